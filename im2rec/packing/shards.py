"""Several ``.rec`` files made or read as one: part names, merging, size-limited shards, manifests.

* Parts (``pack --num-parts N --part-index I``) are contiguous slices of one list,
  written as ``OUT-0000I-of-0000N.rec``; ``merge_parts`` concatenates them. RecordIO
  records do not depend on their position (every part starts 4-aligned), so the
  merged ``.rec`` is byte-identical to one pack of the whole list, and its ``.idx``
  is the parts' lines with offsets shifted.
* Shards (``pack --shard-size SIZE``) split one run's output into
  ``OUT-00000.rec``, ``OUT-00001.rec``, ... each under SIZE bytes, listed in a
  manifest ``OUT.shards.json`` that ``RecordDataset`` reads as one dataset.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import __version__, faces, storage
from ..errors import Im2recError, OptionError
from ..fsutil import commit, make_parents, remove_quietly, start_writeback
from ..outputs import FAILED_HEADER, partial, read_manifest, refuse_existing
from ..recordio import RecordWriter, format_index, idx_path_of, read_index, sibling

__all__ = [
    "MergeResult",
    "ShardedWriter",
    "existing_shard_outputs",
    "layout_path",
    "manifest_path",
    "merge",
    "merge_parts",
    "part_path",
    "parts_layout",
    "read_manifest",
    "shard_path",
]

_PART_RE = re.compile(r"-(\d{5})-of-(\d{5})\.rec$")
def part_path(out_rec: str, index: int, count: int) -> str:
    """``out.rec`` -> ``out-00001-of-00003.rec`` for part 1 of 3."""
    return f"{os.path.splitext(out_rec)[0]}-{index:05d}-of-{count:05d}.rec"


def layout_path(part_rec: str) -> str:
    """``out-00001-of-00003.rec`` -> ``out-00001-of-00003.layout``: written beside a part of a
    ``pack --layout insightface`` run (its records are the images, plain, in list order), so
    that ``merge`` lays the whole out as the single pack would, without being told."""
    return sibling(part_rec, "layout")


def parts_layout(parts: Sequence[str], storage_options: dict | None = None) -> str:
    """The layout the parts were packed for: ``"insightface"`` when each has its ``.layout``
    file saying so, ``"plain"`` when none has one.

    Raises:
        Im2recError: some parts have one and others do not (parts of different runs).
    """
    said = [_layout_of(part, storage_options) for part in parts]
    kinds = sorted(set(said))
    if len(kinds) > 1:
        first = {k: parts[said.index(k)] for k in kinds}
        raise Im2recError(
            "the parts were packed for different layouts ("
            + ", ".join(f"{k}: {first[k]}" for k in kinds)
            + "): merge the parts of one run"
        )
    return kinds[0] if kinds else "plain"


def _layout_of(part: str, storage_options: dict | None) -> str:
    path = layout_path(part)
    return storage.read_any(path, storage_options).decode("ascii").strip() if storage.there(path, storage_options) else "plain"


def shard_path(out_rec: str, index: int) -> str:
    """``out.rec`` -> ``out-00002.rec`` for shard 2."""
    return f"{os.path.splitext(out_rec)[0]}-{index:05d}.rec"


def manifest_path(out_rec: str) -> str:
    return sibling(out_rec, "shards")


def _stem(rec: str) -> str:
    return os.path.splitext(rec)[0]


# --------------------------------------------------------------------------- merging parts


@dataclass
class MergeResult:
    rec: str
    parts: list[str]
    records: int = 0
    bytes: int = 0
    failures: int = 0
    server_side: bool = False  # joined by the store itself (S3 upload-part-copy)
    layout: str = "plain"
    identities: int | None = None  # insightface: identity records written


def merge(out_rec: str, parts: Sequence[str], layout: str | None = None, overwrite: bool = False, storage_options: dict | None = None) -> MergeResult:
    """Join the parts of one pack run into ``out_rec``: what ``im2rec merge`` and ``--dask`` do.

    Args:
        out_rec: the output ``.rec`` (its ``.idx`` and ``.failed.tsv`` beside it); a URL
            when the parts are URLs. ``?``, ``*`` and ``[...]`` in the parts' names are expanded.
        parts: the parts' ``.rec`` files; named ``OUT-0000I-of-0000N.rec`` they are put
            in order and must all be there.
        layout: ``"plain"`` or ``"insightface"``; default: the parts' own (``parts_layout``).
            The parts of an insightface pack hold its images, plain, in list order: once
            joined they are laid out as one face set, byte for byte the single pack.
        overwrite: replace existing outputs.

    Raises:
        Im2recError: as ``merge_parts``.
        OptionError: parts and output not all local or all URLs; the insightface layout
            for parts in a store.
    """
    remote = storage.is_url(out_rec)
    if remote or any(storage.is_url(p) for p in parts):
        if not (remote and all(storage.is_url(p) for p in parts)):
            raise OptionError("merging in an object store needs the output and every part as URLs of it (or all of them local)")
        parts = storage.expand(list(parts), storage_options)
    else:  # a glob the shell left alone (quoted): expanded here, as for URLs
        parts = [found for p in parts for found in (sorted(glob.glob(p)) if any(c in p for c in "*?[") and not os.path.exists(p) else [p])] or list(parts)
    layout = layout or parts_layout(parts, storage_options)
    if layout == "plain":
        return merge_parts_remote(out_rec, parts, overwrite, storage_options) if remote else merge_parts(out_rec, parts, overwrite)
    if remote:
        raise OptionError("the insightface layout merges local parts only (for now): copy the parts here, merge, then upload")
    refuse_existing(faces.insightface_outputs(out_rec), overwrite)
    images = sibling(out_rec, "images")
    result = merge_parts(images, parts, overwrite=True)
    laid = faces.lay_out(images, out_rec)
    result.rec, result.layout, result.identities, result.bytes = out_rec, layout, laid.identities, laid.bytes
    result.records = laid.images
    return result


def _order_parts(parts: Sequence[str]) -> list[str]:
    """Parts named ``-0000I-of-0000N``: sorted, and all N present. Other names: as given."""
    found = [(_PART_RE.search(p), p) for p in parts]
    if not all(m for m, _ in found):
        return list(parts)
    counts = {int(m.group(2)) for m, _ in found}  # type: ignore[union-attr]
    if len(counts) != 1:
        raise Im2recError(f"the parts come from runs with different part counts: {sorted(counts)}")
    count = counts.pop()
    by_index = {int(m.group(1)): p for m, p in found}  # type: ignore[union-attr]
    if len(by_index) != len(parts):
        raise Im2recError("a part is named twice")
    missing = sorted(set(range(count)) - set(by_index))
    if missing:
        names = ", ".join(str(i) for i in missing[:10])
        raise Im2recError(f"missing part(s) {names} of {count}: merge needs every part (or name them all explicitly)")
    return [by_index[i] for i in range(count)]


def _joined_index(ordered: Sequence[str], exists: Any, size_of: Any, storage_options: dict | None = None) -> tuple[list, list, int, np.ndarray]:
    """Each part's keys and offsets shifted by the sizes of the parts before it; the total size; every key."""
    keys, offsets = [], []
    base = 0
    for part in ordered:
        idx = idx_path_of(part)
        for path in (part, idx):
            if not exists(path):
                raise Im2recError(storage.missing(path, storage_options))
        size = size_of(part)
        if size % 4:
            raise Im2recError(f"{part}: {size} bytes is not a multiple of 4; is the part complete?")
        index = read_index(idx, storage_options=storage_options)
        index.validate(size, part)
        keys.append(index.key_list)
        offsets.append(index.offsets + base)
        base += size
    all_keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    uniq, counts = np.unique(all_keys, return_counts=True)
    if (counts > 1).any():
        raise Im2recError(f"key {int(uniq[counts > 1][0])} appears in more than one part: these are not parts of one list")
    return keys, offsets, base, all_keys


