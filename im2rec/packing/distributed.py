"""Packing across machines with Dask: the list's parts as tasks, then one merge.

``pack_dask`` splits the list into ``num_parts`` contiguous parts, runs
``packing.pack`` on each as a task of a Dask cluster (each task encodes in its
own worker process), writes ``OUT-0000I-of-0000N.rec`` parts to the output
folder, which must be storage that every worker and this process share, and
merges them into ``OUT.rec`` (``shards.merge``) unless ``merge_parts=False``. The merged file is
byte-identical to a local ``pack`` of the whole list.

A failed image is reported as in a local pack (``OUT.failed.tsv``, counts by
reason). A part whose task fails (a write error, a lost worker) is named with
the command that reruns it alone (``--part-index``); the other parts are kept.

Dask is an optional extra: ``pip install 'im2rec[dask]'``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import storage
from ..errors import Im2recError, ListFormatError, OptionError, PackError
from ..faces import insightface_outputs
from ..fsutil import remove_quietly
from ..outputs import Outputs, make_output_folder, refuse_existing
from ..recordio import sibling
from .options import PackOptions
from .pipeline import check_list, pack
from .report import PackSummary
from .shards import layout_path, merge, part_path

__all__ = ["DaskSummary", "pack_dask", "pack_part", "summary_line"]


def pack_part(lst: str, root: str, out_rec: str, options: PackOptions, part_index: int) -> PackSummary:
    """One Dask task: pack part ``part_index`` in this worker process."""
    opts = dataclasses.replace(options, part_index=part_index, in_process=True)
    return pack(lst, root, out_rec, opts)


@dataclass
class DaskSummary:
    """What ``pack_dask`` did: the parts' summaries, and the merged output."""

    rec: str
    num_parts: int
    parts: dict[int, PackSummary] = field(default_factory=dict)
    failed_parts: dict[int, str] = field(default_factory=dict)  # part -> error
    merged: bool = False
    seconds: float = 0.0
    workers: int = 0
    identities: int | None = None  # insightface layout: identity records written

    @property
    def packed(self) -> int:
        return sum(s.packed for s in self.parts.values())

    @property
    def images(self) -> int:
        return sum(s.images for s in self.parts.values())

    @property
    def failures(self) -> Counter:
        total: Counter = Counter()
        for s in self.parts.values():
            total.update(s.failures)
        return total

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.parts.values())


def summary_line(result: DaskSummary) -> str:
    """One line for humans, as ``report.summary_line`` says a single run: packed, where, the tasks, failed by reason."""
    where = result.rec if result.merged else f"{result.num_parts} parts next to {result.rec}"
    if result.identities is not None:
        where += f", insightface layout with {result.identities:,} identities"
    failed = ", ".join(f"{n:,} {kind}" for kind, n in sorted(result.failures.items()))
    return (
        f"packed {result.packed:,} of {result.images:,} images into {where} ({result.bytes / 1e6:,.1f} MB) "
        f"with {result.num_parts} Dask tasks on {result.workers} workers in {result.seconds:.1f} s; "
        + (f"{result.failed:,} failed ({failed})" if result.failed else "0 failed")
    )


def _client(address: str, workers: int) -> Any:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise PackError("--dask needs Dask: pip install distributed (im2rec's dask extra)") from None
    if address == "local":
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
        return Client(cluster)
    try:
        return Client(address, timeout="30s")
    except (OSError, TimeoutError) as e:
        raise PackError(f"cannot reach the Dask scheduler at {address}: {e}") from None


def _check(lst: str, out_rec: str, options: PackOptions) -> int:
    """Everything refused before a task runs: the options, existing outputs, the list
    (checked here through a copy when it is a URL; the tasks read the URL themselves).
    Returns the list's length."""
    if options.part_index is not None:
        raise OptionError("--dask runs every part: leave out --part-index")
    if options.shard_size is not None:
        raise OptionError("--shard-size is written by single runs, not yet by --dask")
    remote = storage.is_url(out_rec)
    if remote and options.layout == "insightface":
        raise PackError("--dask --layout insightface with a URL output is not supported yet: write it locally, then upload")
    if not options.resume:
        finals = dict.fromkeys([*Outputs.for_rec(out_rec).finals, *(insightface_outputs(out_rec) if options.layout == "insightface" else [])])
        refuse_existing(finals, options.overwrite, lambda path: storage.there(path, options.storage_options))
    with storage.StagedInput(lst, (), options.storage_options) as listed:
        try:
            lines = check_list(listed.path, options).lines
        except ListFormatError as e:  # named by the list's URL, not its local copy
            raise ListFormatError(listed.shown(str(e))) from None
    if not remote:
        make_output_folder(out_rec)
    return lines


