"""Parquet files as 🤗 datasets writes an image dataset, through pyarrow (``im2rec[parquet]``).

Columns of ``NAME-000000.parquet``, ``NAME-000001.parquet``...:

* ``key`` string: the ``.idx`` key;
* ``image`` struct<bytes: binary, path: string>: the image bytes as stored, and ``KEY.EXT``
  (🤗 datasets' ``Image`` feature);
* ``label`` list<float32>: every label;
* ``cls`` int64: the class when the label is one integer, else -1 (a ``ClassLabel`` with the
  names when ``PREFIX.classes.tsv`` gives them, as ``-1`` means "no label" there);
* ``meta`` string: JSON of the IRHeader's id and id2 and the like (``base.Sample.meta``).

The schema carries 🤗 datasets' ``huggingface`` metadata (the features), so that
``datasets.load_dataset("parquet", ...)`` gives PIL images and a ``ClassLabel``, and
``im2rec``: the dataset's ``DatasetMeta`` (layout, classes, an insightface ``property``).
Row groups hold at most ``ROW_GROUP_BYTES`` of images or ``ROW_GROUP_ROWS`` rows, so that a
reader streaming the file holds one small group at a time; image bytes are stored
uncompressed (they are compressed images already), the other columns with zstd.

The reader takes any Parquet file with an image column (a struct with ``bytes``, or binary),
its label from ``label`` (numbers, lists, or strings: class names), ``cls`` or the like,
and ``ClassLabel`` names from the ``huggingface`` metadata.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import storage
from ..errors import Im2recError
from ..fsutil import start_writeback
from .base import (
    IMAGE_NAMES,
    KEY_NAMES,
    LABEL_NAMES,
    Batch,
    DatasetMeta,
    OnShard,
    Sample,
    SampleReader,
    ShardWriter,
    check_listed,
    extension_of,
    in_folder,
    labels_of,
    meta_text,
    read_meta,
    shard_files,
    source_folder,
)

__all__ = ["ROW_GROUP_BYTES", "ROW_GROUP_ROWS", "Reader", "Writer", "pyarrow"]

ROW_GROUP_BYTES = 32 << 20
ROW_GROUP_ROWS = 10_000


def pyarrow() -> Any:
    """pyarrow and pyarrow.parquet, or an error saying how to install them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet
    except ImportError:
        raise Im2recError("the parquet format needs pyarrow: pip install 'im2rec[parquet]'") from None
    return pa


def shard_name(name: str, index: int) -> str:
    return f"{name}-{index:06d}.parquet"


def _features(classes: dict[int, str]) -> dict[str, Any]:
    """🤗 datasets' features of the columns (``Sequence`` for the list: read by old and new versions)."""
    if classes and sorted(classes) == list(range(len(classes))):
        cls: dict[str, Any] = {"names": [classes[i] for i in range(len(classes))], "_type": "ClassLabel"}
    else:
        cls = {"dtype": "int64", "_type": "Value"}
    return {
        "key": {"dtype": "string", "_type": "Value"},
        "image": {"_type": "Image"},
        "label": {"feature": {"dtype": "float32", "_type": "Value"}, "_type": "Sequence"},
        "cls": cls,
        "meta": {"dtype": "string", "_type": "Value"},
    }


