"""MXNet's training iterators without MXNet: ``ImageRecordIter`` and ``ImageDetRecordIter``.

``im2rec.ImageRecordIter(**kwargs)`` takes ``mx.io.ImageRecordIter``'s keyword arguments,
with MXNet 1.9.1's defaults, and gives the batches MXNet gives: ``DataBatch(data=[NCHW
array], label=[array], pad, index)``, numpy instead of NDArrays (``im2rec.mx.io``'s subclasses
hand out ``mx.nd`` arrays). Where MXNet's output is
deterministic it is MXNet's value for value (``augment`` holds the pixel rules); what MXNet
decides by its reader is decided here by the same rules, written from
``src/io/iter_image_recordio_2.cc``, ``iter_image_det_recordio.cc``, ``iter_batchloader.h``
and dmlc-core's input splits:

* records are read in file order (``.idx`` offsets sorted);
* ``num_parts``/``part_index``: with ``path_imgidx``, part k holds the ``.idx`` entries
  ``[k * ceil(N / parts), (k + 1) * ceil(N / parts))``; without it, the records that start
  in the k-th of ``parts`` equal byte ranges of the file (rounded up to 4 bytes);
* the last batch of an epoch, when short: with ``round_batch`` (the default) filled from
  the start of the next epoch, which then starts after those records (``pad`` counts
  them); without, zeros (``pad`` counts them too);
* labels from ``path_imglist`` (the first ``label_width`` numbers of the line whose index
  is the record's header id), else the record's own.

Beyond MXNet: the records come through ``RecordDataset`` (so a URL, a shard manifest or an
insightface set, whose header and identity records are skipped); ``shuffle`` permutes the
whole part every epoch (MXNet without an ``.idx`` shuffles within 64 MB chunks); every image
draws its random augmentation from its own generator, seeded by ``seed_aug`` (or ``seed``),
the epoch and the record, so the batches are the same with any ``preprocess_threads`` and
in any process; a record that cannot be decoded raises an error naming the ``.rec``, the
key and the byte offset; one whose image is damaged (libjpeg decodes it with a warning) is
``on_damaged``'s: ``"warn"`` (MXNet's pixels, one warning naming it, counted in
``damaged``), ``"skip"`` (left out, its row taken by the next good record of the part) or ``"raise"``.

Decoding, augmenting and normalising run in ``preprocess_threads`` threads (OpenCV and numpy
release the GIL), each image written in place into its row of the batch; a background
thread keeps ``prefetch_buffer`` batches ready. Each batch is a new array, so a
``torch.from_numpy(batch.data[0])`` tensor stays valid.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import weakref
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from .. import ndfile
from ..batching import END, Work, produce
from ..dataset import RecordDataset
from ..errors import Im2recError, ImageError, LabelError, OptionError, RecordIOError
from ..image import Damaged, next_good
from ..lst import iter_lst
from .args import DET_DTYPES, READER_ARGS, RECORD_DTYPES, Arg, args_of, help_text, parse_arguments, table
from .augment import DetAugmenter, DetNormalizer, ImageAugmenter, Normalizer, decode_for_iterator
from .batch import DataBatch, DataDesc, DataIter
from .epochs import part_items, plan_epoch

__all__ = ["DataBatch", "DataDesc", "ImageDetRecordIter", "ImageRecordIter"]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- arguments

#: ``mx.io.ImageRecordIter``'s arguments: the readers', ``aug_default``'s fields, its normalisation's.
RECORD_ITER_ARGS: dict[str, Arg] = table(
    READER_ARGS,
    args_of(ImageAugmenter),
    dtype=Arg("choice", None, choices=RECORD_DTYPES),
    path_imgrec=Arg("str", ""),
    aug_seq=Arg("choice", "aug_default", choices=("aug_default",)),
    device_id=Arg("int", 0, inert=True),
    std_r=Arg("float", 1.0),
    std_g=Arg("float", 1.0),
    std_b=Arg("float", 1.0),
    std_a=Arg("float", 1.0),
    mirror=Arg("bool", False),
    rand_mirror=Arg("bool", False),
    max_random_contrast=Arg("float", 0.0),
    max_random_illumination=Arg("float", 0.0),
)
#: ``mx.io.ImageDetRecordIter``'s: the readers', ``det_aug_default``'s fields, the label's and the normalisation's.
DET_ITER_ARGS: dict[str, Arg] = table(
    READER_ARGS,
    args_of(DetAugmenter),
    dtype=Arg("choice", None, choices=DET_DTYPES),
    path_imgrec=Arg("str", "./data/imgrec.rec"),
    aug_seq=Arg("choice", "det_aug_default", choices=("det_aug_default",)),
    label_width=Arg("int", -1),
    label_pad_width=Arg("int", 0),
    label_pad_value=Arg("float", -1.0),
    std_r=Arg("float", 0.0),
    std_g=Arg("float", 0.0),
    std_b=Arg("float", 0.0),
    std_a=Arg("float", 0.0),
)


def _seed_words(seed: int) -> int:
    return int(seed) % (1 << 32)


# --------------------------------------------------------------------------- the iterators


class _Batch(NamedTuple):
    data: np.ndarray
    label: np.ndarray
    ids: np.ndarray
    pad: int


#: The epoch number the mean image's pass draws its random augmentations for.
MEAN_PASS = (1 << 32) - 1


class _RecordIter(DataIter):
    """What both iterators share: the records, the part, the epochs, the threads, the batch protocol."""

    NAME = ""
    TABLE: Mapping[str, Arg] = {}
    FACES: bool | str = "auto"  # RecordDataset's insightface=: whether a face set's layout is looked for
    AUGMENTER: Any = ImageAugmenter
    dtype: np.dtype

    def __init__(self, **kwargs: Any):
        self.args = a = parse_arguments(self.NAME, self.TABLE, kwargs)
        self.batch_size: int = a["batch_size"]
        self.data_shape: tuple[int, int, int] = (a["data_shape"][0], a["data_shape"][1], a["data_shape"][2])
        self.dtype = np.dtype(a["dtype"] or "float32")
        self._setup_augmenter()
        if a["path_imglist"] and not os.path.exists(a["path_imglist"]):
            raise OptionError(f"{a['path_imglist']}: no such file (path_imglist)", "path_imglist")
        # without path_imgidx MXNet reads the .rec through: so does this, when no .idx is beside it
        self._damaged = Damaged(a["on_damaged"])
        self.dataset = RecordDataset(a["path_imgrec"], mode="raw", storage_options=a["storage_options"], index=a["path_imgidx"] or None, insightface=self.FACES, scan=not a["path_imgidx"], on_missing="skip")
        positions = self.dataset.positions if self._splits_by_bytes() else None
        self.part = part_items(len(self.dataset), a["num_parts"], a["part_index"], positions, self.dataset.total_bytes)
        self._list = self._read_list() if a["path_imglist"] else None
        self._aug_seed = _seed_words(a["seed_aug"] if a["seed_aug"] is not None else a["seed"])
        self.epoch = 0
        self._skip = 0
        self._closed = False
        self._pool = ThreadPoolExecutor(a["preprocess_threads"], thread_name_prefix="im2rec-iter")
        try:
            self._prepare()
            # the mean image, when it must be computed, is computed by a pass of the pipeline
            # itself, with float32 rows normalised by the given means (MXNet's CreateMeanImg)
            self._batch_dtype = np.dtype(np.float32)
            self.normalizer = self._normalizer(self._batch_dtype, None)
            mean_img = self._mean_image() if self.dtype != np.uint8 else None
            self._batch_dtype = self.dtype
            self.normalizer = self._normalizer(self.dtype, mean_img)
        except BaseException:
            self._pool.shutdown(wait=True, cancel_futures=True)
            raise
        log.info("%s: %s, %d of %d records (part %d of %d), %d threads", self.NAME, a["path_imgrec"], self.part.size, len(self.dataset), a["part_index"], a["num_parts"], a["preprocess_threads"])
        self.provide_data = [DataDesc(a["data_name"], (self.batch_size, *self.data_shape), self.dtype)]
        self.provide_label = [DataDesc(a["label_name"], self._label_shape(), np.float32)]
        self._current: _Batch | None = None
        self._start_epoch()

    def _setup_augmenter(self) -> None:
        fields = {f.name: self.args[f.name] for f in dataclasses.fields(self.AUGMENTER) if f.name in self.args and f.name != "data_shape"}
        self.augmenter = self.AUGMENTER(data_shape=self.data_shape, **fields)
        for name, message in self.augmenter.check():
            raise OptionError(message, name)

    # ---- what each iterator defines

    def _normalizer(self, dtype: np.dtype, mean_img: np.ndarray | None) -> Any:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Work done once before the first batch (the detection iterator's label width)."""

    def _splits_by_bytes(self) -> bool:
        raise NotImplementedError

    def _label_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def _fill(self, batch: _Batch, row: int, item: int, epoch: int) -> None:
        """Row ``row`` of ``batch`` from item ``item``; when it is left out (``on_damaged="skip"``),
        from the next item of the part that is not (the part's items are sorted)."""
        part = self.part
        at = int(np.searchsorted(part, item))
        next_good(at, part.size, lambda k: self._fill_row(batch, row, int(part[k]), epoch), f"{self.args['path_imgrec']} (part {self.args['part_index']} of {self.args['num_parts']})")

    def _fill_row(self, batch: _Batch, row: int, item: int, epoch: int) -> None:
        raise NotImplementedError

    # ---- records

    def _read_list(self) -> dict[int, tuple[float, ...]]:
        """``path_imglist``: the labels of each index (a later line wins, as MXNet's map)."""
        width = self.args["label_width"]
        path = self.args["path_imglist"]
        labels: dict[int, tuple[float, ...]] = {}
        for lineno, entry in iter_lst(path):
            if width > 0 and len(entry.labels) < width:
                raise LabelError(f"{path}:{lineno}: label_width is {width} but the line has {len(entry.labels)} label{'s' * (len(entry.labels) != 1)}")
            labels[entry.index] = entry.labels[:width] if width > 0 else entry.labels
        return labels

    def _where(self, item: int) -> str:
        path, offset, key = self.dataset.locate(item)
        return f"{path}: record {key} (byte {offset})"

    def _listed_labels(self, header_id: int, item: int) -> tuple[float, ...]:
        assert self._list is not None
        labels = self._list.get(int(header_id))
        if labels is None:
            raise LabelError(f"{self.args['path_imglist']}: no line has the index {header_id}, the id of {self._where(item)}")
        return labels

    def _record(self, item: int) -> tuple[Any, Any]:
        """Item ``item``'s header and image bytes; a damaged record's error names its key too."""
        try:
            return self.dataset.record(item)
        except RecordIOError as e:
            key = self.dataset.locate(item)[2]
            raise type(e)(f"{e} (the record of .idx key {key})", e.offset) from None

    def _decode(self, image: Any, item: int) -> np.ndarray:
        channels = self.data_shape[0]
        img = self._damaged.image(lambda: self._where(item), decode_for_iterator(image, channels), len(image))
        if channels == 4 and (img.ndim != 3 or img.shape[2] != 4):
            got = 1 if img.ndim == 2 else img.shape[2]
            raise ImageError("channels", f"{self._where(item)}: data_shape asks for 4 channels, the image has {got}")
        return img

    @property
    def damaged(self) -> int:
        """How many records whose image is damaged (or cannot be decoded, with ``on_damaged="skip"``) this iterator has met."""
        return len(self._damaged)

    def _rng(self, epoch: int, item: int) -> np.random.Generator:
        return np.random.default_rng([self._aug_seed, int(epoch), int(item)])

    # ---- epochs

    def _order(self, epoch: int) -> np.ndarray:
        if not self.args["shuffle"]:
            return self.part
        return np.random.default_rng([_seed_words(self.args["seed"]), 0x5EED, epoch]).permutation(self.part)

    def _start_epoch(self) -> None:
        epoch = self.epoch
        self._plan = plan_epoch(self._order(epoch), lambda: self._order(epoch + 1), epoch, self.batch_size, self.args["round_batch"], self._skip)
        self._ended = False
        # prefetch_buffer batches ahead of the one in use: up to two being filled, the rest ready
        self._queue: queue.Queue[Any] = queue.Queue(max(1, self.args["prefetch_buffer"] - 2))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=produce, args=(weakref.ref(self), zip(self._plan.rows, self._plan.epochs), self._queue, self._stop), name=f"im2rec-{self.NAME}", daemon=True)
        self._thread.start()

    def _new_batch(self, pad: int) -> _Batch:
        b = self.batch_size
        data = np.zeros((b, *self.data_shape), dtype=self._batch_dtype) if pad else np.empty((b, *self.data_shape), dtype=self._batch_dtype)
        label = np.zeros((b, *self._label_shape()[1:]), dtype=np.float32)
        return _Batch(data, label, np.zeros(b, dtype=np.uint64), int(pad))

    def start_batch(self, rows: np.ndarray, epochs: np.ndarray) -> Work:
        """A new batch and the pool's work filling its rows: ``rows[r]`` is the item of row r
        (-1: left empty, padding), ``epochs[r]`` the epoch it is read for. From a store, the
        batch's records are fetched at once first."""
        pad = int(np.count_nonzero((rows < 0) | (epochs != epochs[0])))  # padding, and rows lent by the next epoch
        self.dataset.prefetch(rows[rows >= 0])
        batch = self._new_batch(pad)
        return Work(batch, [self._pool.submit(self._fill, batch, r, int(item), int(e)) for r, (item, e) in enumerate(zip(rows, epochs)) if item >= 0])

    def finished(self, work: Work) -> _Batch:
        self.dataset.release()  # the mapped pages of the records decoded: memory stays flat
        return work.batch

    def _stop_producer(self) -> None:
        self._stop.set()
        self._thread.join()

    # ---- MXNet's DataIter protocol

    def reset(self) -> None:
        """Back to the start: the next epoch (reshuffled with ``shuffle``). If the epoch that
        ended lent records to fill its last batch (``round_batch``), the next starts after them."""
        self._stop_producer()
        self._skip = self._plan.skip_next if self._ended else 0
        self.epoch += 1
        self._current = None
        self._start_epoch()

    def iter_next(self) -> bool:
        """Move to the next batch (``getdata``, ``getlabel``, ``getpad``, ``getindex`` read it); False at the end."""
        if self._closed:
            raise Im2recError(f"{self.NAME} is closed")
        while True:
            try:
                x = self._queue.get(timeout=0.5)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    self._current = None
                    return False
        if x is END:
            self._current = None
            self._ended = True
            self._queue.put(END)  # a further call answers the same
            return False
        if isinstance(x, BaseException):
            self._queue.put(x)
            raise x
        self._current = x
        return True

    def next(self) -> DataBatch:
        """The next batch.

        Raises:
            StopIteration: at the end of the epoch (``reset()`` starts the next).
            ImageError: a record's image cannot be decoded (the message names the ``.rec``,
                the key and the byte offset).
            LabelError: a record's labels do not fit ``label_width`` or the list.
        """
        if not self.iter_next():
            raise StopIteration
        return DataBatch([self.getdata()], [self.getlabel()], self.getpad(), self.getindex(), provide_data=self.provide_data, provide_label=self.provide_label)

    __next__ = next

    def __iter__(self) -> Iterator[DataBatch]:
        return self

    def _now(self) -> _Batch:
        if self._current is None:
            raise Im2recError(f"{self.NAME}: no current batch: call iter_next() (or next()) first")
        return self._current

    #: How a batch's arrays are handed out: numpy here, NDArrays in ``im2rec.mx.io``.
    _as_array = staticmethod(lambda a: a)

    def getdata(self) -> np.ndarray:
        return self._as_array(self._now().data)

    def getlabel(self) -> np.ndarray:
        return self._as_array(self._now().label)

    def getindex(self) -> np.ndarray:
        return self._now().ids

    def getpad(self) -> int:
        return self._now().pad

    def __len__(self) -> int:
        """The batches of the current epoch."""
        return len(self._plan.rows)

    def close(self) -> None:
        """Stop the background threads (also on garbage collection and at the end of a ``with``)."""
        if self._closed:
            return
        self._closed = True
        self._stop_producer()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> _RecordIter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_thread", None) is not None and not getattr(self, "_closed", True):
            self._stop.set()
            self._pool.shutdown(wait=False, cancel_futures=True)

    def __repr__(self) -> str:
        return f"{self.NAME}({self.args['path_imgrec']!r}, {self.part.size} records, batch_size={self.batch_size}, data_shape={self.data_shape})"

    # ---- the mean image

    def _mean_image(self) -> np.ndarray | None:
        """``mean_img``: read (MXNet's NDArray file), or, when the file is missing, computed over
        this part as MXNet does (every image through the augmenter and the normalisation with
        ``mean_r/g/b`` as given) and written there."""
        path = self.args["mean_img"]
        if not path:
            return None
        if os.path.exists(path):
            arrays = ndfile.load(path)
            values = list(arrays.values()) if isinstance(arrays, dict) else arrays
            if len(values) != 1:
                raise OptionError(f"{path}: a mean image file holds one array, this one holds {len(values)}", "mean_img")
            mean = values[0].astype(np.float32)
            if mean.shape != self.data_shape:
                raise OptionError(f"{path}: the mean image is {mean.shape}, data_shape is {self.data_shape}", "mean_img")
            return mean
        log.info("%s: cannot find %s: creating the mean image over %d records", self.NAME, path, self.part.size)
        mean = self._compute_mean()
        ndfile.save(path, {"mean_img": mean})
        return mean

    def _compute_mean(self) -> np.ndarray:
        mean_plan = plan_epoch(self.part, lambda: self.part, MEAN_PASS, self.batch_size, False)
        plan = zip(mean_plan.rows, mean_plan.epochs)
        total = np.zeros(self.data_shape, dtype=np.float32)
        count = 0
        q: queue.Queue[Any] = queue.Queue(2)
        stop = threading.Event()
        thread = threading.Thread(target=produce, args=(weakref.ref(self), plan, q, stop), daemon=True)
        thread.start()
        try:
            while True:
                x = q.get()
                if x is END:
                    break
                if isinstance(x, BaseException):
                    raise x
                for row in x.data[: self.batch_size - x.pad]:
                    total += row.astype(np.float32)
                    count += 1
        finally:
            stop.set()
            thread.join()
        if count:
            total *= np.float32(1) / np.float32(count)
        return total


