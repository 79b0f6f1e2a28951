"""Leaving or entering RecordIO: ``im2rec export`` and ``im2rec import``.

One record becomes one ``Sample`` (its key, its payload bytes as stored, every label, the
IRHeader's id, id2 and flag, a class name when one is known), and a ``Sample`` becomes
one record again: every format holds the same four fields, so that an export followed
by an import gives back the ``.rec`` and ``.idx`` byte for byte.

* ``key``: the ``.idx`` key, as text;
* ``image``: the payload after the IRHeader and its labels, untouched (``KEY.jpg`` in a
  WebDataset tar, with the extension of its real format);
* ``label``: every label, as float32 values (``KEY.cls`` as well in a tar when it is one
  integer);
* ``meta``: JSON text: ``id`` and ``id2`` (the IRHeader's), ``flag`` when it is not what
  MXNet's ``pack`` gives for that many labels (0 for one label, else their count),
  ``class`` (the class name, from ``PREFIX.classes.tsv``), ``identity`` (insightface sets).

Beside the shards, ``OUT/im2rec.json`` (``DatasetMeta``) says where the data came from,
its layout, its classes and, for insightface sets, the ``property`` line.

Each format is a module with a ``Writer`` and a ``Reader`` (see ``ShardWriter`` and
``SampleReader``): ``formats.webdataset``, ``formats.parquet``, ``formats.mds``, ``formats.litdata``.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .. import storage
from ..errors import Im2recError, ImageError
from ..recordio import LAYOUTS

log = logging.getLogger(__name__)

__all__ = [
    "FORMATS",
    "IMAGE_NAMES",
    "KEY_NAMES",
    "LABEL_NAMES",
    "META_NAME",
    "Batch",
    "DatasetMeta",
    "FolderSource",
    "Roles",
    "Sample",
    "SampleReader",
    "ShardWriter",
    "build_sample",
    "decompress_zstd",
    "extension_of",
    "in_folder",
    "labels_of",
    "pick_roles",
    "png_from_array",
    "png_from_pil_raw",
    "read_file",
    "read_meta",
    "shard_files",
    "source_folder",
]

FORMATS = ("webdataset", "parquet", "mds", "litdata")
#: The dataset's metadata file, beside the shards of every format.
META_NAME = "im2rec.json"

_EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "BMP": "bmp", "TIFF": "tif", "WebP": "webp", "AVIF": "avif", "JPEG 2000": "jp2", "PNM": "pnm", "HDR": "hdr", "EXR": "exr"}


def extension_of(data: bytes | memoryview) -> str:
    """The file extension of the payload's real format (``jpg``, ``png``, ...), ``bin`` when none is recognised."""
    head = bytes(data[:32])
    if head[:3] == b"\xff\xd8\xff":  # the common case, without the table
        return "jpg"
    from ..image import image_format

    return _EXTENSIONS.get(image_format(head) or "", "bin")


def meta_text(label: tuple[float, ...], id_: int | None, id2: int, flag: int | None, class_name: str | None = None, identity: int | None = None, with_label: bool = False) -> str:
    """``Sample.meta`` as compact JSON text (with ``label`` first when ``with_label``: a tar's
    ``KEY.json``), the same text ``json.dumps(..., separators=(",", ":"))`` gives, made faster."""
    head = ""
    if with_label:
        if all(math.isfinite(x) for x in label):
            head = '"label":[' + ",".join(map(repr, label)) + "],"
        else:
            head = '"label":' + json.dumps(list(label)) + ","
    text = "{" + head + '"id":' + ("null" if id_ is None else str(id_)) + ',"id2":' + str(id2)
    if flag is not None and flag != default_flag(label):
        text += ',"flag":' + str(flag)
    if class_name is not None:
        text += ',"class":' + json.dumps(class_name)
    if identity is not None:
        text += ',"identity":' + str(identity)
    return text + "}"


