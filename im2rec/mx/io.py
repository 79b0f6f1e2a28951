"""``mx.io`` without MXNet: the iterator protocol, MXNet's Python iterators, and the record iterators.

``DataIter``, ``DataBatch`` and ``DataDesc`` are MXNet's base classes (``batch``);
``NDArrayIter``, ``ResizeIter`` and ``PrefetchingIter`` are MXNet 1.9.1's Python iterators,
written anew with the same epochs, padding and threads (``NDArrayIter`` shuffles with
``np.random.shuffle``, as MXNet's, so ``mx.random.seed`` or ``np.random.seed`` repeats a run);
``ImageRecordIter`` and ``ImageDetRecordIter`` are ``im2rec``'s, batch for batch MXNet's, with
their batches as ``mx.nd`` arrays.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from . import iterators
from .batch import DataBatch, DataDesc, DataIter
from .nd import NDArray, array

__all__ = ["DataBatch", "DataDesc", "DataIter", "ImageDetRecordIter", "ImageRecordInt8Iter", "ImageRecordIter", "ImageRecordUInt8Iter", "NDArrayIter", "PrefetchingIter", "ResizeIter"]


def _as_nd(a: np.ndarray) -> NDArray:
    return a.view(NDArray)


class ImageRecordIter(iterators.ImageRecordIter):
    __doc__ = f"``mx.io.ImageRecordIter``, batches as ``mx.nd`` arrays.\n\n{iterators.ImageRecordIter.__doc__}"
    _as_array = staticmethod(_as_nd)


class ImageDetRecordIter(iterators.ImageDetRecordIter):
    __doc__ = f"``mx.io.ImageDetRecordIter``, batches as ``mx.nd`` arrays.\n\n{iterators.ImageDetRecordIter.__doc__}"
    _as_array = staticmethod(_as_nd)


def ImageRecordUInt8Iter(**kwargs: Any) -> ImageRecordIter:
    """``mx.io.ImageRecordUInt8Iter``: ``ImageRecordIter`` with ``dtype='uint8'``."""
    return ImageRecordIter(**{**kwargs, "dtype": "uint8"})


def ImageRecordInt8Iter(**kwargs: Any) -> ImageRecordIter:
    """``mx.io.ImageRecordInt8Iter``: ``ImageRecordIter`` with ``dtype='int8'``."""
    return ImageRecordIter(**{**kwargs, "dtype": "int8"})


class _FromCurrentBatch(DataIter):
    """The getters of an iterator that keeps its batch in ``current_batch``."""

    current_batch: Any

    def getdata(self) -> Any:
        return self.current_batch.data

    def getlabel(self) -> Any:
        return self.current_batch.label

    def getindex(self) -> Any:
        return self.current_batch.index

    def getpad(self) -> Any:
        return self.current_batch.pad


class ResizeIter(_FromCurrentBatch):
    """``mx.io.ResizeIter(data_iter, size, reset_internal=True)``: ``size`` batches an epoch,
    restarting ``data_iter`` when it ends early (and resetting it at ``reset`` unless told not to)."""

    def __init__(self, data_iter: Any, size: int, reset_internal: bool = True):
        super().__init__()
        self.data_iter, self.size, self.reset_internal = data_iter, size, reset_internal
        self.cur = 0
        self.current_batch: Any = None
        self.provide_data = data_iter.provide_data
        self.provide_label = data_iter.provide_label
        self.batch_size = data_iter.batch_size
        if hasattr(data_iter, "default_bucket_key"):
            self.default_bucket_key = data_iter.default_bucket_key

    def reset(self) -> None:
        self.cur = 0
        if self.reset_internal:
            self.data_iter.reset()

    def iter_next(self) -> bool:
        if self.cur == self.size:
            return False
        try:
            self.current_batch = self.data_iter.next()
        except StopIteration:
            self.data_iter.reset()
            self.current_batch = self.data_iter.next()
        self.cur += 1
        return True



class PrefetchingIter(_FromCurrentBatch):
    """``mx.io.PrefetchingIter(iters, rename_data=None, rename_label=None)``: each iterator's
    next batch made by a thread of its own while the current one is used; several iterators'
    batches are joined (their data and labels one after the other). Prefetching starts at
    construction, as MXNet's; an error in an iterator is raised by the ``next`` that meets it."""

    def __init__(self, iters: Any, rename_data: list[dict[str, str]] | None = None, rename_label: list[dict[str, str]] | None = None):
        super().__init__()
        self.iters = iters if isinstance(iters, list) else [iters]
        if not self.iters:
            raise ValueError("PrefetchingIter needs at least one iterator")
        self.n_iter = len(self.iters)
        self.rename_data, self.rename_label = rename_data, rename_label
        self.batch_size = self.provide_data[0][1][0]
        self.data_ready = [threading.Event() for _ in self.iters]
        self.data_taken = [threading.Event() for _ in self.iters]
        for taken in self.data_taken:
            taken.set()
        self.started = True
        self.current_batch: Any = None
        self.next_batch: list[Any] = [None] * self.n_iter
        self.prefetch_threads = [threading.Thread(target=self._prefetch, args=(i,), name=f"im2rec-prefetch-{i}", daemon=True) for i in range(self.n_iter)]
        for thread in self.prefetch_threads:
            thread.start()

    def _prefetch(self, i: int) -> None:
        while True:
            self.data_taken[i].wait()
            if not self.started:
                break
            try:
                self.next_batch[i] = self.iters[i].next()
            except StopIteration:
                self.next_batch[i] = None
            except BaseException as e:  # handed to the consumer's next()
                self.next_batch[i] = e
            self.data_taken[i].clear()
            self.data_ready[i].set()

    def close(self) -> None:
        """Stop the threads (also on garbage collection)."""
        if not getattr(self, "started", False):
            return
        self.started = False
        for taken in self.data_taken:
            taken.set()
        for thread in self.prefetch_threads:
            if thread is not threading.current_thread():
                thread.join()

    def __del__(self) -> None:
        self.close()

    def _renamed(self, which: str, renames: list[dict[str, str]] | None) -> list[Any]:
        if renames is None:
            return [x for it in self.iters for x in getattr(it, which)]
        out: list[Any] = []
        for rename, it in zip(renames, self.iters):
            for x in getattr(it, which):
                desc = x if isinstance(x, DataDesc) else DataDesc(*x)
                out.append(DataDesc(rename[desc.name], desc.shape, desc.dtype))
        return out

    @property
    def provide_data(self) -> list[Any]:
        return self._renamed("provide_data", self.rename_data)

    @property
    def provide_label(self) -> list[Any]:
        return self._renamed("provide_label", self.rename_label)

    def reset(self) -> None:
        for ready in self.data_ready:
            ready.wait()
        for it in self.iters:
            it.reset()
        for ready in self.data_ready:
            ready.clear()
        for taken in self.data_taken:
            taken.set()

    def iter_next(self) -> bool:
        for ready in self.data_ready:
            ready.wait()
        for got in self.next_batch:
            if isinstance(got, BaseException):
                self.next_batch = [None if b is got else b for b in self.next_batch]
                for ready in self.data_ready:
                    ready.clear()
                for taken in self.data_taken:
                    taken.set()
                raise got
        if self.next_batch[0] is None:
            if any(b is not None for b in self.next_batch):
                raise ValueError("PrefetchingIter: the iterators give different numbers of batches")
            return False
        if any(b.pad != self.next_batch[0].pad for b in self.next_batch):
            raise ValueError("PrefetchingIter: the iterators' batches differ in padding")
        self.current_batch = DataBatch(
            [d for b in self.next_batch for d in b.data],
            [d for b in self.next_batch for d in (b.label or [])],
            self.next_batch[0].pad,
            self.next_batch[0].index,
            provide_data=self.provide_data,
            provide_label=self.provide_label,
        )
        for ready in self.data_ready:
            ready.clear()
        for taken in self.data_taken:
            taken.set()
        return True

    def next(self) -> DataBatch:
        if self.iter_next():
            return self.current_batch
        raise StopIteration