def merge_parts_remote(out_rec: str, parts: Sequence[str], overwrite: bool = False, storage_options: dict | None = None) -> MergeResult:
    """``merge_parts`` for parts and an output in an object store.

    The ``.rec`` is joined by the store itself where it can (S3: a multipart upload whose
    parts are copies of the part objects, no byte downloaded; every part but the last
    must be 5 MiB or more), else streamed through this process; the ``.idx`` (shifted
    offsets) and ``.failed.tsv`` are written after it, each in one request.

    Raises:
        Im2recError: as ``merge_parts``; StorageError for the store's failures.
    """
    import io

    ordered = _order_parts(list(parts))
    if not ordered:
        raise Im2recError("merge needs at least one part")
    out_idx, out_failed = idx_path_of(out_rec), sibling(out_rec, "failed")
    store = storage.store_for(out_rec, storage_options)
    store.check_bucket(out_rec)  # a store may make a bucket a write names: refuse first
    refuse_existing((out_rec, out_idx), overwrite, store.exists)
    if out_rec in ordered:
        raise Im2recError(f"{out_rec} is one of the parts")

    def size_of(url: str) -> int:
        return store.head(url).size

    keys, offsets, base, all_keys = _joined_index(ordered, store.exists, size_of, storage_options)
    result = MergeResult(out_rec, ordered)
    result.server_side = storage.concatenate(out_rec, ordered, [size_of(p) for p in ordered], store.open, storage_options)
    failed = io.StringIO()
    for part in ordered:
        path = sibling(part, "failed")
        if storage.exists(path, storage_options):
            lines = storage.read_bytes(path, storage_options).decode("utf-8").splitlines()[1:]
            failed.writelines(line + "\n" for line in lines)
            result.failures += len(lines)
    if result.failures:
        storage.write_bytes(out_failed, (FAILED_HEADER + failed.getvalue()).encode("utf-8"), storage_options)
    elif storage.exists(out_failed, storage_options):  # an earlier merge's, of other parts
        storage.remove([out_failed], storage_options)
    text = "".join(format_index(k, o) for k, o in zip(keys, offsets))
    storage.write_bytes(out_idx, text.encode("ascii"), storage_options)  # last: readers look for it
    result.records, result.bytes = int(all_keys.size), base
    return result