@dataclass(slots=True)
class Batch:
    """Records as columns, what ``export`` hands a writer's ``write_batch`` (``ShardWriter``'s
    default writes ``samples()`` one by one): the fields of ``Sample``, one list each."""

    keys: list[str]
    images: list[Any]  # bytes or memoryviews of the input, valid during the call only
    labels: list[tuple[float, ...]]
    ids: list[int]
    id2s: list[int]
    flags: list[int]
    class_names: list[str | None] | None = None
    identities: bool = False  # an insightface set: each record's identity is its label

    def __len__(self) -> int:
        return len(self.keys)

    def samples(self) -> Iterator[Sample]:
        names = self.class_names
        for i, key in enumerate(self.keys):
            sample = Sample(key, self.images[i], self.labels[i], self.ids[i], self.id2s[i], self.flags[i], ext=extension_of(self.images[i]))
            if names is not None:
                sample.class_name = names[i]
            if self.identities:
                sample.identity = sample.cls
            yield sample


@dataclass(slots=True)
class Sample:
    """One record, as every format holds it.

    Attributes:
        key: the ``.idx`` key as text (export); the source's key (import).
        image: the payload bytes after the IRHeader and its labels, as stored.
        label: every label (float32 values); empty when the source names a class only.
        id, id2: the IRHeader's; ``id`` None: the key when it is a number, else the position.
        flag: the IRHeader's flag; None: MXNet's rule (0 for one label, else their count).
        class_name: the class's name, when one is known (a string label of a source).
        identity: insightface sets: the identity id (the label).
        ext: the payload's format as a file extension (``extension_of``).
        where: import: where the sample is in the source (``shard.tar:KEY``), for messages.
        problem: import: ``(kind, reason)`` when the sample cannot become a record (a missing
            image, a label that cannot be read); it is listed in ``OUT.failed.tsv``.
    """

    key: str
    image: bytes | memoryview
    label: tuple[float, ...]
    id: int | None = None
    id2: int = 0
    flag: int | None = None
    class_name: str | None = None
    identity: int | None = None
    ext: str = "bin"
    where: str = ""
    problem: tuple[str, str] | None = None

    def meta(self) -> dict[str, Any]:
        """The ``meta`` field: id, id2, and flag, class, identity where they say something."""
        out: dict[str, Any] = {"id": self.id, "id2": self.id2}
        if self.flag is not None and self.flag != default_flag(self.label):
            out["flag"] = self.flag
        if self.class_name is not None:
            out["class"] = self.class_name
        if self.identity is not None:
            out["identity"] = self.identity
        return out

    def meta_json(self, with_label: bool = False) -> str:
        """``meta()`` as compact JSON (``meta_text``)."""
        return meta_text(self.label, self.id, self.id2, self.flag, self.class_name, self.identity, with_label)

    @property
    def cls(self) -> int | None:
        """The integer class when there is one label and it is an integer (``KEY.cls``)."""
        if len(self.label) == 1 and math.isfinite(self.label[0]) and self.label[0] == int(self.label[0]):
            return int(self.label[0])
        return None

    def with_meta(self, meta: dict[str, Any] | str | bytes | None) -> Sample:
        """This sample with the fields of a ``meta`` JSON (or dict) written by ``export``; other keys are ignored."""
        if meta is None:
            return self
        if isinstance(meta, (str, bytes)):
            meta = json.loads(meta)
        if not isinstance(meta, dict):
            return self
        if isinstance(meta.get("id"), int):
            self.id = meta["id"]
        if isinstance(meta.get("id2"), int):
            self.id2 = meta["id2"]
        if isinstance(meta.get("flag"), int):
            self.flag = meta["flag"]
        if isinstance(meta.get("class"), str):
            self.class_name = meta["class"]
        if isinstance(meta.get("identity"), int):
            self.identity = meta["identity"]
        return self


def default_flag(label: tuple[float, ...]) -> int:
    """The flag MXNet's ``pack`` writes for these labels: 0 for one (a scalar), else their count."""
    return 0 if len(label) == 1 else len(label)


