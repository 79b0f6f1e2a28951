"""Objects that appear only complete: ``upload``/``upload_stream`` (one PUT, or a multipart upload aborted on
any failure), ``concatenate`` (objects joined by the store itself where it can), and ``Streamer``, a
``.rec`` sent to S3 in parts while ``pack`` writes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..errors import StorageError
from . import multipart
from .multipart import MIN_PART, UPLOAD_PART, UPLOAD_PARTS_IN_FLIGHT, abort_all, upload_part_size
from .retries import Tally
from .store import store_for

__all__ = ["MIN_PART", "UPLOAD_PART", "UPLOAD_PARTS_IN_FLIGHT", "Streamer", "concatenate", "upload", "upload_part_size", "upload_stream"]


def upload(local: str, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Copy a local file to ``url`` so that the object appears only complete; see ``upload_stream``."""
    with open(local, "rb") as src:
        upload_stream(src, url, storage_options)


def upload_stream(src: Any, url: str, storage_options: Mapping[str, Any] | None = None, block_size: int | None = None) -> None:
    """Copy a readable binary stream to ``url`` so that the object appears only complete: on S3
    one PUT, or a multipart upload of ``block_size`` parts (``UPLOAD_PART``) completed at the end
    and aborted on any failure or interrupt (no orphaned parts left behind).

    Raises:
        StorageError: the upload failed (the store's failure after its retries, or an OSError
            of ``src``); nothing is left under ``url``. Anything else, an interrupt included,
            is raised as it is, after the abort.
    """
    store_for(url, storage_options).put_stream(url, src, block_size or multipart.UPLOAD_PART)


#: The largest part UploadPartCopy takes (5 GiB): a larger object is copied in ranges of this size.
MAX_COPY_PART = 5 << 30


def concatenate(url: str, sources: Sequence[str], sizes: Sequence[int], opener: Callable[[str], Any], storage_options: Mapping[str, Any] | None = None) -> bool:
    """Write the objects ``sources`` (of ``sizes`` bytes), one after the other, as the object
    ``url``: joined by the store itself where it can (S3: a multipart upload whose parts are
    copies of the sources, no byte downloaded; every source but the last 5 MiB or more), else
    streamed through this process from ``opener(source)``. Whether the store joined them.

    Raises:
        StorageError: from the store; nothing is left under ``url``.
    """
    store = store_for(url, storage_options)
    if not (store.multipart and len(sources) > 1 and all(s >= MIN_PART for s in sizes[:-1])):
        store.put_stream(url, _Concatenated([lambda p=p: opener(p) for p in sources]))
        return False
    upload_id = store.create_upload(url)
    try:
        pieces = [(source, a, min(size, a + MAX_COPY_PART)) for source, size in zip(sources, sizes) for a in range(0, max(size, 1), MAX_COPY_PART)]
        with ThreadPoolExecutor(8, thread_name_prefix="im2rec-copy") as pool:
            etags = list(pool.map(lambda n: store.copy_part(url, upload_id, n + 1, *pieces[n]), range(len(pieces))))
        store.complete_upload(url, upload_id, list(enumerate(etags, 1)))
    except BaseException:
        abort_all(store, url, upload_id)
        raise
    return True


class _Concatenated:
    """A readable stream of several opened-on-demand streams, one after the other."""

    def __init__(self, openers: Sequence[Any]):
        self._openers = list(openers)
        self._current: Any = None

    def read(self, n: int = -1) -> bytes:
        while True:
            if self._current is None:
                if not self._openers:
                    return b""
                self._current = self._openers.pop(0)()
            data = self._current.read(n)
            if data:
                return data
            self._current.close()
            self._current = None


class Streamer:
    """Uploads a local file to S3 while it is being written: each full part as soon as it is
    on disk (one part in flight, in a background thread), the rest at ``finish``, which
    completes the multipart upload; so the object appears only complete, and a run
    ends with one part left to send rather than the whole file. ``abort`` (on any
    failure or interrupt) leaves no part behind; uploads left by a killed run for the
    same key are aborted when the next one starts. Its requests are counted in ``tally``.
    """

    def __init__(self, url: str, local: str, storage_options: Mapping[str, Any] | None = None, upload_part: int | None = None):
        self.url, self.local = url, local
        self.upload_part = upload_part or multipart.UPLOAD_PART  # read now: a test makes parts smaller
        self.tally = Tally()
        self.store = store_for(url, storage_options, tally=self.tally)
        self._parts: list[tuple[int, str]] = []
        self.sent = 0  # bytes of the file already handed to a part
        self._next = 1  # the number of the next part
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="im2rec-upload")
        self._pending: Future | None = None
        try:
            for upload_id in self.store.uploads(url):  # left by a killed run
                self.store.abort_upload(url, upload_id)
            self.upload_id = self.store.create_upload(url)
        except BaseException:
            self._pool.shutdown()
            raise

    @staticmethod
    def supported(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        """Whether ``url``'s store has multipart uploads (S3), which streaming needs."""
        return store_for(url, storage_options).multipart

    def _send(self, number: int, start: int, end: int) -> None:
        with open(self.local, "rb") as f:
            f.seek(start)
            body = f.read(end - start)
        self._parts.append((number, self.store.upload_part(self.url, self.upload_id, number, body)))

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def feed(self, size: int, flush: Callable[[], None]) -> None:
        """The local file is ``size`` bytes long: send the next part if a whole one is there
        (``flush`` puts the writer's buffer on disk first).

        Raises:
            StorageError: the part before it failed (after its retries).
        """
        part = self.upload_part_size(self._next)
        if size - self.sent < part:
            return
        self._wait()
        flush()
        self._pending = self._pool.submit(self._send, self._next, self.sent, self.sent + part)
        self._next += 1
        self.sent += part

    def upload_part_size(self, number: int) -> int:
        """The size of part ``number`` (from 1): see ``UPLOAD_PART``."""
        return upload_part_size(number, self.upload_part)

    def finish(self, size: int) -> None:
        """Send the rest of the (closed) file and complete the upload: the object appears.

        Raises:
            StorageError: a part or the completion failed (after its retries); the upload is aborted.
        """
        try:
            self._wait()
            while self.sent < size or not self._parts:
                end = min(size, self.sent + self.upload_part_size(self._next))
                self._send(self._next, self.sent, end)
                self._next += 1
                self.sent = end
            self.store.complete_upload(self.url, self.upload_id, self._parts)
        except BaseException as e:
            self.abort()
            if isinstance(e, OSError) and not isinstance(e, StorageError):  # the local file's
                raise StorageError(f"{self.url}: {type(e).__name__}: {e}") from None
            raise
        finally:
            self._pool.shutdown()

    def abort(self) -> None:
        """Drop the upload and every part sent (idempotent; quiet: it runs while another failure is raised)."""
        try:
            if self._pending is not None:
                self._pending.cancel()
                with contextlib.suppress(Exception):
                    self._pending.result()
            abort_all(self.store, self.url, self.upload_id)
        finally:
            self._pool.shutdown(wait=False)
