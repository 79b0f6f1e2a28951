"""MXNet's training iterators without MXNet: ``ImageRecordIter`` and ``ImageDetRecordIter``.

``im2rec.ImageRecordIter(**kwargs)`` takes ``mx.io.ImageRecordIter``'s keyword arguments,
with MXNet 1.9.1's defaults, and gives the batches MXNet gives: ``DataBatch(data=[NCHW
array], label=[array], pad, index)``, numpy instead of NDArrays. Where MXNet's output is
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
import difflib
import logging
import os
import queue
import threading
import weakref
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from . import ndfile
from .augment import CROP_EMIT_MODES, CROP_SAMPLER_ARGS, RESIZE_MODES, DetAugmenter, DetNormalizer, ImageAugmenter, Normalizer, decode_for_iterator
from .batching import END, Work, produce
from .dataset import RecordDataset
from .errors import Im2recError, ImageError, LabelError, OptionError, RecordIOError
from .image import DAMAGE_POLICIES, Damaged, next_good
from .lst import iter_lst

__all__ = ["DataBatch", "DataDesc", "ImageDetRecordIter", "ImageRecordIter"]

log = logging.getLogger(__name__)


class DataDesc(namedtuple("DataDesc", ["name", "shape"])):
    """``mx.io.DataDesc``: a ``(name, shape)`` tuple, as MXNet's (so it equals ``("data", shape)``),
    with ``dtype`` and ``layout`` attributes."""

    dtype: Any  # attributes beside the tuple, as MXNet's
    layout: str

    def __new__(cls, name: str, shape: tuple[int, ...], dtype: Any = np.float32, layout: str = "NCHW") -> DataDesc:
        desc = super().__new__(cls, name, tuple(shape))
        desc.dtype, desc.layout = dtype, layout
        return desc

    def __repr__(self) -> str:
        return f"DataDesc[{self.name},{self.shape},{np.dtype(self.dtype)},{self.layout}]"


class DataBatch:
    """``mx.io.DataBatch``: ``data`` and ``label`` (lists of one numpy array each), ``pad``
    (how many of the last rows are not this epoch's records) and ``index`` (the records'
    header ids, uint64)."""

    def __init__(self, data: list[np.ndarray], label: list[np.ndarray], pad: int = 0, index: np.ndarray | None = None, provide_data: list[DataDesc] | None = None, provide_label: list[DataDesc] | None = None):
        self.data, self.label, self.pad, self.index = data, label, pad, index
        self.provide_data, self.provide_label = provide_data, provide_label
        self.bucket_key = None

    def __repr__(self) -> str:
        shapes = ", ".join(str(d.shape) for d in self.data)
        labels = ", ".join(str(d.shape) for d in self.label)
        return f"DataBatch: data shapes: [{shapes}] label shapes: [{labels}] pad: {self.pad}"


# --------------------------------------------------------------------------- arguments


@dataclasses.dataclass(frozen=True)
class Arg:
    """One keyword argument: its kind, MXNet's default, a lower bound or the allowed values.
    ``inert``: MXNet's, but it changes nothing here (devices, logging, chunked shuffling)."""

    kind: str  # int, float, bool, str, shape, floats, ints, choice, optional-int, optional-float, options
    default: Any = None
    lower: float | None = None
    choices: tuple[str, ...] = ()
    required: bool = False
    inert: bool = False


