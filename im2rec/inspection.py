"""Looking into existing ``.rec`` files: inspect, verify, extract, and rebuild the ``.idx``.

Every function here survives damage: a corrupt record in the middle is reported
(with its byte offset and, when known, its key) and the walk resumes at the next
record head, as dmlc's readers resynchronise.
"""

from __future__ import annotations

import dataclasses
import os
import random
import statistics
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import storage
from .errors import HeaderError, Im2recError, ImageError, OutputExistsError, RecordIOError, TruncatedRecordError
from .fsutil import atomic_open
from .image import ImageOptions, decode, image_format, image_info
from .lst import ListEntry, format_label, write_lst
from .recordio import (
    IRHEADER_SIZE,
    MAGIC,
    MAGIC_BYTES,
    RecordIndex,
    RecordReader,
    cflag_of,
    format_index,
    header_size,
    idx_path_of,
    insightface_header,
    read_index,
    record_splits_header,
    splits_header,
    unpack,
    write_index,
)
from .text import plural

__all__ = ["Problem", "combined_index", "extract_rec", "inspect_rec", "rebuild_index", "verify_rec"]


@dataclass(frozen=True)
class Problem:
    """Something wrong in a ``.rec``/``.idx``, where it is, and what."""

    offset: int | None
    key: Any
    message: str
    file: str | None = None  # named when a report covers several files

    def __str__(self) -> str:
        where = []
        if self.offset is not None:
            where.append(f"byte {self.offset}")
        if self.key is not None:
            where.append(f"key {self.key}")
        text = f"{', '.join(where)}: {self.message}" if where else self.message
        return f"{self.file}: {text}" if self.file else text


def open_rec(rec: str, with_idx: bool = True, storage_options: dict | None = None) -> tuple[RecordReader, RecordIndex | None]:
    """A reader of ``rec`` (a path or a URL), with its ``.idx`` when there is one and ``with_idx``.

    Raises:
        Im2recError: ``rec`` is missing, or is not a RecordIO file (see ``refuse_non_recordio``).
    """
    if not storage.there(rec, storage_options):
        raise Im2recError(storage.missing(rec, storage_options))
    idx = idx_path_of(rec)
    reader = RecordReader(rec, idx if with_idx and storage.there(idx, storage_options) else None, storage_options=storage_options, on_cut="skip")
    try:
        refuse_non_recordio(reader)
    except Im2recError:
        reader.close()
        raise
    return reader, reader.index


