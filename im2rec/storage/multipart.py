"""S3 multipart uploads on a store's verbs: the sizes of the parts, a stream sent in parts
(``put_in_parts``, aborted on any failure: no upload left open), and the ETag a completed upload
has (``expected_etag``, which tells a retried CompleteMultipartUpload whose first answer was lost
that it went through).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

__all__ = ["MIN_PART", "UPLOAD_PART", "UPLOAD_PARTS_IN_FLIGHT", "Multipart", "expected_etag", "put_in_parts", "read_full", "upload_part_size"]

#: Bytes of the first 1,000 parts of a multipart upload; the next 1,000 are twice as large, and
#: so on: S3 takes at most 10,000 parts of 5 MiB or more (but the last): 55,000 x 16 MiB, about
#: 920 GB; a part in flight, read into memory, costs 16 MB for any .rec under 16 GB.
UPLOAD_PART = 16 << 20

#: Parts of one upload sent at once (each held in memory while it is sent).
UPLOAD_PARTS_IN_FLIGHT = 2

#: S3's smallest part (but the last).
MIN_PART = 5 << 20


def upload_part_size(number: int, first: int = UPLOAD_PART) -> int:
    """The size of part ``number`` (from 1) of an upload whose first parts are ``first`` bytes: see ``UPLOAD_PART``."""
    return first * (1 + (number - 1) // 1000)


class Multipart(Protocol):
    """The verbs of a store that has S3's multipart uploads (``store.Store``'s)."""

    def put(self, url: str, data: bytes | memoryview) -> None: ...

    def create_upload(self, url: str) -> str: ...

    def upload_part(self, url: str, upload_id: str, number: int, body: bytes | memoryview) -> str: ...

    def complete_upload(self, url: str, upload_id: str, parts: Sequence[tuple[int, str]]) -> None: ...

    def abort_upload(self, url: str, upload_id: str) -> None: ...

    def uploads(self, url: str) -> list[str]: ...


def read_full(src: Any, size: int) -> bytes:
    """``size`` bytes of ``src`` (fewer only at its end)."""
    chunks, got = [], 0
    while got < size:
        chunk = src.read(size - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def put_in_parts(store: Multipart, url: str, src: Any, first: int = UPLOAD_PART) -> None:
    """Send the stream ``src`` to ``url``: one PUT for what fits in a part, else a multipart
    upload, ``UPLOAD_PARTS_IN_FLIGHT`` parts at once, completed at the end and aborted on any
    failure or interrupt, so that the object appears only complete and no upload is left open.

    Raises:
        StorageError: from the store (after its retries); anything ``src`` raises, after the abort.
    """
    head = read_full(src, first)
    if len(head) < first:
        store.put(url, head)
        return
    upload_id = store.create_upload(url)
    parts: list[tuple[int, str]] = []
    try:
        with ThreadPoolExecutor(UPLOAD_PARTS_IN_FLIGHT, thread_name_prefix="im2rec-upload") as pool:
            pending: list[Future] = []
            number, body = 1, head
            while body:
                pending.append(pool.submit(lambda n, b: (n, store.upload_part(url, upload_id, n, b)), number, body))
                while len(pending) >= UPLOAD_PARTS_IN_FLIGHT:
                    parts.append(pending.pop(0).result())
                number += 1
                body = read_full(src, upload_part_size(number, first))
            parts += [f.result() for f in pending]
        store.complete_upload(url, upload_id, parts)
    except BaseException:
        abort_all(store, url, upload_id)
        raise


def abort_all(store: Multipart, url: str, upload_id: str | None = None) -> None:
    """Abort ``upload_id`` and any other upload left open for ``url`` (a create whose answer was
    lost, retried, leaves one behind); quietly: this runs while another failure is raised."""
    with contextlib.suppress(Exception):
        if upload_id is not None:
            store.abort_upload(url, upload_id)
        for other in store.uploads(url):
            store.abort_upload(url, other)


def expected_etag(parts: Sequence[tuple[int, str]]) -> str | None:
    """The ETag S3 gives the object a multipart upload of ``parts`` ((number, part ETag)) makes:
    the MD5 of the parts' MD5s, dash, their count; None when a part's ETag is not an MD5 (an
    encrypted store's)."""
    digests = []
    for _, etag in sorted(parts):
        hexdigest = etag.strip('"')
        if len(hexdigest) != 32:
            return None
        try:
            digests.append(bytes.fromhex(hexdigest))
        except ValueError:
            return None
    return f'"{hashlib.md5(b"".join(digests)).hexdigest()}-{len(parts)}"'