def merge_parts(out_rec: str, parts: Sequence[str], overwrite: bool = False) -> MergeResult:
    """Concatenate part ``.rec`` files into ``out_rec`` and write its ``.idx`` (and ``.failed.tsv``).

    Parts named ``OUT-0000I-of-0000N.rec`` are put in order and must all be there.
    Outputs are written under temporary names and renamed when complete.

    Raises:
        Im2recError: a part or its ``.idx`` is missing or malformed, keys repeat across
            parts, or an output exists without ``overwrite``.
    """
    ordered = _order_parts([os.fspath(p) for p in parts])
    if not ordered:
        raise Im2recError("merge needs at least one part")
    out_idx, out_failed = idx_path_of(out_rec), sibling(out_rec, "failed")
    refuse_existing((out_rec, out_idx), overwrite)
    if os.path.abspath(out_rec) in {os.path.abspath(p) for p in ordered}:
        raise Im2recError(f"{out_rec} is one of the parts")
    result = MergeResult(out_rec, ordered)
    keys, offsets, base, all_keys = _joined_index(ordered, os.path.exists, os.path.getsize)
    tmp_rec, tmp_idx, tmp_failed = partial(out_rec), partial(out_idx), partial(out_failed)
    try:
        make_parents(out_rec)
        with open(tmp_rec, "wb") as out:
            for part in ordered:
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 24)
        with open(tmp_idx, "w", encoding="ascii", newline="\n") as f:
            for k, o in zip(keys, offsets):
                f.write(format_index(k, o))
        failed_parts = [sibling(p, "failed") for p in ordered]
        lines = []
        for path in failed_parts:
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    lines += f.read().splitlines()[1:]
        result.failures += len(lines)
        if lines:  # a failure list only where something failed, as pack's
            with open(tmp_failed, "w", encoding="utf-8", newline="\n") as out:
                out.write(FAILED_HEADER)
                out.writelines(line + "\n" for line in lines)
            commit(tmp_failed, out_failed)
        else:
            remove_quietly(out_failed)
        commit(tmp_rec, out_rec)
        commit(tmp_idx, out_idx)
    except OSError as e:
        raise Im2recError(f"{e.filename or tmp_rec}: {e.strerror or e}") from None
    finally:
        for tmp in (tmp_rec, tmp_idx, tmp_failed):
            remove_quietly(tmp)
    result.records, result.bytes = int(all_keys.size), base
    return result