class Writer(ShardWriter):
    """Writes samples as ``NAME-000000.parquet``... in ``folder`` (see the module)."""

    def __init__(self, folder: str, name: str, shard_size: int, meta: DatasetMeta, on_shard: OnShard):
        pa = pyarrow()
        self.pa, self.pq = pa, pa.parquet
        self.folder, self.name, self.shard_size, self.meta, self.on_shard = folder, name, shard_size, meta, on_shard
        hf = {"info": {"features": _features(meta.classes)}}
        self.schema = pa.schema(
            [
                ("key", pa.string()),
                ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                ("label", pa.list_(pa.float32())),
                ("cls", pa.int64()),
                ("meta", pa.string()),
            ],
            metadata={b"huggingface": json.dumps(hf).encode(), b"im2rec": meta.to_json(totals=False).encode()},
        )
        self._writer: Any = None
        self._path = ""
        self._file_bytes = 0
        self.samples = 0
        self._clear()

    def _clear(self) -> None:
        """The rows of the next row group, as columns."""
        self._keys: list[str] = []
        self._paths: list[str] = []
        self._data: list[bytes] = []  # image bytes, joined per call
        self._lens: list[int] = []
        self._labels: list[float] = []
        self._label_lens: list[int] = []
        self._cls: list[int] = []
        self._metas: list[str] = []
        self._bytes = 0

    def _open(self) -> None:
        self._path = os.path.join(self.folder, shard_name(self.name, len(self.meta.shards)))
        self.meta.shards.append(os.path.basename(self._path))
        compression = {c: "zstd" for c in ("key", "image.path", "label.list.element", "cls", "meta")}
        compression["image.bytes"] = "none"
        self._writer = self.pq.ParquetWriter(self._path, self.schema, compression=compression, use_dictionary=False, write_statistics=["key", "cls"])
        self._file_bytes = 0

    def _flush(self) -> None:
        n = len(self._keys)
        if not n:
            return
        pa = self.pa
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(self._lens, out=offsets[1:])
        images = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(self._data))]).cast(pa.binary())
        label_offsets = np.zeros(n + 1, np.int32)
        np.cumsum(self._label_lens, out=label_offsets[1:])
        labels = pa.ListArray.from_arrays(pa.array(label_offsets), pa.array(np.asarray(self._labels, np.float32)))
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self._keys, pa.string()),
                pa.StructArray.from_arrays([images, pa.array(self._paths, pa.string())], ["bytes", "path"]),
                labels,
                pa.array(np.asarray(self._cls, np.int64)),
                pa.array(self._metas, pa.string()),
            ],
            schema=self.schema,
        )
        if self._writer is None:
            self._open()
        self._writer.write_batch(batch)
        start_writeback(self._path)  # the disk writes start as the file grows: a short fsync at the end
        self._file_bytes += self._bytes
        self._clear()
        if self._file_bytes >= self.shard_size:
            self._finish_file()

    def _finish_file(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        self._file_bytes = 0  # the next file starts empty (a stale count cut one-row files between full ones)
        self.on_shard(self._path)

    def _room(self, size: int) -> None:
        """Write the rows held when ``size`` more bytes would pass the row group's or the file's size."""
        if self._keys and self._file_bytes + self._bytes + size > self.shard_size:
            self._flush()
            self._finish_file()
        elif self._bytes + size > ROW_GROUP_BYTES or len(self._keys) >= ROW_GROUP_ROWS:
            self._flush()

    def _row(self, key: str, image: Any, label: tuple[float, ...], meta: str) -> None:
        n = len(image)
        self._room(n)
        c = int(label[0]) if len(label) == 1 and math.isfinite(label[0]) and label[0] == int(label[0]) else -1
        self._keys.append(key)
        self._paths.append(key + "." + ("jpg" if image[:3] == b"\xff\xd8\xff" else extension_of(image)))
        self._data.append(bytes(image))
        self._lens.append(n)
        self._labels.extend(label)
        self._label_lens.append(len(label))
        self._cls.append(c)
        self._metas.append(meta)
        self._bytes += n + 64
        self.samples += 1

    def write(self, sample: Sample) -> None:
        self._row(sample.key, sample.image, sample.label, sample.meta_json())

    def write_batch(self, batch: Batch) -> None:
        """``write`` for each record of ``batch``, without making Samples: its columns made by
        comprehensions, then cut into row groups and files by their bytes."""
        keys, images, labels = batch.keys, batch.images, batch.labels
        n = len(keys)
        lens = [len(x) for x in images]
        cls = [int(x[0]) if len(x) == 1 and x[0].is_integer() else -1 for x in labels]
        paths = [k + (".jpg" if image[:3] == b"\xff\xd8\xff" else "." + extension_of(image)) for k, image in zip(keys, images)]
        plain = batch.class_names is None and not batch.identities and all(f == (0 if len(x) == 1 else len(x)) for f, x in zip(batch.flags, labels))
        if plain:
            metas = [f'{{"id":{a},"id2":{b}}}' for a, b in zip(batch.ids, batch.id2s)]
        else:
            names = batch.class_names
            metas = [
                meta_text(labels[i], batch.ids[i], batch.id2s[i], batch.flags[i], names[i] if names is not None else None, (cls[i] if cls[i] >= 0 else None) if batch.identities else None)
                for i in range(n)
            ]
        i = 0
        while i < n:  # rows [i, j) into the open row group: up to its size, or the file's
            room = min(ROW_GROUP_BYTES - self._bytes, self.shard_size - self._file_bytes - self._bytes)
            j, used = i, 0
            while j < n and j - i + len(self._keys) < ROW_GROUP_ROWS and (used + lens[j] + 64 <= room or (j == i and not self._keys)):
                used += lens[j] + 64
                j += 1
            if j == i:  # the group (or the file) is full
                full_file = self._file_bytes + self._bytes + lens[i] + 64 > self.shard_size
                self._flush()
                if full_file:
                    self._finish_file()
                continue
            self._keys += keys[i:j]
            self._paths += paths[i:j]
            self._data.append(b"".join(images[i:j]))
            self._lens += lens[i:j]
            for x in labels[i:j]:
                self._labels += x
            self._label_lens += [len(x) for x in labels[i:j]]
            self._cls += cls[i:j]
            self._metas += metas[i:j]
            self._bytes += used
            self.samples += j - i
            i = j
            if self._bytes >= ROW_GROUP_BYTES or len(self._keys) >= ROW_GROUP_ROWS:
                self._flush()

    def close(self) -> list[str]:
        self._flush()
        self._finish_file()
        self.meta.samples = self.samples
        self.meta.format = "parquet"
        meta_path = self.meta.write(self.folder)
        return [meta_path]

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


# --------------------------------------------------------------------------- reading


def _column(names: list[str], wanted: tuple[str, ...]) -> str | None:
    lower = {n.lower(): n for n in names}
    for w in wanted:
        if w in lower:
            return lower[w]
    return None


class Reader(SampleReader):
    """Samples of Parquet files: one file, a folder (or URL prefix) of ``*.parquet``, or a glob."""

    def __init__(self, src: str, storage_options: dict | None = None, label_field: str | None = None):
        pa = pyarrow()
        self.pa, self.pq = pa, pa.parquet
        self.src, self.storage_options = src, storage_options
        self.files = shard_files(src, ".parquet", storage_options)
        self.meta: DatasetMeta | None = None
        first = self._parquet(self.files[0])
        schema = first.schema_arrow
        kv = schema.metadata or {}
        if b"im2rec" in kv:
            self.meta = DatasetMeta.from_json(kv[b"im2rec"], f"{self.files[0]} (its im2rec metadata)")
        self.meta = read_meta(source_folder(src), storage_options) or self.meta
        check_listed(self.files, self.meta, "parquet", src)
        names = schema.names
        self.image = _column(names, IMAGE_NAMES)
        if self.image is None:  # the first binary column, or struct with bytes
            for f in schema:
                if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type) or (pa.types.is_struct(f.type) and f.type.get_field_index("bytes") >= 0):
                    self.image = f.name
                    break
        if self.image is None:
            raise Im2recError(f"{self.files[0]}: no image column (looked for {', '.join(IMAGE_NAMES)}, or a binary column); columns: {', '.join(names)}")
        if label_field is not None and label_field not in names:
            raise Im2recError(f"{self.files[0]}: no column {label_field!r} for --label-field (its columns: {', '.join(names)})")
        self.label = label_field or _column([n for n in names if n != self.image], LABEL_NAMES)
        self.key = _column(names, KEY_NAMES)
        self.meta_column = "meta" if "meta" in names else None
        self.label_names: list[str] | None = None
        if b"huggingface" in kv and self.label is not None:
            try:
                feature = json.loads(kv[b"huggingface"])["info"]["features"][self.label]
            except (KeyError, ValueError, TypeError):
                feature = None
            if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" and feature.get("names"):
                self.label_names = list(feature["names"])
        self.label_type = schema.field(self.label).type if self.label else None

    def _open(self, path: str) -> Any:
        if storage.is_url(path):
            return storage.store_for(path, self.storage_options).open(path)
        return path

    def _parquet(self, path: str) -> Any:
        try:
            return self.pq.ParquetFile(self._open(path))
        except Exception as e:
            raise Im2recError(f"{path}: not a readable Parquet file: {' '.join(str(e).split())}") from None

    def _external(self, path: str, file: str) -> bytes | None:
        """The bytes of an image a row names by path only: the path as it is, or relative to
        the Parquet file's folder; None when neither can be read."""
        candidates = [path] if storage.is_url(path) or os.path.isabs(path) else [path, in_folder(file.rsplit("/", 1)[0] if "/" in file else ".", path)]
        for candidate in candidates:
            try:
                return storage.read_any(candidate, self.storage_options)
            except (OSError, Im2recError):
                continue
        return None

    def shard_names(self) -> list[str | None]:
        return list(self.files)

    def count(self) -> int | None:
        if self.meta is not None and self.meta.samples and self.meta.format == "parquet" and len(self.meta.shards) == len(self.files):
            return self.meta.samples
        return sum(self._parquet(p).metadata.num_rows for p in self.files)

    def class_names(self) -> list[str] | None:
        if self.label is None or self.label_type is None or (not self.pa.types.is_string(self.label_type) and not self.pa.types.is_large_string(self.label_type)):
            return None
        names: set[str] = set()
        for path in self.files:
            f = self._parquet(path)
            for batch in f.iter_batches(columns=[self.label], batch_size=65536):
                names.update(x for x in batch.column(0).to_pylist() if x is not None)
        return sorted(names)

    def samples(self, start: int = 0) -> Iterator[Sample]:
        columns = [c for c in (self.key, self.image, self.label, self.meta_column) if c is not None]
        position = 0
        for path in self.files:
            f = self._parquet(path)
            rows = f.metadata.num_rows
            if position + rows <= start:
                position += rows
                continue
            base = path.rsplit("/", 1)[-1]
            row = 0
            for g in range(f.metadata.num_row_groups):
                n = f.metadata.row_group(g).num_rows
                if position + row + n <= start:
                    row += n
                    continue
                try:  # the group's columns as Python values (what _rows converts first)
                    samples = list(self._rows(f.read_row_group(g, columns=columns), base, row, path))
                except Exception as e:  # pyarrow's errors of damaged data: the group's rows are failures, the rest goes on
                    reason = f"row group {g} of {base} cannot be read: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                    samples = [Sample(key=str(row + i), image=b"", label=(), where=f"{base}:row {row + i}", problem=("corrupt", reason)) for i in range(n)]
                for i, sample in enumerate(samples):
                    if position + row + i >= start:
                        yield sample
                row += n
            position += rows

    def _rows(self, batch: Any, base: str, first_row: int, file: str = "") -> Iterator[Sample]:
        pa = self.pa
        image = batch.column(self.image)
        paths: list[Any] = []
        if pa.types.is_struct(image.type):
            if image.type.get_field_index("path") >= 0:
                paths = pa.chunked_array([c.field("path") for c in image.chunks]).to_pylist()
            image = pa.chunked_array([c.field("bytes") for c in image.chunks])
        images = image.to_pylist()
        keys = batch.column(self.key).to_pylist() if self.key else None
        labels = batch.column(self.label).to_pylist() if self.label else None
        metas = batch.column(self.meta_column).to_pylist() if self.meta_column else None
        for i, data in enumerate(images):
            row = first_row + i
            key = str(keys[i]) if keys is not None and keys[i] is not None else str(row)
            if not data and paths and paths[i]:  # 🤗 datasets made from files keeps their paths, not their bytes
                data = self._external(paths[i], file)
            sample = Sample(key=key, image=data or b"", label=(), where=f"{base}:row {row}")
            if not data:
                if paths and paths[i]:
                    why = f"no image bytes in column {self.image!r}, and its path {paths[i]!r} cannot be read here (save the dataset with its images embedded: datasets' embed_external_files, as push_to_hub does)"
                else:
                    why = f"no image bytes in column {self.image!r}"
                sample.problem = ("missing", why)
                yield sample
                continue
            sample.ext = extension_of(data)
            label = labels[i] if labels is not None else None
            if label is None:
                sample.problem = ("bad-label", f"no label (no {', '.join(LABEL_NAMES)} column)" if self.label is None else f"{self.label} is null")
                yield sample
                continue
            try:
                sample.label, sample.class_name = labels_of(label)
            except ValueError as e:
                sample.problem = ("bad-label", f"{self.label}: {e}")
                yield sample
                continue
            if self.label_names is not None and isinstance(label, int) and 0 <= label < len(self.label_names):
                sample.class_name = self.label_names[label]
            if metas is not None and metas[i]:
                try:
                    sample.with_meta(metas[i])
                except ValueError as e:
                    sample.problem = ("bad-label", f"its meta cannot be read: {e}")
            yield sample
