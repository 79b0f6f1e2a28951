"""Face-recognition datasets: insightface's layout, and images moved between layouts and datasets.

Two layouts of image records:

* ``plain``: images only, keys 0..N-1 (what im2rec.py writes, and what insightface's
  ``scripts/shuffle_rec.py`` makes for DALI and arcface_torch's DALI route);
* ``insightface``: what insightface's ``RecBuilder`` writes. Image records have keys
  1..N, grouped by identity (identities in ascending label order, the input order kept
  within each), ``IRHeader(0, identity, key, 0)``; identity records N+1..N+K hold the
  ``[start, end)`` image-key range of each identity; header record 0 (flag 2,
  ``[N+1, N+K+1)``, id2 1) is written last; a ``property`` file
  (``num_classes,height,width``) sits next to the ``.rec``.

``convert`` rewrites one dataset in a layout, ``combine`` several into one. Payload
bytes are copied, never re-encoded: a record that was in one part is written from a
view of the input's memory map, with only its 24-byte header new.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import Im2recError, RecordIOError
from .fsutil import WriteBehind, atomic_open, remove_quietly
from .image import image_info
from .outputs import Outputs, RecordFile
from .recordio import (
    FRAME_HEAD_SIZE,
    IRHEADER_SIZE,
    LAYOUTS,
    MAGIC,
    MAX_RECORD_SIZE,
    PADDING,
    RECORD_HEAD,
    IRHeader,
    RecordReader,
    RecordWriter,
    idx_path_of,
    insightface_header,
    pack,
    read_headers,
    sibling,
)

__all__ = ["LAYOUTS", "LayoutResult", "combine", "convert", "insightface_outputs", "lay_out", "summary_line"]

log = logging.getLogger(__name__)

MAX_IDENTITY = 1 << 24  # identity ids and image keys are stored as float32 labels: exact below 2**24
_SIZE_SAMPLE = 256  # images whose header is read for the property file's height and width


@dataclass
class LayoutResult:
    """What ``convert`` or ``combine`` wrote."""

    rec: str
    idx: str
    layout: str
    images: int = 0
    identities: int = 0  # insightface: identity records written
    num_classes: int = 0  # distinct labels (plain) or max label + 1 (insightface property)
    property: str | None = None
    size: tuple[int, int] | None = None  # (height, width) written to property
    sizes_seen: int = 0  # how many different image sizes the sample found
    sources: str | None = None  # combine: the OUT.sources.tsv label map
    bytes: int = 0
    seconds: float = 0.0
    input_bytes: int = 0


class _Images:
    """The image records of one input ``.rec``, as arrays: offset, scalar label, id, id2, and
    where the image bytes start in the payload (after the IRHeader and its labels)."""

    def __init__(self, path: str):
        if "://" in path:
            raise Im2recError(f"{path}: convert and combine read local files (for now): copy it here first")
        if not os.path.isfile(path):
            raise Im2recError(f"{path}: no such file")
        idx = idx_path_of(path)
        self.path = path
        self.reader = RecordReader(path, idx if os.path.exists(idx) else None)
        self.face = insightface_header(self.reader)
        self.layout = "insightface" if self.face else "plain"
        self.offsets = self._offsets()
        self._read_headers()

    def _offsets(self) -> np.ndarray:
        reader, index = self.reader, self.reader.index
        if self.face:
            first, _ = self.face
            missing = [k for k in range(1, first) if k not in index]  # type: ignore[operator]
            if missing:
                raise Im2recError(
                    f"{self.path}: its insightface header says the images are keys 1..{first - 1}, "
                    f"but key {missing[0]} is not in {index.path}"  # type: ignore[union-attr]
                )
            return np.array([index.offset(k) for k in range(1, first)], dtype=np.int64)  # type: ignore[union-attr]
        if index is not None:
            return index.offsets.astype(np.int64)
        offsets = []
        for offset, _length, _next, error in reader.walk():
            if error is not None:
                raise Im2recError(f"{self.path}: {error}; rebuild the file's .idx with `im2rec index` to skip damaged records")
            offsets.append(offset)
        return np.array(offsets, dtype=np.int64)

    def _read_headers(self) -> None:
        try:
            headers = read_headers(self.reader, self.offsets)
        except RecordIOError as e:
            raise Im2recError(str(e)) from None
        self.labels, self.ids, self.id2s = headers.label, headers.id, headers.id2
        self.body_start, self.length, self.single = headers.body, headers.length, headers.single

    def key_of(self, i: int) -> str:
        index = self.reader.index
        return f"key {index.key_list[i]}" if index is not None and not self.face else (f"key {i + 1}" if self.face else f"record {i}")

    def close(self) -> None:
        self.reader.close()


def _check_identities(labels: np.ndarray, src: _Images, picks: np.ndarray) -> None:
    bad = np.flatnonzero((labels != np.floor(labels)) | (labels < 0) | (labels >= MAX_IDENTITY))
    if bad.size:
        i = int(picks[bad[0]])
        raise Im2recError(
            f"{src.path}: {src.key_of(i)} (byte {int(src.offsets[i])}) has label {labels[bad[0]]:g}: the insightface "
            f"layout needs integer identity ids from 0 to {MAX_IDENTITY - 1}"
        )


def _image_size(src: _Images, i: int) -> tuple[int, int] | None:
    reader, offset = src.reader, int(src.offsets[i])
    start = int(src.body_start[i])
    try:
        head = bytes(reader.head_at(offset, start + 65536))[start:]
    except RecordIOError:
        return None
    info = image_info(head)
    return (info[2], info[1]) if info else None


_BATCH = 8 << 20  # bytes assembled before one write


def _write_images(writer: RecordWriter, sources: list[_Images], src_of: np.ndarray, pos: np.ndarray, labels: np.ndarray, keys: np.ndarray, ids: np.ndarray, id2s: np.ndarray) -> None:
    """Write image ``pos[j]`` of ``sources[src_of[j]]`` as key ``keys[j]`` with a new 24-byte IRHeader.

    A record that was in one part stays in one part: its image bytes keep their
    4-byte alignment (the old header and labels were a multiple of 4 bytes long), so
    unless the new header holds the magic, the record is its new part header and
    IRHeader (computed for all records at once) followed by the old image bytes.
    Records that follow each other in the input, with a 24-byte header there too,
    are copied as one span whose headers are then overwritten in place (a memcpy
    and a scatter, whatever the record count); others are written from views of
    the input in batches. Multi-part records are unpacked and framed one by one.
    """
    n = len(pos)
    rec_off = np.zeros(n, np.int64)
    body_start = np.zeros(n, np.int64)
    body_end = np.zeros(n, np.int64)
    single = np.zeros(n, bool)
    for s, src in enumerate(sources):
        mine = src_of == s
        p = pos[mine]
        rec_off[mine] = src.offsets[p]
        body_start[mine] = src.offsets[p] + 8 + src.body_start[p]
        body_end[mine] = src.offsets[p] + 8 + src.length[p]
        single[mine] = src.single[p]
    heads = np.zeros(n, RECORD_HEAD)
    payload = IRHEADER_SIZE + body_end - body_start
    heads["magic"], heads["lrec"], heads["label"], heads["id"], heads["id2"] = MAGIC, payload, labels, ids, id2s
    head_words = heads.view("<u4").reshape(n, 8)
    fast = single & ~(head_words[:, 2:] == MAGIC).any(axis=1) & (payload <= MAX_RECORD_SIZE)
    sizes = 8 + ((payload + 3) & ~3)
    # Runs of records that lie back to back in one input with a 24-byte header there: copied as spans.
    same_shape = fast & (body_start - rec_off == FRAME_HEAD_SIZE + IRHEADER_SIZE)
    joined = np.zeros(n, bool)
    if n > 1:
        joined[1:] = same_shape[1:] & same_shape[:-1] & (src_of[1:] == src_of[:-1]) & (rec_off[1:] == rec_off[:-1] + sizes[:-1])
    run_starts = np.flatnonzero(~joined).tolist() + [n]

    head_view = memoryview(heads.tobytes())
    views = [s.reader.buffer() for s in sources]
    write_behind = WriteBehind(writer.file)
    pieces: list = []
    batch_keys: list = []
    starts: list = []
    filled = 0

    def flush() -> None:
        nonlocal pieces, batch_keys, starts, filled
        if batch_keys:
            writer.write_framed_many(batch_keys, pieces, starts)
            write_behind(writer.tell())
        pieces, batch_keys, starts, filled = [], [], [], 0

    def write_span(j0: int, j1: int) -> None:
        first, last = int(rec_off[j0]), int(rec_off[j1 - 1] + sizes[j1 - 1])
        buf = bytearray(views[int(src_of[j0])][first:last])
        words = np.frombuffer(buf, dtype="<u4")
        rel = rec_off[j0:j1] - first
        words[(rel // 4 + 2)[:, None] + np.arange(6)] = head_words[j0:j1, 2:]
        del words
        writer.write_framed_many(keys[j0:j1].tolist(), buf, rel.tolist())
        write_behind(writer.tell())

    try:
        for r0, r1 in itertools.pairwise(run_starts):
            if r1 - r0 >= 8:  # a span: cut at about _BATCH bytes
                flush()
                ends = np.cumsum(sizes[r0:r1])
                j = r0
                while j < r1:
                    k = r0 + int(np.searchsorted(ends, ends[j - r0] - sizes[j] + _BATCH, side="right"))
                    k = min(max(k, j + 1), r1)
                    write_span(j, k)
                    j = k
                continue
            for j in range(r0, r1):
                s, key = int(src_of[j]), int(keys[j])
                if not fast[j]:
                    flush()
                    src, i = sources[s], int(pos[j])
                    old = src.reader.read_at(int(src.offsets[i]))[0]
                    header = IRHeader(0, float(labels[j]), int(ids[j]), int(id2s[j]))
                    writer.write_idx(key, pack(header, b"") + bytes(old[int(src.body_start[i]) :]))
                    continue
                a, b = int(body_start[j]), int(body_end[j])
                pieces += (head_view[32 * j : 32 * j + 32], views[s][a:b])
                if (b - a) & 3:
                    pieces.append(PADDING[(b - a) & 3])
                batch_keys.append(key)
                starts.append(filled)
                filled += int(sizes[j])
                if filled >= _BATCH:
                    flush()
        flush()
    finally:
        del pieces
        for v in views:
            v.release()


def _write(
    out: RecordFile,
    sources: list[_Images],
    picks: list[tuple[int, np.ndarray]],  # (source, image positions) in output order
    labels: list[np.ndarray],  # the new label of each pick
    layout: str,
    result: LayoutResult,
) -> None:
    """Write the picked images of ``sources`` in ``layout``: plain keeps each record's id and id2."""
    src_of = np.concatenate([np.full(len(p), s, np.int32) for s, p in picks]) if picks else np.zeros(0, np.int32)
    pos = np.concatenate([p for _, p in picks]) if picks else np.zeros(0, np.int64)
    lab = np.concatenate(labels) if labels else np.zeros(0)
    if layout == "insightface":
        order = np.argsort(lab, kind="stable")  # grouped by identity, input order kept within each
        src_of, pos, lab = src_of[order], pos[order], lab[order]
    writer = out.writer
    keys = np.arange(len(pos), dtype=np.int64) + (1 if layout == "insightface" else 0)
    if layout == "insightface":
        ids, id2s = keys.astype(np.uint64), np.zeros(len(pos), np.uint64)
    else:  # shuffle_rec.py keeps each record's id and id2
        ids, id2s = np.zeros(len(pos), np.uint64), np.zeros(len(pos), np.uint64)
        for s, src in enumerate(sources):
            mine = src_of == s
            ids[mine], id2s[mine] = src.ids[pos[mine]], src.id2s[pos[mine]]
    _write_images(writer, sources, src_of, pos, lab, keys, ids, id2s)
    result.images = len(pos)
    if layout != "insightface":
        result.num_classes = len(np.unique(lab))
        return
    # identity records, then header 0, as RecBuilder writes them
    n_images = len(pos)
    identities, starts = np.unique(lab, return_index=True)
    ends = np.append(starts[1:], n_images)
    key = n_images + 1
    for start, end in zip(starts.tolist(), ends.tolist()):
        writer.write_idx(key, pack(IRHeader(0, [start + 1, end + 1], key, 0), b""))
        key += 1
    writer.write_idx(0, pack(IRHeader(0, [n_images + 1, key], 0, 1), b""))
    result.identities = len(identities)
    result.num_classes = int(identities[-1]) + 1 if len(identities) else 0
    sizes: Counter = Counter()
    for s, i in zip(src_of[:_SIZE_SAMPLE].tolist(), pos[:_SIZE_SAMPLE].tolist()):
        size = _image_size(sources[s], i)
        if size:
            sizes[size] += 1
    result.sizes_seen = len(sizes)
    result.size = sizes.most_common(1)[0][0] if sizes else None