#: The dtypes each iterator makes batches of: MXNet's three, and float16/float64 beside them
#: (computed in float32, then cast). MXNet's other dtype names are refused.
RECORD_DTYPES = ("float32", "float16", "float64", "uint8", "int8")
DET_DTYPES = ("float32", "float16", "float64")
_READER_ARGS = {
    "path_imglist": Arg("str", ""),
    "label_width": Arg("int", 1, lower=1),
    "data_shape": Arg("shape", required=True),
    "preprocess_threads": Arg("int", 4, lower=1),
    "verbose": Arg("bool", True, inert=True),
    "num_parts": Arg("int", 1, lower=1),
    "part_index": Arg("int", 0, lower=0),
    "shuffle_chunk_size": Arg("int", 0, inert=True),
    "shuffle_chunk_seed": Arg("int", 0, inert=True),
    "shuffle": Arg("bool", False),
    "seed": Arg("int", 0),
    "batch_size": Arg("int", required=True, lower=1),
    "round_batch": Arg("bool", True),
    "prefetch_buffer": Arg("int", 4, lower=1),
    "ctx": Arg("choice", "gpu", choices=("cpu", "gpu"), inert=True),
    "mean_img": Arg("str", ""),
    "mean_r": Arg("float", 0.0),
    "mean_g": Arg("float", 0.0),
    "mean_b": Arg("float", 0.0),
    "mean_a": Arg("float", 0.0),
    "scale": Arg("float", 1.0),
    "resize": Arg("int", -1),
    "inter_method": Arg("int", 1),
    # mx.io.MXDataIter's own: the names of provide_data and provide_label
    "data_name": Arg("str", "data"),
    "label_name": Arg("str", "softmax_label"),
    # im2rec's: fsspec options for a URL (else the environment's credentials and endpoint)
    "storage_options": Arg("options", None),
    # im2rec's: the seed of the random augmentations (ImageRecordIter has it in MXNet too)
    "seed_aug": Arg("optional-int", None),
    # the .idx (ImageDetRecordIter: im2rec's; records are read through it)
    "path_imgidx": Arg("str", ""),
    # im2rec's: a record whose image is damaged: its pixels and a warning, left out, or an error
    "on_damaged": Arg("choice", "warn", choices=DAMAGE_POLICIES),
}
RECORD_ITER_ARGS: dict[str, Arg] = {
    **_READER_ARGS,
    "dtype": Arg("choice", None, choices=RECORD_DTYPES),
    "path_imgrec": Arg("str", ""),
    "aug_seq": Arg("choice", "aug_default", choices=("aug_default",)),
    "device_id": Arg("int", 0, inert=True),
    "std_r": Arg("float", 1.0),
    "std_g": Arg("float", 1.0),
    "std_b": Arg("float", 1.0),
    "std_a": Arg("float", 1.0),
    "mirror": Arg("bool", False),
    "rand_mirror": Arg("bool", False),
    "max_random_contrast": Arg("float", 0.0),
    "max_random_illumination": Arg("float", 0.0),
    "rand_crop": Arg("bool", False),
    "random_resized_crop": Arg("bool", False),
    "max_rotate_angle": Arg("int", 0),
    "max_aspect_ratio": Arg("float", 0.0),
    "min_aspect_ratio": Arg("optional-float", None),
    "max_shear_ratio": Arg("float", 0.0),
    "max_crop_size": Arg("int", -1),
    "min_crop_size": Arg("int", -1),
    "max_random_scale": Arg("float", 1.0),
    "min_random_scale": Arg("float", 1.0),
    "max_random_area": Arg("float", 1.0),
    "min_random_area": Arg("float", 1.0),
    "max_img_size": Arg("float", 1e10),
    "min_img_size": Arg("float", 0.0),
    "brightness": Arg("float", 0.0),
    "contrast": Arg("float", 0.0),
    "saturation": Arg("float", 0.0),
    "pca_noise": Arg("float", 0.0),
    "random_h": Arg("int", 0),
    "random_s": Arg("int", 0),
    "random_l": Arg("int", 0),
    "rotate": Arg("int", -1),
    "rotate_list": Arg("ints", ()),
    "fill_value": Arg("int", 255),
    "pad": Arg("int", 0),
}
DET_ITER_ARGS: dict[str, Arg] = {
    **_READER_ARGS,
    "dtype": Arg("choice", None, choices=DET_DTYPES),
    "path_imgrec": Arg("str", "./data/imgrec.rec"),
    "aug_seq": Arg("choice", "det_aug_default", choices=("det_aug_default",)),
    "label_width": Arg("int", -1),
    "label_pad_width": Arg("int", 0),
    "label_pad_value": Arg("float", -1.0),
    "std_r": Arg("float", 0.0),
    "std_g": Arg("float", 0.0),
    "std_b": Arg("float", 0.0),
    "std_a": Arg("float", 0.0),
    "rand_crop_prob": Arg("float", 0.0),
    **{name: Arg("ints" if name == "max_crop_trials" else "floats", getattr(DetAugmenter, name)) for name in CROP_SAMPLER_ARGS},
    "num_crop_sampler": Arg("int", 1),
    "crop_emit_mode": Arg("choice", "center", choices=CROP_EMIT_MODES),
    "emit_overlap_thresh": Arg("float", 0.3),
    "rand_pad_prob": Arg("float", 0.0),
    "max_pad_scale": Arg("float", 1.0),
    "max_random_hue": Arg("int", 0),
    "random_hue_prob": Arg("float", 0.0),
    "max_random_saturation": Arg("int", 0),
    "random_saturation_prob": Arg("float", 0.0),
    "max_random_illumination": Arg("int", 0),
    "random_illumination_prob": Arg("float", 0.0),
    "max_random_contrast": Arg("float", 0.0),
    "random_contrast_prob": Arg("float", 0.0),
    "rand_mirror_prob": Arg("float", 0.0),
    "fill_value": Arg("int", 127),
    "resize_mode": Arg("choice", "force", choices=RESIZE_MODES),
}
_KIND_WORDS = {"int": "int", "float": "float", "bool": "boolean", "str": "string", "shape": "Shape(tuple)", "floats": "tuple of float", "ints": "tuple of int", "optional-int": "int or None", "optional-float": "float or None", "options": "dict"}