@dataclass
class DatasetMeta:
    """``OUT/im2rec.json``: what an export came from, and what an import needs to lay it out again.

    Attributes:
        source: the ``.rec`` (or manifest) exported.
        layout: ``"plain"`` or ``"insightface"`` (images only were exported, labelled by identity).
        property: insightface sets: the ``property`` file's line (``num_classes,height,width``).
        classes: label -> class name, from ``PREFIX.classes.tsv``.
        samples: how many samples were written.
        shards: the shard files, in order (names relative to the folder).
        format: the format written.
    """

    source: str = ""
    layout: str = "plain"
    property: str | None = None
    classes: dict[int, str] = field(default_factory=dict)
    samples: int = 0
    shards: list[str] = field(default_factory=list)
    format: str = ""

    def to_json(self, totals: bool = True) -> str:
        """The JSON text; ``totals`` False leaves out ``samples`` and ``shards`` (for a copy
        written before they are known, such as the one inside every Parquet file)."""
        d = {
            "im2rec": 1,
            "format": self.format,
            "source": self.source,
            "layout": self.layout,
            "property": self.property,
            "classes": {str(k): v for k, v in sorted(self.classes.items())},
            "samples": self.samples,
            "shards": self.shards,
        }
        if not totals:
            del d["samples"], d["shards"]
        return json.dumps(d, indent=1) + "\n"

    def write(self, folder: str) -> str:
        """Write ``folder/im2rec.json`` (a local folder); returns its path."""
        path = os.path.join(folder, META_NAME)
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())
        return path

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "im2rec.json") -> DatasetMeta:
        """The metadata in ``text`` (what ``where`` holds: a file's name, for the errors).

        Raises:
            Im2recError: it is not JSON, or not the object im2rec export writes.
        """
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            at = f" at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
            raise Im2recError(f"{where}: not JSON ({e.msg if isinstance(e, json.JSONDecodeError) else 'not UTF-8'}{at}): an export's im2rec.json is damaged; remove it to read the shards without it") from None
        if not isinstance(d, dict):
            raise Im2recError(f"{where}: not the object an export writes (a JSON {type(d).__name__}); remove it to read the shards without it")
        if d.get("layout", "plain") not in LAYOUTS:
            raise Im2recError(f"{where}: layout {d.get('layout')!r}: an export writes {' or '.join(LAYOUTS)}; remove it to read the shards without it")
        try:
            return cls(
                source=str(d.get("source", "")),
                layout=str(d.get("layout", "plain")),
                property=d.get("property"),
                classes={int(k): str(v) for k, v in (d.get("classes") or {}).items()},
                samples=int(d.get("samples", 0)),
                shards=[str(x) for x in d.get("shards", [])],
                format=str(d.get("format", "")),
            )
        except (TypeError, ValueError, AttributeError) as e:
            raise Im2recError(f"{where}: a field holds what an export does not write ({e}); remove it to read the shards without it") from None


def in_folder(folder: str, name: str) -> str:
    """``folder/name`` for a local folder or a URL prefix."""
    return storage.join(folder, name) if storage.is_url(folder) else os.path.join(folder, name)


