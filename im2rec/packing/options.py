"""``PackOptions``: every option of ``im2rec pack`` besides the per-image ones, checked once
(``OptionError`` names the flag), with the CLI's defaults."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from .. import recordio
from ..errors import OptionError
from ..image import ImageOptions

__all__ = ["PackOptions", "default_workers"]


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
