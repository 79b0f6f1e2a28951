"""``im2rec pack``: a ``.lst`` and an image folder to ``OUT.rec`` + ``OUT.idx``.

The pipeline is three stages joined in ``pack()``:

1. ``check_list`` reads the whole ``.lst`` once, before any image is touched: a
   malformed line, a duplicate index or a wrong label count stops the run with
   ``file:line`` and nothing is written.
2. ``OrderedPool`` runs ``encode_record`` in worker processes: read the file,
   ``image.transform`` it, ``recordio.pack`` it with its IRHeader. A bad image
   comes back as a Result with a reason, never as an exception.
3. The writer, in this process, takes results in list order and writes the
   records and their ``.idx`` lines through one ``RecordWriter`` and the failures
   to ``OUT.failed.tsv``, all under temporary names that are renamed into place
   only when the run completes.

Each record's header id and ``.idx`` key is the list index, id2 is 0, and records
follow the list order, as MXNet's im2rec.py writes them: identical options give
identical bytes whatever the number of workers.
"""

from __future__ import annotations

import logging
import os
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterator, NamedTuple, Optional, Tuple, Union

import numpy as np

from . import recordio
from .errors import ImageError, ListFormatError, PackError
from .fsutil import commit, remove_quietly
from .image import ImageOptions, init_worker, transform
from .lst import iter_lst
from .pool import OrderedPool

__all__ = ["PackOptions", "PackSummary", "Task", "Result", "pack", "check_list", "encode_record", "output_paths"]

log = logging.getLogger(__name__)


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
        overwrite: replace existing outputs.
    """

    image: ImageOptions = field(default_factory=ImageOptions)
    pack_label: bool = False
    label_width: Optional[int] = None
    workers: int = field(default_factory=default_workers)
    overwrite: bool = False

    def __post_init__(self) -> None:
        if self.label_width is not None and self.label_width < 1:
            raise ValueError(f"label_width must be at least 1, got {self.label_width}")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")


class Task(NamedTuple):
    """One image to pack: where it is in the list, and what goes in its header."""

    seq: int
    index: int
    label: Union[float, Tuple[float, ...]]
    path: str  # as written in the .lst
    file: str  # root joined with path


class Result(NamedTuple):
    """What a worker made of a Task: the record payload, or why there is none."""

    task: Task
    payload: Optional[bytes]
    kind: str = ""  # failure category, see ImageError
    reason: str = ""


@dataclass
class PackSummary:
    """What a pack run did."""

    rec: str
    idx: str
    failed_tsv: str
    images: int = 0  # lines in the list
    packed: int = 0
    failures: Counter = field(default_factory=Counter)  # kind -> count
    bytes: int = 0
    seconds: float = 0.0

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def output_paths(out_rec: str) -> Tuple[str, str, str]:
    """(rec, idx, failed.tsv) for an output ``.rec`` path: same folder and stem."""
    stem = os.path.splitext(out_rec)[0]
    return out_rec, stem + ".idx", stem + ".failed.tsv"


# --------------------------------------------------------------------------- stage 1: the list


@dataclass
class ListCheck:
    lines: int
    extra_labels: int  # lines whose labels beyond the first will not be stored


def _label_of(labels: Tuple[float, ...], opts: PackOptions) -> Union[float, Tuple[float, ...]]:
    if opts.label_width is not None:
        return labels if opts.label_width > 1 else labels[0]
    if opts.pack_label and len(labels) > 1:
        return labels
    return labels[0]


def check_list(lst: str, opts: PackOptions) -> ListCheck:
    """Read the whole list once: syntax, unique indices, label counts.

    Raises:
        ListFormatError: naming ``file:line``; no image has been read yet.
    """
    indices = array("Q")
    lines = array("Q")
    extra = 0
    for lineno, entry in iter_lst(lst):
        n = len(entry.labels)
        if opts.label_width is not None and n != opts.label_width:
            raise ListFormatError(
                f"{lst}:{lineno}: expected {opts.label_width} label{'s' if opts.label_width > 1 else ''} "
                f"(--label-width {opts.label_width}), got {n}"
            )
        if n > 1 and opts.label_width is None and not opts.pack_label:
            extra += 1
        indices.append(entry.index)
        lines.append(lineno)
    idx = np.frombuffer(indices, dtype=np.uint64)
    if idx.size:
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


def iter_tasks(lst: str, root: str, opts: PackOptions) -> Iterator[Task]:
    """The list's entries as Tasks, read lazily (the list was checked by check_list)."""
    for seq, (_, entry) in enumerate(iter_lst(lst)):
        yield Task(seq, entry.index, _label_of(entry.labels, opts), entry.path, os.path.join(root, entry.path))