def _named(data: Any, allow_empty: bool, default_name: str) -> list[tuple[str, NDArray]]:
    """MXNet's ``_init_data``: an array, a list or a dict of arrays as sorted ``(name, NDArray)`` pairs."""
    if data is None:
        if not allow_empty:
            raise ValueError("NDArrayIter: data is required")
        data = []
    if isinstance(data, np.ndarray):
        data = [data]
    if isinstance(data, list):
        if not allow_empty and not data:
            raise ValueError("NDArrayIter: data is an empty list")
        data = OrderedDict([(default_name, data[0])]) if len(data) == 1 else OrderedDict((f"_{i}_{default_name}", d) for i, d in enumerate(data))
    if not isinstance(data, dict):
        raise TypeError("Input must be NDArray, numpy.ndarray, a list of them or dict with them as values")
    out = {}
    for k, v in data.items():
        try:
            out[k] = v if isinstance(v, NDArray) else array(v)
        except (TypeError, ValueError):
            raise TypeError(f"Invalid type '{type(v)}' for {k}, should be NDArray or numpy.ndarray") from None
    return sorted(out.items())


class NDArrayIter(DataIter):
    """``mx.io.NDArrayIter(data, label=None, batch_size=1, shuffle=False, last_batch_handle='pad',
    data_name='data', label_name='softmax_label', layout='NCHW')``: batches of in-memory arrays.

    ``last_batch_handle``: ``'pad'`` fills the last batch from the start (``pad`` counts those
    rows), ``'discard'`` drops it, ``'roll_over'`` carries it into the next epoch's first
    batch. ``shuffle`` permutes the rows at every ``reset`` by ``np.random.shuffle``.
    ``data`` given as numpy arrays is kept as MXNet keeps it: converted by ``mx.nd.array``
    (so float32)."""

    def __init__(self, data: Any, label: Any = None, batch_size: int = 1, shuffle: bool = False, last_batch_handle: str = "pad", data_name: str = "data", label_name: str = "softmax_label", layout: str = "NCHW"):
        super().__init__(batch_size)
        if last_batch_handle not in ("pad", "discard", "roll_over"):
            raise ValueError(f"NDArrayIter: last_batch_handle must be 'pad', 'discard' or 'roll_over', got {last_batch_handle!r}")
        self.data = _named(data, False, data_name)
        self.label = _named(label, True, label_name)
        self.idx = np.arange(self.data[0][1].shape[0])
        self.shuffle = shuffle
        self.last_batch_handle = last_batch_handle
        self.batch_size = batch_size
        self.cursor = -self.batch_size
        self.num_data = self.idx.shape[0]
        self.layout = layout
        self._cache_data: list[NDArray] | None = None
        self._cache_label: list[NDArray] | None = None
        self.reset()
        self.data_list = [x[1] for x in self.data] + [x[1] for x in self.label]
        self.num_source = len(self.data_list)

    def _descs(self, pairs: list[tuple[str, NDArray]]) -> list[DataDesc]:
        axis = self.layout.find("N")
        return [DataDesc(k, (*v.shape[:axis], self.batch_size, *v.shape[axis + 1 :]), v.dtype, layout=self.layout) for k, v in pairs]

    @property
    def provide_data(self) -> list[DataDesc]:
        return self._descs(self.data)

    @property
    def provide_label(self) -> list[DataDesc]:
        return self._descs(self.label)

    def hard_reset(self) -> None:
        """Back to the start, ignoring ``roll_over``'s carried rows."""
        if self.shuffle:
            self._shuffle_data()
        self.cursor = -self.batch_size
        self._cache_data = self._cache_label = None

    def reset(self) -> None:
        if self.shuffle:
            self._shuffle_data()
        if self.last_batch_handle == "roll_over" and self.num_data - self.batch_size < self.cursor < self.num_data:
            self.cursor = self.cursor - self.num_data - self.batch_size
        else:
            self.cursor = -self.batch_size

    def iter_next(self) -> bool:
        self.cursor += self.batch_size
        return self.cursor < self.num_data

    def next(self) -> DataBatch:
        if not self.iter_next():
            raise StopIteration
        data, label = self.getdata(), self.getlabel()
        if data[0].shape[self.layout.find("N")] != self.batch_size:  # roll_over and discard: the short tail
            self._cache_data, self._cache_label = data, label
            raise StopIteration
        return DataBatch(data=data, label=label, pad=self.getpad(), index=None)

    def _rows(self, source: list[tuple[str, NDArray]], start: int = 0, end: int | None = None) -> list[NDArray]:
        axis = self.layout.find("N")
        out = []
        for _, v in source:
            index: list[Any] = [slice(None)] * v.ndim
            index[axis] = slice(start, v.shape[axis] if end is None else end)
            out.append(v[tuple(index)])
        return out

    def _concat(self, first: list[NDArray], second: list[NDArray]) -> list[NDArray]:
        if not first or not second:
            return first or second
        axis = self.layout.find("N")
        return [np.concatenate([a, b], axis=axis).view(NDArray) for a, b in zip(first, second)]

    def _batchify(self, source: list[tuple[str, NDArray]]) -> list[NDArray]:
        if self.cursor >= self.num_data:
            raise ValueError("NDArrayIter needs reset()")
        if self.last_batch_handle == "roll_over" and -self.batch_size < self.cursor < 0:
            cache = self._cache_data if self._cache_data is not None else self._cache_label
            if cache is None:
                raise ValueError("NDArrayIter: the next epoch should have carried rows (roll_over)")
            second = self._rows(source, end=self.cursor + self.batch_size)
            if self._cache_data is not None:
                self._cache_data = None
            else:
                self._cache_label = None
            return self._concat(cache, second)
        if self.last_batch_handle == "pad" and self.cursor + self.batch_size > self.num_data:
            pad = self.batch_size - self.num_data + self.cursor
            first = self._rows(source, start=self.cursor)
            if pad > self.num_data:
                whole = self._rows(source, end=self.num_data)
                second = [np.tile(d, [pad // self.num_data] + [1] * (d.ndim - 1)).view(NDArray) for d in whole]
                if pad % self.num_data:
                    second = self._concat(second, self._rows(source, end=pad % self.num_data))
            else:
                second = self._rows(source, end=pad)
            return self._concat(first, second)
        return self._rows(source, self.cursor, min(self.cursor + self.batch_size, self.num_data))

    def getdata(self) -> list[NDArray]:
        return self._batchify(self.data)

    def getlabel(self) -> list[NDArray]:
        return self._batchify(self.label)

    def getpad(self) -> int:
        if self.last_batch_handle == "pad" and self.cursor + self.batch_size > self.num_data:
            return self.cursor + self.batch_size - self.num_data
        if self.last_batch_handle == "roll_over" and -self.batch_size < self.cursor < 0:
            return -self.cursor
        return 0

    def _shuffle_data(self) -> None:
        np.random.shuffle(self.idx)
        # as MXNet: the current rows permuted again (the shuffles compound), through mx.nd.array (float32)
        self.data = [(k, array(v.asnumpy()[self.idx])) for k, v in self.data]
        self.label = [(k, array(v.asnumpy()[self.idx])) for k, v in self.label]


_OUT_OF_SCOPE = {
    "MNISTIter": "torchvision.datasets.MNIST",
    "CSVIter": "numpy.loadtxt with NDArrayIter",
    "LibSVMIter": "sklearn.datasets.load_svmlight_file with NDArrayIter",
    "MXDataIter": "ImageRecordIter or ImageDetRecordIter",
}


def __getattr__(name: str) -> Any:
    instead = _OUT_OF_SCOPE.get(name, "DataIter, NDArrayIter, ImageRecordIter or a PyTorch DataLoader")
    raise AttributeError(f"mx.io.{name} is not in im2rec.mx: use {instead} instead")
