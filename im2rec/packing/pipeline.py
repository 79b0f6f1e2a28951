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
import hashlib
import itertools
import json
import logging
import os
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from .. import recordio, storage
from ..errors import Im2recError, ImageError, ListFormatError, OptionError, PackError, TooManyFailures
from ..fsutil import remove_quietly
from ..image import ImageOptions, init_worker, transform_image
from ..lst import format_label, iter_lst
from ..outputs import FailureList, PackFiles, RecordSink, kind_of, make_output_folder, partial
from ..text import plural
from .destination import Plan, finish, plan, shard_outputs
from .options import PackOptions
from .pool import OrderedPool
from .report import TRANSPARENT_EXAMPLES, PackSummary, transparency_warning
from .shards import ShardedWriter, manifest_path

__all__ = ["Checked", "ListSource", "Progress", "Result", "Source", "Task", "check_list", "encode_record", "iter_tasks", "pack", "pack_source"]

log = logging.getLogger(__name__)




class Task(NamedTuple):
    """One image to pack: its key, what goes in its header, where its bytes are."""

    index: int  # type: ignore[assignment]  # the .lst word for it; tuple.index() is never called on a Task
    label: float | tuple[float, ...]
    path: str  # as written in the .lst
    file: str  # root joined with path
    data: bytes | None = None  # its bytes, fetched already (a URL ROOT, an import's sample); None: read ``file``
    failed: tuple[str, str] | None = None  # (kind, reason): it failed before encoding (its fetch, an import's sample)
    header_id: int | None = None  # the IRHeader's id; None: ``index`` (im2rec.py's)
    id2: int = 0


class Result(NamedTuple):
    """What became of a Task: its record, framed for the ``.rec``, or the kind and reason of its failure."""

    task: Task
    framed: bytes | None
    kind: str = ""  # failure category, see ImageError
    reason: str = ""
    transparent: bool = False  # the image had transparency (see image.Decoded); the record bytes do not say it


class Progress:
    """Receives progress from ``pack``; the CLI draws a bar with it. The default does nothing."""

    def start(self, total: int, done: int) -> None:
        """The run starts: ``total`` list entries, ``done`` of them already handled (resume)."""

    def writing(self, partial: str) -> None:
        """The records go to ``partial`` as they are written (what a stopped run keeps for ``--resume``)."""

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
    for _, entry in iter_lst(lst, start, stop):
        yield Task(entry.index, _label_of(entry.labels, opts), entry.path, join(root, entry.path))


def _fetching(tasks: Iterable[Task], opts: PackOptions, summary: PackSummary) -> Iterator[Task]:
    """Tasks with their images' bytes, fetched from a URL ROOT concurrently ahead of the encoders."""
    stats = storage.FetchStats()
    try:
        for task, data in storage.fetch_in_order(tasks, lambda t: t.file, opts.storage_options, stats=stats):
            if isinstance(data, storage.StorageError):
                kind = "missing" if "no such object" in str(data) else "unreadable"
                yield task._replace(failed=(kind, _reason_of(data, task.file)))
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
    """Read, transform and pack one image. Never raises: a failure is a Result with a reason.
    The Result's task has no ``data``: fetched bytes go to a worker, and not back again."""
    data, task = task.data, task._replace(data=None)
    try:
        if task.failed is not None:  # its fetch from a URL ROOT failed, or an import's sample
            return Result(task, None, *task.failed)
        out = transform_image(data if data is not None else _read_file(task.file), opts, task.index)
        payload = recordio.pack(recordio.IRHeader(0, task.label, task.index if task.header_id is None else task.header_id, task.id2), out.data)
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


def _run(source: Source, checked: Checked, dest: Plan, opts: PackOptions, progress: Progress, summary: PackSummary) -> None:
    """Stages 2 and 3: encode the source's images and write them, through one loop, into the
    plan's sink: pack's resumable single file, or size-limited shards."""
    out = dest.loop
    sink: RecordSink
    if opts.shard_size:  # local files only: the other plans refuse shards
        for path in shard_outputs(out):  # an earlier run's (--overwrite)
            remove_quietly(path)
        sink = shards = ShardedWriter(out.rec, opts.shard_size)
    else:
        resuming = PackFiles.claim(out, checked.fingerprint, opts.overwrite, opts.resume)
        progress.writing(partial(out.rec))
        sink = files = PackFiles(out, dest.stream_to, opts.storage_options)
    try:
        failures = FailureList(out.failed)
    except OSError as e:  # the first file a run writes: a folder it cannot write in
        raise PackError(f"cannot write {out.failed}: {e.strerror or e}") from None
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
    finally:
        if not opts.shard_size:
            summary.retried += files.retried
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

    One pipeline, top to bottom (``pack_source``): where the records go (``destination.plan``:
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
    """The pipeline of ``pack`` for any ``Source``: the plan of where the records go, stage 1
    (``source.checked``), stages 2 and 3 (``_run``), the plan finished. See ``pack``."""
    progress = progress or Progress()
    started = time.perf_counter()
    dest = plan(out_rec, opts)  # names, what an earlier run left, refusals: before any work
    summary = PackSummary(source.name, source.root, dest.final, alpha_background=opts.image.alpha_background)
    if dest.earlier == "finished":
        summary.already_complete = summary.complete = True  # nothing to do
        return summary
    with source.checked(opts) as checked:
        summary.images = checked.stop - checked.start if checked.stop is not None else 0
        make_output_folder(dest.loop.rec)
        if dest.earlier == "nothing":
            _run(source, checked, dest, opts, progress, summary)
    if checked.stop is None:  # a source of unknown length: as many as were read
        summary.images = summary.packed + summary.failed
    finish(dest, opts, summary)
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
