"""Where a pack's records go, decided once before any work: a ``Plan``.

``plan(out_rec, opts)`` names the files the write loop writes (``loop``) and those the
user gets (``final``), says what an earlier run left (``earlier``: nothing to use, its
records, or everything), and refuses outputs that exist, all before the list is read.
``finish(plan, opts, summary)`` does what follows the loop, in this order: a part of an
insightface pack gets its ``.layout``; a whole output that got no record leaves only its
failure list; ``--layout insightface`` lays the images out as ``OUT.rec``; a URL output is
uploaded, the index last.

The plans, by what ``pack`` is given:

* a local ``OUT.rec``, a part (``OUT-0000I-of-0000N.rec``) or shards: the loop writes the final files;
* ``--layout insightface``: the loop writes the images plain to ``OUT.images.rec`` (resumable
  as any pack), laid out at the end;
* a URL: either of those in a local staging folder (``storage.staging_dir``, kept for
  ``--resume``), uploaded at the end; on S3 a plain ``.rec`` is streamed to the store while
  it is written (``stream_to``).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from dataclasses import dataclass
from typing import Literal

from .. import faces, recordio, storage
from ..errors import OutputExistsError, PackError
from ..fsutil import atomic_open, remove_quietly
from ..outputs import PARTIAL_SUFFIX, Outputs, partial, refuse_existing
from .options import PackOptions
from .report import PackSummary, nothing_packed, sha256_of
from .shards import existing_shard_outputs, layout_path, part_path

__all__ = ["Earlier", "Plan", "finish", "plan"]

#: What an earlier run (``--resume``) left: nothing to use; its records, with what follows
#: them (laying out, uploading) still to do; or everything (nothing to do).
Earlier = Literal["nothing", "records", "finished"]


@dataclass(frozen=True)
class Plan:
    """Where a pack's records go (see the module's docstring)."""

    loop: Outputs  # the local files the write loop writes
    final: Outputs  # what the user gets: local files, or URLs
    earlier: Earlier
    lay_out_to: str | None = None  # --layout insightface: the OUT.rec the loop's images are laid out as
    staged: Outputs | None = None  # a URL output: the local files uploaded to ``final``'s URLs
    stream_to: str | None = None  # S3: the URL the loop's .rec is sent to as it grows


def plan(out_rec: str, opts: PackOptions) -> Plan:
    """The plan of a pack to ``out_rec`` (a path or a URL).

    Raises:
        OutputExistsError: an output exists, without ``overwrite`` (or ``resume``).
        PackError: an earlier run's files are in the way, or the plan cannot be (shards to a URL).
        StorageError: ``out_rec``'s bucket is not there.
    """
    if out_rec.endswith(("/", os.sep)):
        raise PackError(f"{out_rec}: a folder: name the .rec file to write")
    if storage.is_url(out_rec):
        return _remote(out_rec, opts)
    local = _local(out_rec, opts)
    if local.earlier != "finished":
        _refuse_local(local, opts)
    return local


def _finished(out: Outputs, opts: PackOptions) -> bool:
    """``--resume`` finds the outputs of a run that finished."""
    return opts.resume and not opts.overwrite and all(os.path.exists(p) for p in out.required) and not os.path.exists(out.state)


def _local(out_rec: str, opts: PackOptions) -> Plan:
    if opts.layout == "insightface" and opts.part_index is None:
        images = Outputs.for_rec(recordio.sibling(out_rec, "images"))
        laid_out = opts.resume and all(os.path.exists(p) for p in faces.insightface_outputs(out_rec))
        if laid_out and not os.path.exists(images.rec) and not os.path.exists(partial(images.rec)):
            earlier: Earlier = "finished"
        else:
            earlier = "records" if _finished(images, opts) else "nothing"
        return Plan(images, Outputs.for_rec(out_rec), earlier, lay_out_to=out_rec)
    out = Outputs.for_rec(part_path(out_rec, opts.part_index, opts.num_parts) if opts.part_index is not None else out_rec)
    return Plan(out, out, "finished" if _finished(out, opts) else "nothing")


def shard_outputs(out: Outputs) -> list[str]:
    """What a ``--shard-size`` pack to ``out`` left there (its shards, manifest, failure list)."""
    return existing_shard_outputs(out.rec) + [p for p in (out.failed, partial(out.failed)) if os.path.exists(p)]


def _refuse_local(p: Plan, opts: PackOptions) -> None:
    if p.lay_out_to is not None:
        if not opts.resume:
            refuse_existing([*faces.insightface_outputs(p.lay_out_to), p.final.failed], opts.overwrite)
    elif opts.shard_size:
        existing = shard_outputs(p.loop)
        unfinished = [path for path in existing if path.endswith(PARTIAL_SUFFIX)]
        if unfinished and not opts.overwrite:
            raise PackError(f"{unfinished[0]} is left from an interrupted --shard-size run, which cannot be resumed: pass --overwrite to start again")
        refuse_existing(existing, opts.overwrite)


def _remote(out_url: str, opts: PackOptions) -> Plan:
    if opts.shard_size is not None:
        raise PackError(f"{out_url}: --shard-size writes local shards only (for now): pack them locally, then copy")
    storage.check_bucket(out_url, opts.storage_options)
    local = _local(os.path.join(storage.staging_dir(out_url), posixpath.basename(out_url)), opts)
    staged, loop = local.final, local.loop
    final = Outputs.for_rec(storage.join(out_url.rsplit("/", 1)[0], os.path.basename(staged.rec)))
    there = [url for url in (final.rec, final.idx) if storage.exists(url, opts.storage_options)]
    staged_any = any(os.path.exists(path) for path in (*loop.partials, *loop.finals, *staged.finals))
    if opts.resume and len(there) == 2 and not staged_any:
        earlier: Earlier = "finished"  # uploaded by an earlier run
    else:
        earlier = "nothing" if local.earlier == "nothing" else "records"
    stream_to = final.rec if opts.layout == "plain" and storage.Streamer.supported(out_url, opts.storage_options) else None
    remote = Plan(loop, final, earlier, lay_out_to=local.lay_out_to, staged=staged, stream_to=stream_to)
    if earlier != "finished":
        if there and not opts.overwrite and not opts.resume:
            raise OutputExistsError(there[0])
        if not opts.overwrite and not opts.resume:
            if all(os.path.exists(path) for path in staged.required):
                raise PackError(
                    f"{final.rec}: an earlier run packed it but did not finish uploading it (its files are in "
                    f"{os.path.dirname(staged.rec)}): pass --resume to upload them, or --overwrite to start again"
                )
            if any(os.path.exists(path) for path in (*loop.partials, loop.state)):
                raise PackError(
                    f"{final.rec}: an interrupted run left its finished part in {os.path.dirname(staged.rec)}: "
                    f"pass --resume to continue it, or --overwrite to start again"
                )
        _refuse_local(local, opts)
    return remote


def finish(p: Plan, opts: PackOptions, summary: PackSummary) -> None:
    """After the loop (or in its stead, when an earlier run wrote the records): the part's
    ``.layout``, no empty output, the insightface layout, the upload. Sets
    ``summary.already_complete``: the earlier run's records, and nothing new was laid out."""
    lays_out = p.lay_out_to is not None and os.path.exists(p.loop.rec)  # else laid out by an earlier run
    summary.already_complete = p.earlier == "records" and not lays_out
    if p.lay_out_to is None:
        if opts.part_index is not None and opts.layout == "insightface":  # the layout travels with the part, to merge
            with atomic_open(layout_path(p.loop.rec), "w", encoding="ascii", newline="\n") as f:
                f.write("insightface\n")
        if nothing_packed(summary, opts):  # no empty .rec and .idx: the failure list says why
            remove_quietly(p.loop.rec)
            remove_quietly(p.loop.idx)
    elif lays_out:
        laid = faces.lay_out(p.loop.rec, p.lay_out_to)
        if laid.images:
            summary.bytes, summary.identities = laid.bytes, laid.identities
    if p.staged is not None:
        _upload(p, p.staged, opts, summary)


