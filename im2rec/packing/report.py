"""What a pack run did, said: ``PackSummary``, the one summary line of every path
(``summary_line``), the transparency warning, and ``--stats``' JSON audit record (``write_stats``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field

from .. import __version__, recordio, storage
from ..fsutil import commit, make_parents
from ..image import format_color
from ..outputs import Outputs, partial
from ..text import plural
from .options import PackOptions

__all__ = ["ALPHA_HINT", "TRANSPARENT_EXAMPLES", "PackSummary", "nothing_packed", "sha256_of", "summary_line", "transparency_clause", "transparency_warning", "write_stats"]

TRANSPARENT_EXAMPLES = 100  # images with transparency kept by name for the warning and --stats (the count is exact)
ALPHA_HINT = "pass --alpha-background COLOR to composite them"


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
    retried: int = 0  # requests to a store retried after a transient failure: the images fetched, the .rec streamed
    identities: int | None = None  # insightface layout: identity records written
    sha256: dict = field(default_factory=dict)  # URL outputs: URL -> sha256 of what was uploaded
    transparent: int = 0  # packed images that had transparency (alpha not all opaque)
    transparent_examples: list[tuple[int, str]] = field(default_factory=list)  # (index, path), the first TRANSPARENT_EXAMPLES
    alpha_background: tuple[int, int, int] | None = None  # what they were composited over; None: alpha was dropped

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def nothing_packed(summary: PackSummary, opts: PackOptions) -> bool:
    """Whether a whole output (not a part a merge waits for, not shards) got no record because
    every image failed: it then leaves only its failure list."""
    return bool(summary.failed and not summary.packed and not summary.already_complete and opts.part_index is None and not opts.shard_size)


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


def sha256_of(path: str) -> str | None:
    """The SHA-256 of a local file, or None when it is not there."""
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
        name: {"path": path, "sha256": s.sha256.get(path)} if storage.is_url(path) else {"path": os.path.abspath(path), "sha256": sha256_of(path)}
        for name, path in files.items()
    }


def write_stats(path: str, summary: PackSummary, options: PackOptions, argv: list[str] | None = None) -> dict:
    """Write the JSON audit record of a run (atomically) and return it.

    It holds the im2rec version, the command line, every option, the counts
    (packed, failed by reason, requests to a store retried), bytes, timings, and the sha256 of the ``.rec``
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
        "counts": {"images": s.images, "packed": s.packed, "failed": s.failed, "failed_by_reason": dict(sorted(s.failures.items())), "requests_retried": s.retried},
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