class ImageRecordIter(_RecordIter):
    """``mx.io.ImageRecordIter`` without MXNet: batches of images from a ``.rec``.

    Takes MXNet 1.9.1's keyword arguments, with its defaults (``help(im2rec.ImageRecordIter)``
    lists them; ``data_shape`` and ``batch_size`` are required)::

        it = im2rec.ImageRecordIter(path_imgrec="train.rec", path_imgidx="train.idx",
                                    data_shape=(3, 224, 224), batch_size=64, resize=256,
                                    rand_crop=True, rand_mirror=True, shuffle=True,
                                    mean_r=123.68, mean_g=116.779, mean_b=103.939,
                                    std_r=58.395, std_g=57.12, std_b=57.375)
        for batch in it:
            x = batch.data[0]    # (64, 3, 224, 224) float32, a numpy array (not an NDArray)
            y = batch.label[0]   # (64,) float32
        it.reset()               # the next epoch

    Beyond MXNet: ``path_imgrec`` may be a URL (``s3://...``), a shard manifest or an
    insightface set; ``storage_options`` passes fsspec options for a URL; ``dtype`` also
    takes ``float16`` and ``float64``. ``ctx``, ``device_id``, ``verbose`` and the
    ``shuffle_chunk_*`` arguments are accepted and change nothing.

    Raises:
        OptionError: an unknown argument, a missing ``data_shape`` or ``batch_size``, a
            value of the wrong kind or range (the message names the argument).
        Im2recError: the ``.rec`` or its ``.idx`` is missing or malformed.
    """

    NAME = "ImageRecordIter"
    TABLE = RECORD_ITER_ARGS

    def _normalizer(self, dtype: np.dtype, mean_img: np.ndarray | None) -> Normalizer:
        a = self.args
        return Normalizer(
            self.data_shape[0],
            dtype,
            mean=np.array([a["mean_r"], a["mean_g"], a["mean_b"], a["mean_a"]]),
            std=np.array([a["std_r"], a["std_g"], a["std_b"], a["std_a"]]),
            scale=a["scale"],
            mean_img=mean_img,
            max_random_contrast=a["max_random_contrast"],
            max_random_illumination=a["max_random_illumination"],
        )

    def _splits_by_bytes(self) -> bool:
        return not self.args["path_imgidx"]

    def _label_shape(self) -> tuple[int, ...]:
        width = self.args["label_width"]
        return (self.batch_size,) if width == 1 else (self.batch_size, width)

    def _labels(self, header: Any, item: int) -> Any:
        width = self.args["label_width"]
        if self._list is not None:
            return self._listed_labels(header.id, item)
        if header.flag > 0:
            if self.dataset.insightface is not None and width == 1:
                return header.label[0]
            if header.flag != width:
                raise LabelError(f"{self._where(item)} holds {header.flag} labels but label_width is {width}")
            return header.label
        if width != 1:
            raise LabelError(f"{self._where(item)} holds one label but label_width is {width}: give path_imglist, or pack the records with {width} labels")
        return header.label

    def _fill_row(self, batch: _Batch, row: int, item: int, epoch: int) -> None:
        header, image = self._record(item)
        label = self._labels(header, item)
        img = self._decode(image, item)
        rng = self._rng(epoch, item)
        try:
            img = self.augmenter.process(img, rng)
        except ValueError as e:
            raise ImageError("too-small", f"{self._where(item)}: {e}") from None
        a = self.args
        mirrored = bool(a["rand_mirror"] and rng.random() < 0.5) or a["mirror"]
        self.normalizer.write(img, batch.data[row], mirrored, rng)
        batch.label[row] = label
        batch.ids[row] = header.id