def _upload(p: Plan, staged: Outputs, opts: PackOptions, summary: PackSummary) -> None:
    """Each staged output under its URL, appearing only complete (a multipart upload, aborted
    on failure), the index last; then the staging folder is removed."""
    streamed = p.stream_to is not None and not summary.already_complete  # the .rec is in the store already
    if streamed and nothing_packed(summary, opts):
        storage.remove([p.final.rec], opts.storage_options)  # an empty .rec, streamed as it grew
    files = [staged.failed] if streamed else [staged.rec, staged.failed]
    if opts.layout == "insightface":
        files.append(recordio.sibling(staged.rec, "property") if opts.part_index is None else layout_path(staged.rec))
    files.append(staged.idx)  # readers look for the .idx: it appears once the rest is there
    folder = p.final.rec.rsplit("/", 1)[0]
    url_of = {path: storage.join(folder, os.path.basename(path)) for path in files}
    if summary.already_complete and not os.path.exists(staged.idx):
        return
    for path in [staged.rec, *files]:  # for --stats: what was uploaded (hashed here, where it is local)
        digest = sha256_of(path)
        if digest is not None:
            summary.sha256[url_of.get(path, p.final.rec)] = digest
    for path in files:
        if os.path.exists(path):
            storage.upload(path, url_of[path], opts.storage_options)
        elif path == staged.failed and storage.exists(url_of[path], opts.storage_options):
            storage.remove([url_of[path]], opts.storage_options)  # an earlier run's: nothing failed now
    for path in [*files, staged.rec]:
        remove_quietly(path)
    with contextlib.suppress(OSError):  # the staging folder, once empty
        os.rmdir(os.path.dirname(staged.rec))
