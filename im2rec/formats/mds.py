"""MosaicML streaming's MDS format (``im2rec export/import --format mds``), read and written here.

No ``import streaming``: it imports torchvision (and transformers) at import time. The
layout below is the one ``streaming.base.format.mds`` writes (``MDSWriter``) and reads
(``MDSReader``), version 2; the tests check both ways against streaming itself.

A folder holds ``index.json`` and the shards ``shard.00000.mds``, ``shard.00001.mds``, ...
(``shard.00000.mds.zstd`` when compressed: the whole file, with zstd)::

    num_samples  uint32 little-endian
    offsets      uint32[num_samples + 1], little-endian: where each sample starts, from the
                 file's start; the last one is the file's size
    config       the shard's config as JSON text (json.dumps(..., sort_keys=True)): the same
                 keys as its entry in index.json, less raw_data, zip_data and samples
    samples      each: a uint32 size for each variable-size column, in column order, then
                 the columns' bytes in column order

Columns are sorted by name (``MDSWriter`` sorts them). A shard's size is what
``MDSWriter`` counts against its ``size_limit``: ``8 + len(config)`` plus ``4 + len(sample)``
for each sample, the file's exact size. ``index.json`` is
``{"shards": [...], "version": 2}``, one entry per shard: ``column_encodings``,
``column_names``, ``column_sizes`` (null for variable size), ``compression``, ``format``
("mds"), ``hashes``, ``raw_data`` (``basename``, ``bytes``, ``hashes``), ``samples``,
``size_limit``, ``version`` (2), ``zip_data`` (the compressed file's, or null).

``export`` writes the columns ``image`` (bytes: the payload as stored), ``key`` (str),
``label`` (json: a list of floats) and ``meta`` (json: ``Sample.meta()``). ``import`` reads
those, or other columns by the rules of ``pick_roles`` (shared with ``formats.litdata``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import Im2recError
from .base import DatasetMeta, FolderSource, Sample, SampleReader, ShardWriter, build_sample, decompress_zstd, in_folder, pick_roles, png_from_pil_raw, read_meta

__all__ = [
    "COLUMNS",
    "INDEX_NAME",
    "STREAMING_STAND_INS",
    "Reader",
    "Writer",
    "shard_name",
    "write_streaming_stand_ins",
]

log = logging.getLogger(__name__)

INDEX_NAME = "index.json"
#: export's columns and their MDS encodings, in MDSWriter's (sorted) order.
COLUMNS = {"image": "bytes", "key": "str", "label": "json", "meta": "json"}
U32 = struct.Struct("<I")
#: offsets are uint32 (streaming refuses a size_limit of 2**32 or more for the same reason)
MAX_SHARD = (1 << 32) - 1

#: Fixed sizes of MDS encodings (numpy dtype names); every other encoding has a size per sample.
SCALARS = {
    "int": "<i8",
    "uint8": "<u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "int8": "<i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
}
#: MDS ndarray's value dtype codes (streaming's NDArray._int2value_dtype) and shape dtype codes.
NDARRAY_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32", 33: "int32", 34: "float32", 64: "uint64", 65: "int64", 66: "float64"}
NDARRAY_SHAPE_DTYPES = {0: "<u1", 1: "<u2", 2: "<u4", 3: "<u8"}


def shard_name(index: int) -> str:
    """``shard.00000.mds``: MDSWriter's name for its ``index``-th shard."""
    return f"shard.{index:05d}.mds"


# --------------------------------------------------------------------------- writing