def _bad(name: str, value: Any, kind: str) -> OptionError:
    return OptionError(f"Invalid Parameter format for {name} expect {_KIND_WORDS.get(kind, kind)} but value='{value}'", name)


def _number_list(name: str, value: Any, kind: str, cast: Callable[[Any], Any]) -> tuple:
    if isinstance(value, str):
        text = value.strip().strip("()[]")
        items: Any = [t for t in (p.strip() for p in text.split(",")) if t]
    elif isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
    else:
        items = [value]
    try:
        out = tuple(cast(v) for v in items)
    except (TypeError, ValueError):
        raise _bad(name, value, kind) from None
    return out


def _as_int(v: Any) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    if isinstance(v, str):
        return int(v.strip())
    raise ValueError(v)


def _parse(name: str, spec: Arg, value: Any) -> Any:
    """``value`` (a Python value, or the string MXNet's Python would pass on) as ``spec`` says."""
    kind = spec.kind
    if value is None and (kind.startswith("optional") or (kind in ("options", "choice") and spec.default is None)):
        return None
    try:
        if kind == "int" or kind == "optional-int":
            out: Any = _as_int(value)
        elif kind == "float" or kind == "optional-float":
            if isinstance(value, bool):
                raise ValueError(value)
            out = float(value)
        elif kind == "bool":
            if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
                out = bool(value)
            elif isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
                out = value.strip().lower() in ("true", "1")
            else:
                raise ValueError(value)
        elif kind == "str":
            if not isinstance(value, (str, os.PathLike)):
                raise ValueError(value)
            out = os.fspath(value)
        elif kind == "options":
            if not isinstance(value, Mapping):
                raise ValueError(value)
            out = dict(value)
        elif kind == "choice":
            text = np.dtype(value).name if name == "dtype" and not isinstance(value, str) else str(value)
            if text not in spec.choices:
                raise OptionError(f"Invalid Input: '{value}' for Parameter {name}, valid values are: {{{', '.join(spec.choices)}}}", name)
            out = text
        elif kind == "shape":
            out = _number_list(name, value, kind, _as_int)
        elif kind == "floats":
            out = _number_list(name, value, kind, float)
        elif kind == "ints":
            out = _number_list(name, value, kind, _as_int)
        else:  # pragma: no cover - the tables name no other kind
            raise AssertionError(kind)
    except (TypeError, ValueError) as e:
        if isinstance(e, OptionError):
            raise
        raise _bad(name, value, kind) from None
    if spec.lower is not None and out < spec.lower:
        raise OptionError(f"value {out} for Parameter {name} should be greater equal to {spec.lower:g}", name)
    return out


