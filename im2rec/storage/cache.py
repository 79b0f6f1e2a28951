"""A local disk cache of blocks fetched from a store, shared by every process of a machine.

``RecordDataset(url, cache_dir=..., cache_limit=...)`` keeps each block it fetches
(a run of neighbouring records, about 4 MB) as one file in ``cache_dir``. DataLoader
workers and DDP ranks on one machine share the folder:

- a block is written to a temporary file and renamed into place, so a reader sees a
  whole block or none (never a torn one), and two processes that fetch the same block
  at once both succeed (the second rename replaces the first's identical file);
- the space is reserved before the bytes are written, under an exclusive lock on
  ``cache_dir/.lock``: the least recently used blocks are evicted until the cached
  blocks plus every reservation in flight fit in ``limit``, so the folder never holds
  more than ``limit`` bytes of blocks (a block that cannot fit is not cached);
- a hit refreshes the block's mtime, which orders eviction (least recently used first).

File names: ``<source>-<start>-<end>.blk``, where ``<source>`` hashes the object's URL,
size and ETag (a changed object gets new names), and reservations
``.<name>.<size>.<pid>.tmp``; a reservation whose process is gone is reclaimed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

__all__ = ["BlockCache", "source_key"]

_RESERVATION = re.compile(r"^\.(?P<name>.+)\.(?P<size>\d+)\.(?P<pid>\d+)\.[0-9a-f]+\.tmp$")


def source_key(url: str, size: int, etag: str | None) -> str:
    """The file-name prefix of one object's blocks: changes when the object does."""
    return hashlib.sha1(f"{url}\0{size}\0{etag or ''}".encode()).hexdigest()[:20]


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class BlockCache:
    """Blocks on local disk, at most ``limit`` bytes of them (see the module's docstring).

    Args:
        folder: created if missing.
        limit: bytes.
    """

    def __init__(self, folder: str, limit: int):
        if limit < 1:
            raise ValueError(f"cache_limit must be positive, got {limit}")
        self.folder, self.limit = os.fspath(folder), int(limit)
        os.makedirs(self.folder, exist_ok=True)
        self.hits = 0
        self.stored = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder, "limit": self.limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["folder"], state["limit"])  # type: ignore[misc]

    def name(self, source: str, start: int, end: int) -> str:
        return f"{source}-{start}-{end}.blk"

    def get(self, name: str, size: int) -> bytes | None:
        """The cached block, or None (missing, evicted meanwhile, or not ``size`` bytes)."""
        path = os.path.join(self.folder, name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        if len(data) != size:  # cannot happen with our writes; a hand-edited folder is not trusted
            return None
        with contextlib.suppress(OSError):
            os.utime(path)
        self.hits += 1
        return data

    def put(self, name: str, data: bytes) -> bool:
        """Store a block if it fits in the limit (evicting older blocks); whether it was stored."""
        if len(data) > self.limit:
            return False
        tmp = os.path.join(self.folder, f".{name}.{len(data)}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        with self._locked():
            if not self._make_room(len(data)):
                return False
            open(tmp, "wb").close()  # the reservation: counted by every process from now on
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(self.folder, name))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.stored += 1
        return True

    def usage(self) -> int:
        """Bytes of blocks held plus bytes reserved by writes in flight."""
        return sum(size for _, size, _, _ in self._entries())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            import fcntl
        except ImportError:  # Windows: one process per cache folder
            yield
            return
        with open(os.path.join(self.folder, ".lock"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _entries(self) -> list[tuple[str, int, float, bool]]:
        """``(path, bytes, mtime, is_block)`` of every block and live reservation; dead
        processes' reservations are removed on the way."""
        out = []
        with os.scandir(self.folder) as it:
            for entry in it:
                if entry.name.endswith(".blk"):
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    out.append((entry.path, st.st_size, st.st_mtime, True))
                elif (m := _RESERVATION.match(entry.name)) is not None:
                    if not _alive(int(m["pid"])):
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
                        continue
                    out.append((entry.path, int(m["size"]), 0.0, False))
        return out

    def _make_room(self, size: int) -> bool:
        entries = self._entries()
        used = sum(e[1] for e in entries)
        for path, held, _, is_block in sorted(entries, key=lambda e: e[2]):
            if used + size <= self.limit:
                break
            if is_block:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                used -= held
        return used + size <= self.limit
