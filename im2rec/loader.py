"""``RecordLoader``: batches of tensors for PyTorch, decoded by threads straight into them.

``for images, labels in RecordLoader(source, batch_size, transform=...)`` takes
``DataLoader(RecordDataset(source), batch_size, ...)``'s place without its worker
processes. A pool of threads of this process decodes each record (the checked decode:
libjpeg-turbo and OpenCV release the GIL), runs ``transform`` on it and writes the result
into its row of a batch tensor allocated once per batch; a background thread keeps batches
ready ahead of the training loop. Nothing crosses a process boundary: no pickling of
samples, no shared-memory copies of decoded batches, no per-worker copy of the dataset.

The order is a sampler's: ``RecordSampler`` by default (``shuffle``, ``seed``; the ranks of a
``torch.distributed`` job are taken from it), or any iterable of indices. ``state_dict()``
says how far the epoch went (as of the batches handed out), ``load_state_dict`` resumes
there: torchdata's ``StatefulDataLoader`` protocol.
"""

from __future__ import annotations

import inspect
import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .batching import END, Work, produce
from .dataset import RecordDataset
from .errors import Im2recError, ImageError
from .image import next_good
from .sampler import RecordSampler

__all__ = ["RecordLoader"]

log = logging.getLogger(__name__)

_STATE_VERSION = 1


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class _Batch:
    """A batch being filled: its images tensor (made at the first row whose shape is known),
    each row's label, and how many of the sampler's indices the epoch had taken with it."""

    def __init__(self, size: int, taken: int):
        self.images: Any = None
        self.array: np.ndarray | None = None  # images as numpy (a view), for numpy rows
        self.labels: list[Any] = [None] * size
        self.taken = taken