class ImageDetRecordIter(_RecordIter):
    """``mx.io.ImageDetRecordIter`` without MXNet: images and boxes from a ``.rec`` packed
    with ``--pack-label`` (each label ``[header_width, object_width, extra header...,
    (class, xmin, ymin, xmax, ymax, extra...) x N]``, coordinates 0-1).

    Each label row is MXNet's: ``[channels, height, width, n]`` of the image as augmented,
    then its ``n`` label numbers (objects without area dropped), then ``label_pad_value``
    up to ``label_pad_width + 4`` (``label_pad_width`` is the widest label of the part
    unless given). Random crops, pads and mirrors move the boxes with the pixels; with
    ``resize_mode`` ``shrink`` or ``fit`` the image sits at the top left of its row.

    Beyond MXNet: ``path_imgidx`` (records are read through the ``.idx``; the part split is
    MXNet's byte rule all the same), ``seed_aug``, URLs, manifests and ``storage_options``
    as ``ImageRecordIter``.
    """

    NAME = "ImageDetRecordIter"
    TABLE = DET_ITER_ARGS
    FACES = False
    AUGMENTER = DetAugmenter

    def _splits_by_bytes(self) -> bool:
        return True

    def _prepare(self) -> None:
        """MXNet's label width: the widest label of the list or of this part's records."""
        a = self.args
        width = a["label_width"]
        if self._list is not None:
            widest = max((len(v) for v in self._list.values()), default=0)
        else:
            widest = 0
            for start in range(0, self.part.size, 1024):
                chunk = self.part[start : start + 1024]
                self.dataset.prefetch(chunk)
                for item in chunk.tolist():
                    header = self.dataset.header(item)
                    if header.flag == 0:
                        raise LabelError(f"{self._where(item)} holds no label array: pack detection records with --pack-label, or give path_imglist")
                    if width > 0 and header.flag != width:
                        raise LabelError(f"{self._where(item)} holds {header.flag} labels but label_width is {width}")
                    widest = max(widest, header.flag)
        if widest > a["label_pad_width"]:
            if a["label_pad_width"] > 0:
                raise OptionError(f"label_pad_width {a['label_pad_width']} is smaller than the widest label ({widest})", "label_pad_width")
            a["label_pad_width"] = widest
        self.label_pad_width = a["label_pad_width"]

    def _normalizer(self, dtype: np.dtype, mean_img: np.ndarray | None) -> DetNormalizer:
        a = self.args
        return DetNormalizer(
            self.data_shape[0],
            mean=np.array([a["mean_r"], a["mean_g"], a["mean_b"], a["mean_a"]]),
            std=np.array([a["std_r"], a["std_g"], a["std_b"], a["std_a"]]),
            scale=a["scale"],
            mean_img=mean_img,
        )

    def _label_shape(self) -> tuple[int, ...]:
        return (self.batch_size, self.label_pad_width + 4)

    def _fill_row(self, batch: _Batch, row: int, item: int, epoch: int) -> None:
        header, image = self._record(item)
        if self._list is not None:
            raw = np.asarray(self._listed_labels(header.id, item), dtype=np.float32)
        elif header.flag > 0:
            raw = header.label
        else:
            raise LabelError(f"{self._where(item)} holds no label array: pack detection records with --pack-label, or give path_imglist")
        img = self._decode(image, item)
        try:
            img, label = self.augmenter.process(img, raw, self._rng(epoch, item))
        except ValueError as e:
            raise LabelError(f"{self._where(item)}: {e}") from None
        planes = img[None] if img.ndim == 2 else img.transpose(2, 0, 1)[[2, 1, 0, 3][: img.shape[2]]]
        rows, cols = img.shape[:2]
        out = batch.data[row] if batch.data.dtype == np.float32 else np.zeros(self.data_shape, dtype=np.float32)
        out[:, :rows, :cols] = planes
        if rows < self.data_shape[1] or cols < self.data_shape[2]:  # shrink, fit: the rest is 0
            out[:, rows:, :] = 0
            out[:, :rows, cols:] = 0
        self.normalizer.apply(out)
        if out is not batch.data[row]:
            batch.data[row] = out
        lab = batch.label[row]
        lab[:] = self.args["label_pad_value"]
        lab[:4] = (planes.shape[0], rows, cols, label.size)
        lab[4 : 4 + label.size] = label
        batch.ids[row] = header.id


ImageRecordIter.__doc__ = f"{ImageRecordIter.__doc__}\n    Arguments and defaults:\n{help_text(RECORD_ITER_ARGS)}\n"
ImageDetRecordIter.__doc__ = f"{ImageDetRecordIter.__doc__}\n    Arguments and defaults:\n{help_text(DET_ITER_ARGS)}\n"
