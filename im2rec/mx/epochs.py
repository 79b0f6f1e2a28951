"""Which records each batch of an epoch holds, as MXNet's readers decide: parts and epochs.

Written from dmlc-core's input splits and ``src/io/iter_batchloader.h``: a part of an
indexed ``.rec`` is ``ceil(N / parts)`` entries, of an unindexed one the records starting
in its byte range; an epoch's short last batch is filled from the next (``round_batch``),
which then starts after them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..errors import OptionError

__all__ = ["EpochPlan", "part_items", "plan_epoch"]


def part_items(num_items: int, parts: int, index: int, positions: np.ndarray | None = None, total_bytes: int = 0) -> np.ndarray:
    """The items (in file order) of part ``index`` of ``parts``, as MXNet's readers split.

    With ``positions`` (each item's byte offset, the files laid end to end) the split is
    dmlc's byte-range rule for a ``.rec`` read without its index; without, the indexed rule
    (``ceil(N / parts)`` entries a part, the last ones short or empty).
    """
    if positions is None:
        step = -(-num_items // parts)
        return np.arange(min(index * step, num_items), min((index + 1) * step, num_items), dtype=np.int64)
    step = -(-total_bytes // parts)
    step = -(-step // 4) * 4
    begin, end = min(step * index, total_bytes), min(step * (index + 1), total_bytes)
    return np.flatnonzero((positions >= begin) & (positions < end)).astype(np.int64)


class EpochPlan(NamedTuple):
    """The batches of one epoch: ``rows[b]`` are the items of batch b (-1 for an empty row),
    ``epochs[b]`` the epoch each row's record belongs to (a row taken from the next epoch
    to fill the last batch belongs to it), ``pads[b]`` the rows that are not this epoch's."""

    rows: np.ndarray
    epochs: np.ndarray
    pads: np.ndarray
    skip_next: int


def plan_epoch(order: np.ndarray, next_order: Callable[[], np.ndarray], epoch: int, batch_size: int, round_batch: bool, skip: int = 0) -> EpochPlan:
    """Cut ``order[skip:]`` into batches; the short last one filled from ``next_order()`` with
    ``round_batch`` (the next epoch then skips those), else left empty.

    Raises:
        OptionError: ``round_batch`` would need more records than the next epoch has.
    """
    seq = order[skip:]
    n = seq.size
    nb = -(-n // batch_size)
    rows = np.full(nb * batch_size, -1, dtype=np.int64)
    rows[:n] = seq
    epochs = np.full(rows.size, epoch, dtype=np.int64)
    pads = np.zeros(nb, dtype=np.int64)
    skip_next = 0
    missing = rows.size - n
    if missing:
        pads[-1] = missing
        if round_batch:
            following = next_order()
            if missing > following.size:
                raise OptionError(f"batch_size {batch_size} needs {missing} more records to fill the last batch (round_batch), but this part has {following.size}: the number of records must be larger than the batch size", "batch_size")
            rows[n:] = following[:missing]
            epochs[n:] = epoch + 1
            skip_next = missing
    return EpochPlan(rows.reshape(nb, batch_size), epochs.reshape(nb, batch_size), pads, skip_next)

