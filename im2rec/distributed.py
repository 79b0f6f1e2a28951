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

from . import storage
from .errors import Im2recError, OptionError, PackError
from .faces import insightface_outputs
from .fsutil import make_parents, remove_quietly
from .outputs import Outputs, refuse_existing
from .packing import PackOptions, PackSummary, check_list, pack
from .recordio import sibling
from .shards import layout_path, merge, part_path

__all__ = ["DaskSummary", "pack_dask", "pack_part"]


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
    def bytes(self) -> int:
        return sum(s.bytes for s in self.parts.values())


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
    if options.part_index is not None:
        raise OptionError("--dask runs every part: leave out --part-index")
    if options.shard_size is not None:
        raise OptionError("--shard-size is written by single runs, not yet by --dask")
    started = time.perf_counter()
    out_rec = out_rec or sibling(lst, "rec")
    remote = storage.is_url(out_rec)
    if remote and options.layout == "insightface":
        raise PackError("--dask --layout insightface with a URL output is not supported yet: write it locally, then upload")
    if not options.resume:
        finals = dict.fromkeys([*Outputs.for_rec(out_rec).finals, *(insightface_outputs(out_rec) if options.layout == "insightface" else [])])
        refuse_existing(finals, options.overwrite, lambda path: storage.there(path, options.storage_options))
    if storage.is_url(lst):  # checked here through a copy; the tasks read the URL themselves
        with storage.StagedInput(lst, (), options.storage_options) as copy:
            lines = check_list(copy.path, options).lines
    else:
        lines = check_list(lst, options).lines
    if not remote:
        try:
            make_parents(out_rec)
        except OSError as e:
            raise PackError(f"cannot create the output folder {e.filename}: {e.strerror}") from None

    def absolute(path: str) -> str:
        return path if storage.is_url(path) else os.path.abspath(path)

    lst, root, out_rec = absolute(lst), absolute(root), absolute(out_rec)
    client = _client(address, options.workers)
    try:
        workers = len(client.scheduler_info().get("workers", {})) or 1
        n = num_parts or max(1, min(4 * workers, lines // 100 or 1))
        options = dataclasses.replace(options, num_parts=n)  # each task's part_index is checked against it
        summary = DaskSummary(out_rec, n, workers=workers)
        futures = {client.submit(pack_part, lst, root, out_rec, options, i, pure=False, key=f"im2rec-part-{i}-of-{n}"): i for i in range(n)}
        from dask.distributed import as_completed

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
    finally:
        cluster = getattr(client, "cluster", None)
        client.close()
        if cluster is not None and address == "local":
            cluster.close()
    if summary.failed_parts:
        lines_ = [f"part {i}: {err}; rerun it alone with: {rerun_command(lst, root, out_rec, i, n)}" for i, err in sorted(summary.failed_parts.items())]
        raise PackError(f"{len(summary.failed_parts)} of {n} parts failed; the others are kept\n" + "\n".join(lines_))
    if merge_parts:
        parts = [part_path(out_rec, i, n) for i in range(n)]
        # The outputs were checked before the run (S3: joined by server-side copies). Parts of
        # an insightface pack hold the images plain: merge lays the whole out.
        merged = merge(out_rec, parts, options.layout, overwrite=options.overwrite or remote or options.layout == "insightface", storage_options=options.storage_options)
        summary.identities = merged.identities
        leftovers = [path for p in parts for path in (*Outputs.for_rec(p).finals, layout_path(p))]
        if remote:
            storage.remove(leftovers, options.storage_options)
        else:
            for path in leftovers:
                remove_quietly(path)
        summary.merged = True
    summary.seconds = time.perf_counter() - started
    return summary
