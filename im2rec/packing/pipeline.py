"""``im2rec pack``: a ``.lst`` and an image folder to ``OUT.rec`` + ``OUT.idx``.

The pipeline is three stages joined in ``pack()``:

1. ``check_list`` reads the whole ``.lst`` once, before any image is touched: a
   malformed line, a duplicate index or a wrong label count stops the run with
   ``file:line`` and nothing is written.
2. ``encode_record`` turns a Task into a Result: read the file, ``image.transform_image``
   it, ``recordio.pack`` it with its IRHeader. A bad image is a Result with a
   reason, never an exception; an image that had transparency (which ``--color``
   dropped, or ``--alpha-background`` filled) says so in its Result. It runs in
   an ``OrderedPool`` of worker processes, or in this process for
   ``--pass-through`` (reading a file costs less than handing it between
   processes).
3. ``_write`` takes the Results in list order and writes the records and their
   ``.idx`` lines through one ``RecordWriter``, and the failures to
   ``OUT.failed.tsv``; it counts the images that had transparency and keeps the
   first ``TRANSPARENT_EXAMPLES`` of them for the summary, the warning and ``--stats``.

Nothing is written under a final name until the run is complete: the outputs
grow as ``OUT.rec.partial``, ``OUT.idx.partial`` and ``OUT.failed.tsv.partial``
(next to a ``OUT.resume.json`` that records the command), are fsynced, then
renamed. An interrupted or killed run leaves only those; ``resume=True`` cuts a
torn record off their end and continues after the last complete record, so the
final files are byte-identical to those of an uninterrupted run.

Each record's header id and ``.idx`` key is the list index, id2 is 0, and records
follow the list order, as MXNet's im2rec.py writes them: identical options give
identical bytes whatever the number of workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import logging
import os
import posixpath
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from .. import __version__, faces, recordio, storage
from ..errors import Im2recError, ImageError, ListFormatError, OptionError, OutputExistsError, PackError, TooManyFailures
from ..fsutil import atomic_open, commit, make_parents, remove_quietly
from ..image import ImageOptions, format_color, init_worker, transform_image
from ..lst import format_label, iter_lst
from ..outputs import PARTIAL_SUFFIX, FailureList, Outputs, PackFiles, RecordSink, kind_of, make_output_folder, partial, refuse_existing
from ..text import plural
from .pool import OrderedPool
from .shards import ShardedWriter, existing_shard_outputs, layout_path, manifest_path, part_path

__all__ = [
    "Checked",
    "ListSource",
    "PackOptions",
    "PackSummary",
    "Progress",
    "Result",
    "Source",
    "Task",
    "check_list",
    "encode_record",
    "pack",
    "pack_source",
    "summary_line",
    "transparency_clause",
    "transparency_warning",
    "write_stats",
]

log = logging.getLogger(__name__)

TRANSPARENT_EXAMPLES = 100  # images with transparency kept by name for the warning and --stats (the count is exact)
ALPHA_HINT = "pass --alpha-background COLOR to composite them"


def default_workers() -> int:
    """Every core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class PackOptions:
    """Options of ``im2rec pack`` besides the per-image ones, with the CLI's defaults.

    Attributes:
        image: how each image is processed.
        pack_label: store every label of a line (flag = count) when it has more than one.
        label_width: every line must have exactly this many labels; all are stored
            (as float32 labels after the header when > 1, as the scalar label when 1).
        workers: worker processes.
        overwrite: replace existing outputs (and discard an interrupted run's files).
        resume: continue an interrupted run from its last complete record.
        max_errors: stop (and fail) when more images than this have failed.
        num_parts, part_index: pack only part ``part_index`` of ``num_parts`` contiguous
            slices of the list (entries ``[n*I//N, n*(I+1)//N)``), to
            ``OUT-0000I-of-0000N.rec``; ``merge`` joins the parts.
        shard_size: start a new ``OUT-0000K.rec`` whenever the next record would take
            the current one past this many bytes, and list them in ``OUT.shards.json``.
        in_process: encode in this process instead of a worker pool (for callers that
            are themselves worker processes, such as Dask tasks).
        allow_outside_root: accept list paths that are absolute or climb out of ROOT
            with ``..`` (refused by default: a list from elsewhere could otherwise pull
            any readable file of the machine into the ``.rec``).
        layout: ``"plain"`` (im2rec.py's: keys = list indices) or ``"insightface"``
            (RecBuilder's face-recognition layout, see ``faces``: labels must be integer
            identity ids). A part of an insightface pack is written plain; ``merge``
            with ``layout="insightface"`` lays the whole out.
        storage_options: fsspec's options when ROOT or the output is a URL.
    """

    image: ImageOptions = field(default_factory=ImageOptions)
    pack_label: bool = False
    label_width: int | None = None
    workers: int = field(default_factory=default_workers)
    overwrite: bool = False
    resume: bool = False
    max_errors: int | None = None
    num_parts: int = 1
    part_index: int | None = None
    shard_size: int | None = None
    in_process: bool = False
    allow_outside_root: bool = False
    layout: str = "plain"
    storage_options: dict | None = None  # fsspec's, for a ROOT or an output that is a URL

    def __post_init__(self) -> None:
        if self.label_width is not None and self.label_width < 1:
            raise ValueError(f"label_width must be at least 1, got {self.label_width}")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.max_errors is not None and self.max_errors < 0:
            raise ValueError(f"max_errors must be 0 or more, got {self.max_errors}")
        if self.num_parts < 1:
            raise OptionError(f"--num-parts must be at least 1, got {self.num_parts}", "--num-parts")
        if self.part_index is not None and not 0 <= self.part_index < self.num_parts:
            needs = " (give the number of parts with --num-parts N)" if self.num_parts == 1 else ""
            raise OptionError(f"{self.part_index} is not below --num-parts {self.num_parts}{needs}", "--part-index")
        if self.shard_size is not None and self.shard_size < 1:
            raise OptionError(f"--shard-size must be positive, got {self.shard_size}", "--shard-size")
        if self.shard_size is not None and (self.part_index is not None or self.resume):
            raise OptionError("--shard-size cannot be combined with --part-index, --dask or --resume")
        if self.layout not in recordio.LAYOUTS:
            raise ValueError(f"layout must be 'plain' or 'insightface', got {self.layout!r}")
        if self.layout == "insightface" and (self.shard_size is not None or self.pack_label or (self.label_width or 1) > 1):
            raise OptionError("--layout insightface has one identity label per image: no --shard-size, --pack-label or --label-width N")

    def output_affecting(self) -> dict:
        """The options that change the bytes written (what a resumed run must share)."""
        return {
            "image": dataclasses.asdict(self.image),
            "pack_label": self.pack_label,
            "label_width": self.label_width,
            "part": [self.part_index, self.num_parts] if self.part_index is not None else None,
        }

    def part_slice(self, n: int) -> tuple[int, int]:
        """The list positions ``[start, stop)`` this run packs, for a list of ``n`` entries."""
        if self.part_index is None:
            return 0, n
        return n * self.part_index // self.num_parts, n * (self.part_index + 1) // self.num_parts