# --------------------------------------------------------------------------- stage 2: the workers


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
        body = transform(_read_file(task.file), opts, task.index)
        payload = recordio.pack(recordio.IRHeader(0, task.label, task.index, 0), body)
        if len(payload) > recordio.MAX_RECORD_SIZE:
            return Result(task, None, "too-large", f"record of {len(payload):,} bytes is above RecordIO's 2**29 limit")
        return Result(task, payload)
    except ImageError as e:
        return Result(task, None, e.kind, str(e))
    except MemoryError:
        return Result(task, None, "too-large", "out of memory while processing it")
    except Exception as e:  # a bug or an OpenCV surprise: keep going, but say what happened
        return Result(task, None, "error", f"unexpected {type(e).__name__}: {e}")


def _crashed(task: Task, reason: str) -> Result:
    return Result(task, None, "crashed", reason)


def _weigh(result: Result) -> int:
    return len(result.payload) if result.payload is not None else 0


# --------------------------------------------------------------------------- stage 3: the writer


def _tsv_field(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ").replace("\r", " ")


ProgressFn = Callable[[Result], None]


def pack(
    lst: str,
    root: str,
    out_rec: Optional[str] = None,
    options: Optional[PackOptions] = None,
    progress: Optional[ProgressFn] = None,
) -> PackSummary:
    """Pack the images of a ``.lst`` into ``OUT.rec`` and ``OUT.idx``.

    Args:
        lst: the ``.lst`` file.
        root: the folder the list's paths are relative to.
        out_rec: the output ``.rec``; default: the list's path with ``.rec``.
        options: see PackOptions.
        progress: called with every Result, in list order, as it is written.

    Returns:
        A PackSummary; failed images are listed in ``OUT.failed.tsv``.

    Raises:
        ListFormatError: the list is malformed (nothing is written).
        PackError: an output exists (without ``overwrite``) or cannot be written.
    """
    opts = options or PackOptions()
    started = time.perf_counter()
    rec, idx, failed_tsv = output_paths(out_rec or os.path.splitext(lst)[0] + ".rec")
    summary = PackSummary(rec, idx, failed_tsv)
    if not os.path.isdir(root):
        raise PackError(f"{root}: no such folder")
    out_dir = os.path.dirname(os.path.abspath(rec))
    if not os.path.isdir(out_dir):
        raise PackError(f"{out_dir}: the output folder does not exist")
    if not opts.overwrite:
        for path in (rec, idx, failed_tsv):
            if os.path.exists(path):
                raise PackError(f"{path} exists: pass --overwrite to replace it")
    check = check_list(lst, opts)
    summary.images = check.lines
    if check.extra_labels:
        log.warning(
            "%s: %d line(s) have more than one label; only the first is packed "
            "(use --pack-label or --label-width N to keep them all)",
            lst,
            check.extra_labels,
        )

    finals = (rec, idx, failed_tsv)
    partials = tuple(p + ".partial" for p in finals)
    try:
        with recordio.RecordWriter(partials[0], partials[1]) as writer, open(
            partials[2], "w", encoding="utf-8", newline="\n"
        ) as failures, OrderedPool(
            encode_record, opts.image, opts.workers, _crashed, weigh=_weigh, initializer=init_worker
        ) as pool:
            failures.write("index\tpath\treason\n")
            for result in pool.map(iter_tasks(lst, root, opts)):
                task = result.task
                if result.payload is not None:
                    writer.write_idx(task.index, result.payload)
                    summary.packed += 1
                else:
                    failures.write(f"{task.index}\t{_tsv_field(task.path)}\t{_tsv_field(result.reason)}\n")
                    summary.failures[result.kind] += 1
                if progress is not None:
                    progress(result)
            summary.bytes = writer.tell()
        for tmp, final in zip(partials, finals):
            commit(tmp, final)
    except OSError as e:
        for tmp in partials:
            remove_quietly(tmp)
        name = e.filename or rec
        raise PackError(f"cannot write {name}: {e.strerror or e}") from None
    except BaseException:
        for tmp in partials:
            remove_quietly(tmp)
        raise
    summary.seconds = time.perf_counter() - started
    return summary


def summary_line(s: PackSummary) -> str:
    """One line for humans: packed, failed by reason, bytes, seconds."""
    rate = s.packed / s.seconds if s.seconds else 0.0
    failed = ", ".join(f"{n} {kind}" for kind, n in sorted(s.failures.items()))
    return (
        f"packed {s.packed:,} of {s.images:,} images into {s.rec} ({s.bytes / 1e6:,.1f} MB) "
        f"in {s.seconds:.1f} s ({rate:,.0f} images/s); "
        + (f"{s.failed:,} failed ({failed}), see {s.failed_tsv}" if s.failed else "0 failed")
    )