def refuse_non_recordio(reader: RecordReader) -> None:
    """Refuse a file in which no record starts anywhere: not a RecordIO file (a ``.lst`` named by
    mistake shares its ``.idx`` name with the ``.rec``, which it must not be read with or rebuild).
    A damaged ``.rec`` has a record head somewhere; an empty file holds no records and passes.

    Raises:
        Im2recError: no 4-aligned magic word followed by a record's lrec in the whole file.
    """
    size, source = reader.size, reader.source

    def starts_a_record(pos: int) -> bool:
        return pos + 8 <= size and source[pos : pos + 4] == MAGIC_BYTES and cflag_of(int.from_bytes(source[pos + 4 : pos + 8], "little")) in (0, 1)

    if starts_a_record(0):  # every good file: nothing more is read
        return
    step = _SCAN_CHUNK // 4
    for first in range(0, size // 4, step):
        words = reader.words(first, min(step, size // 4 - first))
        if any(starts_a_record(pos) for pos in ((np.flatnonzero(words == MAGIC) + first) * 4).tolist()):
            return
    if size:
        raise Im2recError(f"{reader.path}: not a RecordIO file: no record starts in its {plural(size, 'byte')} (each starts with the magic 0xced7230a)")


def cut_problem(reader: RecordReader) -> list[Problem]:
    """A file cut short as one problem (not one per record lost), saying how to mend it."""
    return [Problem(None, None, reason_in(reader.cut.message(), reader.path))] if reader.cut is not None else []


def record_entries(reader: RecordReader, problems: list[Problem]) -> Iterator[tuple[Any, int]]:
    """(key or None, offset) of every record: from the .idx in line order, else a walk of the file."""
    if reader.index is not None:
        yield from zip(reader.index.keys(), reader.index.offsets.tolist())
        return
    for offset, _length, _next, error in reader.walk():
        if error is not None:
            problems.append(walk_problem(reader, offset, _next, error, "skipped to the next record at byte"))
        else:
            yield None, offset


def walk_problem(reader: RecordReader, offset: int, nxt: int, error: RecordIOError, then: str = "the next record starts at byte") -> Problem:
    """Damage a walk met, in words; the end of a file cut short inside its last record said as such."""
    if isinstance(error, TruncatedRecordError) and nxt >= reader.size:
        return Problem(
            offset, None,
            f"the file ends {reader.size - offset:,} bytes into this record: it was cut short (a partial download?); the records before it "
            f"are whole, and `truncate -s {offset} {reader.path}` drops the partial one",
        )
    return Problem(offset, None, f"{reason_in(error, reader.path)}; " + (f"{then} {nxt}" if nxt < reader.size else "the file ends there"))


def reason_in(error: Exception | str, path: str) -> str:
    """An error's message without the leading file name (the report names the file once)."""
    text = str(error)
    return text[len(path) + 2 :] if text.startswith(path + ": ") else text


def _read_header(reader: RecordReader, offset: int) -> tuple[Any, int, list[tuple[int, int, int]]]:
    """(IRHeader with labels, payload length, frames as ``RecordReader.frames``) of the record at ``offset``."""
    frames = reader.frames(offset)
    length = sum(n for _, _, n in frames) + 4 * (len(frames) - 1)
    head = reader.head_at(offset, IRHEADER_SIZE)
    if len(head) < IRHEADER_SIZE:
        raise HeaderError(f"record of {len(head)} bytes is too short for an IRHeader")
    flag = int.from_bytes(head[:4], "little")
    if flag:
        head = reader.head_at(offset, header_size(flag))
    return unpack(head)[0], length, frames


HEADER_SPLIT_WARNING = (
    "the record is split inside its header (a header word or label equals the RecordIO magic 0xCED7230A): "
    "MXNet reads it, DALI's fn.readers.mxnet cannot"
)


def _stats(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    return {"min": min(values), "mean": round(statistics.fmean(values), 1), "median": statistics.median(values), "max": max(values)}


# --------------------------------------------------------------------------- inspect


@dataclass
class InspectReport:
    """What ``inspect_rec`` found; ``to_json`` is ``inspect --json``, ``lines`` its text."""

    path: str
    idx: str | None
    file_bytes: int
    records: int
    image_records: int
    labels: dict[str, Any]  # scalar_records, multi_label_records; classes, per_class, per_class_min_max; widths
    payload_bytes: dict[str, float]  # min, mean, median, max
    sample: dict[str, Any]  # records, formats, width and height statistics
    insightface: dict[str, Any] | None  # images, identities, header
    multi_part_records: int
    header_split: list[str]
    damaged: list[str]
    grid: dict[str, Any] | None = None  # inspect --grid: path, tiles, columns, rows, classes, marked
    lost: str | None = None  # the file was cut short: what its .idx names that is not in it

    def to_json(self) -> dict[str, Any]:
        report = dataclasses.asdict(self)
        if self.grid is None:
            del report["grid"]
        return report

    def lines(self, limit: int = 20) -> list[tuple[str, bool]]:
        """The report for humans, in order, as ``(line, for stderr)``: warnings and damaged
        records go to stderr (at most ``limit`` of each), the summary to stdout."""
        rec, labels = self.path, self.labels
        out = [(f"{rec}: {plural(self.records, 'record')}, {self.file_bytes / 1e6:,.1f} MB" + (f", index {self.idx}" if self.idx else ", no .idx"), False)]
        face = self.insightface
        if face:
            out.append((f"  insightface: {plural(face['images'], 'image')}, {plural(face['identities'], 'identity', 'identities')} (header {face['header']})", False))
        if labels.get("classes"):
            lo, hi = labels["per_class_min_max"]
            out.append((f"  labels: {plural(labels['classes'], 'class', 'classes')} over {plural(labels['scalar_records'], 'record')} ({lo:,} to {hi:,} per class)", False))
        if labels.get("widths"):
            widths = ", ".join(f"{n:,} with {w}" for w, n in labels["widths"].items())
            out.append((f"  multi-label records: {widths} labels", False))
        sizes = self.payload_bytes
        if sizes:
            out.append((f"  payload bytes: min {sizes['min']:,}, median {sizes['median']:,.0f}, mean {sizes['mean']:,.0f}, max {sizes['max']:,}", False))
        sample = self.sample
        if sample["records"]:
            formats = ", ".join(f"{n} {f}" for f, n in sample["formats"].items())
            w, h = sample["width"], sample["height"]
            dims = f"; width {w['min']}-{w['max']} (median {w['median']:.0f}), height {h['min']}-{h['max']} (median {h['median']:.0f})" if w else ""
            out.append((f"  sample of {sample['records']}: {formats}{dims}", False))
        if self.multi_part_records:
            out.append((f"  multi-part records: {self.multi_part_records:,} (an aligned magic word in the payload, escaped)", False))
        out += [(f"warning: {rec}: {line}", True) for line in self.header_split[:limit]]
        if len(self.header_split) > limit:
            out.append((f"warning: {rec}: ... and {len(self.header_split) - limit:,} more records split inside their header", True))
        if self.lost:
            out.append((f"{rec}: {self.lost}", True))
        if self.damaged:
            out.append((f"  damaged: {len(self.damaged)} record(s) skipped", False))
            out += [(f"{rec}: {line}", True) for line in self.damaged[:limit]]
        grid = self.grid
        if grid:
            marked = f", {len(grid['marked'])} marked" if grid["marked"] else ""
            names = f", captions from {grid['classes']}" if grid["classes"] else ""
            out.append((f"  contact sheet: {grid['path']} ({grid['tiles']} records, {grid['columns']}x{grid['rows']}{marked}{names})", False))
            out += [(f"{rec}: {line}", True) for line in grid["marked"][:limit]]
        return out


def inspect_rec(rec: str, sample: int = 200, seed: int = 0, storage_options: dict | None = None) -> InspectReport:
    """Summarise a ``.rec``: records, labels, payload sizes, image formats and sizes on a sample.

    Args:
        rec: the ``.rec`` (its ``.idx`` is used when it exists).
        sample: how many records to look at for formats and dimensions (headers only, no decode).
        seed: the sample's seed.

    Returns:
        An InspectReport; ``damaged`` lists the records that could not be read.
    """
    reader, index = open_rec(rec, storage_options=storage_options)
    problems: list[Problem] = []
    entries = list(record_entries(reader, problems))
    face = insightface_header(reader) if index is not None else None
    image_keys = set(range(1, face[0])) if face else None
    sizes: list[int] = []
    scalar: Counter = Counter()
    widths: Counter = Counter()
    images: list[tuple[Any, int, int]] = []  # (key, offset, flag)
    multi_part = 0
    header_split: list[Problem] = []
    for key, offset in entries:
        if image_keys is not None and key not in image_keys:
            continue
        try:
            header, length, parts = _read_header(reader, offset)
        except (RecordIOError, HeaderError) as e:
            problems.append(Problem(offset, key, reason_in(e, reader.path)))
            continue
        if len(parts) > 1:
            multi_part += 1
            if splits_header(parts[0][2], header.flag):
                header_split.append(Problem(offset, key, HEADER_SPLIT_WARNING))
        sizes.append(length)
        if header.flag:
            widths[header.flag] += 1
        else:
            scalar[header.label] += 1
        images.append((key, offset, header.flag))
    formats: Counter = Counter()
    dims: list[tuple[int, int]] = []
    chosen = random.Random(seed).sample(images, min(sample, len(images)))
    for key, offset, flag in chosen:
        try:
            head = bytes(reader.head_at(offset, header_size(flag) + 256 * 1024))[header_size(flag) :]
        except RecordIOError as e:
            problems.append(Problem(offset, key, reason_in(e, reader.path)))
            continue
        info = image_info(head)
        formats[info[0] if info else (image_format(head) or "unknown")] += 1
        if info:
            dims.append((info[1], info[2]))
    labels: dict[str, Any] = {"scalar_records": sum(scalar.values()), "multi_label_records": sum(widths.values())}
    if scalar:
        labels["classes"] = len(scalar)
        labels["per_class"] = {label_name(k): v for k, v in sorted(scalar.items())[:1000]}
        labels["per_class_min_max"] = [min(scalar.values()), max(scalar.values())]
    if widths:
        labels["widths"] = {str(k): v for k, v in sorted(widths.items())}
    report = InspectReport(
        path=rec,
        idx=index.path if index is not None else None,
        file_bytes=reader.size,
        records=len(entries),
        image_records=len(images),
        labels=labels,
        payload_bytes=_stats(sizes),
        sample={
            "records": len(chosen),
            "formats": dict(formats.most_common()),
            "width": _stats([w for w, _ in dims]),
            "height": _stats([h for _, h in dims]),
        },
        insightface={"images": face[0] - 1, "identities": face[1] - face[0], "header": list(face)} if face else None,
        multi_part_records=multi_part,
        header_split=[str(p) for p in header_split],
        damaged=[str(p) for p in problems],
        lost=reason_in(reader.cut.message(), reader.path) if reader.cut is not None else None,
    )
    reader.close()
    return report


def label_name(label: float) -> str:
    """A label as a folder or JSON key: ``3`` for 3.0, ``0.5`` for 0.5."""
    return str(int(label)) if float(label).is_integer() else format_label(label)


# --------------------------------------------------------------------------- verify


@dataclass
class VerifyReport:
    """What ``verify_rec`` found."""

    rec: str
    idx: str | None
    records: int = 0
    decoded: int = 0
    multi_part: int = 0  # records in several frames (an aligned magic in the payload)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)  # readable by MXNet, not by every consumer


_SCAN_CHUNK = 16 << 20  # bytes of the file compared at once when looking for stray record heads


def verify_rec(rec: str, decode_images: bool = False, storage_options: dict | None = None) -> VerifyReport:
    """Check a ``.rec`` and its ``.idx`` the way their strictest consumers will read them.

    Checks: the file size is a multiple of 4 (dmlc InputSplit refuses others); every
    part's framing (magic, cflag sequence, lengths within the file); no record head
    hidden inside another record (a corrupt length); every ``.idx`` line parses and
    points at a record head; no duplicate keys or offsets (a duplicate offset ends a
    dmlc epoch early); no record missing from the ``.idx``; with ``decode_images``,
    every image decodes (insightface header and identity records excepted).
    """
    if not storage.there(rec, storage_options):
        raise Im2recError(storage.missing(rec, storage_options))
    idx_path = idx_path_of(rec)
    reader = RecordReader(rec, storage_options=storage_options)
    try:
        refuse_non_recordio(reader)
    except Im2recError:
        reader.close()
        raise
    report = VerifyReport(rec, idx_path if storage.there(idx_path, storage_options) else None)
    problems = report.problems
    if reader.size % 4:
        problems.append(Problem(None, None, f"the file size ({reader.size} bytes) is not a multiple of 4: dmlc's InputSplit refuses to open it"))

    heads: list[int] = []
    parts: list[int] = []  # every frame head, for the stray-head check
    for offset, length, nxt, error in reader.walk():
        if error is not None:
            problems.append(walk_problem(reader, offset, nxt, error))
            if isinstance(error, TruncatedRecordError):
                parts.append(offset)  # a real head whose record the end of the file cuts
            continue
        heads.append(offset)
        if nxt - offset == 8 + ((length + 3) & ~3):
            parts.append(offset)
        else:  # several parts: each header is legitimate
            parts.extend(p for p, _, _ in reader.frames(offset))
            report.multi_part += 1
            if record_splits_header(reader, offset):
                report.warnings.append(Problem(offset, None, HEADER_SPLIT_WARNING))
    report.records = len(heads)
    heads_arr = np.array(heads, dtype=np.int64)
    for stray in _stray_heads(reader, np.array(parts, dtype=np.int64)):
        i = int(np.searchsorted(heads_arr, stray, side="right")) - 1
        inside = f"inside the record at byte {heads[i]}" if i >= 0 else "before the first record"
        problems.append(Problem(int(stray), None, f"a record head {inside}: that record's length is probably corrupt"))

    keys_at: dict[int, Any] = {}
    if report.idx is not None:
        try:
            index = read_index(report.idx, storage_options=storage_options)
        except Im2recError as e:
            problems.append(Problem(None, None, str(e)))
            index = None
        if index is not None:
            keep, cut = reader.cut_of(index)
            if cut is not None:  # one problem for what is lost, not one per record (nor the walk's for the last)
                lost_from = int(index.offsets[~keep].min())
                problems[:] = [p for p in problems if not (p.offset is not None and p.offset >= lost_from and ("truncated record" in p.message or "cut short" in p.message))]
                problems.append(Problem(None, None, reason_in(cut.message(), rec)))
                index = index.subset(keep)
            keys_at = _check_index(index, heads_arr, problems)
    else:
        problems.append(Problem(None, None, f"no .idx ({idx_path}): random access, DALI and ImageRecordIter(path_imgidx) need one; `im2rec index` rebuilds it"))

    if decode_images:
        face = None
        if report.idx is not None:
            try:
                face = insightface_header(RecordReader(rec, report.idx, storage_options=storage_options))
            except Im2recError:
                face = None
        options = ImageOptions()
        for offset in heads:
            key = keys_at.get(offset)
            if face and (key == 0 or (key is not None and key >= face[0])):
                continue  # insightface header and identity records hold no image
            try:
                _header, body = unpack(reader.read_at(offset)[0])
                decode(bytes(body), options)
                report.decoded += 1
            except (HeaderError, ImageError, RecordIOError) as e:
                said = e.said if isinstance(e, ImageError) else "image not decodable"
                problems.append(Problem(offset, key, f"{said}: {reason_in(e, rec)}"))
    def with_keys(found: list[Problem]) -> list[Problem]:
        return [dataclasses.replace(p, key=keys_at[p.offset]) if p.key is None and p.offset in keys_at else p for p in found]

    report.problems, report.warnings = with_keys(problems), with_keys(report.warnings)
    reader.close()
    return report


def _stray_heads(reader: RecordReader, parts: np.ndarray) -> Iterator[int]:
    """4-aligned magic words followed by a valid lrec that are not part headers."""
    source, size = reader.source, reader.size
    words_total = size // 4
    step = _SCAN_CHUNK // 4
    for first in range(0, words_total, step):
        count = min(step, words_total - first)
        words = reader.words(first, count)
        found = (np.flatnonzero(words == MAGIC) + first) * 4
        del words
        if found.size:
            for pos in np.setdiff1d(found, parts, assume_unique=True).tolist():
                if pos + 8 <= size and cflag_of(int.from_bytes(source[pos + 4 : pos + 8], "little")) in (0, 1):
                    yield pos


def _check_index(index: RecordIndex, heads: np.ndarray, problems: list[Problem]) -> dict[int, Any]:
    keys = index.keys()
    offsets = index.offsets.tolist()
    heads_set = set(heads.tolist())
    first_key_line: dict[Any, int] = {}
    first_offset_line: dict[int, int] = {}
    for entry, (key, offset) in enumerate(zip(keys, offsets)):
        line = index.line_of(entry)
        where = f"{index.path}:{line}"
        if offset not in heads_set:
            problems.append(Problem(offset, key, f"{where}: the offset is not a record head"))
        if key in first_key_line:
            problems.append(Problem(offset, key, f"{where}: key {key} is also on line {first_key_line[key]}"))
        else:
            first_key_line[key] = line
        if offset in first_offset_line:
            problems.append(Problem(offset, key, f"{where}: offset {offset} is also on line {first_offset_line[offset]} (a duplicate offset ends a dmlc epoch early)"))
        else:
            first_offset_line[offset] = line
    for head in sorted(heads_set - set(first_offset_line)):
        problems.append(Problem(head, None, f"the record is missing from {index.path}"))
    return {offset: key for key, offset in zip(keys, offsets)}


# --------------------------------------------------------------------------- extract


_EXTENSIONS = {"JPEG": ".jpg", "PNG": ".png", "GIF": ".gif", "BMP": ".bmp", "TIFF": ".tiff", "WebP": ".webp", "JPEG 2000": ".jp2", "PNM": ".pnm", "AVIF": ".avif", "HDR": ".hdr", "EXR": ".exr"}


@dataclass
class ExtractResult:
    """What ``extract_rec`` wrote."""

    lst: str
    images: int = 0
    problems: list[Problem] = field(default_factory=list)
    max_labels: int = 1
    label_widths: Counter = field(default_factory=Counter)
    id_mismatches: int = 0

    @property
    def pack_command(self) -> str:
        """The command that packs the extracted images back into the same records."""
        root = os.path.dirname(self.lst) or "."
        extra = ""
        if set(self.label_widths) - {0}:
            widths = set(self.label_widths)
            extra = f" --label-width {widths.pop()}" if len(widths) == 1 else " --pack-label"
        return f"im2rec pack {self.lst} {root} NEW.rec --pass-through{extra}"


def extract_rec(rec: str, outdir: str, flat: bool = False, overwrite: bool = False, storage_options: dict | None = None) -> ExtractResult:
    """Write every image of a ``.rec`` back to a file, with its original bytes, and a ``.lst``.

    Files go to ``OUTDIR/<label>/<key>.<ext>`` (or ``OUTDIR/<key>.<ext>`` with
    ``flat``), the extension taken from the image bytes. ``OUTDIR/<rec stem>.lst``
    lists them in record order with their keys and labels, so that
    ``im2rec pack OUTDIR/<stem>.lst OUTDIR NEW.rec --pass-through`` (plus
    ``--label-width N`` for multi-label records) rebuilds the same records when
    their header id is their key, as im2rec.py writes them.

    Raises:
        Im2recError: ``rec`` is missing, or a file would be overwritten without ``overwrite``.
    """
    reader, index = open_rec(rec, storage_options=storage_options)
    os.makedirs(outdir, exist_ok=True)
    result = ExtractResult(os.path.join(outdir, os.path.splitext(os.path.basename(rec))[0] + ".lst"))
    if os.path.exists(result.lst) and not overwrite:
        raise OutputExistsError(result.lst)
    face = insightface_header(reader) if index is not None else None
    entries: list[ListEntry] = []
    result.problems.extend(cut_problem(reader))
    for key, offset in record_entries(reader, result.problems):
        if face and not (isinstance(key, int) and 1 <= key < face[0]):
            continue
        try:
            header, body = unpack(reader.read_at(offset)[0])
        except (RecordIOError, HeaderError) as e:
            result.problems.append(Problem(offset, key, f"{reason_in(e, reader.path)}; skipped"))
            continue
        key = header.id if key is None else key
        if header.id != key:
            result.id_mismatches += 1
        labels = tuple(float(x) for x in np.atleast_1d(header.label)) if header.flag else (float(header.label),)
        result.label_widths[header.flag] += 1
        fmt = image_format(bytes(body[:16]))
        name = f"{key}{_EXTENSIONS.get(fmt or '', '.bin')}"
        rel = name if flat else f"{label_name(labels[0])}/{name}"
        path = os.path.join(outdir, rel)
        if os.path.exists(path) and not overwrite:
            raise OutputExistsError(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(body)
        entries.append(ListEntry(int(key), labels, rel))
        result.images += 1
    with atomic_open(result.lst, "w", encoding="utf-8", newline="\n") as f:
        write_lst(f, entries)
    reader.close()
    return result


# --------------------------------------------------------------------------- index


@dataclass
class IndexResult:
    """What ``rebuild_index`` wrote."""

    idx: str
    entries: int = 0
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)  # a cut file's partial last record, left out


def rebuild_index(rec: str, idx: str | None = None, keys: str = "id", overwrite: bool = False, storage_options: dict | None = None) -> IndexResult:
    """Rebuild a ``.idx`` by a sequential scan of the ``.rec``.

    Args:
        rec: the ``.rec``.
        idx: where to write; default: beside the ``.rec``, same stem (a URL when
            ``rec`` is one: written with one request, so it appears whole).
        keys: ``"id"`` takes each key from the record's IRHeader id (what im2rec.py
            writes); ``"counter"`` numbers records 0, 1, 2... (DALI's rec2idx).
        overwrite: replace an existing ``.idx``.
        storage_options: fsspec's options for URLs.

    Raises:
        Im2recError: the ``.idx`` exists without ``overwrite``, or a record has no
            IRHeader to take a key from (use ``keys="counter"``).
    """
    idx = idx or idx_path_of(rec)
    _check_index_args(idx, keys, overwrite, storage_options)
    result = IndexResult(idx)
    reader, _ = open_rec(rec, with_idx=False, storage_options=storage_options)
    with reader:
        entries = _scan_entries(reader, keys, result.problems, warnings=result.warnings)
    _write_index(idx, entries, storage_options)
    result.entries = len(entries)
    return result


def _check_index_args(idx: str, keys: str, overwrite: bool, storage_options: dict | None = None) -> None:
    if keys not in ("id", "counter"):
        raise ValueError(f"keys must be 'id' or 'counter', got {keys!r}")
    if storage.there(idx, storage_options) and not overwrite:
        raise OutputExistsError(idx)


def _scan_entries(reader: RecordReader, keys: str, problems: list[Problem], first_key: int = 0, warnings: list[Problem] | None = None) -> list[tuple[Any, int]]:
    """(key, offset) of every record found by a sequential scan; damage is skipped and reported
    (the partial record a cut file ends in to ``warnings``, when given: what an index of what is
    there leaves out by design)."""
    entries: list[tuple[Any, int]] = []
    for offset, _length, nxt, error in reader.walk():
        if error is not None:
            problem = walk_problem(reader, offset, nxt, error, "skipped to the next record at byte")
            (warnings if warnings is not None and "cut short" in problem.message else problems).append(problem)
            continue
        if keys == "counter":
            key: Any = first_key + len(entries)
        else:
            head = reader.head_at(offset, IRHEADER_SIZE)
            if len(head) < IRHEADER_SIZE:
                raise Im2recError(
                    f"{reader.path}: the record at byte {offset} is {len(head)} bytes, too short for an IRHeader to "
                    f"take a key from: use --keys counter"
                )
            key = int.from_bytes(head[8:16], "little")
        entries.append((key, offset))
    return entries


def _write_index(idx: str, entries: Sequence[tuple[Any, int]], storage_options: dict | None = None) -> None:
    keys, offsets = [key for key, _ in entries], [offset for _, offset in entries]
    if storage.is_url(idx):
        storage.write_bytes(idx, format_index(keys, offsets).encode("ascii"), storage_options)
        return
    write_index(idx, keys, offsets)


def combined_index(recs: Sequence[str], idx: str, keys: str = "id", overwrite: bool = False) -> IndexResult:
    """Write one ``.idx`` for several ``.rec`` files read as one, as DALI's ``fn.readers.mxnet`` wants it.

    DALI takes a list of ``.rec`` files (``path``) but exactly one ``index_path``, whose
    offsets count across the files concatenated in ``path`` order: an entry of the
    k-th file is its offset there plus the sizes of the files before it. Given only
    the first shard's own ``.idx``, DALI silently reads that shard alone.

    Args:
        recs: the ``.rec`` files, in the order they will be given to DALI's ``path``.
        idx: the combined ``.idx`` to write.
        keys: ``"id"`` keeps each shard's keys (from its ``.idx``, or its headers' ids
            when it has none); ``"counter"`` numbers the records 0, 1, 2... across all
            files (DALI ignores the keys).
        overwrite: replace an existing ``idx``.

    Returns:
        An IndexResult; damaged records of a shard scanned without its ``.idx`` are
        in ``problems``, with offsets in that shard.

    Raises:
        Im2recError: a file is missing, a size is not a multiple of 4 (DALI and MXNet
            reject such files), a shard's ``.idx`` does not match it, or ``idx`` exists
            without ``overwrite``.
    """
    _check_index_args(idx, keys, overwrite)
    if not recs:
        raise Im2recError("--combined needs at least one .rec")
    result = IndexResult(idx)
    entries: list[tuple[Any, int]] = []
    base = 0
    remote = [r for r in recs if storage.is_url(r)]
    if remote:
        raise Im2recError(f"{remote[0]}: --combined reads local files (for now); DALI reads local files too")
    for rec in recs:
        if not os.path.isfile(rec):
            raise Im2recError(storage.missing(rec))
        size = os.path.getsize(rec)
        if size % 4:
            raise Im2recError(f"{rec}: {size:,} bytes is not a multiple of 4: DALI and MXNet refuse such a file")
        own = idx_path_of(rec)
        if os.path.exists(own):
            index = read_index(own)
            index.validate(size, rec)
            found = list(zip(index.key_list if keys == "id" else range(len(entries), len(entries) + len(index)), index.offsets.tolist()))
        else:
            problems: list[Problem] = []
            with RecordReader(rec) as reader:
                found = _scan_entries(reader, keys, problems, len(entries))
            result.problems += [dataclasses.replace(p, file=rec) for p in problems]
        entries += [(key, offset + base) for key, offset in found]
        base += size
    _write_index(idx, entries)
    result.entries = len(entries)
    return result