class Task(NamedTuple):
    """One image to pack: where it is in the list, and what goes in its header."""

    seq: int
    index: int  # type: ignore[assignment]  # the .lst word for it; tuple.index() is never called on a Task
    label: float | tuple[float, ...]
    path: str  # as written in the .lst
    file: str  # root joined with path
    data: bytes | tuple[str, str] | None = None  # fetched bytes (a URL ROOT, an import's sample), or (kind, reason) of a failure before encoding
    id: int | None = None  # the IRHeader's id; None: ``index`` (im2rec.py's)
    id2: int = 0


class Result(NamedTuple):
    """What became of a Task: its record, framed for the ``.rec``, or the kind and reason of its failure."""

    task: Task
    framed: bytes | None
    kind: str = ""  # failure category, see ImageError
    reason: str = ""
    transparent: bool = False  # the image had transparency (see image.Decoded); the record bytes do not say it


@dataclass
class PackSummary:
    """What a pack run did (resumed runs include the work of the interrupted one)."""

    lst: str
    root: str
    outputs: Outputs
    images: int = 0  # entries in the list
    packed: int = 0
    failures: Counter = field(default_factory=Counter)  # kind -> count
    bytes: int = 0
    seconds: float = 0.0
    resumed_from: int = 0  # list entries already done by an interrupted run
    resumed_packed: int = 0  # records already written by it
    complete: bool = False
    already_complete: bool = False  # resume=True found the outputs finished
    manifest: str | None = None  # with shard_size: the manifest, and the shards
    shards: list[str] = field(default_factory=list)
    header_split: list[int] = field(default_factory=list)  # keys of records split inside their header
    retried: int = 0  # a URL ROOT: requests retried after a transient failure
    identities: int | None = None  # insightface layout: identity records written
    sha256: dict = field(default_factory=dict)  # URL outputs: URL -> sha256 of what was uploaded
    transparent: int = 0  # packed images that had transparency (alpha not all opaque)
    transparent_examples: list[tuple[int, str]] = field(default_factory=list)  # (index, path), the first TRANSPARENT_EXAMPLES
    alpha_background: tuple[int, int, int] | None = None  # what they were composited over; None: alpha was dropped

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


class Progress:
    """Receives progress from ``pack``; the CLI draws a bar with it. The default does nothing."""

    def start(self, total: int, done: int) -> None:
        """The run starts: ``total`` list entries, ``done`` of them already handled (resume)."""

    def update(self, result: Result) -> None:
        """One more entry was written (or failed)."""


# --------------------------------------------------------------------------- stage 1: the list


@dataclass
class ListCheck:
    lines: int
    extra_labels: int  # lines whose labels beyond the first will not be stored


def _label_of(labels: tuple[float, ...], opts: PackOptions) -> float | tuple[float, ...]:
    if opts.label_width is not None:
        return labels if opts.label_width > 1 else labels[0]
    if opts.pack_label and len(labels) > 1:
        return labels
    return labels[0]


def leaves_root(path: str) -> bool:
    """Whether a list path is absolute or climbs above its root with ``..`` (``a/../b`` does not)."""
    if os.path.isabs(path):
        return True
    if ".." not in path:  # the common case, decided without normalising
        return False
    norm = os.path.normpath(path)
    return norm == os.pardir or norm.startswith(os.pardir + os.sep)


