"""Objects that appear only complete: ``upload``/``upload_stream`` (one PUT, or a multipart upload aborted on
any failure) and ``Streamer``, a ``.rec`` sent to S3 in parts while ``pack`` writes it.
"""

from __future__ import annotations

import contextlib
import posixpath
import shutil
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import s3client
from .urls import filesystem, storage_error

__all__ = ["UPLOAD_PART", "UPLOAD_PARTS_IN_FLIGHT", "Streamer", "upload", "upload_part_size", "upload_stream"]

def upload(local: str, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Copy a local file to ``url`` so that the object appears only complete; see ``upload_stream``."""
    with open(local, "rb") as src:
        upload_stream(src, url, storage_options)


def upload_stream(src: Any, url: str, storage_options: Mapping[str, Any] | None = None, block_size: int | None = None) -> None:
    """Copy a readable binary stream to ``url`` so that the object appears only complete: on S3
    a multipart upload completed at the end and aborted on any failure or interrupt (no
    orphaned parts left behind).

    Raises:
        StorageError: the upload failed (an OSError of the store or of ``src``); nothing is
            left under ``url``. Anything else, an interrupt included, is raised as it is,
            after the abort.
    """

    client = s3client.client_for(url, storage_options)
    if client is not None:
        _upload_parts(client, src, url, block_size or UPLOAD_PART)
        return
    fs, path = filesystem(url, storage_options)
    try:
        if getattr(fs, "root_marker", "") == "/":  # file://, memory://: folders are real there
            fs.makedirs(posixpath.dirname(path), exist_ok=True)
        f = fs.open(path, "wb", **({"block_size": block_size} if block_size else {}))
    except Exception as e:
        raise storage_error(url, e) from None
    try:
        shutil.copyfileobj(src, f, 16 << 20)
    except BaseException as e:
        discard = getattr(f, "discard", None)  # s3fs: abort the multipart upload
        if discard is not None:
            discard()
        f.closed = True  # nothing to flush or complete any more
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
            raise storage_error(url, e) from None
        raise
    try:
        f.close()
    except Exception as e:
        raise storage_error(url, e) from None


#: Bytes of the first 1,000 parts of a multipart upload; the next 1,000 are twice as large, and
#: so on: S3 takes at most 10,000 parts of 5 MiB or more (but the last): 55,000 x 16 MiB, about
#: 920 GB; a part in flight, read into memory, costs 16 MB for any .rec under 16 GB.
UPLOAD_PART = 16 << 20


#: Parts of one upload sent at once (each held in memory while it is sent).
UPLOAD_PARTS_IN_FLIGHT = 2


def upload_part_size(number: int, first: int = UPLOAD_PART) -> int:
    """The size of part ``number`` (from 1) of an upload whose first parts are ``first`` bytes: see ``UPLOAD_PART``."""
    return first * (1 + (number - 1) // 1000)


def _upload_parts(client: s3client.S3Client, src: Any, url: str, first: int) -> None:
    """``upload_stream`` through the S3 client: one PUT for what fits in a part, else a
    multipart upload, ``UPLOAD_PARTS_IN_FLIGHT`` parts at once, aborted on any failure."""
    bucket, key = s3client.split(url)
    head = _read_full(src, first)
    if len(head) < first:
        try:
            client.put(bucket, key, head)
        except Exception as e:
            raise storage_error(url, e) from None
        return
    try:
        upload_id = client.create_upload(bucket, key)
    except Exception as e:
        raise storage_error(url, e) from None
    parts: list[tuple[int, str]] = []
    try:
        with ThreadPoolExecutor(UPLOAD_PARTS_IN_FLIGHT, thread_name_prefix="im2rec-upload") as pool:
            pending: list[Any] = []
            number, body = 1, head
            while body:
                pending.append(pool.submit(lambda n, b: (n, client.upload_part(bucket, key, upload_id, n, b)), number, body))
                while len(pending) >= UPLOAD_PARTS_IN_FLIGHT:
                    parts.append(pending.pop(0).result())
                number += 1
                body = _read_full(src, upload_part_size(number, first))
            parts += [f.result() for f in pending]
        client.complete_upload(bucket, key, upload_id, parts)
    except BaseException as e:
        with contextlib.suppress(Exception):
            client.abort_upload(bucket, key, upload_id)
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
            raise storage_error(url, e) from None
        raise


def _read_full(src: Any, size: int) -> bytes:
    """``size`` bytes of ``src`` (fewer only at its end)."""
    chunks, got = [], 0
    while got < size:
        chunk = src.read(size - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


class Streamer:
    """Uploads a local file to S3 while it is being written: each full part as soon as it is
    on disk (one part in flight, in a background thread), the rest at ``finish``, which
    completes the multipart upload; so the object appears only complete, and a run
    ends with one part left to send rather than the whole file. ``abort`` (on any
    failure or interrupt) leaves no part behind; uploads left by a killed run for the
    same key are aborted when the next one starts.
    """

    UPLOAD_PART = UPLOAD_PART

    def __init__(self, url: str, local: str, storage_options: Mapping[str, Any] | None = None, upload_part: int = UPLOAD_PART):
        import concurrent.futures

        self.url, self.local, self.upload_part = url, local, upload_part
        self.client = s3client.client_for(url, storage_options)
        self.fs: Any = None
        if self.client is None:
            self.fs, path = filesystem(url, storage_options)
            self.bucket, self.key = path.split("/", 1)
        else:
            self.bucket, self.key = s3client.split(url)
        self._parts: list[tuple[int, str]] = []
        self.sent = 0  # bytes of the file already handed to a part
        self._next = 1  # the number of the next part
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="im2rec-upload")
        self._pending: Any = None
        try:
            for key, upload_id in self._uploads():
                if key == self.key:  # left by a killed run
                    self._abort(upload_id)
            self.upload_id = self._create()
        except Exception as e:
            self._pool.shutdown()
            raise storage_error(url, e) from None

    # the five calls, through the S3 client, else s3fs's botocore client
    def _uploads(self) -> list[tuple[str, str]]:
        if self.client is not None:
            return self.client.uploads(self.bucket, self.key)
        found = self.fs.call_s3("list_multipart_uploads", Bucket=self.bucket, Prefix=self.key).get("Uploads", [])
        return [(u["Key"], u["UploadId"]) for u in found]

    def _create(self) -> str:
        if self.client is not None:
            return self.client.create_upload(self.bucket, self.key)
        return self.fs.call_s3("create_multipart_upload", Bucket=self.bucket, Key=self.key)["UploadId"]

    def _part(self, number: int, body: bytes) -> str:
        if self.client is not None:
            return self.client.upload_part(self.bucket, self.key, self.upload_id, number, body)
        return self.fs.call_s3("upload_part", Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number, Body=body)["ETag"]

    def _complete(self) -> None:
        if self.client is not None:
            self.client.complete_upload(self.bucket, self.key, self.upload_id, self._parts)
            return
        parts = [{"PartNumber": n, "ETag": etag} for n, etag in sorted(self._parts)]
        self.fs.call_s3("complete_multipart_upload", Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, MultipartUpload={"Parts": parts})

    def _abort(self, upload_id: str) -> None:
        if self.client is not None:
            self.client.abort_upload(self.bucket, self.key, upload_id)
        else:
            self.fs.call_s3("abort_multipart_upload", Bucket=self.bucket, Key=self.key, UploadId=upload_id)

    @staticmethod
    def supported(url: str) -> bool:
        return url.split("://", 1)[0] in ("s3", "s3a")

    def _send(self, number: int, start: int, end: int) -> None:
        with open(self.local, "rb") as f:
            f.seek(start)
            body = f.read(end - start)
        self._parts.append((number, self._part(number, body)))

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            try:
                pending.result()
            except Exception as e:
                raise storage_error(self.url, e) from None

    def feed(self, size: int, flush: Callable[[], None]) -> None:
        """The local file is ``size`` bytes long: send the next part if a whole one is there
        (``flush`` puts the writer's buffer on disk first)."""
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
        """Send the rest of the (closed) file and complete the upload: the object appears."""
        try:
            self._wait()
            while self.sent < size or not self._parts:
                end = min(size, self.sent + self.upload_part_size(self._next))
                self._send(self._next, self.sent, end)
                self._next += 1
                self.sent = end
            self._complete()
        except Exception as e:
            self.abort()
            raise storage_error(self.url, e) from None
        finally:
            self._pool.shutdown()

    def abort(self) -> None:
        """Drop the upload and every part sent (idempotent)."""
        try:
            if self._pending is not None:
                self._pending.cancel()
                with contextlib.suppress(Exception):
                    self._pending.result()
            self._abort(self.upload_id)
        except Exception:
            pass
        finally:
            self._pool.shutdown(wait=False)
