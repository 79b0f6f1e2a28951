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
``SampleReader``): ``fmt_webdataset``, ``fmt_parquet``, ``fmt_mds``, ``fmt_litdata``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "FORMATS",
    "META_NAME",
    "Batch",
    "DatasetMeta",
    "Sample",
    "SampleReader",
    "ShardWriter",
    "extension_of",
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
    from .image import image_format

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
    """Records as columns, what ``export`` hands a writer's ``write_batch`` (a format without
    one gets ``samples()`` one by one): the fields of ``Sample``, one list each."""

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

    def to_json(self) -> str:
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
        return json.dumps(d, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> DatasetMeta:
        d = json.loads(text)
        return cls(
            source=d.get("source", ""),
            layout=d.get("layout", "plain"),
            property=d.get("property"),
            classes={int(k): v for k, v in (d.get("classes") or {}).items()},
            samples=int(d.get("samples", 0)),
            shards=list(d.get("shards", [])),
            format=d.get("format", ""),
        )


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
    writer wrote, or one shard file where the format allows (a tar, a parquet file).
    """

    meta: DatasetMeta | None  # ``im2rec.json`` when the folder has one

    def count(self) -> int | None:
        """How many samples, when the format says so without reading them."""
        return None

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