class Writer(ShardWriter):
    """Writes samples as MDS shards that streaming's ``StreamingDataset`` reads (a ``ShardWriter``).

    A shard is built in memory (at most ``shard_size`` bytes, or one larger sample) and
    written when the next sample would not fit, as ``MDSWriter`` does with its ``size_limit``.
    No compression, no hashes.
    """

    def __init__(self, folder: str, name: str, shard_size: int, meta: DatasetMeta, on_shard: Callable[[str], None]):
        if not 0 < shard_size <= MAX_SHARD:
            raise ValueError(f"an MDS shard size must be between 1 and {MAX_SHARD} bytes (uint32 offsets), got {shard_size}")
        self.folder = folder
        self.name = name  # MDS names its shards shard.NNNNN.mds whatever the dataset's name
        self.shard_size = shard_size
        self.meta = meta
        self.on_shard = on_shard
        self.config = {
            "column_encodings": list(COLUMNS.values()),
            "column_names": list(COLUMNS),
            "column_sizes": [None] * len(COLUMNS),
            "compression": None,
            "format": "mds",
            "hashes": [],
            "size_limit": shard_size,
            "version": 2,
        }
        self.config_data = json.dumps(self.config, sort_keys=True).encode("utf-8")
        self.shards: list[dict[str, Any]] = []
        self.pending: list[bytes] = []
        self.pending_size = 8 + len(self.config_data)
        self.count = 0

    def write(self, sample: Sample) -> None:
        """Add one sample; writes the current shard first when the sample would not fit in it."""
        columns = (
            sample.image,
            sample.key.encode("utf-8"),
            json.dumps(list(sample.label)).encode("utf-8"),  # json.dumps as streaming's JSON encoding: MDSWriter's very bytes
            json.dumps(sample.meta()).encode("utf-8"),
        )
        encoded = b"".join([struct.pack(f"<{len(columns)}I", *map(len, columns)), *columns])
        if self.pending and self.pending_size + 4 + len(encoded) > self.shard_size:
            self.flush()
        if self.pending_size + 4 + len(encoded) > MAX_SHARD:
            raise Im2recError(f"{sample.key}: a sample of {len(encoded)} bytes does not fit in an MDS shard (uint32 offsets: 4 GiB)")
        self.pending.append(encoded)
        self.pending_size += 4 + len(encoded)
        self.count += 1

    def flush(self) -> None:
        """Write the samples held as the next shard and pass it to ``on_shard``."""
        if not self.pending:
            return
        n = len(self.pending)
        sizes = np.fromiter((len(s) for s in self.pending), np.int64, n)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        offsets += 4 + 4 * (n + 1) + len(self.config_data)
        basename = shard_name(len(self.shards))
        path = os.path.join(self.folder, basename)
        with open(path, "wb") as f:
            f.write(U32.pack(n))
            f.write(offsets.astype("<u4").tobytes())
            f.write(self.config_data)
            for s in self.pending:
                f.write(s)
            size = f.tell()
        self.shards.append({**self.config, "raw_data": {"basename": basename, "bytes": size, "hashes": {}}, "samples": n, "zip_data": None})
        self.pending = []
        self.pending_size = 8 + len(self.config_data)
        self.on_shard(path)

    def close(self) -> list[str]:
        """Write the last shard, then ``im2rec.json`` and ``index.json``; return their paths (index last)."""
        self.flush()
        meta = dataclasses.replace(self.meta, samples=self.count, shards=[s["raw_data"]["basename"] for s in self.shards], format="mds")
        meta_path = meta.write(self.folder)
        index_path = os.path.join(self.folder, INDEX_NAME)
        with open(index_path, "w", encoding="utf-8") as f:
            json.dump({"shards": self.shards, "version": 2}, f, sort_keys=True)
        return [meta_path, index_path]

    def abort(self) -> None:
        """Drop the samples held; the shards written are left for the caller."""
        self.pending = []


# --------------------------------------------------------------------------- reading


class Shard:
    """One shard's entry of ``index.json``, and how to decode its columns."""

    def __init__(self, entry: Mapping[str, Any], folder: str = ""):
        self.entry = entry
        raw = entry.get("raw_data") or {}
        zipped = entry.get("zip_data") or None
        self.basename: str = str(raw.get("basename", ""))
        self.file: str = str(zipped["basename"]) if zipped else self.basename
        self.where = in_folder(folder, self.file) if folder else self.file  # its path or URL, for messages
        self.samples = int(entry.get("samples", 0))
        self.compression: str | None = entry.get("compression") or None
        self.names: list[str] = list(entry.get("column_names", []))
        self.encodings: list[str] = list(entry.get("column_encodings", []))
        self.sizes: list[int | None] = list(entry.get("column_sizes", [None] * len(self.names)))
        if entry.get("format", "mds") != "mds":
            raise Im2recError(f"{self.where}: format {entry.get('format')!r}: only MDS shards can be read (not streaming's json, csv or tsv)")
        if not (len(self.names) == len(self.encodings) == len(self.sizes)):
            raise Im2recError(f"{in_folder(folder, INDEX_NAME) if folder else INDEX_NAME}: {self.basename}: column_names, column_encodings and column_sizes differ in length")

    def kinds(self) -> dict[str, str]:
        return {n: e.split(":", 1)[0] for n, e in zip(self.names, self.encodings)}

    def spans(self, data: bytes) -> Iterator[tuple[int, int]]:
        """``(start, end)`` of each sample in the shard's (decompressed) bytes.

        Raises:
            Im2recError: the header or an offset lies beyond the file (naming the byte offset).
        """
        size = len(data)
        if size < 4:
            raise Im2recError(f"{self.where}: {size} bytes: too short for an MDS shard header")
        (n,) = U32.unpack_from(data, 0)
        if n != self.samples:
            raise Im2recError(f"{self.where}: holds {n} samples, {INDEX_NAME} says {self.samples}")
        head = 4 + 4 * (n + 1)
        if head > size:
            raise Im2recError(f"{self.where}: the offsets of {n} samples end at byte {head}, beyond the file's {size} bytes")
        offsets = np.frombuffer(data, "<u4", n + 1, 4).astype(np.int64)
        for i in range(n):
            start, end = int(offsets[i]), int(offsets[i + 1])
            if not head <= start <= end <= size:
                raise Im2recError(f"{self.where}: sample {i} at bytes {start}-{end} (offset table at byte {4 + 4 * i}) lies beyond the file's {size} bytes or overlaps the header")
            yield start, end

    def columns(self, data: bytes, start: int, end: int) -> dict[str, memoryview]:
        """The raw bytes of each column of the sample at ``data[start:end]``.

        Raises:
            Im2recError: the column sizes run past the sample (naming the byte offset).
        """
        view = memoryview(data)
        pos = start
        sizes: list[int] = []
        for fixed in self.sizes:
            if fixed:
                sizes.append(int(fixed))
            else:
                if pos + 4 > end:
                    raise Im2recError(f"{self.where}: the sample at byte {start} is too short for its column sizes")
                sizes.append(U32.unpack_from(data, pos)[0])
                pos += 4
        out: dict[str, memoryview] = {}
        for name, size in zip(self.names, sizes):
            if pos + size > end:
                raise Im2recError(f"{self.where}: column {name!r} of the sample at byte {start} ends at byte {pos + size}, beyond the sample's end at byte {end}")
            out[name] = view[pos : pos + size]
            pos += size
        return out

    def getter(self, data: bytes, start: int, end: int) -> Callable[[str], Any]:
        """``get(name)``: the value of column ``name`` of the sample at ``data[start:end]``, decoded when asked for."""
        columns = self.columns(data, start, end)
        encodings = dict(zip(self.names, self.encodings))
        return lambda name: decode_column(encodings[name], columns[name])