def check_list(lst: str, opts: PackOptions) -> ListCheck:
    """Read the whole list once: syntax, unique indices, label counts, paths that leave ROOT.

    Memory: 16 bytes per line (the indices and line numbers), whatever the paths.

    Raises:
        ListFormatError: naming ``file:line``; no image has been read yet.
    """
    indices = array("Q")
    lines = array("Q")
    extra = 0
    outside: list[tuple[int, str]] = []  # (line, path), the first few
    outside_count = 0
    for lineno, entry in iter_lst(lst):
        if not opts.allow_outside_root and leaves_root(entry.path):
            outside_count += 1
            if len(outside) < 3:
                outside.append((lineno, entry.path))
        n = len(entry.labels)
        if opts.label_width is not None and n != opts.label_width:
            raise ListFormatError(
                f"{lst}:{lineno}: expected {opts.label_width} label{'s' if opts.label_width > 1 else ''} "
                f"(--label-width {opts.label_width}), got {n}"
            )
        if n > 1 and opts.label_width is None and not opts.pack_label:
            extra += 1
        if opts.layout == "insightface":
            label = entry.labels[0]
            if not (label == int(label) and 0 <= label < 1 << 24):
                raise ListFormatError(
                    f"{lst}:{lineno}: label {format_label(label)} is not an identity id: the insightface layout "
                    f"needs integer labels from 0 to {(1 << 24) - 1}"
                )
        indices.append(entry.index)
        lines.append(lineno)
    if outside:
        lineno, path = outside[0]
        more = f" (and {outside_count - 1:,} more line{'s' if outside_count > 2 else ''}, e.g. line {outside[1][0]})" if outside_count > 1 else ""
        raise ListFormatError(
            f"{lst}:{lineno}: the path {path!r} is {'absolute' if os.path.isabs(path) else 'outside ROOT (it climbs out with ..)'}{more}; "
            f"list paths must be relative to ROOT and stay under it. Fix the list, or pass --allow-outside-root "
            f"if it was written with such paths on purpose"
        )
    if not indices:
        raise ListFormatError(f"{lst}: the list has no entries")
    idx = np.frombuffer(indices, dtype=np.uint64)
    order = np.argsort(idx, kind="stable")
    sorted_idx = idx[order]
    dup = np.flatnonzero(sorted_idx[1:] == sorted_idx[:-1])
    if dup.size:
        first, second = int(order[dup[0]]), int(order[dup[0] + 1])
        raise ListFormatError(
            f"{lst}:{lines[second]}: index {int(idx[second])} was already used on line {lines[first]} "
            f"(indices become .idx keys and must be unique)"
        )
    return ListCheck(len(indices), extra)


def iter_tasks(lst: str, root: str, opts: PackOptions, start: int = 0, stop: int | None = None) -> Iterator[Task]:
    """The list's entries at positions ``[start, stop)`` as Tasks, read lazily."""
    join = storage.join if storage.is_url(root) else os.path.join
    for seq, (_, entry) in enumerate(iter_lst(lst, start, stop), start):
        yield Task(seq, entry.index, _label_of(entry.labels, opts), entry.path, join(root, entry.path))


def _fetching(tasks: Iterable[Task], opts: PackOptions, summary: PackSummary) -> Iterator[Task]:
    """Tasks with their images' bytes, fetched from a URL ROOT concurrently ahead of the encoders."""
    stats = storage.FetchStats()
    try:
        for task, data in storage.fetch_in_order(tasks, lambda t: t.file, opts.storage_options, stats=stats):
            if isinstance(data, storage.StorageError):
                kind = "missing" if "no such object" in str(data) else "unreadable"
                yield task._replace(data=(kind, _reason_of(data, task.file)))
            else:
                yield task._replace(data=data)
    finally:
        summary.retried += stats.retried


def _reason_of(error: Exception, url: str) -> str:
    text = str(error)
    return text[len(url) + 2 :] if text.startswith(url + ": ") else text


#: How many entries ``check_root`` looks at before deciding that ROOT is the wrong folder.
ROOT_SAMPLE = 20


def check_root(lst: str, root: str, opts: PackOptions, start: int = 0, stop: int | None = None) -> None:
    """Refuse a ROOT where not one of the list's first images exists: the wrong folder, most likely.

    Without it a wrong ROOT gives an empty ``.rec`` and a failure list as long as the list.

    Raises:
        PackError: the first ``ROOT_SAMPLE`` entries (or all, if fewer) are all missing.
    """
    looked = [t.file for t in itertools.islice(iter_tasks(lst, root, opts, start, stop), ROOT_SAMPLE)]
    there = (lambda f: storage.exists(f, opts.storage_options)) if storage.is_url(root) else os.path.lexists
    if looked and not any(there(f) for f in looked):
        which = f"the first {len(looked)}" if len(looked) == ROOT_SAMPLE else f"the {len(looked)}"
        raise PackError(
            f"{root}: none of {which} images of {lst} is there (the first would be {looked[0]}); "
            f"is ROOT the folder the list's paths are relative to?"
        )


# --------------------------------------------------------------------------- stage 2: encoding


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ImageError("missing", "no such file") from None
    except IsADirectoryError:
        raise ImageError("unreadable", "a folder, not a file") from None
    except PermissionError:
        raise ImageError("unreadable", "permission denied") from None
    except OSError as e:
        raise ImageError("unreadable", f"cannot read it: {e.strerror or e}") from None