# --------------------------------------------------------------------------- size-limited shards


@dataclass
class _Shard:
    rec: str
    idx: str
    records: int = 0
    bytes: int = 0


@dataclass
class ShardedWriter:
    """Writes records to ``OUT-00000.rec``, ``OUT-00001.rec``, ... starting a new shard
    whenever the next record would take the current one past ``limit`` bytes (a
    record larger than the limit gets a shard of its own). Each shard has its
    ``.idx``; all are written as ``.partial`` files until ``commit()``, which renames
    them and writes the manifest ``OUT.shards.json``.
    """

    out_rec: str
    limit: int
    shards: list[_Shard] = field(default_factory=list)
    _writer: RecordWriter | None = None

    def tell(self) -> int:
        """Bytes written over all shards."""
        return sum(s.bytes for s in self.shards)

    def write_framed_idx(self, key: Any, framed: bytes) -> int:
        """Append one record framed by ``recordio.frame()`` and its ``.idx`` line, in a new shard if needed."""
        size = len(framed)
        current = self.shards[-1] if self.shards else None
        if current is None or (current.bytes and current.bytes + size > self.limit):
            self._rotate()
            current = self.shards[-1]
        offset = self._writer.write_framed_idx(key, framed)  # type: ignore[union-attr]
        current.records += 1
        current.bytes = self._writer.tell()  # type: ignore[union-attr]
        return offset

    def _rotate(self) -> None:
        if self._writer is not None:
            self._writer.close()
            start_writeback(partial(self.shards[-1].rec))  # so that commit() does not wait for every shard
        rec = shard_path(self.out_rec, len(self.shards))
        self.shards.append(_Shard(rec, idx_path_of(rec)))
        self._writer = RecordWriter(partial(rec), partial(idx_path_of(rec)))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def partials(self) -> list[str]:
        return [partial(p) for s in self.shards for p in (s.rec, s.idx)]

    def commit(self) -> None:
        """Rename every shard into place and write the manifest (``manifest_path``)."""
        self.close()
        for s in self.shards:
            commit(partial(s.rec), s.rec)
            commit(partial(s.idx), s.idx)
        path = manifest_path(self.out_rec)
        folder = os.path.dirname(os.path.abspath(path))
        manifest: dict[str, Any] = {
            "im2rec": __version__,
            "format": "im2rec shards 1",
            "records": sum(s.records for s in self.shards),
            "bytes": self.tell(),
            "shard_size_limit": self.limit,
            "shards": [
                {"rec": os.path.relpath(os.path.abspath(s.rec), folder), "idx": os.path.relpath(os.path.abspath(s.idx), folder), "records": s.records, "bytes": s.bytes}
                for s in self.shards
            ],
        }
        with open(partial(path), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
        commit(partial(path), path)

    def abort(self) -> None:
        self.close()
        for p in self.partials():
            remove_quietly(p)


def existing_shard_outputs(out_rec: str) -> list[str]:
    """Shard files or a manifest of ``out_rec`` that exist already."""
    stem = _stem(out_rec)
    folder = os.path.dirname(os.path.abspath(out_rec))
    name = os.path.basename(stem)
    pattern = re.compile(re.escape(name) + r"-\d{5}\.(rec|idx)(\.partial)?$")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []  # a new folder: made once the checks pass
    found = [os.path.join(folder, f) for f in names if pattern.match(f)]
    if os.path.exists(manifest_path(out_rec)):
        found.insert(0, manifest_path(out_rec))
    return found