def read_file(path: str, storage_options: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of a small file of a source (an index, ``im2rec.json``), local or a URL.

    Raises:
        Im2recError: it is not there ("no such file", "no such object").
    """
    if not storage.there(path, storage_options):
        raise Im2recError(storage.missing(path, storage_options))
    try:
        return storage.read_any(path, storage_options)
    except IsADirectoryError:
        raise Im2recError(f"{path}: is a folder, where a file was named (a damaged index?)") from None
    except OSError as e:
        raise Im2recError(f"{path}: cannot read it: {e.strerror or e}") from None


def read_meta(folder: str, storage_options: Mapping[str, Any] | None = None) -> DatasetMeta | None:
    """``folder/im2rec.json``, when an export wrote one there."""
    path = in_folder(folder, META_NAME)
    return DatasetMeta.from_json(storage.read_any(path, storage_options), path) if storage.there(path, storage_options) else None


def check_listed(files: list[str], meta: DatasetMeta | None, fmt: str, src: str) -> None:
    """Refuse a source whose ``im2rec.json`` lists a shard that is not among ``files`` (read
    as a whole folder): its samples would be lost without a word.

    Raises:
        Im2recError: naming the missing shard and the file that lists it.
    """
    if meta is None or meta.format != fmt or not meta.shards or any(c in src.split("://", 1)[-1] for c in "*?[") or src.endswith(EXTENSIONS_OF.get(fmt, "\0")):
        return  # a glob or one shard: only what was asked for is read
    there = {f.rstrip("/").rsplit("/", 1)[-1] for f in files}
    folder = source_folder(src)
    for name in meta.shards:
        if name not in there:
            raise Im2recError(f"{in_folder(folder, name)}: no such file: {in_folder(folder, META_NAME)} lists it (a shard lost in the copy?)")


#: The shard file extension of each format read from shard files.
EXTENSIONS_OF = {"webdataset": ".tar", "parquet": ".parquet"}


def shard_files(src: str, ext: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The shard files a reader reads, in name order: ``src`` itself when it ends with ``ext``
    (``.tar``, ``.parquet``), the files ending with ``ext`` in the folder (or URL prefix)
    ``src``, or those a glob (``*``, ``?``, ``[``) matches.

    Raises:
        Im2recError: nothing there, or nothing matches.
    """
    if any(c in src.split("://", 1)[-1] for c in "*?["):
        if storage.is_url(src):
            return storage.expand([src], storage_options)
        found = sorted(glob.glob(src))
        if not found:
            raise Im2recError(f"{src}: no file matches")
        return found
    if src.endswith(ext):
        if not storage.there(src, storage_options):
            raise Im2recError(storage.missing(src, storage_options))
        return [src]
    if storage.is_url(src):
        names = storage.list_files(src, recursive=False, storage_options=storage_options)
    elif os.path.isdir(src):
        names = os.listdir(src)
    else:
        raise Im2recError(f"{src}: no such folder or {ext} file")
    files = [in_folder(src, n) for n in sorted(names) if n.endswith(ext)]
    if not files:
        if storage.is_url(src):
            storage.check_bucket(src, storage_options)  # a missing bucket says so
        raise Im2recError(f"{src}: no {ext} file there")
    return files


class FolderSource:
    """A source that is a folder (or URL prefix) of named files with an index: MDS, litdata.
    ``path(name)`` and ``read(name)`` reach its files, local or in a store."""

    def __init__(self, src: str, storage_options: Mapping[str, Any] | None = None):
        self.src = src.rstrip("/") if storage.is_url(src) else src
        self.storage_options = storage_options

    def path(self, name: str) -> str:
        return in_folder(self.src, name)

    def read(self, name: str) -> bytes:
        return read_file(self.path(name), self.storage_options)


def source_folder(src: str) -> str:
    """The folder of a source given as a folder, a shard file or a glob: where ``im2rec.json`` is."""
    if any(c in src.split("://", 1)[-1] for c in "*?[") or os.path.splitext(src.rstrip("/"))[1] in (".tar", ".parquet"):
        return src.rsplit("/", 1)[0] if "/" in src else "."
    return src


class ShardWriter(Protocol):
    """Writes samples as a format's shards in a local folder.

    ``Writer(folder, name, shard_size, meta, on_shard)``: ``folder`` exists and is empty;
    ``name`` the stem for shard names where the format has one (``NAME-000000.tar``);
    ``shard_size`` in bytes; ``meta`` the dataset's metadata (the writer may put it in
    its own index or file metadata); ``on_shard(path)`` is called with each shard file
    once it is complete and closed (the caller may upload and delete it).
    """

    def write(self, sample: Sample) -> None:
        """Add one sample (its ``image`` may be a view that is only valid during the call)."""

    def write_batch(self, batch: Batch) -> None:
        """Add the samples of ``batch`` (what ``export`` hands over): one by one, unless the format does better."""
        for sample in batch.samples():
            self.write(sample)

    def close(self) -> list[str]:
        """Finish the last shard (``on_shard`` is called for it) and write the format's index,
        if it has one; return the paths of the files written after the last ``on_shard``
        (the index), which the caller handles last."""
        return []

    def abort(self) -> None:
        """Stop after a failure; what was written may be left for the caller to remove."""


class SampleReader(Protocol):
    """Reads a format's samples in order, from a local folder or a URL (with ``storage_options``).

    ``Reader(src, storage_options)``; ``src`` is the folder (or URL prefix) the format's
    writer wrote, or one shard file where the format allows (a tar, a parquet file). The
    formats' readers subclass it (and their writers ``ShardWriter``) for the defaults.
    """

    meta: DatasetMeta | None  # ``im2rec.json`` when the folder has one
    label_names: list[str] | None = None  # the names the format's own metadata gives integer labels (🤗 datasets' ClassLabel)

    def count(self) -> int | None:
        """How many samples, when the format says so without reading them."""
        return None

    def shard_names(self) -> list[str | None]:
        """The files the samples come from, in order, as the resume fingerprint names them (a
        resumed import must read the same ones): paths or URLs, or the names in the format's index."""
        return []

    def class_names(self) -> list[str] | None:
        """When labels are class names (strings): their sorted distinct names, read as cheaply as
        the format allows (a pass over the labels only); None when labels are numbers."""
        return None

    def samples(self, start: int = 0) -> Iterator[Sample]:
        """The samples from position ``start`` in order, each with its ``where``. A sample that
        cannot become a record (no image field, an unreadable label) is yielded with its
        ``problem`` set, never raised: the caller lists it in ``OUT.failed.tsv`` and goes on.
        A source that cannot be read at all (a damaged shard file) raises ``Im2recError``
        naming the file and the byte offset or row."""
        return iter(())


OnShard = Callable[[str], None]


# --------------------------------------------------------------------------- what other writers wrote
# The rules every reader follows for samples it did not write: which column (field) is the
# image, the label, the key, the meta; labels as numbers, lists or class names; raw pixels as PNG.

IMAGE_NAMES = ("image", "img", "jpg", "jpeg", "png", "webp", "x")
#: encodings (serializer names) that hold an image, for a source without an image column by name
IMAGE_KINDS = ("jpeg", "png", "jpeg_array", "jpegarray", "pil", "bytes", "image")
LABEL_NAMES = ("label", "labels", "cls", "class", "target", "y")
KEY_NAMES = ("key", "__key__")
META_COLUMN = "meta"


@dataclasses.dataclass(frozen=True)
class Roles:
    """Which columns of a source hold the image, the label, the key and the meta (None: none)."""

    image: str | None
    label: str | None
    key: str | None
    meta: str | None


def pick_roles(kinds: Mapping[str, str], label_field: str | None = None, where: str = "") -> Roles:
    """The roles of a source's columns, from ``{name: kind}`` in the source's column order.

    ``kind`` is the encoding without its arguments (``jpeg``, ``pil``, ``str``, ``ndarray``...).
    The image is the first present of ``IMAGE_NAMES``, else the first column of an image kind
    (``IMAGE_KINDS``); the label ``label_field`` when given, else the first present of
    ``LABEL_NAMES``; the key ``key`` or ``__key__``; the meta ``meta``.

    Raises:
        Im2recError: ``label_field`` is not a column (``where`` names the source).
    """
    if label_field is not None and label_field not in kinds:
        raise Im2recError(f"{where}: no field {label_field!r} for --label-field (its fields: {', '.join(kinds)})")
    image = next((n for n in IMAGE_NAMES if n in kinds and n != label_field), None)
    if image is None:
        image = next((n for n, kind in kinds.items() if kind in IMAGE_KINDS and n not in (*LABEL_NAMES, *KEY_NAMES, META_COLUMN, label_field)), None)
    label = label_field or next((n for n in LABEL_NAMES if n in kinds and n != image), None)
    key = next((n for n in KEY_NAMES if n in kinds), None)
    return Roles(image=image, label=label, key=key, meta=META_COLUMN if META_COLUMN in kinds else None)


def labels_of(value: Any) -> tuple[tuple[float, ...], str | None]:
    """``(labels, class name)`` of a label value: a number, a list or array of numbers, or a
    string (a class name: no labels).

    Raises:
        ValueError: the value is none of these.
    """
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str):
        return (), value
    if isinstance(value, (bool, np.bool_)) or value is None or isinstance(value, dict):
        raise ValueError(f"a label must be a number, a list of numbers or a class name, got {type(value).__name__} {value!r:.60}")
    try:
        array = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError(f"a label must be a number, a list of numbers or a class name, got {value!r:.60}") from None
    return tuple(float(x) for x in array.ravel()), None