def encode_record(task: Task, opts: ImageOptions) -> Result:
    """Read, transform and pack one image. Never raises: a failure is a Result with a reason."""
    try:
        if isinstance(task.data, tuple):  # the fetch from a URL ROOT failed
            return Result(task, None, task.data[0], task.data[1])
        out = transform_image(task.data if task.data is not None else _read_file(task.file), opts, task.index)
        payload = recordio.pack(recordio.IRHeader(0, task.label, task.index if task.id is None else task.id, task.id2), out.data)
        if len(payload) > recordio.MAX_RECORD_SIZE:
            return Result(task, None, "too-large", f"record of {len(payload):,} bytes is above RecordIO's 2**29-byte limit")
        return Result(task, recordio.frame(payload), transparent=out.transparent)
    except ImageError as e:
        return Result(task, None, e.kind, str(e))
    except MemoryError:
        return Result(task, None, "too-large", "out of memory while processing it")
    except Exception as e:  # a bug or an OpenCV surprise: keep going, but say what happened
        return Result(task, None, "error", f"unexpected {type(e).__name__}: {e}")


def _crashed(task: Task, reason: str) -> Result:
    return Result(task, None, "crashed", reason.replace("this item", "this image"))


def _weigh(result: Result) -> int:
    return len(result.framed) if result.framed is not None else 0


@contextmanager
def _encoder(opts: PackOptions) -> Iterator[Callable[[Iterable[Task]], Iterator[Result]]]:
    """Stage 2 as a function from Tasks to Results in order: a process pool, or inline."""
    if opts.image.pass_through or opts.in_process:
        # Reading a file costs less than handing it to another process (threads measured
        # slower still: the GIL); Dask tasks are worker processes already.
        yield lambda tasks: (encode_record(t, opts.image) for t in tasks)
        return
    with OrderedPool(
        encode_record,
        opts.image,
        opts.workers,
        _crashed,
        weigh=_weigh,
        initializer=init_worker,
        preload=("cv2", __name__),
        fork_unsafe=("cv2",),  # the command never loads OpenCV itself: its workers fork in milliseconds
    ) as pool:
        yield pool.map


# --------------------------------------------------------------------------- stage 3: writing


def _write(results: Iterable[Result], sink: RecordSink, failures: FailureList, summary: PackSummary, opts: PackOptions, progress: Progress) -> None:
    """Write the Results in order: records into ``sink``, failures into ``failures``."""
    for result in results:
        task = result.task
        if result.framed is not None:
            sink.write_framed_idx(task.index, result.framed)
            summary.packed += 1
            if recordio.framed_splits_header(result.framed):
                summary.header_split.append(task.index)
            if result.transparent:
                summary.transparent += 1
                if len(summary.transparent_examples) < TRANSPARENT_EXAMPLES:
                    summary.transparent_examples.append((task.index, task.path))
        else:
            failures.add(task.index, task.path, result.kind, result.reason)
            summary.failures[result.kind] += 1
            if opts.max_errors is not None and summary.failed > opts.max_errors:
                raise TooManyFailures(
                    f"stopped after {plural(summary.failed, 'failed image')} (more than --max-errors {opts.max_errors}); "
                    f"the last: {task.path}: {result.kind}: {result.reason}",
                    summary,
                )
        progress.update(result)


# --------------------------------------------------------------------------- where the records go


