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
from . import s3client
from .retries import RETRIES, permanent, single_attempt, single_attempt_options, with_retries
from .urls import filesystem, object_path, storage_error

__all__ = ["FETCH_AHEAD", "OUTAGE", "FetchStats", "StoreUnreachable", "fetch_in_order"]

T = TypeVar("T")


class FetchStats:
    """What ``fetch_in_order`` did: requests retried after a transient failure."""

    def __init__(self) -> None:
        self.retried = 0


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
    when it is missing or access is denied, after ``RETRIES`` retries with backoff for
    anything else (timeouts, 5xx, throttling, dropped connections). When ``OUTAGE`` objects in a
    row fail that way, the store itself is down: the objects before them are yielded, then
    ``StoreUnreachable`` is raised (pack keeps what it packed, for ``--resume``).
    """
    import queue

    stats = stats if stats is not None else FetchStats()
    out: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()
    room = threading.Condition()
    held = [0, 0]  # bytes and batches fetched and not yet taken by the consumer
    in_a_row: list[str] = []  # the objects that went unanswered, after their retries, since the last one fetched
    fs_cache: dict[str, Any] = {}

    def fs_for(url: str) -> tuple[Any, str]:
        if "fs" not in fs_cache:
            fs_cache["fs"] = single_attempt(filesystem(url, single_attempt_options(url, storage_options), fresh=True)[0])
        fs = fs_cache["fs"]
        return fs, object_path(url)

    def fetch(urls: list[str]) -> tuple[list[bytes | StorageError], list[bool]]:
        client = s3client.client_for(urls[0], storage_options)
        attempt: Callable[[list[Any]], list[Any]]
        if client is not None:
            paths: list[Any] = [s3client.split(u) for u in urls]

            def attempt(todo: list[tuple[str, str]]) -> list[Any]:
                return client.map(lambda where: client.get(*where), todo)
        else:
            fs, _ = fs_for(urls[0])
            paths = [object_path(u) for u in urls]

            def attempt(todo: list[str]) -> list[Any]:
                got = fs.cat(todo, on_error="return") if len(todo) > 1 else {todo[0]: fs.cat_file(todo[0])}
                return [got.get(p) for p in todo]

        def count(n: int) -> None:
            stats.retried += n

        results = with_retries(list(dict.fromkeys(paths)), attempt, RETRIES, count)
        return [
            storage_error(url, results[p]) if isinstance(results[p], BaseException) else results[p]
            for url, p in zip(urls, paths)
        ], [isinstance(results[p], BaseException) and not permanent(results[p]) for p in paths]

    def outage(urls: list[str], data: list[Any], unanswered: list[bool]) -> tuple[int, StorageError] | None:
        """``(where in this batch the run began, the error)`` when ``OUTAGE`` objects in a row went
        unanswered (the store itself stopped answering: stop, rather than fail every image), else None."""
        for i, (url, failed) in enumerate(zip(urls, unanswered)):
            if not failed:
                in_a_row.clear()
                continue
            in_a_row.append(url)
            if len(in_a_row) >= OUTAGE:
                said = str(data[i]).removeprefix(url + ": ")
                error = StoreUnreachable(f"{in_a_row[0]}: {said}; so were the next {len(in_a_row) - 1} objects, after {RETRIES} retries each: the store stopped answering")
                return max(0, i - len(in_a_row) + 1), error
        return None

    def feed() -> None:
        try:
            it = iter(items)
            size = min(batch, 4)  # a small first batch: the encoders start at once, and its sizes tell the next
            fetched_bytes = fetched = 0
            while not stop.is_set():
                with room:
                    room.wait_for(lambda: (held[0] < ahead and held[1] < window) or stop.is_set())
                chunk = list(itertools.islice(it, size))
                if not chunk:
                    break
                urls = [url_of(x) for x in chunk]
                data, unanswered = fetch(urls)
                stopped = outage(urls, data, unanswered)
                if stopped is not None:  # what came before the run goes on to the encoders, then the error
                    out.put(list(zip(chunk, data))[: stopped[0]])
                    out.put(stopped[1])
                    return
                got = sum(len(d) for d in data if isinstance(d, bytes))
                with room:
                    held[0] += got
                    held[1] += 1
                fetched, fetched_bytes = fetched + len(chunk), fetched_bytes + got
                size = max(1, min(batch, int(ahead // 4 // max(1, fetched_bytes // fetched))))
                out.put(list(zip(chunk, data)))
            out.put(None)
        except BaseException as e:
            out.put(e)

    thread = threading.Thread(target=feed, name="im2rec-fetch", daemon=True)
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
                with room:  # taken: the encoders hold it now
                    held[0] -= len(data) if isinstance(data, bytes) else 0
                    held[1] -= i == len(got)
                    room.notify()
    finally:
        stop.set()
        with room:
            room.notify()
        thread.join(5)