def _finish(out: RecordFile, result: LayoutResult, started: float) -> LayoutResult:
    result.bytes = out.tell()
    out.commit()
    if result.layout == "insightface":
        h, w = result.size or (0, 0)
        result.property = sibling(out.rec, "property")
        with atomic_open(result.property, "w", encoding="ascii", newline="\n") as f:
            f.write(f"{result.num_classes},{h},{w}\n")
    result.seconds = time.perf_counter() - started
    return result


def _extra_outputs(rec: str, layout: str) -> list[str]:
    return [sibling(rec, "property")] if layout == "insightface" else []


def convert(inp: str, out_rec: str, layout: str, shuffle: bool = False, seed: int = 0, overwrite: bool = False) -> LayoutResult:
    """Rewrite the images of ``inp`` (any layout) in ``layout``, copying their bytes.

    Args:
        inp: the input ``.rec`` (its ``.idx`` is used when present; insightface
            header and identity records are recognised and dropped).
        out_rec: the output ``.rec``; its ``.idx`` (and, for insightface, ``property``)
            go next to it.
        layout: ``"plain"``: keys 0..N-1, scalar labels (``label[0]`` of multi-label
            records), each record's id and id2 kept, as insightface's shuffle_rec.py
            writes for DALI; ``"insightface"``: RecBuilder's layout (see the module).
        shuffle, seed: plain only: the images in a seeded random order (numpy's
            ``RandomState(seed).shuffle``, as shuffle_rec.py after ``np.random.seed``).
        overwrite: replace existing outputs.
        names: how ``OUT.sources.tsv`` names the inputs [default: their paths]; for
            inputs read from local copies of URLs, the URLs.

    Raises:
        Im2recError: a missing or damaged input, a non-integer label for the
            insightface layout, or an existing output without ``overwrite``.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if shuffle and layout != "plain":
        raise Im2recError("--shuffle applies to the plain layout: the insightface layout groups images by identity")
    started = time.perf_counter()
    src = _Images(inp)
    try:
        if os.path.abspath(inp) == os.path.abspath(out_rec):
            raise Im2recError(f"{out_rec}: the output cannot be the input")
        positions = np.arange(len(src.offsets))
        if shuffle:
            np.random.RandomState(seed).shuffle(positions)
        labels = src.labels[positions]
        if layout == "insightface":
            _check_identities(labels, src, positions)
        result = LayoutResult(out_rec, idx_path_of(out_rec), layout, input_bytes=src.reader.size)
        out = RecordFile(out_rec, overwrite, _extra_outputs(out_rec, layout))
        try:
            _write(out, [src], [(0, positions)], [labels], layout, result)
        except BaseException:
            out.abort()
            raise
        return _finish(out, result, started)
    finally:
        src.close()


def combine(
    out_rec: str,
    inputs: Sequence[str],
    labels: str = "offset",
    layout: str | None = None,
    overwrite: bool = False,
    names: Sequence[str] | None = None,
) -> LayoutResult:
    """One dataset from several: images of every input, in input order, keys renumbered.

    Args:
        out_rec: the output ``.rec``; ``OUT.sources.tsv`` maps every input's old labels
            to the new ones.
        inputs: the input ``.rec`` files (any layout; insightface header and identity
            records are dropped).
        labels: ``"offset"``: each input's labels are shifted past the previous inputs'
            classes (max label + 1 of each), so identities never collide; ``"keep"``:
            labels unchanged (the inputs share one label space).
        layout: ``"plain"`` or ``"insightface"``; default: insightface when every
            input is, else plain.
        overwrite: replace existing outputs.

    Raises:
        Im2recError: as ``convert``; negative labels with ``labels="offset"``.
    """
    if labels not in ("offset", "keep"):
        raise ValueError(f"labels must be 'offset' or 'keep', got {labels!r}")
    if not inputs:
        raise Im2recError("combine needs at least one input")
    started = time.perf_counter()
    sources: list[_Images] = []
    try:
        for path in inputs:
            if os.path.abspath(path) == os.path.abspath(out_rec):
                raise Im2recError(f"{out_rec}: the output cannot be one of the inputs")
            sources.append(_Images(path))
        layout = layout or ("insightface" if all(s.layout == "insightface" for s in sources) else "plain")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        picks, new_labels, mapping = [], [], []
        offset = 0.0
        for s, src in enumerate(sources):
            positions = np.arange(len(src.offsets))
            old = src.labels
            if labels == "offset" and len(old) and (old < 0).any():
                i = int(np.flatnonzero(old < 0)[0])
                raise Im2recError(f"{src.path}: {src.key_of(i)} has label {old[i]:g}: --labels offset needs labels of 0 or more")
            new = old + offset if labels == "offset" else old.copy()
            if layout == "insightface":
                _check_identities(new, src, positions)
            picks.append((s, positions))
            new_labels.append(new)
            uniq = np.unique(old)
            name = names[s] if names is not None else src.path
            mapping += [(name, float(a), float(a) + (offset if labels == "offset" else 0.0)) for a in uniq.tolist()]
            if labels == "offset" and len(old):
                offset += float(np.floor(old.max())) + 1.0
        result = LayoutResult(out_rec, idx_path_of(out_rec), layout, input_bytes=sum(s.reader.size for s in sources))
        result.sources = sibling(out_rec, "sources")
        out = RecordFile(out_rec, overwrite, [result.sources, *_extra_outputs(out_rec, layout)])
        try:
            _write(out, sources, picks, new_labels, layout, result)
            with atomic_open(result.sources, "w", encoding="utf-8", newline="\n") as f:
                f.write("source\told_label\tnew_label\n")
                f.writelines(f"{path}\t{_num(a)}\t{_num(b)}\n" for path, a, b in mapping)
        except BaseException:
            out.abort()
            raise
        return _finish(out, result, started)
    finally:
        for src in sources:
            src.close()


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def lay_out(images_rec: str, out_rec: str) -> LayoutResult:
    """Finish a ``pack --layout insightface`` (or the merge of its parts): turn ``images_rec``
    (the images, plain, in list order) into ``out_rec`` in insightface's layout, move its
    failure list to ``OUT.failed.tsv``, and remove it. With no image, only the failure
    list is moved."""
    images, failed = Outputs.for_rec(images_rec), Outputs.for_rec(out_rec).failed
    laid = LayoutResult(out_rec, idx_path_of(out_rec), "insightface")
    if os.path.getsize(images.rec):
        laid = convert(images_rec, out_rec, "insightface", overwrite=True)
        if laid.sizes_seen > 1:
            h, w = laid.size or (0, 0)
            log.warning("%s: the images have %d different sizes; property says the most common, %dx%d", out_rec, laid.sizes_seen, h, w)
    if os.path.exists(images.failed):
        os.replace(images.failed, failed)
    remove_quietly(images.rec)
    remove_quietly(images.idx)
    return laid


def insightface_outputs(rec: str) -> list[str]:
    """The files an insightface-layout output ``rec`` consists of."""
    return [rec, idx_path_of(rec), *_extra_outputs(rec, "insightface")]


def summary_line(result: LayoutResult) -> str:
    """One line saying what was written, with its speed."""
    rate = result.input_bytes / result.seconds / 1e6 if result.seconds else 0.0
    face = f", {result.identities:,} identities, property {result.property}" if result.layout == "insightface" else ""
    return (
        f"wrote {result.images:,} images to {result.rec} ({result.layout} layout{face}); "
        f"{result.bytes / 1e6:,.1f} MB in {result.seconds:.2f} s ({rate:,.0f} MB/s read)"
    )

