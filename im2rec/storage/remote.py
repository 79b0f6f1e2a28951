"""``RemoteSource``: the ``recordio.ByteSource`` a remote ``.rec`` is read through (ranged reads, held in
memory up to ``HOLD`` bytes for all the sources of a process, prefetched, retried, through a
``cache.BlockCache`` when given).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import StorageError
from .retries import Tally
from .store import Store, store_for

__all__ = ["HOLD", "READAHEAD", "RemoteSource", "hold_at_least"]

READAHEAD = 4 << 20  # bytes fetched at once when reading in order


#: Bytes of fetched ranges the ``RemoteSource`` objects of one process keep in memory together
#: (beyond those of the batch being read), least recently used dropped first: room for a
#: RecordSampler window of 8 blocks of 4 MB being read and the next batch's blocks fetched ahead.
HOLD = 80 << 20


class _Held:
    """The ranges every ``RemoteSource`` of this process holds, in one least-recently-used
    order, so that a dataset of many shards holds ``HOLD`` bytes in all, not per shard.
    A forked child inherits it with the sources it describes."""

    def __init__(self) -> None:
        self.order: dict[tuple[int, int], tuple[weakref.ref, int]] = {}  # (id(source), start) -> (source, bytes)
        self.total = 0
        self.limit = HOLD

    def used(self, source: RemoteSource, start: int) -> None:
        key = (id(source), start)
        entry = self.order.pop(key, None)
        if entry is not None:
            self.order[key] = entry

    def added(self, source: RemoteSource, start: int, size: int, pinned: frozenset[int]) -> None:
        self.order[(id(source), start)] = (weakref.ref(source), size)
        self.total += size
        for (sid, b0), (ref, _size) in list(self.order.items()):
            if self.total <= self.limit:
                break
            if sid == id(source) and (b0 == start or b0 in pinned):
                continue
            owner = ref()
            if owner is not None:
                owner.forget(b0)
            else:
                self.dropped(sid, b0)

    def dropped(self, sid: int, start: int) -> None:
        entry = self.order.pop((sid, start), None)
        if entry is not None:
            self.total -= entry[1]


_HELD = _Held()


def hold_at_least(size: int) -> None:
    """Let the sources of this process hold at least ``size`` bytes of fetched ranges
    (``HOLD`` by default): a dataset whose sampler mixes wider windows of blocks needs more."""
    _HELD.limit = max(_HELD.limit, int(size))


#: Guards what the sources of this process hold (``_HELD`` and each ``_held``): a dataset's
#: read-ahead thread adds blocks while the reading thread looks them up. New in a forked child.
_LOCK = threading.RLock()


def _new_lock() -> None:
    global _LOCK
    _LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock)


class RemoteSource:
    """A remote object read by ranges: the byte source ``recordio.RecordReader`` reads a URL through.

    Behaves like the read-only memory map a local file gets: ``len``, slicing
    (``source[a:b]`` -> bytes) and ``find``. Fetched ranges are held in memory, the
    least recently used dropped beyond ``HOLD`` bytes for all the sources of the process:
    a read inside one costs no request. On a miss, after ``hint(start, end)`` (a record's exact extent, from the
    ``.idx``) exactly that range is fetched; otherwise ``READAHEAD`` bytes from where the
    read starts, for sequential scans. ``prefetch(ranges)`` fetches many ranges at once,
    concurrently (one request each), for a batch of records.

    Transient failures (timeouts, 5xx, throttling, dropped connections) are retried by the
    store, ``retries`` times with backoff (None: as ``config_kwargs.retries`` in the options
    asks, else ``RETRIES``); ``requests``, ``retried`` and ``fetched`` count what
    was sent and received. A missing object or a denied access fails at once. With ``cache``
    (a ``cache.BlockCache``), ranges are looked up on local disk first and stored there once
    fetched.

    The store's connections are made in the process that reads, and again after a fork;
    pickling sends only the URL, the options and the cache's folder, so DataLoader workers
    under fork and spawn each open their own.

    Raises:
        StorageError: the object is missing, or access is denied (at open).
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        size: int | None = None,
        *,
        etag: str | None = None,
        cache: Any = None,
        retries: int | None = None,
    ):
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.cache, self.retries = cache, retries
        self.tally = Tally()
        self._store: Store | None = None
        self._pid = -1
        self._held: dict[int, bytes] = {}  # start -> bytes (their order of use: _HELD)
        self._starts: list[int] = []  # sorted starts of _held
        self._hint: tuple[int, int] | None = None
        if size is None:
            info = self._the_store().head(url)
            size, etag = info.size, info.etag
        self.size, self.etag = size, etag
        self._key: str | None = None

    def _the_store(self) -> Store:
        if self._pid != os.getpid():  # new process (fork, spawn or first use)
            self._store, self._pid = store_for(self.url, self.storage_options, tally=self.tally, retries=self.retries), os.getpid()
        assert self._store is not None
        return self._store

    @property
    def requests(self) -> int:
        """Requests sent to the store (retries included)."""
        return self.tally.requests

    @property
    def retried(self) -> int:
        """Requests sent again after a transient failure."""
        return self.tally.retried

    @property
    def fetched(self) -> int:
        """Bytes received."""
        return self.tally.fetched

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in ("url", "storage_options", "size", "etag", "cache", "retries")}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state.pop("url"), state.pop("storage_options"), state.pop("size"), **state)  # type: ignore[misc]

    def __len__(self) -> int:
        return self.size

    def hint(self, start: int, end: int) -> None:
        """The next read will be of ``[start, end)``: fetch exactly that on a miss."""
        self._hint = (start, end)

    # -- what is held -------------------------------------------------------- #

    def _find(self, start: int, stop: int) -> tuple[int, bytes] | None:
        with _LOCK:
            return self._find_locked(start, stop)

    def _find_locked(self, start: int, stop: int) -> tuple[int, bytes] | None:
        i = bisect.bisect_right(self._starts, start) - 1
        while i >= 0:  # held ranges may overlap (a record, then its whole block): try each that starts before
            b0 = self._starts[i]
            block = self._held[b0]
            if stop <= b0 + len(block):
                _HELD.used(self, b0)
                return b0, block
            i -= 1
        return None

    def _keep(self, start: int, data: bytes, pinned: frozenset[int] = frozenset()) -> None:
        with _LOCK:
            self._keep_locked(start, data, pinned)

    def _keep_locked(self, start: int, data: bytes, pinned: frozenset[int]) -> None:
        end = start + len(data)
        for b0 in [b for b in self._starts if start <= b and b + len(self._held[b]) <= end]:  # now inside this one
            self.forget(b0)
        bisect.insort(self._starts, start)
        self._held[start] = data
        _HELD.added(self, start, len(data), pinned)

    def forget(self, start: int) -> None:
        """Drop the range held from ``start`` (the process's memory budget is full)."""
        with _LOCK:
            if self._held.pop(start, None) is not None:
                self._starts.remove(start)
                _HELD.dropped(id(self), start)

    def held(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` is in memory."""
        return self._find(start, end) is not None

    # -- fetching ------------------------------------------------------------ #

    def _cache_name(self, start: int, end: int) -> str:
        if self._key is None:
            from .cache import source_key

            self._key = source_key(self.url, self.size, self.etag)
        return self.cache.name(self._key, start, end)

    def prefetch(self, ranges: Iterable[tuple[int, int]], cache: bool = True) -> None:
        """Hold every ``[start, end)`` of ``ranges``: from memory, from the disk cache, or
        fetched, all the missing ones at once (concurrently where the store's driver is
        asynchronous, as s3fs and gcsfs are), and stored in the disk cache unless ``cache``
        is False.

        Raises:
            StorageError: a range could not be read (after the retries, for a transient
                failure); its message names the URL and the bytes.
        """
        wanted = sorted({(max(0, a), min(b, self.size)) for a, b in ranges if b > a})
        pinned = frozenset(a for a, _ in wanted)
        missing = []
        for a, b in wanted:
            if self._find(a, b) is not None:
                continue
            data = self.cache.get(self._cache_name(a, b), b - a) if self.cache is not None else None
            if data is not None:
                self._keep(a, data, pinned)
            else:
                missing.append((a, b))
        if not missing:
            return
        got = self._fetch_ranges(missing)
        for (a, b), data in zip(missing, got):
            if self.cache is not None and cache:
                self.cache.put(self._cache_name(a, b), data)
            self._keep(a, data, pinned)

    def _fetch_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        got = self._the_store().get_ranges(self.url, ranges)
        for (a, b), data in zip(ranges, got):
            if isinstance(data, StorageError):
                raise data
            if len(data) != b - a:
                error = StorageError(f"{self.url}: asked for bytes {a}-{b}, the store sent {len(data)}")
                error.url, error.span = self.url, (a, b)
                raise error
        return got  # type: ignore[return-value]

    def __getitem__(self, s: slice) -> bytes:
        start, stop, _ = s.indices(self.size)
        if stop <= start:
            return b""
        found = self._find(start, stop)
        if found is None:
            hint, self._hint = self._hint, None
            if hint is not None and hint[0] <= start and stop <= hint[1]:
                self.prefetch([hint], cache=False)  # the cache holds read blocks only
            else:
                self.prefetch([(start, min(self.size, max(stop, start + READAHEAD)))], cache=False)
            found = self._find(start, stop)
            assert found is not None
        b0, block = found
        return block[start - b0 : stop - b0]

    def find(self, sub: bytes, start: int = 0) -> int:
        pos = start
        while pos < self.size:
            end = min(self.size, pos + READAHEAD)
            chunk = self[pos:end]
            i = chunk.find(sub)
            if i >= 0:
                return pos + i
            if end >= self.size:
                return -1
            pos = end - len(sub) + 1
        return -1

    def close(self) -> None:
        for start in list(self._held):
            self.forget(start)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