class RecordLoader:
    """An iterable of ``(images, labels)`` batches for PyTorch, as ``DataLoader`` is.

    Args:
        source: what ``RecordDataset`` takes (a ``.rec``, a list of shards, a shard manifest,
            a URL, an insightface set), or a ``RecordDataset`` (its ``mode``, transforms and
            ``on_damaged`` are used; ``transform`` here runs after its own).
        batch_size: samples per batch.
        transform: called on each decoded image (HWC uint8, RGB unless the dataset's
            ``mode`` says otherwise); returns a numpy array or a tensor, of one shape for
            every sample (torchvision's v2 transforms take the array as it is). Without it
            the images must all have one size. A transform with an ``out`` parameter is
            given its row of the batch (a numpy view, once the first sample has shown the
            shape) and may write the result there and return it: no copy.
        target_transform: called on each label (a float, or a float32 array).
        shuffle, seed: the default sampler's: a new order each epoch, drawn from ``seed``.
        drop_last: leave out the epoch's last batch when it is short.
        threads: decoding threads [default: the cores this process may use, plus 2].
        sampler: the indices' order instead of the default ``RecordSampler(dataset,
            shuffle=shuffle, seed=seed)`` (for example a ``RecordSampler`` with
            ``num_replicas``/``rank``, or any iterable of indices).
        pin_memory: batches in pinned memory, for a fast copy to the GPU (a warning, and
            ordinary memory, when there is none).
        mode: the default dataset's ``mode`` ("rgb", "bgr", "gray", "unchanged", "raw").
        on_damaged: the default dataset's: ``"warn"``, ``"skip"`` (the record is left out,
            its row taken by the next good record in the file, so that batches and the
            epoch keep their size and the ranks of a job stay in step) or ``"raise"``.
        prefetch: batches kept ready ahead of the loop.
        storage_options: the default dataset's, for URLs.

    Batches are ``(images, labels)``: ``images`` a tensor ``(batch, *shape)`` of the
    transform's dtype, ``labels`` as ``DataLoader``'s default collation makes them (float64
    for float labels, a stacked tensor for arrays). Each batch is a new tensor: it stays
    valid while later batches are made. With the default sampler each iteration is the
    next epoch (``set_epoch`` picks one).

    Raises:
        ImageError: a record cannot be decoded, is damaged with ``on_damaged="raise"``, or
            its transformed image has another shape than the batch's first (named by its
            ``.rec``, key and byte offset).
    """

    def __init__(
        self,
        source: Any,
        batch_size: int,
        *,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        threads: int | None = None,
        sampler: Any = None,
        pin_memory: bool = False,
        mode: str = "rgb",
        on_damaged: str = "warn",
        prefetch: int = 2,
        storage_options: dict | None = None,
    ):
        import torch

        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        if not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch must be a positive integer, got {prefetch!r}")
        if sampler is not None and shuffle:
            raise ValueError("sampler and shuffle are mutually exclusive (as DataLoader's): give the sampler shuffle=True")
        if isinstance(source, RecordDataset):
            given = [name for name, value, default in (("mode", mode, "rgb"), ("on_damaged", on_damaged, "warn"), ("storage_options", storage_options, None)) if value != default]
            if given:
                raise ValueError(f"{', '.join(given)}: the RecordDataset's own (RecordDataset(..., {given[0]}=...)), not RecordLoader's when it is given one")
        self.dataset = source if isinstance(source, RecordDataset) else RecordDataset(source, mode=mode, on_damaged=on_damaged, storage_options=storage_options)
        self.batch_size, self.drop_last, self.prefetch = batch_size, bool(drop_last), prefetch
        self.transform, self.target_transform = transform, target_transform
        self._own_sampler = sampler is None
        self.sampler = RecordSampler(self.dataset, shuffle=shuffle, seed=seed) if sampler is None else sampler
        self.threads = threads or min(32, _cores() + 2)  # more than the cores: the GIL is held in stretches
        self.pin_memory = bool(pin_memory)
        if self.pin_memory and not torch.cuda.is_available():
            log.warning("RecordLoader: pin_memory=True, but there is no GPU: batches are in ordinary memory")
            self.pin_memory = False
        self._torch = torch
        self._collate = torch.utils.data.default_collate
        self._shape: tuple[tuple[int, ...], Any] | None = None  # the samples' shape and dtype, from the first made
        self._shaped_by = -1  # ... and that sample's item
        self._epoch = 0
        self._taken = 0  # the current iteration's indices that batches handed out have used
        self._started = 0  # ... and that batches started have
        self._live: _Epoch | None = None
        self._lock = threading.Lock()  # the first sample's shape, a batch's tensor: made once
        self._dtypes: dict[Any, Any] = {}  # numpy dtype -> torch dtype
        self._into = transform is not None and _takes_out(transform)
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="im2rec-loader")
        self._closed = False

    # ---- the iterable

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads: its order, from the default sampler (or from
        a given one that has ``set_epoch``, which is called)."""
        if int(epoch) != self._epoch:
            self._taken = 0  # a state saved now: the new epoch, from its start
        self._epoch = int(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self._epoch)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        if self._closed:
            raise Im2recError("RecordLoader is closed")
        if self._live is not None:
            self._live.stop()
        if self._own_sampler:
            self.sampler.set_epoch(self._epoch)
        indices = np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
        self._taken = self._started = 0
        epoch = self._live = _Epoch(self, indices)
        return self._batches(epoch)

    def _batches(self, epoch: _Epoch) -> Iterator[tuple[Any, Any]]:
        try:
            while True:
                x = epoch.next()
                if x is END:
                    break
                self._taken = x.taken
                if len(x.labels) < self.batch_size and self.drop_last:
                    continue
                yield x.images, self._collate(x.labels)
            if self._own_sampler and self._live is epoch:
                self.set_epoch(self._epoch + 1)  # the next iteration: the next epoch (as DataLoader's shuffling)
        finally:
            epoch.stop()
            if self._live is epoch:
                self._live = None

    # ---- resume

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: the epoch, and the sampler's state as of the batches handed out."""
        state: dict[str, Any] = {"version": _STATE_VERSION, "epoch": self._epoch, "taken": self._taken}
        if hasattr(self.sampler, "state_dict"):
            state["sampler"] = self.sampler.state_dict(taken=self._taken) if isinstance(self.sampler, RecordSampler) else self.sampler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume where ``state`` (from ``state_dict``) stood: the next iteration reads the rest of its epoch."""
        if "epoch" not in state:
            raise ValueError("a RecordLoader state needs its epoch")
        self._epoch = int(state["epoch"])
        if "sampler" in state:
            if not hasattr(self.sampler, "load_state_dict"):
                raise ValueError(f"the state holds a sampler's state, but this loader's sampler ({type(self.sampler).__name__}) cannot load one")
            self.sampler.load_state_dict(state["sampler"])

    # ---- the Filler protocol (batching.produce)

    def start_batch(self, rows: np.ndarray, epochs: np.ndarray) -> Work:
        self._started += rows.size  # the producer starts the batches in order
        batch = _Batch(rows.size, self._started)
        with self._lock:
            if self._shape is not None:  # known from the first sample: each row is written into it
                self._allocate(batch)
        self.dataset.prefetch(rows)
        return Work(batch, [self._pool.submit(self._fill, batch, r, int(item)) for r, item in enumerate(rows)])

    def finished(self, work: Work) -> _Batch:
        self.dataset.release()
        return work.batch

    def _fill(self, batch: _Batch, row: int, item: int) -> None:
        ds = self.dataset
        image, label = next_good(item, len(ds), ds.sample, ds.paths[0])  # one left out: the next good record in its row
        if self.target_transform is not None:
            label = self.target_transform(label)
        if self._into and batch.array is not None:  # the transform writes the row itself
            out = batch.array[row]
            image = self._transformed(image, item, out=out)
            if image is out or image is None:
                batch.labels[row] = label
                return
        elif self.transform is not None:
            image = self._transformed(image, item)
        shape, dtype = self._shape_of(image, item)
        with self._lock:
            if self._shape is None:
                self._shape, self._shaped_by = (shape, dtype), item
            if batch.images is None:
                self._allocate(batch)
        want, want_dtype = self._shape
        if shape != want or dtype != want_dtype:
            path, offset, key = self.dataset.locate(self._shaped_by)
            first = f"record {key}'s at byte {offset}{'' if path == self.dataset.locate(item)[0] else f' of {path}'}, the first made"
            raise ImageError("error", f"{self._where(item)}: its image is {shape} {dtype}, the batch's are {want} {want_dtype} (as {first}): a batch needs one shape and dtype (resize or crop in the transform)")
        if isinstance(image, np.ndarray):
            batch.array[row] = image  # type: ignore[index]
        else:
            batch.images[row].copy_(image)
        batch.labels[row] = label

    def _transformed(self, image: Any, item: int, **out: Any) -> Any:
        """``transform(image)``; an error of its own keeps its type, with the record named in a note."""
        try:
            return self.transform(image, **out)  # type: ignore[misc]
        except Exception as e:
            if hasattr(e, "add_note"):  # Python 3.11+
                e.add_note(f"(in RecordLoader's transform, on {self._where(item)})")
            raise

    def _shape_of(self, image: Any, item: int) -> tuple[tuple[int, ...], Any]:
        torch = self._torch
        if isinstance(image, np.ndarray):
            dtype = self._dtypes.get(image.dtype)
            if dtype is None:
                dtype = self._dtypes[image.dtype] = torch.from_numpy(np.empty(0, dtype=image.dtype)).dtype
            return image.shape, dtype
        if isinstance(image, torch.Tensor):
            return tuple(image.shape), image.dtype
        raise ImageError("error", f"{self._where(item)}: the transform gave a {type(image).__name__}: a RecordLoader batches numpy arrays and tensors (end the transform with ToImage/ToDtype, or np.asarray)")

    def _allocate(self, batch: _Batch) -> None:
        """``batch``'s tensor, of the samples' shape and dtype (and its numpy view, where numpy has the dtype)."""
        assert self._shape is not None
        want, want_dtype = self._shape
        batch.images = self._torch.empty((len(batch.labels), *want), dtype=want_dtype, pin_memory=self.pin_memory)
        try:
            batch.array = batch.images.numpy()
        except TypeError:  # bfloat16 and the like: rows are copied as tensors
            batch.array = None

    def _where(self, item: int) -> str:
        path, offset, key = self.dataset.locate(item)
        return f"{path}: record {key} (byte {offset})"

    # ---- the end

    def close(self) -> None:
        """Stop the threads (also at garbage collection and at the end of a ``with``)."""
        if self._closed:
            return
        self._closed = True
        if self._live is not None:
            self._live.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> RecordLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def damaged(self) -> int:
        """Records whose image was damaged (or could not be decoded) met so far in this process."""
        return self.dataset.damaged

    def __repr__(self) -> str:
        return f"RecordLoader({self.dataset!r}, batch_size={self.batch_size}, threads={self.threads})"


def _takes_out(transform: Callable[[Any], Any]) -> bool:
    """Whether ``transform`` takes ``out=``: then it is called with its row of the batch (a numpy view)."""
    try:
        return "out" in inspect.signature(transform).parameters
    except (TypeError, ValueError):  # a builtin, a C extension's callable
        return False


class _Epoch:
    """One iteration: its stream of indices, the producer thread, the queue of finished batches."""

    def __init__(self, loader: RecordLoader, indices: np.ndarray):
        size = loader.batch_size
        batches = ((indices[k : k + size], np.zeros(min(size, indices.size - k), dtype=np.int64)) for k in range(0, indices.size, size))
        self.queue: queue.Queue[Any] = queue.Queue(loader.prefetch)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=produce, args=(weakref.ref(loader), batches, self.queue, self._stop), name="im2rec-loader-batches", daemon=True)
        self.thread.start()

    def next(self) -> Any:
        while True:
            try:
                x = self.queue.get(timeout=0.5)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.queue.empty():
                    return END
        if isinstance(x, BaseException):
            raise x
        return x

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()