def png_from_array(pixels: np.ndarray, order: str = "RGB") -> bytes:
    """Lossless PNG of decoded pixels (H x W, or H x W x 1, 3 or 4 channels in ``order``: RGB(A) or BGR(A)).

    Raises:
        ValueError: a shape or dtype PNG cannot hold.
    """
    from ..image import ImageOptions, encode

    if pixels.dtype not in (np.uint8, np.uint16):
        raise ValueError(f"pixels of {pixels.dtype} cannot be stored as PNG (uint8 or uint16 only)")
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    if not (pixels.ndim == 2 or (pixels.ndim == 3 and pixels.shape[2] in (3, 4))) or pixels.size == 0:
        raise ValueError(f"pixels of shape {pixels.shape} are not an image")
    if pixels.ndim == 3 and order == "RGB":
        pixels = np.ascontiguousarray(pixels[:, :, [2, 1, 0, 3][: pixels.shape[2]]])  # OpenCV writes BGR(A)
    try:
        return encode(pixels, ImageOptions(encoding=".png"))
    except ImageError as e:
        raise ValueError(str(e)) from None


#: PIL mode -> (numpy dtype, channels) of its raw bytes (Image.tobytes()), for the modes PNG holds.
PIL_MODES = {"L": ("u1", 1), "LA": ("u1", 2), "RGB": ("u1", 3), "RGBA": ("u1", 4), "RGBX": ("u1", 4), "I;16": ("<u2", 1), "I;16B": (">u2", 1)}