def decode_column(encoding: str, data: memoryview) -> Any:
    """The value of an MDS column: bytes as stored for bytes/jpeg/png (and a PNG for pil), str,
    a Python number, JSON, a numpy array for ndarray.

    Raises:
        ValueError: the encoding is not supported here (pkl: unsafe; lists of images), or the
            data does not decode.
    """
    kind, _, args = encoding.partition(":")
    if kind in ("bytes", "jpeg", "png"):
        return bytes(data)
    if kind == "pil":
        return png_from_pil_raw(data)
    if kind == "str":
        return bytes(data).decode("utf-8")
    if kind in ("str_int", "str_float", "str_decimal"):
        text = bytes(data).decode("utf-8")
        return int(text) if kind == "str_int" else float(text)
    if kind in SCALARS:
        dtype = np.dtype(SCALARS[kind])
        if len(data) != dtype.itemsize:
            raise ValueError(f"{kind} needs {dtype.itemsize} bytes, got {len(data)}")
        return np.frombuffer(data, dtype)[0].item()
    if kind == "json":
        return json.loads(bytes(data).decode("utf-8"))
    if kind == "ndarray":
        return decode_ndarray(args, data)
    if kind in ("jpeg_array", "jpegarray"):
        if len(data) < 4:
            raise ValueError("a jpeg_array needs 4 bytes for its count")
        (n,) = U32.unpack_from(data, 0)
        if n != 1:
            raise ValueError(f"a jpeg_array of {n} images: one image a sample only")
        (size,) = U32.unpack_from(data, 4)
        return bytes(data[8 : 8 + size])
    if kind == "pkl":
        raise ValueError("pkl (pickle) columns are not read: unpickling runs code")
    raise ValueError(f"MDS encoding {encoding!r} is not supported")


def decode_ndarray(args: str, data: memoryview) -> np.ndarray:
    """MDS ``ndarray[:dtype[:shape]]``: ``[dtype code]`` unless given, ``[ndim << 2 | shape dtype code]
    [shape]`` unless given, then the values."""
    parts = args.split(":") if args else []
    pos = 0
    if parts and parts[0]:
        dtype = parts[0]
    else:
        dtype = NDARRAY_DTYPES[data[pos]]
        pos += 1
    if len(parts) > 1:
        shape = tuple(int(x) for x in parts[1].split(","))
    else:
        byte = data[pos]
        pos += 1
        shape_dtype = np.dtype(NDARRAY_SHAPE_DTYPES[byte & 3])
        ndim = byte >> 2
        shape = tuple(np.frombuffer(data[pos : pos + ndim * shape_dtype.itemsize], shape_dtype).tolist())
        pos += ndim * shape_dtype.itemsize
    return np.frombuffer(data[pos:], np.dtype(dtype).newbyteorder("<")).reshape(shape)


