"""``im2rec export`` and ``im2rec import``: RecordIO to and from WebDataset, Parquet, MDS and litdata.

``export_rec`` streams the records of a ``.rec`` (or its shards) once, in ``.idx`` order,
into a format's ``Writer`` (``formats.webdataset``, ``formats.parquet``, ``formats.mds``, ``formats.litdata``):
the payload bytes are copied, never decoded. An insightface set exports its images only
(its header and identity records are rebuilt by an import), each labelled with its identity;
its ``property`` goes into ``im2rec.json``. Local outputs grow in ``OUT.partial/`` and are
renamed into place whole; a URL output's shards are uploaded as each is finished (so the
local disk holds one shard at a time), ``im2rec.json`` and the format's index last.

``import_samples`` is a ``pack`` from another source: a ``SampleSource`` (a ``packing.Source``)
turns a format ``Reader``'s samples into pack's Tasks, and ``packing.pack_source`` runs the
one pipeline (stage 2 in-process for the default pass-through, or in pack's worker pool
when image options re-encode; failures to ``OUT.failed.tsv``; ``--resume``; a URL output;
the insightface layout). Samples that ``export`` wrote carry their key, ids and flag, so
the ``.rec`` and ``.idx`` come back byte for byte.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from . import formats, recordio, storage
from .errors import Im2recError, OptionError, OutputExistsError, RecordIOError
from .formats.base import Batch, DatasetMeta, Sample, SampleReader, default_flag, read_meta, shard_files, source_folder
from .fsutil import atomic_open, make_parents, start_writeback
from .inspection import Problem, open_rec
from .lst import find_classes, format_classes, read_classes
from .outputs import partial
from .packing import Checked, PackOptions, PackSummary, Progress, Task, pack_source
from .recordio import IRHEADER_SIZE, RecordReader, idx_path_of, insightface_header, read_headers, unpack
from .text import plural

__all__ = ["ExportProgress", "ExportSummary", "SampleSource", "export_rec", "import_samples", "reader_for"]

_CHUNK = 8192  # records whose headers are read at once, at most
CHUNK_BYTES = 32 << 20  # and at most this many bytes of them (one record more, if it is larger): the memory of a batch
_FETCH = 8 << 20  # a URL input is fetched in ranges of this size, several at once


def reader_for(fmt: str, src: str, storage_options: dict | None = None, label_field: str | None = None) -> SampleReader:
    """The format's ``Reader`` of ``src`` (a folder, a shard file, a glob; local or a URL);
    ``label_field`` names the field (tar extension, column) holding the label."""
    module = formats.load(fmt)
    try:
        return module.Reader(src, storage_options, label_field=label_field)
    except Im2recError as e:
        meta = source_meta(src, storage_options)
        if meta is not None and meta.format and meta.format != fmt:
            raise Im2recError(f"{e}; its im2rec.json says it holds {meta.format}: pass --format {meta.format}") from None
        raise


def source_meta(src: str, storage_options: dict | None = None) -> DatasetMeta | None:
    """``im2rec.json`` of an export's folder (given as the folder, a shard or a glob), if there is one."""
    return read_meta(source_folder(src), storage_options)


# --------------------------------------------------------------------------- export


@dataclass
class ExportSummary:
    """What ``export_rec`` wrote."""

    source: str
    out: str
    format: str
    layout: str = "plain"
    samples: int = 0
    skipped: int = 0  # insightface header and identity records, not exported
    bytes: int = 0  # payload bytes exported
    shards: list[str] = field(default_factory=list)
    seconds: float = 0.0
    problems: list[Problem] = field(default_factory=list)  # damaged records, left out
    lost: list[str] = field(default_factory=list)  # files cut short: what their .idx names that is not there

    def line(self) -> str:
        rate = self.samples / self.seconds if self.seconds else 0.0
        face = f" (insightface set: images only, {self.skipped:,} header and identity records left out)" if self.layout == "insightface" else ""
        damaged = f"; {plural(len(self.problems), 'damaged record')} left out" if self.problems else ""
        return (
            f"exported {plural(self.samples, 'record')}{face} to {self.out} as {self.format}: {plural(len(self.shards), 'shard')}, "
            f"{self.bytes / 1e6:,.1f} MB of images in {self.seconds:.1f} s ({rate:,.0f} records/s){damaged}"
        )