def _run_parts(client: Any, lst: str, root: str, options: PackOptions, summary: DaskSummary, on_part: Callable[[int, PackSummary | None, str | None], None] | None) -> None:
    """One task per part; each part's summary, or its error, into ``summary`` as it ends."""
    from dask.distributed import as_completed

    n, out_rec = summary.num_parts, summary.rec
    futures = {client.submit(pack_part, lst, root, out_rec, options, i, pure=False, key=f"im2rec-part-{i}-of-{n}"): i for i in range(n)}
    for future in as_completed(futures):
        i = futures[future]
        try:
            part = future.result()
        except Exception as e:  # the task's own error, raised again here
            summary.failed_parts[i] = f"{type(e).__name__}: {e}" if not isinstance(e, Im2recError) else str(e)
            if on_part:
                on_part(i, None, summary.failed_parts[i])
            continue
        summary.parts[i] = part
        if on_part:
            on_part(i, part, None)


def _merge(out_rec: str, n: int, options: PackOptions) -> int | None:
    """Join the ``n`` parts as ``im2rec merge`` does, then delete them; returns the identities
    of an insightface layout. The outputs were checked before the run; in S3 the parts are
    joined by server-side copies; the parts of an insightface pack are laid out as one."""
    remote = storage.is_url(out_rec)
    parts = [part_path(out_rec, i, n) for i in range(n)]
    merged = merge(out_rec, parts, options.layout, overwrite=options.overwrite or remote or options.layout == "insightface", storage_options=options.storage_options)
    leftovers = [path for p in parts for path in (*Outputs.for_rec(p).finals, layout_path(p))]
    if remote:
        storage.remove(leftovers, options.storage_options)
    else:
        for path in leftovers:
            remove_quietly(path)
    return merged.identities


def rerun_command(lst: str, root: str, out_rec: str, part_index: int, num_parts: int) -> str:
    return f"im2rec pack {lst} {root} {out_rec} --num-parts {num_parts} --part-index {part_index} [same options]"


def pack_dask(
    lst: str,
    root: str,
    out_rec: str | None,
    options: PackOptions,
    address: str = "local",
    num_parts: int | None = None,
    merge_parts: bool = True,
    on_part: Callable[[int, PackSummary | None, str | None], None] | None = None,
) -> DaskSummary:
    """Pack a list as parts on a Dask cluster, then merge them.

    Args:
        lst, root, out_rec, options: as for ``packing.pack``; ``options.workers`` is the
            number of worker processes of a ``"local"`` cluster.
        address: a scheduler address such as ``tcp://scheduler:8786``, or ``"local"``
            to start a ``LocalCluster`` on this machine.
        num_parts: how many parts (tasks); default: 4 per Dask worker, at most one per
            100 images.
        merge_parts: merge the parts into ``out_rec`` (``shards.merge``, as ``im2rec merge``) and
            delete them, when all succeeded.
        on_part: called as each part ends, with its index and summary, or its error.

    Raises:
        OptionError: ``options`` name one part, or shards.
        PackError: Dask is missing, the scheduler is unreachable, or a part failed
            (the message names the parts and how to rerun them).
        ListFormatError: the list is malformed (checked here, before any task runs).
    """
    started = time.perf_counter()
    out_rec = out_rec or sibling(lst, "rec")
    lines = _check(lst, out_rec, options)

    def absolute(path: str) -> str:
        return path if storage.is_url(path) else os.path.abspath(path)

    lst, root, out_rec = absolute(lst), absolute(root), absolute(out_rec)
    client = _client(address, options.workers)
    try:
        workers = len(client.scheduler_info().get("workers", {})) or 1
        n = num_parts or max(1, min(4 * workers, lines // 100 or 1))
        options = dataclasses.replace(options, num_parts=n)  # each task's part_index is checked against it
        summary = DaskSummary(out_rec, n, workers=workers)
        _run_parts(client, lst, root, options, summary, on_part)
    finally:
        cluster = getattr(client, "cluster", None)
        client.close()
        if cluster is not None and address == "local":
            cluster.close()
    if summary.failed_parts:
        lines_ = [f"part {i}: {err}; rerun it alone with: {rerun_command(lst, root, out_rec, i, n)}" for i, err in sorted(summary.failed_parts.items())]
        raise PackError(f"{len(summary.failed_parts)} of {n} parts failed; the others are kept\n" + "\n".join(lines_))
    if merge_parts:
        summary.identities = _merge(out_rec, n, options)
        summary.merged = True
    summary.seconds = time.perf_counter() - started
    return summary