def _fingerprint(lst: str, local_lst: str, root: str, opts: PackOptions) -> dict:
    """What a resumed run must share with the interrupted one: the list (and its bytes), ROOT, the options."""
    h = hashlib.sha256()
    with open(local_lst, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    fingerprint = {"list": _shown(lst), "list_sha256": h.hexdigest(), "root": _shown(root), "options": opts.output_affecting()}
    return json.loads(json.dumps(fingerprint))  # as the state file reads back: tuples become lists


def _shown(path: str) -> str:
    return path if storage.is_url(path) else os.path.abspath(path)


class _Destination:
    """Where a pack's records go: ``loop`` names the files the write loop writes, ``final``
    those the user gets; ``stream_to``, an S3 URL the ``.rec`` is sent to as it grows."""

    loop: Outputs
    final: Outputs
    stream_to: str | None = None

    def complete(self) -> bool:
        """``--resume`` found the outputs of a run that finished: nothing to do."""
        raise NotImplementedError

    def written(self) -> bool:
        """An earlier run wrote the records; what comes after them is still to do."""
        raise NotImplementedError

    def refuse(self) -> None:
        """Before any work: refuse outputs that exist (without ``--overwrite``) and the like."""

    def prepare(self) -> None:
        """Once the list is checked, before the first record: clear what ``--overwrite`` replaces."""

    def finish(self, summary: PackSummary) -> None:
        """After the loop: lay the records out, upload them."""


def nothing_packed(summary: PackSummary, opts: PackOptions) -> bool:
    """Whether a whole output (not a part a merge waits for, not shards) got no record because
    every image failed: it then leaves only its failure list."""
    return bool(summary.failed and not summary.packed and not summary.already_complete and opts.part_index is None and not opts.shard_size)


class _Files(_Destination):
    """Local files: ``OUT.rec`` (or part ``OUT-0000I-of-0000N.rec``, or shards) where the write
    loop puts them; a part of an insightface pack gets its ``.layout`` beside it."""

    def __init__(self, out_rec: str, opts: PackOptions):
        self.opts = opts
        self.final = self.loop = Outputs.for_rec(part_path(out_rec, opts.part_index, opts.num_parts) if opts.part_index is not None else out_rec)

    def complete(self) -> bool:
        out = self.loop
        return self.opts.resume and not self.opts.overwrite and all(os.path.exists(p) for p in out.required) and not os.path.exists(out.state)

    def written(self) -> bool:
        return self.complete()

    def refuse(self) -> None:
        if not self.opts.shard_size:
            return
        existing = self._shard_outputs()
        unfinished = [p for p in existing if p.endswith(PARTIAL_SUFFIX)]
        if unfinished and not self.opts.overwrite:
            raise PackError(f"{unfinished[0]} is left from an interrupted --shard-size run, which cannot be resumed: pass --overwrite to start again")
        refuse_existing(existing, self.opts.overwrite)

    def _shard_outputs(self) -> list[str]:
        out = self.loop
        return existing_shard_outputs(out.rec) + [p for p in (out.failed, partial(out.failed)) if os.path.exists(p)]

    def prepare(self) -> None:
        for path in self._shard_outputs() if self.opts.shard_size else []:  # an earlier run's (--overwrite)
            remove_quietly(path)

    def finish(self, summary: PackSummary) -> None:
        if self.opts.part_index is not None and self.opts.layout == "insightface":  # the layout travels with the part, to merge
            with atomic_open(layout_path(self.loop.rec), "w", encoding="ascii", newline="\n") as f:
                f.write("insightface\n")
        if nothing_packed(summary, self.opts):  # no empty .rec and .idx: the failure list says why
            remove_quietly(self.loop.rec)
            remove_quietly(self.loop.idx)


class _Layout(_Destination):
    """``--layout insightface``: the loop writes the images plain, in list order, to
    ``OUT.images.rec`` (resumable as any pack); ``finish`` lays them out as ``OUT.rec``."""

    def __init__(self, out_rec: str, opts: PackOptions):
        self.opts, self.out_rec = opts, out_rec
        self.inner = _Files(recordio.sibling(out_rec, "images"), opts)
        self.loop, self.final = self.inner.loop, Outputs.for_rec(out_rec)
        self.finals = [*faces.insightface_outputs(out_rec), self.final.failed]
        self.required = faces.insightface_outputs(out_rec)  # the failure list only when something failed

    def complete(self) -> bool:
        images = self.loop.rec
        return self.opts.resume and all(os.path.exists(p) for p in self.required) and not os.path.exists(images) and not os.path.exists(partial(images))

    def written(self) -> bool:
        return self.inner.written()

    def refuse(self) -> None:
        if not self.opts.resume:
            refuse_existing(self.finals, self.opts.overwrite)

    def finish(self, summary: PackSummary) -> None:
        if not os.path.exists(self.loop.rec):  # laid out by an earlier run (whose upload did not finish)
            return
        laid = faces.lay_out(self.loop.rec, self.out_rec)
        if laid.images:
            summary.bytes, summary.identities = laid.bytes, laid.identities
        summary.already_complete = False


class _Upload(_Destination):
    """A URL output: the loop writes in a local staging folder (kept for ``--resume``), and
    ``finish`` uploads each output so that it appears under its URL only complete (a
    multipart upload, aborted on failure), the index last. On S3 the ``.rec`` is streamed
    while it is written (``storage.Streamer``); elsewhere, and for the insightface layout,
    which is laid out at the end, it is uploaded then."""

    def __init__(self, out_url: str, opts: PackOptions):
        if opts.shard_size is not None:
            raise PackError(f"{out_url}: --shard-size writes local shards only (for now): pack them locally, then copy")
        storage.check_bucket(out_url, opts.storage_options)
        self.opts = opts
        self.folder = out_url.rsplit("/", 1)[0]
        self.inner = _destination(os.path.join(storage.staging_dir(out_url), posixpath.basename(out_url)), opts)
        self.loop, staged = self.inner.loop, self.inner.final
        self.final = Outputs.for_rec(storage.join(self.folder, os.path.basename(staged.rec)))
        if opts.layout == "plain" and storage.Streamer.supported(out_url):  # the loop writes into _Files
            self.inner.stream_to = self.stream_to = self.final.rec
        self.staged = staged

    def _there(self) -> list[str]:
        return [url for url in (self.final.rec, self.final.idx) if storage.exists(url, self.opts.storage_options)]

    def _staged_any(self) -> bool:
        return any(os.path.exists(p) for p in (*self.loop.partials, *self.loop.finals, *self.staged.finals))

    def complete(self) -> bool:
        return self.opts.resume and len(self._there()) == 2 and not self._staged_any()  # uploaded by an earlier run

    def written(self) -> bool:
        return self.inner.written() or self.inner.complete()

    def refuse(self) -> None:
        opts, staged = self.opts, self.staged
        there = self._there()
        if there and not opts.overwrite and not opts.resume:
            raise OutputExistsError(there[0])
        if not opts.overwrite and not opts.resume:
            if all(os.path.exists(p) for p in staged.required):
                raise PackError(
                    f"{self.final.rec}: an earlier run packed it but did not finish uploading it (its files are in "
                    f"{os.path.dirname(staged.rec)}): pass --resume to upload them, or --overwrite to start again"
                )
            if any(os.path.exists(p) for p in (*self.loop.partials, self.loop.state)):
                raise PackError(
                    f"{self.final.rec}: an interrupted run left its finished part in {os.path.dirname(staged.rec)}: "
                    f"pass --resume to continue it, or --overwrite to start again"
                )
        self.inner.refuse()

    def finish(self, summary: PackSummary) -> None:
        self.inner.finish(summary)
        staged = self.staged
        streamed = self.stream_to is not None and not summary.already_complete  # the .rec is in the store already
        if streamed and nothing_packed(summary, self.opts):
            storage.remove([self.final.rec], self.opts.storage_options)  # an empty .rec, streamed as it grew
        files = [staged.failed] if streamed else [staged.rec, staged.failed]
        if self.opts.layout == "insightface":
            files.append(recordio.sibling(staged.rec, "property") if self.opts.part_index is None else layout_path(staged.rec))
        files.append(staged.idx)  # readers look for the .idx: it appears once the rest is there
        url_of = {path: storage.join(self.folder, os.path.basename(path)) for path in files}
        if summary.already_complete and not os.path.exists(staged.idx):
            return
        for path in [staged.rec, *files]:  # for --stats: what was uploaded (hashed here, where it is local)
            digest = _sha256(path)
            if digest is not None:
                summary.sha256[url_of.get(path, self.final.rec)] = digest
        for path in files:
            if os.path.exists(path):
                storage.upload(path, url_of[path], self.opts.storage_options)
            elif path == staged.failed and storage.exists(url_of[path], self.opts.storage_options):
                storage.remove([url_of[path]], self.opts.storage_options)  # an earlier run's: nothing failed now
        for path in [*files, staged.rec]:
            remove_quietly(path)
        with contextlib.suppress(OSError):  # the staging folder, once empty
            os.rmdir(os.path.dirname(staged.rec))


def _destination(out_rec: str, opts: PackOptions) -> _Destination:
    """Where a pack's records go: local files, laid out as insightface's, sent to a store."""
    if storage.is_url(out_rec):
        return _Upload(out_rec, opts)
    if opts.layout == "insightface" and opts.part_index is None:
        return _Layout(out_rec, opts)
    return _Files(out_rec, opts)


def _resumed_from(indices: Iterable[int], start: int, last_key: int | None, failed: list[tuple[int, str]]) -> tuple[int, list[str]]:
    """Where an interrupted run stopped: the position after its last record (``indices``: the
    source's indices from position ``start``), and the failures it listed before it (later
    ones will be tried again)."""
    if last_key is None:
        return start, []
    failed_indices = {index for index, _ in failed}
    done: set[int] = set()
    for seq, index in enumerate(indices, start):  # this part's entries only
        if index in failed_indices:
            done.add(index)
        if index == last_key:
            return seq + 1, [line for i, line in failed if i in done]
    return start, []


def _open_files(files: PackFiles, resuming: bool, failures: FailureList, source: Source, checked: Checked, summary: PackSummary) -> int:
    """Open pack's single output, fresh or resumed; returns the source position to go on from."""
    resumed = files.open(checked.fingerprint, resuming)
    if not resuming or resumed.last_key is None:
        failures.start()
        return checked.start
    first, kept = _resumed_from(source.indices(checked.start, checked.stop), checked.start, resumed.last_key, failures.previous())
    summary.packed = summary.resumed_packed = resumed.records
    summary.resumed_from = first
    for line in kept:
        summary.failures[kind_of(line)] += 1
    failures.start(kept)
    return first


def _run(source: Source, checked: Checked, dest: _Destination, opts: PackOptions, progress: Progress, summary: PackSummary) -> None:
    """Stages 2 and 3: encode the source's images and write them, through one loop, into the
    destination's sink: pack's resumable single file, or size-limited shards."""
    out = dest.loop
    sink: RecordSink
    if opts.shard_size:  # local files only: the other destinations refuse shards
        dest.prepare()
        sink = shards = ShardedWriter(out.rec, opts.shard_size)
    else:
        resuming = PackFiles.claim(out, checked.fingerprint, opts.overwrite, opts.resume)
        sink = files = PackFiles(out, dest.stream_to, opts.storage_options)
    failures = FailureList(out.failed)
    started = False
    try:
        if opts.shard_size:
            failures.start()
            first = checked.start
        else:
            first = _open_files(files, resuming, failures, source, checked, summary)
        started = True
        with _encoder(opts) as encode:  # before the bar: tqdm's monitor thread would rule out fork
            progress.start(summary.images, first - checked.start)
            _write(encode(source.tasks(first, checked.stop, summary)), sink, failures, summary, opts, progress)
        summary.bytes = sink.tell()
        sink.commit()
        failures.commit()
    except BaseException as e:
        sink.abort()  # PackFiles keeps its partial files for --resume; shards are removed
        if opts.shard_size:
            failures.abort()
        else:
            failures.close()
        if isinstance(e, OSError):
            hint = "" if opts.shard_size else "; the partial output is kept: rerun with --resume once this is fixed (or --overwrite to start again)"
            raise PackError(f"{e.filename or partial(out.rec)}: {e.strerror or e}{hint}") from None
        if started and not opts.shard_size and isinstance(e, Im2recError) and not isinstance(e, TooManyFailures):
            # the source failed midway (a damaged shard): what came before it is not lost
            e.args = (f"{e}; what was packed before it is kept in {partial(out.rec)} ({summary.packed:,} packed): rerun with --resume once this is fixed (or --overwrite to start again)",)
        raise
    if opts.shard_size:
        summary.manifest = manifest_path(out.rec)
        summary.shards = [s.rec for s in shards.shards]


# --------------------------------------------------------------------------- the pipeline


class Checked(NamedTuple):
    """What stage 1 found: the positions ``[start, stop)`` to pack (``stop`` None: to the end of a
    source whose length is not known), and the fingerprint a resumed run must share."""

    start: int
    stop: int | None
    fingerprint: dict


class Source(Protocol):
    """What ``pack_source`` packs: a ``.lst`` and its ROOT (``ListSource``), or the samples of
    another format (``exchange``). ``name`` and ``root`` are what the summary shows."""

    name: str
    root: str

    def checked(self, opts: PackOptions) -> contextlib.AbstractContextManager[Checked]:
        """Stage 1, before any image: check the whole source; the source stays open in the ``with``."""
        ...

    def tasks(self, start: int, stop: int | None, summary: PackSummary) -> Iterator[Task]:
        """The Tasks at positions ``[start, stop)``, in order, their ``data`` fetched where it is remote."""
        ...

    def indices(self, start: int, stop: int | None) -> Iterator[int]:
        """The ``Task.index`` of the positions ``[start, stop)`` (what ``--resume`` looks for)."""
        ...


class ListSource:
    """A ``.lst`` and the folder (or URL prefix) its paths are relative to."""

    def __init__(self, lst: str, root: str, opts: PackOptions):
        self.name, self.root, self.opts = lst, root, opts
        self._path = lst  # the local copy of a URL list, while checked() is open

    @contextmanager
    def checked(self, opts: PackOptions) -> Iterator[Checked]:
        lst, root = self.name, self.root
        with storage.StagedInput(lst, (), opts.storage_options) as listed:  # a URL list, read here many times
            try:
                check = check_list(listed.path, opts)
                start, stop = opts.part_slice(check.lines)
                check_root(listed.path, root, opts, start, stop)
            except (ListFormatError, PackError) as e:  # named by the list's URL, not its local copy
                raise (ListFormatError if isinstance(e, ListFormatError) else PackError)(listed.shown(str(e))) from None
            if check.extra_labels:
                log.warning(
                    "%s: %d line(s) have more than one label; only the first is packed (use --pack-label or --label-width N to keep them all)",
                    lst,
                    check.extra_labels,
                )
            self._path = listed.path
            try:
                yield Checked(start, stop, _fingerprint(lst, listed.path, root, opts))
            finally:
                self._path = lst

    def tasks(self, start: int, stop: int | None, summary: PackSummary) -> Iterator[Task]:
        tasks = iter_tasks(self._path, self.root, self.opts, start, stop)
        return _fetching(tasks, self.opts, summary) if storage.is_url(self.root) else tasks

    def indices(self, start: int, stop: int | None) -> Iterator[int]:
        return (entry.index for _, entry in iter_lst(self._path, start, stop))


def pack(
    lst: str,
    root: str,
    out_rec: str | None = None,
    options: PackOptions | None = None,
    progress: Progress | None = None,
) -> PackSummary:
    """Pack the images of a ``.lst`` into ``OUT.rec`` and ``OUT.idx``.

    One pipeline, top to bottom (``pack_source``): where the records go (``_destination``:
    local files, laid out as insightface's, sent to a store), the list checked (stage 1),
    its images encoded (stage 2) and written in order (stage 3) by one loop, then the
    destination finished (laid out, uploaded).

    Args:
        lst: the ``.lst`` file (or its URL).
        root: the folder the list's paths are relative to (or a URL prefix).
        out_rec: the output ``.rec`` (or a URL); default: the list's path with ``.rec``.
        options: see PackOptions.
        progress: told of the start and of every entry written.

    Returns:
        A PackSummary; failed images are listed in ``OUT.failed.tsv``.

    Raises:
        ListFormatError: the list is malformed (nothing is written).
        OptionError: ``num_parts`` without ``part_index`` (``distributed.pack_dask`` packs every part).
        PackError: a wrong ROOT, a write failed, or ``max_errors`` was passed. The
            partial files are kept for ``resume``.
        OutputExistsError: an output exists without ``overwrite``.
        KeyboardInterrupt: on Ctrl-C; workers are stopped, partial files kept.
    """
    opts = options or PackOptions()
    if opts.num_parts > 1 and opts.part_index is None:
        raise OptionError("--num-parts needs --part-index (one part) or --dask (all parts, then a merge)")
    if not storage.is_url(root) and not os.path.isdir(root):
        raise PackError(f"{root}: no such folder")
    return pack_source(ListSource(lst, root, opts), out_rec or recordio.sibling(lst, "rec"), opts, progress)


def pack_source(source: Source, out_rec: str, opts: PackOptions, progress: Progress | None = None) -> PackSummary:
    """The pipeline of ``pack`` for any ``Source``: the destination, stage 1 (``source.checked``),
    stages 2 and 3 (``_run``), the destination finished. See ``pack``."""
    progress = progress or Progress()
    started = time.perf_counter()
    dest = _destination(out_rec, opts)
    summary = PackSummary(source.name, source.root, dest.final, alpha_background=opts.image.alpha_background)
    if dest.complete():
        summary.already_complete = summary.complete = True  # an earlier run finished: nothing to do
        return summary
    dest.refuse()
    with source.checked(opts) as checked:
        summary.images = checked.stop - checked.start if checked.stop is not None else 0
        make_output_folder(dest.loop.rec)
        if dest.written():
            summary.already_complete = True  # the records were written by an earlier run; what follows them was not
        else:
            _run(source, checked, dest, opts, progress, summary)
    if checked.stop is None:  # a source of unknown length: as many as were read
        summary.images = summary.packed + summary.failed
    dest.finish(summary)
    _warn(summary)
    summary.complete = True
    summary.seconds = time.perf_counter() - started
    return summary


def _warn(summary: PackSummary) -> None:
    if summary.header_split:
        keys = ", ".join(map(str, summary.header_split[:10])) + (", ..." if len(summary.header_split) > 10 else "")
        log.warning(
            "%s: %d record(s) split inside their header, because an index or label equals the RecordIO magic "
            "0xCED7230A (keys %s): MXNet reads them, DALI's fn.readers.mxnet cannot; change those indices or labels "
            "if DALI will read this file",
            summary.outputs.rec,
            len(summary.header_split),
            keys,
        )
    if summary.transparent and summary.alpha_background is None:
        log.warning("%s", transparency_warning(summary))


# --------------------------------------------------------------------------- reporting


def _images(n: int) -> str:
    return plural(n, 'image')


def transparency_clause(s: PackSummary, hint: str = ALPHA_HINT) -> str:
    """The summary's words on images that had transparency ('' when none had); ``hint``
    says how to composite them instead of dropping their alpha."""
    if not s.transparent:
        return ""
    had = f"{_images(s.transparent)} had transparency" + (" (since the resume)" if s.resumed_from else "")
    if s.alpha_background is not None:
        return f"{had}, composited over {format_color(s.alpha_background)}"
    return f"{had}; alpha was dropped ({hint})"


def transparency_warning(s: PackSummary, names: int = 3) -> str:
    """The warning for images whose alpha was dropped, naming the first few."""
    shown = [path for _, path in s.transparent_examples[:names]]
    more = f" and {s.transparent - len(shown):,} more" if s.transparent > len(shown) else ""
    return (
        f"{s.outputs.rec}: {_images(s.transparent)} had transparency and {'were' if s.transparent != 1 else 'was'} "
        f"packed with the alpha channel dropped, as im2rec.py does (a picture kept in alpha packs as a blank "
        f"image): {', '.join(shown)}{more}; `im2rec pack --alpha-background COLOR` composites them over a colour instead"
    )


def summary_line(s: PackSummary, alpha_hint: str = ALPHA_HINT) -> str:
    """One line for humans: packed, failed by reason, bytes, seconds, images that had transparency."""
    if s.already_complete:
        return f"{s.outputs.rec} is already complete: nothing to resume"
    rate = (s.packed - s.resumed_packed) / s.seconds if s.seconds else 0.0
    failed = ", ".join(f"{n:,} {kind}" for kind, n in sorted(s.failures.items()))
    resumed = f" (resumed after {s.resumed_from:,})" if s.resumed_from else ""
    into = f"{len(s.shards)} shards listed in {s.manifest}" if s.manifest else s.outputs.rec
    if s.identities is not None:
        into += f", insightface layout with {s.identities:,} identities"
    return (
        f"packed {s.packed:,} of {s.images:,} images{resumed} into {into} ({s.bytes / 1e6:,.1f} MB) "
        f"in {s.seconds:.1f} s ({rate:,.0f} images/s); "
        + (f"{s.failed:,} failed ({failed}), listed in {s.outputs.failed}" if s.failed else "0 failed")
        + (f"; {s.retried:,} requests retried" if s.retried else "")
        + (f"; {transparency_clause(s, alpha_hint)}" if s.transparent else "")
    )


def _sha256(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _output_hashes(s: PackSummary) -> dict:
    files = {"failed": s.outputs.failed}
    if s.manifest:
        files["manifest"] = s.manifest
        files.update({f"shard {n}": rec for n, rec in enumerate(s.shards)})
        files.update({f"shard {n} idx": recordio.idx_path_of(rec) for n, rec in enumerate(s.shards)})
    else:
        files.update(rec=s.outputs.rec, idx=s.outputs.idx)
    return {
        name: {"path": path, "sha256": s.sha256.get(path)} if storage.is_url(path) else {"path": os.path.abspath(path), "sha256": _sha256(path)}
        for name, path in files.items()
    }


def write_stats(path: str, summary: PackSummary, options: PackOptions, argv: list[str] | None = None) -> dict:
    """Write the JSON audit record of a run (atomically) and return it.

    It holds the im2rec version, the command line, every option, the counts
    (packed, failed by reason), bytes, timings, and the sha256 of the ``.rec``
    and ``.idx`` written: enough to reproduce and audit the run.
    """
    s = summary
    stats = {
        "im2rec": __version__,
        "argv": argv,
        "list": s.lst if storage.is_url(s.lst) else os.path.abspath(s.lst),
        "root": s.root if storage.is_url(s.root) or not s.root else os.path.abspath(s.root),  # "" for an import
        "options": dataclasses.asdict(options),
        "complete": s.complete,
        "counts": {"images": s.images, "packed": s.packed, "failed": s.failed, "failed_by_reason": dict(sorted(s.failures.items()))},
        "resumed_from": s.resumed_from,
        "bytes": s.bytes,
        "seconds": round(s.seconds, 3),
        "images_per_second": round(s.packed / s.seconds, 1) if s.seconds else None,
        "transparency": {
            "images": s.transparent,  # packed images that had transparency
            "alpha": "dropped" if s.alpha_background is None else f"composited over {format_color(s.alpha_background)}",
            "counted_from": s.resumed_from,  # a resumed run counts the images after this list position only
            "examples": [{"index": index, "path": path} for index, path in s.transparent_examples],
            "examples_limit": TRANSPARENT_EXAMPLES,
        },
        "outputs": _output_hashes(s),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = partial(path)
    make_parents(path)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=1)
        f.write("\n")
    commit(tmp, path)
    return stats
