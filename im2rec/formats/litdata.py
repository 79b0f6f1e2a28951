"""Lightning litdata's chunked format (``im2rec export/import --format litdata``).

``export`` writes with litdata's own ``BinaryWriter`` (litdata is an optional extra);
``import`` reads with the code below, without litdata or torch. The layout is the one
``litdata.streaming`` (0.2.x) writes with its ``PyTreeLoader``:

``index.json`` is ``{"chunks": [...], "config": {...}, "updated_at": "..."}``: each chunk
``{"chunk_bytes", "chunk_size" (its items), "dim", "filename"}``; the config's
``data_format`` names each leaf's serializer (``str``, ``bytes``, ``int``, ``pil``,
``no_header_numpy:9``...), ``data_spec`` the pytree the leaves make (a torch-style
treespec as JSON: a dict's keys in its ``context``), ``compression`` (``zstd`` or null)
with ``compression_level`` (null or ``chunk``: the whole file is zstd, ``chunk-R-N.zstd.bin``;
``batch``: zstd frames inside the file, below; ``sample``: each item its own zstd frame).

A chunk ``chunk-R-N.bin`` (R the writer's rank, N its chunk number)::

    num_items  uint32 little-endian
    offsets    uint32[num_items + 1], little-endian, from the file's start
    items      each: a uint32 size for every leaf, then the leaves' bytes, in data_format order
    [footer]   when litdata had pyarrow and the rows are plain JSON types: an Arrow IPC file
               of the rows, its length as uint32, then b"LDARW01\\0"; the items are then
               empty (every offset equal) and the rows are read from the footer (pyarrow)

``compression_level: batch`` chunks start with b"LDFZ01\\0\\0" instead::

    magic u8[8], version u16 (1), flags u16, num_items u32, frame_rows u32, n_frames u32
    offsets    uint32[num_items + 1]: of the items in the frames' uncompressed bytes, end to end
    frames     n_frames x (first_item u32, n_items u32, file offset u64, length u32, raw length u32)
    the zstd frames

``export`` writes the items ``{"key": str, "image": bytes, "label": float32 array,
"meta": JSON str}``; ``import`` maps other fields by ``base.pick_roles``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import re
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import Im2recError
from .base import DatasetMeta, FolderSource, Sample, SampleReader, ShardWriter, build_sample, decompress_zstd, pick_roles, png_from_pil_raw, read_meta
from .mds import U32, decode_column

__all__ = ["INDEX_NAME", "MISSING_LITDATA", "Reader", "Writer", "decode_leaf", "leaf_names"]

INDEX_NAME = "index.json"
MISSING_LITDATA = "export --format litdata needs litdata: pip install 'im2rec[litdata]'"
#: a writer's own index before the merge: ``{rank}.index.json``
RANK_INDEX = re.compile(r"\d+\.index\.json")
FRAMED_MAGIC = b"LDFZ01\0\0"
FRAMED_PREFIX = struct.Struct("<8sHHIII")
FRAMED_FRAME = struct.Struct("<IIQII")
ARROW_FOOTER_MAGIC = b"LDARW01\0"
#: litdata's numpy dtype codes (litdata.constants._NUMPY_DTYPES_MAPPING: numpy's scalar types in order)
NUMPY_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64", "complex64", "complex128", "bool"]
#: litdata's torch dtype codes (litdata.constants._TORCH_DTYPES_MAPPING) as numpy dtypes; 10 is bfloat16, which numpy lacks
TORCH_DTYPES = {0: "float32", 1: "float32", 2: "float64", 3: "float64", 4: "complex64", 5: "complex64", 6: "complex128", 7: "complex128", 8: "float16", 9: "float16", 11: "uint8", 12: "int8", 13: "int16", 14: "int16", 15: "int32", 16: "int32", 17: "int64", 18: "int64", 19: "bool", 20: "uint16"}
#: serializers whose bytes are the file as it was given (an image, a video, a document...)
AS_STORED = ("bytes", "jpeg", "image", "file", "pdf", "video", "audio", "tifffile", "tiff", "mesh", "nifti")
#: Every serializer ``decode_leaf`` reads.
READ = (*AS_STORED, "str", "text", "int", "float", "bool", "pil", "no_header_numpy", "numpy", "tensor", "no_header_tensor", "json", "jpeg_array")


# --------------------------------------------------------------------------- writing


class Writer(ShardWriter):
    """Writes samples as litdata chunks with litdata's ``BinaryWriter`` (a ``ShardWriter``).

    ``BinaryWriter`` holds the items of one chunk (``chunk_bytes = shard_size`` of items, plus
    the chunk's header of ``4 * (items + 2)`` bytes; a larger item gets a chunk of its own)
    and writes it when the next item would not fit; ``on_shard`` is called then. ``close``
    merges the writer's ``0.index.json`` into ``index.json`` as ``litdata.optimize`` does.

    Raises:
        Im2recError: litdata is not installed.
    """

    def __init__(self, folder: str, name: str, shard_size: int, meta: DatasetMeta, on_shard: Callable[[str], None]):
        try:
            writer_module = importlib.import_module("litdata.streaming.writer")
            serializers = importlib.import_module("litdata.streaming.serializers")
        except ImportError:
            raise Im2recError(MISSING_LITDATA) from None

        # litdata's ``str``, for every string: its own refuses a string that names an existing file
        text = type("Text", (serializers.StringSerializer,), {"can_serialize": lambda self, data: isinstance(data, str)})
        self.folder = folder
        self.name = name  # litdata names its chunks chunk-RANK-N.bin whatever the dataset's name
        self.meta = meta
        self.on_shard = on_shard
        # our serializers first: a key naming a file, or bytes starting with %PDF, stay str and bytes
        self.writer = writer_module.BinaryWriter(folder, chunk_bytes=shard_size, serializers={"str": text(), "bytes": serializers.BytesSerializer()})
        self.count = 0
        self.digest = hashlib.blake2b(digest_size=16)

    def write(self, sample: Sample) -> None:
        """Add one sample; a chunk that this completes is written and passed to ``on_shard``."""
        image = bytes(sample.image)
        label = np.asarray(sample.label, np.float32)
        meta = sample.meta_json()
        for part in (sample.key.encode("utf-8"), image, label.tobytes(), meta.encode("utf-8")):
            self.digest.update(U32.pack(len(part)) + part)
        path = self.writer.add_item(self.count, {"key": sample.key, "image": image, "label": label, "meta": meta})
        self.count += 1
        if path:
            self.on_shard(str(path))

    def close(self) -> list[str]:
        """Write the last chunks (``on_shard`` for each), then ``im2rec.json`` and ``index.json``;
        return their paths (index last)."""
        for path in self.writer.done():
            self.on_shard(str(path))
        chunks: list[dict[str, Any]] = []
        config: dict[str, Any] | None = None
        for index_name in sorted((f for f in os.listdir(self.folder) if RANK_INDEX.fullmatch(f)), key=lambda f: int(f.split(".")[0])):
            path = os.path.join(self.folder, index_name)
            with open(path, encoding="utf-8") as f:
                part = json.load(f)
            chunks += part["chunks"]
            config = config or part["config"]
            os.remove(path)
        # updated_at names litdata's cache folder for a remote dataset: a digest of the content
        # keeps the index deterministic and still tells a changed dataset from the one cached
        index = {"chunks": chunks, "config": config or self.writer.get_config(), "updated_at": self.digest.hexdigest()}
        meta = dataclasses.replace(self.meta, samples=self.count, shards=[c["filename"] for c in chunks], format="litdata")
        meta_path = meta.write(self.folder)
        index_path = os.path.join(self.folder, INDEX_NAME)
        with open(index_path, "w", encoding="utf-8") as f:
            json.dump(index, f, sort_keys=True)
        return [meta_path, index_path]

    def abort(self) -> None:
        """Stop; the chunks written are left for the caller (the items held are dropped with the writer)."""
        self.count = 0


# --------------------------------------------------------------------------- reading


def leaf_names(data_spec: str | None) -> list[str]:
    """The name of each leaf of litdata's ``data_spec`` (a treespec as JSON), in order: a dict's
    keys, nested ones joined with dots (``a.b``); list and tuple items by index; ``item`` for a
    lone leaf.

    Raises:
        Im2recError: the spec has a container type other than dict, list and tuple.
    """
    if not data_spec:
        return ["item"]
    _protocol, spec = json.loads(data_spec)
    names: list[str] = []

    def walk(node: Mapping[str, Any], path: str) -> None:
        kind = node.get("type")
        children = node.get("children_spec") or []
        if kind is None:
            names.append(path or "item")
            return
        if kind in ("builtins.dict", "collections.OrderedDict"):
            keys = [str(k) for k in json.loads(node["context"])]
        elif kind in ("builtins.list", "builtins.tuple"):
            keys = [str(i) for i in range(len(children))]
        else:
            raise Im2recError(f"{INDEX_NAME}: items of type {kind} cannot be read (dicts, lists and tuples can)")
        for key, child in zip(keys, children):
            walk(child, f"{path}.{key}" if path else key)

    walk(spec, "")
    return names


def decode_leaf(data_format: str, data: memoryview) -> Any:
    """The value of one leaf serialized by litdata's serializer ``data_format``: bytes as stored
    for bytes/jpeg/image (a PNG for pil), str, a number, a numpy array for numpy and tensor
    leaves, the list or dict of a json leaf.

    Raises:
        ValueError: a serializer not read here (pickle: unpickling runs code; graph), or bad data.
    """
    kind, _, arg = data_format.partition(":")
    if kind in AS_STORED:
        return bytes(data)
    if kind in ("str", "text"):
        return bytes(data).decode("utf-8")
    if kind == "int":
        return struct.unpack("<q", data)[0]
    if kind == "float":
        return struct.unpack("<d", data)[0]
    if kind == "bool":
        return data[0] != 0
    if kind == "pil":
        return png_from_pil_raw(data)
    if kind == "no_header_numpy":
        return np.frombuffer(data, np.dtype(NUMPY_DTYPES[int(arg)]))
    if kind == "numpy":
        code, ndim = struct.unpack_from("<II", data, 0)
        shape = struct.unpack_from(f"<{ndim}I", data, 8)
        return np.frombuffer(data[8 + 4 * ndim :], np.dtype(NUMPY_DTYPES[code])).reshape(shape)
    if kind in ("tensor", "no_header_tensor"):
        if kind == "tensor":
            code, ndim = struct.unpack_from(">II", data, 0)  # big-endian, unlike everything else
            dims, start = struct.unpack_from(f">{ndim}I", data, 8), 8 + 4 * ndim
        else:
            code, dims, start = int(arg), (-1,), 0
        if code not in TORCH_DTYPES:
            raise ValueError(f"tensor dtype code {code} (bfloat16?) has no numpy equivalent")
        values = np.frombuffer(data[start:], np.dtype(TORCH_DTYPES[code]))
        return values.reshape(dims)
    if kind == "json":
        return nested_loads(bytes(data))
    if kind == "jpeg_array":
        return decode_column("jpeg_array", data)
    if kind == "pickle":
        raise ValueError("pickle leaves are not read: unpickling runs code")
    raise ValueError(f"litdata serializer {data_format!r} is not supported")


NEST_U32 = struct.Struct("<I")


def nested_loads(raw: bytes) -> Any:
    """litdata's ``json`` leaf: JSON text (its first byte above 0x20), or its compact tagged form."""
    if not raw or raw[0] > 0x20:
        return json.loads(raw)
    return nested_at(raw, 0)[0]


def nested_at(raw: bytes, pos: int) -> tuple[Any, int]:
    """One tagged value at ``pos`` (litdata.streaming.serializers._nested_dumps) and where it ends."""
    tag = raw[pos]

    def count() -> int:
        return int(NEST_U32.unpack_from(raw, pos + 1)[0])

    def text(at: int) -> tuple[str, int]:
        (n,) = NEST_U32.unpack_from(raw, at)
        return raw[at + 4 : at + 4 + n].decode("utf-8"), at + 4 + n

    if tag == 0:  # JSON text
        n = count()
        return json.loads(raw[pos + 5 : pos + 5 + n]), pos + 5 + n
    if tag == 1:  # strings
        out, at = [], pos + 5
        for _ in range(count()):
            value, at = text(at)
            out.append(value)
        return out, at
    if tag in (2, 3):  # int64s, float64s
        n = count()
        return np.frombuffer(raw, "<i8" if tag == 2 else "<f8", n, pos + 5).tolist(), pos + 5 + 8 * n
    if tag == 4:  # bools
        n = count()
        return [b != 0 for b in raw[pos + 5 : pos + 5 + n]], pos + 5 + n
    if tag == 5:  # a dict
        mapping: dict[str, Any] = {}
        at = pos + 5
        for _ in range(count()):
            key, at = text(at)
            mapping[key], at = nested_at(raw, at)
        return mapping, at
    if tag == 7:
        return text(pos + 1)
    if tag == 8:
        return struct.unpack_from("<q", raw, pos + 1)[0], pos + 9
    if tag == 9:
        return struct.unpack_from("<d", raw, pos + 1)[0], pos + 9
    if tag == 10:
        return raw[pos + 1] != 0, pos + 2
    if tag == 11:
        return None, pos + 1
    raise ValueError(f"litdata json tag {tag} (records) is not read here")


class Chunk:
    """One chunk's bytes, its items found: ``items`` (raw item bytes), or ``rows`` from an Arrow footer."""

    def __init__(self, file: str, data: bytes, expected: int, level: str, compression: str | None, where: str | None = None):
        self.file = file
        self.where = where or file  # its path or URL, for messages
        self.rows: list[dict[str, Any]] | None = None
        self.items: list[memoryview] = []
        if data.startswith(FRAMED_MAGIC):
            self.items = self.framed(data, compression or "zstd")
        else:
            self.items = self.classic(data)
            if self.items and all(len(item) == 0 for item in self.items) and data.endswith(ARROW_FOOTER_MAGIC):
                self.rows = self.arrow(data)
            elif level == "sample":
                self.items = [memoryview(decompress_zstd(item, f"{self.where} item {i}", compression or "zstd")) for i, item in enumerate(self.items)]
        found = len(self.rows) if self.rows is not None else len(self.items)
        if found != expected:
            raise Im2recError(f"{self.where}: holds {found} items, {INDEX_NAME} says {expected}")

    def __len__(self) -> int:
        return len(self.rows) if self.rows is not None else len(self.items)

    def classic(self, data: bytes) -> list[memoryview]:
        size = len(data)
        if size < 4:
            raise Im2recError(f"{self.where}: {size} bytes: too short for a chunk header")
        (n,) = U32.unpack_from(data, 0)
        head = 4 + 4 * (n + 1)
        if head > size:
            raise Im2recError(f"{self.where}: the offsets of {n} items end at byte {head}, beyond the file's {size} bytes")
        return self.slices(data, np.frombuffer(data, "<u4", n + 1, 4).astype(np.int64), head, 4)

    def slices(self, data: bytes, offsets: np.ndarray, low: int, table: int) -> list[memoryview]:
        view, size = memoryview(data), len(data)
        items = []
        for i in range(len(offsets) - 1):
            start, end = int(offsets[i]), int(offsets[i + 1])
            if not low <= start <= end <= size:
                raise Im2recError(f"{self.where}: item {i} at bytes {start}-{end} (offset table at byte {table + 4 * i}) lies beyond the {size} bytes of its data or overlaps the header")
            items.append(view[start:end])
        return items

    def framed(self, data: bytes, compression: str) -> list[memoryview]:
        size = len(data)
        if size < FRAMED_PREFIX.size:
            raise Im2recError(f"{self.where}: {size} bytes: too short for a framed zstd header")
        _magic, version, _flags, n, _rows, n_frames = FRAMED_PREFIX.unpack_from(data, 0)
        if version != 1:
            raise Im2recError(f"{self.where}: framed zstd version {version}: only version 1 is known")
        table = FRAMED_PREFIX.size + 4 * (n + 1)
        if table + FRAMED_FRAME.size * n_frames > size:
            raise Im2recError(f"{self.where}: the frame table ends at byte {table + FRAMED_FRAME.size * n_frames}, beyond the file's {size} bytes")
        offsets = np.frombuffer(data, "<u4", n + 1, FRAMED_PREFIX.size).astype(np.int64)
        parts = []
        for i in range(n_frames):
            _first, _count, at, length, raw_length = FRAMED_FRAME.unpack_from(data, table + FRAMED_FRAME.size * i)
            if at + length > size:
                raise Im2recError(f"{self.where}: zstd frame {i} at bytes {at}-{at + length} lies beyond the file's {size} bytes")
            part = decompress_zstd(memoryview(data)[at : at + length], f"{self.where} frame {i}", compression)
            if len(part) != raw_length:
                raise Im2recError(f"{self.where}: zstd frame {i} at byte {at} gives {len(part)} bytes, its table says {raw_length}")
            parts.append(part)
        return self.slices(b"".join(parts), offsets, 0, FRAMED_PREFIX.size)

    def arrow(self, data: bytes) -> list[dict[str, Any]]:
        (length,) = U32.unpack_from(data, len(data) - 12)
        start = len(data) - 12 - length
        if start < 0:
            raise Im2recError(f"{self.where}: its Arrow footer of {length} bytes would start before the file")
        try:
            pa = importlib.import_module("pyarrow")
        except ImportError:
            raise Im2recError(f"{self.where}: its rows are stored as Arrow (litdata had pyarrow): reading them needs pyarrow: pip install pyarrow") from None
        ipc = pa.py_buffer(memoryview(data)[start : start + length])
        reader = pa.ipc.open_file(ipc) if bytes(data[start : start + 6]) == b"ARROW1" else pa.ipc.open_stream(ipc)
        rows: list[dict[str, Any]] = reader.read_all().to_pylist()
        return rows


class Reader(FolderSource, SampleReader):
    """Reads litdata samples in order from a folder or a URL prefix (a ``SampleReader``),
    without litdata: each chunk read whole into memory, one at a time.

    Raises:
        Im2recError: (from the constructor) ``index.json`` is missing, not litdata's, or of an
            item loader other than ``PyTreeLoader`` (tokens, parquet) or encrypted; (from
            ``samples``) a chunk is damaged or compressed with an unsupported algorithm.
    """

    def __init__(self, src: str, storage_options: Mapping[str, Any] | None = None, label_field: str | None = None):
        super().__init__(src, storage_options)
        where = self.path(INDEX_NAME)
        try:
            index = json.loads(self.read(INDEX_NAME))
        except ValueError as e:
            raise Im2recError(f"{where}: not JSON: {e}") from None
        if isinstance(index, dict) and "shards" in index and "chunks" not in index:
            raise Im2recError(f"{where}: an MDS index (streaming's): read it with --format mds")
        if not isinstance(index, dict) or not isinstance(index.get("chunks"), list) or not isinstance(index.get("config"), dict):
            raise Im2recError(f"{where}: not a litdata index (no 'chunks' and 'config')")
        config = index["config"]
        if config.get("item_loader", "PyTreeLoader") != "PyTreeLoader":
            raise Im2recError(f"{where}: item loader {config['item_loader']}: only PyTreeLoader datasets (litdata.optimize's default) hold samples")
        if config.get("encryption"):
            raise Im2recError(f"{where}: the chunks are encrypted")
        self.compression: str | None = config.get("compression") or None
        self.level: str = config.get("compression_level") or "chunk"
        if self.compression and not self.compression.startswith("zstd"):
            raise Im2recError(f"{where}: compressed with {self.compression}: only zstd is supported")
        self.formats: list[str] = list(config.get("data_format") or [])
        try:
            self.names = leaf_names(config.get("data_spec"))
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # the spec is JSON in a JSON string
            raise Im2recError(f"{where}: its data_spec cannot be read ({type(e).__name__}: {e})") from None
        if len(self.names) != len(self.formats):
            raise Im2recError(f"{where}: data_spec has {len(self.names)} leaves, data_format {len(self.formats)}")
        self.chunks: list[dict[str, Any]] = index["chunks"]
        for n, chunk in enumerate(self.chunks):
            if not (isinstance(chunk, dict) and isinstance(chunk.get("filename"), str) and isinstance(chunk.get("chunk_size"), int) and chunk["chunk_size"] >= 0):
                raise Im2recError(f"{where}: chunk {n} is not a litdata chunk entry (a 'filename' and a 'chunk_size')")
        self.roles = pick_roles({n: f.split(":", 1)[0] for n, f in zip(self.names, self.formats)}, label_field, where)
        serializer = dict(zip(self.names, self.formats))
        for role, name in (("image", self.roles.image), ("label", self.roles.label), ("key", self.roles.key)):
            if name is not None and serializer[name].split(":", 1)[0] not in READ:  # else every sample would fail alike
                said = "pickled: im2rec does not unpickle, which runs code" if serializer[name] == "pickle" else "not one im2rec reads"
                raise Im2recError(f"{where}: the {role} column {name!r} has litdata serializer {serializer[name]!r}, {said}")
        self.meta: DatasetMeta | None = read_meta(self.src, storage_options)

    def shard_names(self) -> list[str | None]:
        return [c.get("filename") for c in self.chunks]

    def count(self) -> int:
        """How many samples, from ``index.json``."""
        return sum(int(c["chunk_size"]) for c in self.chunks)

    def load(self, chunk: Mapping[str, Any]) -> Chunk:
        """A chunk read, decompressed and cut into items."""
        file = str(chunk["filename"])
        data = self.read(file)
        if self.compression and self.level == "chunk":
            data = decompress_zstd(data, self.path(file), self.compression)
        return Chunk(file, data, int(chunk["chunk_size"]), self.level, self.compression, self.path(file))

    def getter(self, chunk: Chunk, i: int) -> Callable[[str], Any]:
        """``get(name)``: the value of leaf ``name`` of item ``i``, decoded when asked for."""
        if chunk.rows is not None:
            row = chunk.rows[i]
            return lambda name: row.get(name)
        item = chunk.items[i]
        n = len(self.formats)
        if len(item) < 4 * n:
            raise Im2recError(f"{chunk.where}: item {i} of {len(item)} bytes is too short for the sizes of its {n} leaves")
        sizes = struct.unpack_from(f"<{n}I", item, 0)
        starts = np.cumsum((4 * n,) + sizes).tolist()
        if starts[-1] > len(item):
            raise Im2recError(f"{chunk.where}: item {i}: its leaves end at byte {starts[-1]} of the item, beyond its {len(item)} bytes")
        where = dict(zip(self.names, zip(self.formats, starts, starts[1:])))

        def get(name: str) -> Any:
            data_format, start, end = where[name]
            return decode_leaf(data_format, item[start:end])

        return get

    def class_names(self) -> list[str] | None:
        """The sorted distinct class names when the label leaf holds strings (a pass decoding that
        leaf only); None when labels are numbers."""
        label = self.roles.label
        if label is None or self.formats[self.names.index(label)].split(":")[0] not in ("str", "text", "json"):
            return None
        names: set[str] = set()
        for entry in self.chunks:
            chunk = self.load(entry)
            for i in range(len(chunk)):
                try:
                    value = self.getter(chunk, i)(label)
                except ValueError:
                    continue
                if isinstance(value, str):
                    names.add(value)
                elif value is not None:
                    return None
        return sorted(names) or None

    def samples(self, start: int = 0) -> Iterator[Sample]:
        """The samples from position ``start``, in order; chunks before it are not read."""
        position = 0
        for entry in self.chunks:
            size = int(entry["chunk_size"])
            if position + size <= start:
                position += size
                continue
            chunk = self.load(entry)
            for i in range(len(chunk)):
                if position >= start:
                    yield build_sample(position, f"{chunk.file}:{i}", self.roles, self.getter(chunk, i))
                position += 1
