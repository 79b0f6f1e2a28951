"""``fetch_in_order``: pack's images from a store, batched and concurrent in a background thread, at most
``FETCH_AHEAD`` bytes ahead of the encoders, retried and counted (``FetchStats``), stopped by an outage
(``StoreUnreachable``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from ..errors import StorageError
from .retries import Tally
from .store import Store, store_for

__all__ = ["FETCH_AHEAD", "OUTAGE", "FetchStats", "StoreUnreachable", "fetch_in_order"]

T = TypeVar("T")


class FetchStats:
    """What ``fetch_in_order`` did: its requests, in ``tally``; ``retried``, those after a transient failure."""

    def __init__(self) -> None:
        self.tally = Tally()

    @property
    def retried(self) -> int:
        return self.tally.retried


#: Objects in a row that ``fetch_in_order`` could not fetch, after their retries, for a reason
#: other than their own (no answer, 5xx, throttling): then the store is down, and it stops.
OUTAGE = 8


class StoreUnreachable(StorageError):
    """The store stopped answering during ``fetch_in_order``: ``OUTAGE`` objects in a row failed."""


#: Bytes of fetched images that ``pack`` holds ahead of its encoders, at most (plus one batch
#: being fetched): the read-ahead window of a pack from a store.
FETCH_AHEAD = 32 << 20


def fetch_in_order(
    items: Iterable[T],
    url_of: Callable[[T], str],
    storage_options: Mapping[str, Any] | None = None,
    batch: int = 32,
    ahead: int = FETCH_AHEAD,
    window: int = 2,
    stats: FetchStats | None = None,
) -> Iterator[tuple[T, bytes | StorageError]]:
    """Yield ``(item, bytes)`` for each item, in order, fetching up to ``batch`` objects at
    once (concurrently, where the store's driver is asynchronous, as s3fs and gcsfs are) in
    a background thread.

    The thread stays ahead of the consumer by at most ``window`` batches and ``ahead``
    bytes: it fetches the next batch only while fewer batches than ``window`` wait
    untaken and their bytes are below ``ahead``; and it sizes its batches to a quarter
    of ``ahead`` (from the mean object size so far: 32 objects of 70 KB, 4 of 2 MB), so
    that large photos do not pile up by the dozen.

    An object that cannot be fetched gives a StorageError in place of its bytes: at once
    when it is missing or access is denied, after the store's retries (``retries.Policy``) for
    anything else (timeouts, 5xx, throttling, dropped connections). When ``OUTAGE`` objects in a
    row fail that way, the store itself is down: the objects before them are yielded, then
    ``StoreUnreachable`` is raised (pack keeps what it packed, for ``--resume``).
    """
    import queue

    held = _Window(ahead, window)
    fetcher = _Fetcher(storage_options, stats if stats is not None else FetchStats())
    out: queue.Queue[Any] = queue.Queue()
    thread = threading.Thread(target=_feed, args=(iter(items), url_of, batch, ahead, fetcher, held, out), name="im2rec-fetch", daemon=True)
    thread.start()
    try:
        while True:
            got = out.get()
            if got is None:
                return
            if isinstance(got, BaseException):
                raise got
            for i, (item, data) in enumerate(got, 1):
                yield item, data
                held.taken(len(data) if isinstance(data, bytes) else 0, i == len(got))  # the encoders hold it now
    finally:
        held.stop()
        thread.join(5)


class _Window:
    """What the fetching thread holds ahead of the consumer: ``bytes`` and ``batches`` fetched
    and not yet taken; it fetches more only while both are below their limits."""

    def __init__(self, ahead: int, batches: int):
        self.ahead, self.most = ahead, batches
        self.bytes = self.batches = 0
        self.stopped = False
        self.room = threading.Condition()

    def wait_for_room(self) -> None:
        with self.room:
            self.room.wait_for(lambda: (self.bytes < self.ahead and self.batches < self.most) or self.stopped)

    def added(self, size: int) -> None:
        with self.room:
            self.bytes += size
            self.batches += 1

    def taken(self, size: int, last_of_its_batch: bool) -> None:
        with self.room:
            self.bytes -= size
            self.batches -= last_of_its_batch
            self.room.notify()

    def stop(self) -> None:
        with self.room:
            self.stopped = True
            self.room.notify()


class _Fetcher:
    """The requests of one ``fetch_in_order``: batches of objects fetched at once by the store
    (each retried there, and counted in ``stats``), and the watch for an outage (``OUTAGE``
    objects in a row unanswered)."""

    def __init__(self, storage_options: Mapping[str, Any] | None, stats: FetchStats):
        self.storage_options, self.stats = storage_options, stats
        self.store: Store | None = None  # made on first use, for the first URL's store
        self.in_a_row: list[str] = []  # the objects that went unanswered, after their retries, since the last one fetched

    def fetch(self, urls: list[str]) -> list[bytes | StorageError]:
        """Each object's bytes or its error (``transient`` when it went unanswered, not missing or refused)."""
        if self.store is None:
            self.store = store_for(urls[0], self.storage_options, tally=self.stats.tally)
        unique = list(dict.fromkeys(urls))
        got = dict(zip(unique, self.store.get_many(unique)))
        return [got[u] for u in urls]

    def outage(self, urls: list[str], data: list[Any]) -> tuple[int, StorageError] | None:
        """``(where in this batch the run began, the error)`` when ``OUTAGE`` objects in a row went
        unanswered (the store itself stopped answering: stop, rather than fail every image), else None."""
        for i, (url, got) in enumerate(zip(urls, data)):
            if not (isinstance(got, StorageError) and got.transient):
                self.in_a_row.clear()
                continue
            self.in_a_row.append(url)
            if len(self.in_a_row) >= OUTAGE:
                first, more = self.in_a_row[0], len(self.in_a_row) - 1
                said = str(got).removeprefix(url + ": ")
                error = StoreUnreachable(f"{first}: {said}; so were the next {more} objects: the store stopped answering")
                return max(0, i - more), error
        return None


def _feed(items: Iterator[T], url_of: Callable[[T], str], batch: int, ahead: int, fetcher: _Fetcher, window: _Window, out: Any) -> None:
    """The fetching thread: batches of items with their bytes onto ``out``, then None (or the exception)."""
    try:
        size = min(batch, 4)  # a small first batch: the encoders start at once, and its sizes tell the next
        fetched_bytes = fetched = 0
        while not window.stopped:
            window.wait_for_room()
            chunk = list(itertools.islice(items, size))
            if not chunk:
                break
            urls = [url_of(x) for x in chunk]
            data = fetcher.fetch(urls)
            stopped = fetcher.outage(urls, data)
            if stopped is not None:  # what came before the run goes on to the encoders, then the error
                out.put(list(zip(chunk, data))[: stopped[0]])
                out.put(stopped[1])
                return
            got = sum(len(d) for d in data if isinstance(d, bytes))
            window.added(got)
            fetched, fetched_bytes = fetched + len(chunk), fetched_bytes + got
            size = max(1, min(batch, int(ahead // 4 // max(1, fetched_bytes // fetched))))
            out.put(list(zip(chunk, data)))
        out.put(None)
    except BaseException as e:
        out.put(e)