def png_from_pil_raw(data: bytes | memoryview) -> bytes:
    """A PIL image stored raw (MDS ``pil``, litdata ``pil``: ``[width, height, len(mode)]`` as
    uint32, the mode's name, then ``Image.tobytes()``) as a lossless PNG, through OpenCV.

    The raw pixels are not a file: re-encoding them losslessly is the only way to make a
    payload of them; decoding the PNG gives back the very same pixels.

    Raises:
        ValueError: the data is too short for its size, or the mode has no PNG equivalent
            (``P``: the palette is not stored; ``F``, ``I``, ``CMYK``...).
    """
    if len(data) < 12:
        raise ValueError(f"a raw PIL image needs a 12-byte header, got {len(data)} bytes")
    width, height, mode_size = np.frombuffer(data[:12], "<u4").tolist()
    mode = bytes(data[12 : 12 + mode_size]).decode("utf-8", "replace")
    raw = data[12 + mode_size :]
    if mode == "1":  # one bit a pixel, each row padded to a byte
        rows = np.frombuffer(raw, np.uint8)
        stride = (width + 7) // 8
        if rows.size != stride * height:
            raise ValueError(f"a {width}x{height} PIL image of mode 1 needs {stride * height} bytes, got {rows.size}")
        pixels = np.unpackbits(rows.reshape(height, stride), axis=1)[:, :width] * np.uint8(255)
        return png_from_array(pixels)
    if mode not in PIL_MODES:
        raise ValueError(f"PIL mode {mode!r} has no lossless PNG equivalent (L, LA, RGB, RGBA, 1, I;16 do)")
    dtype, channels = PIL_MODES[mode]
    values = np.frombuffer(raw, np.dtype(dtype))
    if values.size != width * height * channels:
        raise ValueError(f"a {width}x{height} PIL image of mode {mode} needs {width * height * channels} values, got {values.size}")
    pixels = values.reshape(height, width, channels).astype(values.dtype.newbyteorder("="))
    if mode == "LA":  # PNG's gray + alpha is not an OpenCV layout: write it as BGRA
        pixels = np.dstack([pixels[:, :, 0]] * 3 + [pixels[:, :, 1]])
    elif mode == "RGBX":
        pixels = pixels[:, :, :3]
    return png_from_array(pixels)


