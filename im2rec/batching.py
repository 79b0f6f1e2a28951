"""Batches filled row by row in a pool of threads, handed on in order by a background thread.

A reader (``ImageRecordIter``, ``ImageDetRecordIter``, ``RecordLoader``) is a ``Filler``: it
starts a batch (its rows handed to its pool) and says what a finished batch gives.
``produce``, its background thread, keeps two batches in the pool, so that the threads never
wait for the last images of one, and puts finished ones in a queue, in order.

A record left out (``on_damaged="skip"``) keeps its row: the reader fills it with the next
good record after it (``image.next_good``), so that batches, their padding and the epoch's length
stay what they were (the ranks of a distributed job stay in step).
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any, NamedTuple, Protocol

import numpy as np

__all__ = ["END", "Filler", "Work", "produce"]

#: What ``produce`` puts after the last batch.
END = object()


class Work(NamedTuple):
    """A batch being filled, and the pool's work on its rows."""

    batch: Any
    futures: list[Future[None]]


class Filler(Protocol):
    """What ``produce`` asks of a reader."""

    def start_batch(self, rows: np.ndarray, epochs: np.ndarray) -> Work:
        """A new batch, its rows being filled with the records ``rows`` (-1: padding), read for ``epochs``."""
        ...

    def finished(self, work: Work) -> Any:
        """What a batch whose every row is filled gives the consumer."""
        ...


def produce(owner: weakref.ref[Filler], batches: Iterable[tuple[np.ndarray, np.ndarray]], out: queue.Queue[Any], stop: threading.Event) -> None:
    """The background thread of a reader: each of ``batches`` (its rows' items and epochs)
    filled by the reader's pool, finished batches in order into ``out``, then ``END``; an
    error is passed on in place of the batch it spoiled, then nothing more. It holds the
    reader only while it hands out a batch's work, so that a reader dropped without
    ``close()`` is collected (and its ``__del__`` stops this)."""

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
        for f in work.futures:
            error = f.exception()
            if error is not None:
                for other in work.futures:
                    other.cancel()
                raise error
        it = owner()
        if it is None:
            return False
        done = it.finished(work)
        del it
        return put(done)

    # Two batches in the pool at a time, so that its threads never wait for the last images
    # of one; the one before is finished (waited for) and handed on.
    pending: deque[Work] = deque()
    try:
        for rows, epochs in batches:
            it = owner()
            if it is None or stop.is_set():
                return
            pending.append(it.start_batch(rows, epochs))
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
            for f in work.futures:
                f.cancel()