def parse_arguments(what: str, table: Mapping[str, Arg], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Every argument of ``table``: given (parsed) or MXNet's default.

    Raises:
        OptionError: an unknown name (with the closest known one), a required argument
            missing, or a value of the wrong kind or out of range, naming the argument.
    """
    for name in kwargs:
        if name not in table:
            close = difflib.get_close_matches(name, list(table), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise OptionError(f"{what}: cannot find argument '{name}'{hint}", name)
    args = {}
    for name, spec in table.items():
        if name in kwargs:
            args[name] = _parse(name, spec, kwargs[name])
        elif spec.required:
            kind = "Shape(tuple)" if spec.kind == "shape" else "int (non-negative)"
            raise OptionError(f"Required parameter {name} of {kind} is not presented", name)
        else:
            args[name] = spec.default
    shape = args["data_shape"]
    if len(shape) != 3:
        raise OptionError(f"value {shape} for Parameter data_shape has wrong dimensions, expected dimension=3", "data_shape")
    if any(d <= 0 for d in shape):
        raise OptionError(f"value {shape} for Parameter data_shape has a dimension that is not positive", "data_shape")
    if shape[0] not in (1, 3, 4):
        raise OptionError(f"Invalid output shape {shape} for Parameter data_shape: its channels (the first number) must be 1, 3 or 4", "data_shape")
    if args["part_index"] >= args["num_parts"]:
        raise OptionError(f"Invalid Parameter part_index={args['part_index']}: it must be less than num_parts={args['num_parts']}", "part_index")
    if not args["path_imgrec"]:
        raise OptionError(f"{what}: must specify path_imgrec", "path_imgrec")
    if args["resize"] != -1 and args["resize"] <= 0:
        raise OptionError(f"value {args['resize']} for Parameter resize must be -1 (no resize) or a size in pixels", "resize")
    for name in ("pad", "max_rotate_angle"):
        if args.get(name, 0) < 0:
            raise OptionError(f"value {args[name]} for Parameter {name} should be greater equal to 0", name)
    for name in ("min_random_scale", "max_random_scale", "max_pad_scale"):
        if name in args and args[name] <= 0:
            raise OptionError(f"value {args[name]:g} for Parameter {name} must be above 0", name)
    return args


# --------------------------------------------------------------------------- parts and epochs


def part_items(num_items: int, parts: int, index: int, positions: np.ndarray | None = None, total_bytes: int = 0) -> np.ndarray:
    """The items (in file order) of part ``index`` of ``parts``, as MXNet's readers split.

    With ``positions`` (each item's byte offset, the files laid end to end) the split is
    dmlc's byte-range rule for a ``.rec`` read without its index; without, the indexed rule
    (``ceil(N / parts)`` entries a part, the last ones short or empty).
    """
    if positions is None:
        step = -(-num_items // parts)
        return np.arange(min(index * step, num_items), min((index + 1) * step, num_items), dtype=np.int64)
    step = -(-total_bytes // parts)
    step = -(-step // 4) * 4
    begin, end = min(step * index, total_bytes), min(step * (index + 1), total_bytes)
    return np.flatnonzero((positions >= begin) & (positions < end)).astype(np.int64)


class EpochPlan(NamedTuple):
    """The batches of one epoch: ``rows[b]`` are the items of batch b (-1 for an empty row),
    ``epochs[b]`` the epoch each row's record belongs to (a row taken from the next epoch
    to fill the last batch belongs to it), ``pads[b]`` the rows that are not this epoch's."""

    rows: np.ndarray
    epochs: np.ndarray
    pads: np.ndarray
    skip_next: int


def plan_epoch(order: np.ndarray, next_order: Callable[[], np.ndarray], epoch: int, batch_size: int, round_batch: bool, skip: int = 0) -> EpochPlan:
    """Cut ``order[skip:]`` into batches; the short last one filled from ``next_order()`` with
    ``round_batch`` (the next epoch then skips those), else left empty.

    Raises:
        OptionError: ``round_batch`` would need more records than the next epoch has.
    """
    seq = order[skip:]
    n = seq.size
    nb = -(-n // batch_size)
    rows = np.full(nb * batch_size, -1, dtype=np.int64)
    rows[:n] = seq
    epochs = np.full(rows.size, epoch, dtype=np.int64)
    pads = np.zeros(nb, dtype=np.int64)
    skip_next = 0
    missing = rows.size - n
    if missing:
        pads[-1] = missing
        if round_batch:
            following = next_order()
            if missing > following.size:
                raise OptionError(f"batch_size {batch_size} needs {missing} more records to fill the last batch (round_batch), but this part has {following.size}: the number of records must be larger than the batch size", "batch_size")
            rows[n:] = following[:missing]
            epochs[n:] = epoch + 1
            skip_next = missing
    return EpochPlan(rows.reshape(nb, batch_size), epochs.reshape(nb, batch_size), pads, skip_next)


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


class _RecordIter:
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
        return DataBatch([self.getdata()], [self.getlabel()], self.getpad(), self.getindex(), self.provide_data, self.provide_label)

    __next__ = next

    def __iter__(self) -> Iterator[DataBatch]:
        return self

    def _now(self) -> _Batch:
        if self._current is None:
            raise Im2recError(f"{self.NAME}: no current batch: call iter_next() (or next()) first")
        return self._current

    def getdata(self) -> np.ndarray:
        return self._now().data

    def getlabel(self) -> np.ndarray:
        return self._now().label

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


def _help(table: Mapping[str, Arg]) -> str:
    lines = []
    for name, spec in table.items():
        default = "required" if spec.required else repr(spec.default)
        lines.append(f"    {name} ({_KIND_WORDS.get(spec.kind, spec.kind)}): {default}{' (accepted, changes nothing here)' if spec.inert else ''}")
    return "\n".join(lines)


ImageRecordIter.__doc__ = f"{ImageRecordIter.__doc__}\n    Arguments and defaults:\n{_help(RECORD_ITER_ARGS)}\n"
ImageDetRecordIter.__doc__ = f"{ImageDetRecordIter.__doc__}\n    Arguments and defaults:\n{_help(DET_ITER_ARGS)}\n"
