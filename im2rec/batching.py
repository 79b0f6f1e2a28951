"""Batches filled row by row in a pool of threads, in order, with records left out refilled.

A reader (``ImageRecordIter``, ``ImageDetRecordIter``, ``RecordLoader``) is a ``Filler``: it
starts a batch (its rows handed to its pool), refills the rows of records its decode left out
(``SkipRecord``: ``on_damaged="skip"``) and says what a finished batch gives. ``produce``,
its background thread, keeps two batches in the pool, so that the threads never wait for
the last images of one, and hands finished ones on in order. The records come from a
``Stream``: a left-out record's row takes the next one, and at the end of the epoch the last
rows of the batch behind, so that only the epoch's last batch is short.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, NamedTuple, Protocol

import numpy as np

from .image import SkipRecord

__all__ = ["END", "Filler", "Stream", "Work", "produce"]

#: What ``produce`` puts after the last batch.
END = object()


class Filler(Protocol):
    """What ``produce`` asks of a reader."""

    batch_size: int

    def start_batch(self, rows: np.ndarray, epochs: np.ndarray) -> Work:
        """A new batch, its rows being filled with the records ``rows`` (-1: padding)."""
        ...

    def refill(self, work: Work, skipped: list[int], rows: np.ndarray, epochs: np.ndarray) -> Work:
        """``work`` without the rows ``skipped``: the rows after them move up, the new last rows get ``rows``."""
        ...

    def finished(self, work: Work) -> Any:
        """What a batch whose every row is filled gives the consumer."""
        ...


class Stream:
    """An epoch's records not yet given a row, in order (``rows``: -1 for none, ``epochs``: the
    epoch each is read for). A batch takes its rows
    from here, and so do the rows of records left out (``on_damaged="skip"``): the batch is
    filled from the next records, and the later batches move up. Past the epoch's records a
    take gives the next epoch's (``round_batch``, counted in ``borrowed``) or -1 (padding)."""

    def __init__(self, rows: np.ndarray, epochs: np.ndarray, epoch: int, following: Callable[[], np.ndarray] | None = None):
        rows, epochs = rows.reshape(-1), epochs.reshape(-1)
        real = rows >= 0
        self.items, self.epochs = rows[real], epochs[real]
        self.at = 0
        self.epoch = epoch
        self.following = following  # the next epoch's order, when round_batch lends from it
        self.borrowed = 0  # records of the next epoch given rows of this one

    def more(self) -> bool:
        """Whether a batch of this epoch starts at the next record."""
        return self.at < self.items.size and self.epochs[self.at] == self.epoch

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        items = np.full(n, -1, dtype=np.int64)
        epochs = np.full(n, self.epoch, dtype=np.int64)
        got = min(n, self.items.size - self.at)
        items[:got], epochs[:got] = self.items[self.at : self.at + got], self.epochs[self.at : self.at + got]
        self.at += got
        self.borrowed += int(np.count_nonzero(epochs[:got] != self.epoch))
        if got < n and self.following is not None:  # records left out: more lent by the next epoch
            extra = self.following()[self.borrowed : self.borrowed + n - got]
            items[got : got + extra.size], epochs[got : got + extra.size] = extra, self.epoch + 1
            self.borrowed += int(extra.size)
        return items, epochs


def produce(owner: weakref.ref[Filler], stream: Stream, out: queue.Queue[Any], stop: threading.Event) -> None:
    """The background thread of a reader: each batch's rows filled by the reader's pool,
    batches in order into ``out``, then ``END``; an error is passed on in place of the batch
    it spoiled, then nothing more. It holds the reader only while it hands out a batch's
    work, so that a reader dropped without ``close()`` is collected (and its ``__del__``
    stops this)."""

    def put(x: Any) -> bool:
        while not stop.is_set():
            try:
                out.put(x, timeout=0.1)
                return True
            except queue.Full:
                if owner() is None:
                    return False
        return False

    def finish(work: Work) -> bool:
        while True:
            skipped = sorted(work.moved)
            for row, f in work.futures:
                if row in work.moved:
                    continue
                error = f.exception()
                if isinstance(error, SkipRecord):
                    skipped.append(row)
                elif error is not None:
                    for _, other in work.futures:
                        other.cancel()
                    raise error
            if not skipped:
                break
            it = owner()
            if it is None:
                return False
            work = it.refill(work, skipped, *replacements(len(skipped), work.epoch))
            del it
        it = owner()
        if it is None:
            return False
        done = it.finished(work)
        del it
        return put(done)

    def replacements(n: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Records for ``n`` rows of a batch whose records were left out: the next ones; when
        the epoch has none left, the last ones of the batch being filled behind it (which
        then fills its own rows in turn), so that only the epoch's last batch is short."""
        if not stream.more() and pending and pending[0].epoch == epoch:
            donor = pending[0]
            rows = [r for r in range(len(donor.items) - 1, -1, -1) if donor.items[r] >= 0 and donor.epochs[r] == epoch and r not in donor.moved][:n]
            if len(rows) == n:
                donor.moved.update(rows)
                return donor.items[rows[::-1]], donor.epochs[rows[::-1]]
        return stream.take(n)

    # Two batches in the pool at a time, so that its threads never wait for the last images
    # of one batch; the one before is finished (waited for) and handed on.
    pending: deque[Work] = deque()
    try:
        while stream.more():
            it = owner()
            if it is None or stop.is_set():
                return
            pending.append(it.start_batch(*stream.take(it.batch_size)))
            del it
            if len(pending) > 1 and not finish(pending.popleft()):
                return
        while pending:
            if not finish(pending.popleft()):
                return
        put(END)
    except BaseException as e:  # a record that cannot be read or decoded: the consumer raises it
        put(e)
    finally:
        for work in pending:
            for _, f in work.futures:
                f.cancel()


class Work(NamedTuple):
    """A batch being filled: its rows' items, and the pool's work on each row."""

    batch: Any
    epoch: int  # the epoch the batch is of (rows of another are lent to it)
    items: np.ndarray
    epochs: np.ndarray
    futures: list[tuple[int, Future[None]]]
    moved: set[int]  # rows whose records went to fill the batch before (see _produce)