class Reader(FolderSource, SampleReader):
    """Reads MDS samples in order from a folder or a URL prefix (a ``SampleReader``).

    Each shard is read whole into memory, one at a time. Columns other than export's are
    mapped by ``pick_roles``; a ``pil`` image is re-encoded as PNG (lossless).

    Raises:
        Im2recError: (from the constructor) ``index.json`` is missing or not MDS; (from
            ``samples``) a shard is damaged or compressed with an unsupported algorithm.
    """

    def __init__(self, src: str, storage_options: Mapping[str, Any] | None = None, label_field: str | None = None):
        super().__init__(src, storage_options)
        self.label_field = label_field
        try:
            index = json.loads(self.read(INDEX_NAME))
        except ValueError as e:
            raise Im2recError(f"{self.path(INDEX_NAME)}: not JSON: {e}") from None
        if not isinstance(index, dict) or not isinstance(index.get("shards"), list):
            raise Im2recError(f"{self.path(INDEX_NAME)}: not an MDS index (no 'shards' list)")
        if index.get("version", 2) != 2:
            raise Im2recError(f"{self.path(INDEX_NAME)}: version {index.get('version')}: only version 2 is known")
        self.shards = [Shard(entry, self.src) for entry in index["shards"]]
        self.meta: DatasetMeta | None = read_meta(self.src, storage_options)

    def shard_names(self) -> list[str | None]:
        return [s.basename or None for s in self.shards]

    def count(self) -> int:
        """How many samples, from ``index.json``."""
        return sum(s.samples for s in self.shards)

    def load(self, shard: Shard) -> bytes:
        """The shard's bytes, decompressed."""
        data = self.read(shard.file)
        if shard.compression:
            if not shard.compression.split(":")[0] == "zstd":
                raise Im2recError(f"{shard.where}: compressed with {shard.compression}: only zstd is supported")
            data = decompress_zstd(data, shard.where, shard.compression)
        return data

    def class_names(self) -> list[str] | None:
        """The sorted distinct class names when the label column holds strings (a pass decoding
        that column only); None when labels are numbers."""
        names: set[str] = set()
        for shard in self.shards:
            roles = pick_roles(shard.kinds(), self.label_field, shard.basename)
            if roles.label is None:
                return None
            encoding = shard.encodings[shard.names.index(roles.label)]
            if encoding.split(":")[0] not in ("str", "json", "bytes"):
                return None
            data = self.load(shard)
            for start, end in shard.spans(data):
                try:
                    value = decode_column(encoding, shard.columns(data, start, end)[roles.label])
                except ValueError:
                    continue
                if isinstance(value, bytes):
                    value = value.decode("utf-8", "replace")
                if isinstance(value, str):
                    names.add(value)
                elif encoding != "json" or value is not None:
                    return None
        return sorted(names) or None

    def samples(self, start: int = 0) -> Iterator[Sample]:
        """The samples from position ``start``, in order; shards before it are not read."""
        position = 0
        for shard in self.shards:
            if position + shard.samples <= start:
                position += shard.samples
                continue
            roles = pick_roles(shard.kinds(), self.label_field, shard.basename)
            data = self.load(shard)
            for i, (begin, end) in enumerate(shard.spans(data)):
                if position >= start:
                    yield build_sample(position, f"{shard.basename}:{i}", roles, shard.getter(data, begin, end))
                position += 1

# --------------------------------------------------------------------------- MosaicML's reader, beside ours

#: What ``import streaming`` (MosaicML's own reader, which the tests and benchmarks read our
#: shards with) takes from torchvision and transformers at import time, using neither to read or
#: write MDS: a stand-in for each. The only torchvision wheel on the index is a CUDA build that
#: does not load beside CPU torch.
STREAMING_STAND_INS = {
    "torchvision/__init__.py": "from . import datasets, transforms  # noqa: F401\n__version__ = '0.0.0+stub'\n",
    "torchvision/datasets.py": "class VisionDataset:\n    def __init__(self, *args, **kwargs):\n        pass\n\n\nclass CIFAR10(VisionDataset):\n    pass\n",
    "torchvision/transforms/__init__.py": "from . import functional  # noqa: F401\n",
    "torchvision/transforms/functional.py": "def to_tensor(pic):\n    raise NotImplementedError('torchvision stand-in')\n",
    "transformers/__init__.py": "class BatchEncoding(dict):\n    pass\n\n\nclass BatchFeature(dict):\n    pass\n",
    "transformers/models/__init__.py": "",
    "transformers/models/auto/__init__.py": "",
    "transformers/models/auto/tokenization_auto.py": "class AutoTokenizer:\n    pass\n",
}


def write_streaming_stand_ins(folder: str | os.PathLike[str]) -> str:
    """Write ``STREAMING_STAND_INS`` under ``folder`` (put it first on ``sys.path`` or
    ``PYTHONPATH`` before ``import streaming``); returns the folder."""
    for rel, text in STREAMING_STAND_INS.items():
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return os.fspath(folder)