class ExportProgress:
    """Told how many records an export will write, then of every batch written. The default does nothing."""

    def start(self, total: int) -> None:
        pass

    def update(self, n: int) -> None:
        pass


def _inputs(src: str, storage_options: dict | None) -> list[str]:
    """The ``.rec`` files of ``src``: itself, the shards its manifest (``.json``) lists, or those
    a glob matches (``train-*.rec``), in name order."""
    if src.endswith(".json"):
        from .outputs import read_manifest

        return read_manifest(src, storage_options)
    if any(c in src.split("://", 1)[-1] for c in "*?["):
        return shard_files(src, ".rec", storage_options)
    return [src]


def _classes(src: str, storage_options: dict | None, given: str | None = None) -> dict[int, str]:
    """label -> class name: from ``given`` (a ``label TAB name`` file), else the ``PREFIX.classes.tsv``
    that ``im2rec list`` wrote beside ``src``, else none."""
    found = given or find_classes(src, storage_options)
    if found is None:
        return {}
    return {int(k): v for k, v in read_classes(found, storage_options).items() if float(k).is_integer()}


def _batches(reader: RecordReader, classes: dict[int, str], face: tuple[int, int] | None, problems: list[Problem]) -> Iterator[Batch]:
    """The records of ``reader`` as Batches of ``_CHUNK`` records or ``CHUNK_BYTES``, in ``.idx`` order (an insightface set:
    its images only). A local file: headers read at once with numpy, images as views of its
    memory map; a URL: each batch's byte span fetched at once, in ``_FETCH`` ranges. A damaged
    record is left out and noted in ``problems``, as ``extract`` does."""
    index = reader.require_index()
    keys = np.asarray(index.key_list)
    offsets = np.asarray(index.offsets, dtype=np.int64)
    if face is not None:  # images are keys 1..first-1
        mine = (keys >= 1) & (keys < face[0])
        keys, offsets = keys[mine], offsets[mine]
    spans = np.cumsum(reader.record_ends(offsets) - offsets) if len(offsets) else np.zeros(0, np.int64)  # bytes read so far, record by record
    c = 0
    while c < len(offsets):
        end = min(c + _CHUNK, max(c + 1, int(np.searchsorted(spans, (spans[c - 1] if c else 0) + CHUNK_BYTES, side="right"))))
        offs = offsets[c:end]
        batch = Batch([str(k) for k in keys[c:end].tolist()], [], [], [], [], [], identities=face is not None)
        c = end
        if reader.remote:
            ends = reader.record_ends(offs)
            lo, hi = int(offs.min()), int(ends.max())
            reader.prefetch((a, min(a + _FETCH, hi)) for a in range(lo, hi, _FETCH))
            kept = []
            for key, off in zip(batch.keys, offs.tolist()):
                try:
                    _add(batch, *unpack(reader.read_at(off)[0]))
                    kept.append(key)
                except RecordIOError as e:
                    problems.append(Problem(off, key, str(e).removeprefix(f"{reader.path}: ")))
            batch.keys = kept
        else:
            damaged: list[tuple[int, RecordIOError]] = []
            heads = read_headers(reader, offs, damaged)
            if damaged:
                for i, error in damaged:
                    problems.append(Problem(int(offs[i]), batch.keys[i], str(error).removeprefix(f"{reader.path}: ")))
                good = heads.length >= 0
                batch.keys = [k for k, g in zip(batch.keys, good.tolist()) if g]
                offs, heads = offs[good], recordio.Headers(*(field[good] for field in heads))
            buf = reader.buffer()
            labels0 = heads.label.tolist()
            flags = ((heads.body - IRHEADER_SIZE) // 4).tolist()
            starts = (offs + 8).tolist()
            batch.ids, batch.id2s, batch.flags = heads.id.tolist(), heads.id2.tolist(), flags
            images, labels = batch.images, batch.labels
            for i, (single, s, body, end) in enumerate(zip(heads.single.tolist(), starts, heads.body.tolist(), (offs + 8 + heads.length).tolist())):
                if not single:  # a record in several parts: the careful way
                    header, image = unpack(reader.read_at(int(offs[i]))[0])
                    images.append(image)
                    labels.append(tuple(np.asarray(header.label, np.float32).tolist()) if header.flag else (header.label,))
                    continue
                images.append(buf[s + body : end])
                flag = flags[i]
                labels.append(tuple(np.frombuffer(buf, np.float32, flag, s + IRHEADER_SIZE).tolist()) if flag else (labels0[i],))
        if classes and face is None:
            batch.class_names = [classes.get(int(x[0])) if len(x) == 1 and float(x[0]).is_integer() else None for x in batch.labels]
        if len(batch):
            yield batch
        if not reader.remote and len(offs):  # what was read leaves this process's memory: flat for any file size
            del batch
            reader.release(int(offs.min()), int((offs + 8 + heads.length).max()))


def _add(batch: Batch, header: recordio.IRHeader, image: bytes) -> None:
    batch.images.append(image)
    batch.labels.append(tuple(np.asarray(header.label, np.float32).tolist()) if header.flag else (header.label,))
    batch.ids.append(header.id)
    batch.id2s.append(header.id2)
    batch.flags.append(header.flag)


class _Out:
    """Where an export's files go: ``OUT.partial/`` renamed to ``OUT`` at the end, or, for a URL,
    a staging folder whose shards are uploaded (and deleted) as each is finished."""

    def __init__(self, out: str, overwrite: bool, storage_options: dict | None):
        self.out, self.overwrite, self.options = out.rstrip("/"), overwrite, storage_options
        self.remote = storage.is_url(out)
        self.uploaded: list[str] = []
        self.shards: list[str] = []  # the shards finished, as the user sees them
        if self.remote:
            storage.check_bucket(self.out, storage_options)
            self.existing = storage.list_files(self.out, recursive=True, storage_options=storage_options) if storage.exists(self.out, storage_options) else []
            if self.existing and not overwrite:
                raise OutputExistsError(storage.join(self.out, self.existing[0]))

            self.folder = storage.staging_dir(self.out, "export-")
            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            if os.path.exists(self.out) and not overwrite and (not os.path.isdir(self.out) or os.listdir(self.out)):
                raise OutputExistsError(self.out)
            make_parents(self.out)
            self.folder = partial(self.out)
            shutil.rmtree(self.folder, ignore_errors=True)
        os.makedirs(self.folder)

    def shown(self, path: str) -> str:
        name = os.path.relpath(path, self.folder)
        return storage.join(self.out, name) if self.remote else os.path.join(self.out, name)

    def shard_done(self, path: str) -> None:
        self.shards.append(self.shown(path))
        if not self.remote:
            start_writeback(path)  # its disk writes start now, so that the fsync at the end is short
            return
        storage.upload(path, self.shown(path), self.options)
        self.uploaded.append(os.path.relpath(path, self.folder))
        os.remove(path)

    def commit(self, last: list[str]) -> None:
        if self.remote:
            for path in last:  # the metadata and the format's index: readers look for them
                storage.upload(path, self.shown(path), self.options)
                self.uploaded.append(os.path.relpath(path, self.folder))
            stale = [storage.join(self.out, n) for n in self.existing if n not in self.uploaded]
            if stale:
                storage.remove(stale, self.options)
            shutil.rmtree(self.folder, ignore_errors=True)
            return
        for d, _, names in os.walk(self.folder):
            for n in names:
                with open(os.path.join(d, n), "rb") as f:
                    os.fsync(f.fileno())
        if os.path.exists(self.out):
            shutil.rmtree(self.out) if os.path.isdir(self.out) else os.remove(self.out)
        os.rename(self.folder, self.out)

    def abort(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def export_rec(
    src: str,
    out: str,
    fmt: str,
    shard_size: int | None = None,
    overwrite: bool = False,
    storage_options: dict | None = None,
    progress: ExportProgress | None = None,
    classes: str | None = None,
) -> ExportSummary:
    """Write the records of ``src`` (a ``.rec`` with its ``.idx``, or a shard manifest; a path or
    a URL) as ``fmt`` shards in the folder ``out`` (a path or a URL), payload bytes untouched.

    Raises:
        OptionError: an unknown format, a shard size below 1.
        OutputExistsError: ``out`` has files, without ``overwrite``.
        Im2recError: a missing input or ``.idx``, a damaged record (naming its byte offset),
            a format whose library is not installed.
    """
    module = formats.load(fmt)
    shard_size = shard_size or formats.DEFAULT_SHARD_SIZE[fmt]
    if shard_size < 1:
        raise OptionError(f"--shard-size must be positive, got {shard_size}", "--shard-size")
    progress = progress or ExportProgress()
    started = time.perf_counter()
    recs = _inputs(src, storage_options)
    readers = []
    for rec in recs:
        idx = idx_path_of(rec)
        reader, index = open_rec(rec, storage_options=storage_options)  # a file of no records is refused
        readers.append(reader)
        if index is None:
            raise Im2recError(f"{idx}: no such {'object' if storage.is_url(idx) else 'file'}: export reads the records in .idx order (rebuild it with `im2rec index {rec}`)")
    faces = [insightface_header(r) for r in readers]
    layout = "insightface" if all(f is not None for f in faces) else "plain"
    if layout == "plain":  # every record, header and identity records of insightface parts included
        faces = [None] * len(readers)
    name = posixpath.basename(src.rstrip("/")).split("*", 1)[0].split("?", 1)[0].split("[", 1)[0].rstrip("-_.")
    name = name.removesuffix(".json").removesuffix(".shards").removesuffix(".rec") or "data"
    meta = DatasetMeta(source=src, layout=layout, classes=_classes(src, storage_options, classes), format=fmt)
    if layout == "insightface":
        prop = recordio.sibling(recs[0], "property")
        if storage.there(prop, storage_options):
            meta.property = storage.read_any(prop, storage_options).decode("ascii", "replace").strip()
    summary = ExportSummary(src, out.rstrip("/"), fmt, layout)
    summary.lost = [r.cut.message() for r in readers if r.cut is not None]
    total = sum(len(r.require_index()) - (1 + f[1] - f[0] if f is not None else 0) for r, f in zip(readers, faces))
    dest = _Out(out, overwrite, storage_options)
    writer = None
    try:
        writer = module.Writer(dest.folder, name, shard_size, meta, dest.shard_done)
        progress.start(total)
        n = 0
        for reader, face in zip(readers, faces):
            if face is not None:
                summary.skipped += 1 + face[1] - face[0]
            for batch in _batches(reader, meta.classes, face, summary.problems):
                summary.bytes += sum(map(len, batch.images))
                writer.write_batch(batch)
                n += len(batch)
                progress.update(len(batch))
        last = writer.close()
        dest.commit(last)
    except BaseException:
        if writer is not None:
            writer.abort()
        dest.abort()
        raise
    finally:
        for r in readers:
            r.close()
    summary.samples = n
    summary.shards = dest.shards
    summary.seconds = time.perf_counter() - started
    return summary


# --------------------------------------------------------------------------- import


class SampleSource:
    """A format ``Reader``'s samples as pack's Tasks (a ``packing.Source``).

    ``keyed``: the samples were written by ``export`` (``im2rec.json`` is there), so their keys
    are ``.idx`` keys and their ``meta`` holds the IRHeader's ids and flag; otherwise keys are
    the samples' positions and ids follow them. String labels become ids in sorted name order
    (``class_ids``).
    """

    def __init__(self, reader: SampleReader, src: str, fmt: str, class_ids: dict[str, int], keyed: bool):
        self.reader, self.name, self.root, self.fmt = reader, src, "", fmt
        self.class_ids, self.keyed = class_ids, keyed

    @contextmanager
    def checked(self, opts: PackOptions) -> Iterator[Checked]:
        count = self.reader.count()
        fingerprint = {"list": self.name, "format": self.fmt, "shards": self.reader.shard_names(), "count": count, "options": opts.output_affecting()}
        yield Checked(0, count, fingerprint)

    def _task(self, seq: int, sample: Sample) -> Task:
        key = sample.key
        index = int(key) if self.keyed and key.isdigit() else seq
        failed = sample.problem
        label: float | tuple[float, ...]
        values = sample.label
        if not values and sample.class_name is not None:
            values = (float(self.class_ids[sample.class_name]),) if sample.class_name in self.class_ids else ()
            if not values and failed is None:
                failed = ("bad-label", f"class {sample.class_name!r} has no id")
        flag = sample.flag if sample.flag is not None else default_flag(values)
        label = values[0] if flag == 0 and len(values) == 1 else tuple(values)
        if not values and failed is None:
            failed = ("bad-label", "no label")
        return Task(
            index, label, sample.where, sample.where, data=bytes(sample.image) if failed is None else None, failed=failed,
            header_id=sample.id if self.keyed else None, id2=sample.id2 if self.keyed else 0,
        )

    def tasks(self, start: int, stop: int | None, summary: PackSummary | None) -> Iterator[Task]:
        for seq, sample in enumerate(self.reader.samples(start), start):
            if stop is not None and seq >= stop:
                return
            yield self._task(seq, sample)

    def indices(self, start: int, stop: int | None) -> Iterator[int]:
        return (t.index for t in self.tasks(start, stop, None))


def _write_text(path: str, text: str, storage_options: dict | None) -> None:
    if storage.is_url(path):
        storage.write_bytes(path, text.encode("utf-8"), storage_options)
        return
    with atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def import_samples(src: str, out_rec: str, fmt: str, options: PackOptions | None = None, progress: Progress | None = None, label_field: str | None = None) -> tuple[PackSummary, str | None]:
    """Pack the samples of ``src`` (a ``fmt`` folder, shard or glob; local or a URL) into
    ``out_rec`` and its ``.idx``, through pack's pipeline (``packing.pack_source``).

    ``options.layout``: ``"insightface"`` lays the images out as insightface's RecBuilder does,
    keeping the source's ``property`` when ``im2rec.json`` has one. Class names (string labels,
    🤗 ``ClassLabel`` names, or an export's classes) are written to ``OUT.classes.tsv``.

    Returns:
        The PackSummary, and the ``OUT.classes.tsv`` written (or None).
    """
    opts = options or PackOptions()
    if opts.num_parts > 1 or opts.part_index is not None:
        raise OptionError("import packs the whole source: no --num-parts or --part-index")
    reader = reader_for(fmt, src, opts.storage_options, label_field)
    meta: DatasetMeta | None = reader.meta
    names = reader.class_names()
    class_ids = {n: i for i, n in enumerate(names)} if names else {}
    label_names = reader.label_names  # a 🤗 ClassLabel's
    classes = {i: n for n, i in class_ids.items()} or (meta.classes if meta else {}) or dict(enumerate(label_names or []))
    keyed = meta is not None and meta.format == fmt
    source = SampleSource(reader, src, fmt, class_ids, keyed)
    summary = pack_source(source, out_rec, opts, progress)
    classes_path = None
    if classes and summary.complete:
        classes_path = recordio.sibling(out_rec, "classes")
        _write_text(classes_path, format_classes(sorted(classes.items())), opts.storage_options)
    if opts.layout == "insightface" and opts.image.pass_through and meta is not None and meta.property and summary.complete and not summary.already_complete:
        # the images as they were: the source's property (re-encoded ones get the one pack computes)
        _write_text(recordio.sibling(out_rec, "property"), meta.property + "\n", opts.storage_options)
    return summary, classes_path