def build_sample(
    position: int,
    where: str,
    roles: Roles,
    get: Callable[[str], Any],
) -> Sample:
    """The Sample of one source sample whose columns ``get(name)`` decodes (a value, or raises
    ``ValueError`` with the reason it cannot): a missing image or an unreadable label becomes
    the Sample's ``problem``, never an exception.

    The image value is bytes (stored as they are), or already a PNG the reader made; the
    label a value ``labels_of`` reads; ``meta`` a dict or JSON text as ``export`` writes it.
    """
    key = str(position)
    if roles.key is not None:
        try:
            value = get(roles.key)
            key = value.decode("utf-8") if isinstance(value, bytes) else str(value)
        except (ValueError, UnicodeDecodeError) as e:
            log.debug("%s: key unreadable (%s), using the position", where, e)
    sample = Sample(key=key, image=b"", label=(), where=where)
    if roles.image is None:
        sample.problem = ("missing", "no image column")
    else:
        try:
            image = get(roles.image)
            if isinstance(image, np.ndarray):  # decoded pixels (an ndarray or tensor leaf): taken as RGB(A)
                image = png_from_array(image)
            if isinstance(image, str) or not isinstance(image, (bytes, bytearray, memoryview)):
                raise ValueError(f"column {roles.image!r} holds {type(image).__name__}, not image bytes")
            sample.image = bytes(image)
            sample.ext = extension_of(sample.image)
        except ValueError as e:
            sample.problem = ("unreadable", f"image column {roles.image!r}: {e}")
    if roles.label is not None:
        try:
            sample.label, sample.class_name = labels_of(get(roles.label))
        except (ValueError, UnicodeDecodeError) as e:
            sample.problem = sample.problem or ("bad-label", f"label column {roles.label!r}: {e}")
    if roles.meta is not None:
        try:
            meta = get(roles.meta)
            if isinstance(meta, (str, bytes)):
                meta = json.loads(meta)
            sample.with_meta(meta if isinstance(meta, dict) else None)
        except ValueError as e:  # not export's meta: another column that happens to be called so
            log.debug("%s: meta ignored (%s)", where, e)
    return sample


def decompress_zstd(data: bytes | memoryview, where: str, compression: str) -> bytes:
    """A zstd frame (or frames) decompressed, with the ``zstandard`` or the ``zstd`` module.

    Raises:
        Im2recError: neither module is installed, or the data is not zstd.
    """
    module = next((m for m in (optional("zstandard"), optional("zstd")) if m is not None), None)
    if module is None:
        raise Im2recError(f"{where}: compressed with {compression}: reading it needs zstandard: pip install zstandard")
    try:
        if module.__name__ == "zstandard":  # decompressobj: frames that do not say their size too
            return bytes(module.ZstdDecompressor().decompressobj().decompress(bytes(data)))
        return bytes(module.decompress(bytes(data)))
    except Exception as e:  # zstandard.ZstdError, zstd.Error
        raise Im2recError(f"{where}: cannot decompress ({compression}): {e}") from None


def optional(name: str) -> Any:
    """The module ``name``, or None when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
