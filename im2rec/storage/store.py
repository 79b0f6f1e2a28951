"""The store seam: every request im2rec makes of an object store goes through a ``Store``, chosen
once per URL by ``store_for`` from ``STORES`` (as MosaicML streaming's ``CloudUploader`` picks its
uploader by scheme): ``S3Store`` for ``s3://`` (im2rec's own client, ``s3client``), ``FsspecStore``
for every other scheme and for S3 options only s3fs knows.

Inside the seam, and nowhere else: retries (``retries.Policy``: every request, each on its own,
with backoff and full jitter, ``Retry-After`` honoured, bounded in count and time), timeouts,
the words a failure is said in (``storage_error``: the URL, the last answer, the attempts), and
the counters (``retries.Tally``). A caller gets bytes, or a ``StorageError`` (``ObjectMissing``
for what is not there) that it shows as it is; ``StorageError.transient`` tells a store that
stopped answering from a refusal.

Every request is one S3 verb, idempotent (GET, ranged GET, HEAD, PUT of a whole object,
UploadPart, UploadPartCopy, list, DELETE, abort) or made safe to repeat: a retried
CompleteMultipartUpload that finds its upload gone checks that the object is there with the
ETag the parts give (its first answer was lost, not its work).
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, TypeVar
from urllib.parse import quote

from ..errors import ObjectMissing, StorageError
from . import s3client
from .multipart import UPLOAD_PART, expected_etag, put_in_parts
from .retries import TIMEOUT, GaveUp, Policy, Tally, check_options, transient
from .s3client import NoSuchObject, S3Client, S3Error, split, xml_fields, xml_records

__all__ = ["OPEN_BLOCK", "STORES", "FsspecStore", "Info", "S3Store", "Store", "filesystem", "object_path", "storage_error", "store_for"]

#: Bytes read at once by ``Store.open`` (a tar or Parquet file read as a stream) and ``download``.
OPEN_BLOCK = 8 << 20

#: Ranged GETs of one ``download`` in flight at once.
DOWNLOAD_PARALLEL = 4


@dataclass(frozen=True)
class Info:
    """What a HEAD says of an object: its ``size`` and ``etag`` (None where the store has none)."""

    size: int
    etag: str | None


class Store(Protocol):
    """The verbs of an object store; URLs are whole (``s3://bucket/key``). Each call is retried
    inside, counted in ``tally``, and fails with a ``StorageError`` naming the URL.

    ``multipart`` says whether the store has S3's multipart uploads (``create_upload``...
    ``uploads``); ``put_stream`` uses them where it can, and ``uploads.Streamer`` needs them."""

    tally: Tally

    @property
    def multipart(self) -> bool: ...

    def get(self, url: str) -> bytes: ...

    def get_range(self, url: str, start: int, end: int) -> bytes:
        """The bytes ``[start, end)`` (fewer past the end of the object)."""
        ...

    def get_many(self, urls: Sequence[str]) -> list[bytes | StorageError]:
        """Each object's bytes or its error, in order, fetched concurrently."""
        ...

    def get_ranges(self, url: str, ranges: Sequence[tuple[int, int]]) -> list[bytes | StorageError]:
        """Each range's bytes or its error, in order, fetched concurrently."""
        ...

    def head(self, url: str) -> Info: ...

    def exists(self, url: str) -> bool:
        """Whether ``url`` names an object, a bucket, or a prefix ("folder") that holds objects."""
        ...

    def check_bucket(self, url: str) -> None:
        """Raise ``ObjectMissing`` naming the bucket when it is not there (or not visible)."""
        ...

    def put(self, url: str, data: bytes | memoryview) -> None:
        """One request: the object appears whole or not at all."""
        ...

    def put_stream(self, url: str, src: Any, part: int = UPLOAD_PART) -> None:
        """Copy a readable binary stream to ``url`` so that the object appears only complete."""
        ...

    def list_prefix(self, url: str, recursive: bool = True) -> list[str]:
        """The objects under the prefix ``url``, as ``/``-separated names relative to it."""
        ...

    def glob(self, url: str) -> list[str]:
        """The URLs of the objects ``url``'s ``*``, ``?``, ``[...]`` (``**`` across folders) match, sorted."""
        ...

    def delete(self, urls: Sequence[str]) -> None:
        """Delete these objects; one that is not there is no error."""
        ...

    def open(self, url: str, block: int = OPEN_BLOCK) -> BinaryIO:
        """The object as a seekable binary stream, read ``block`` bytes at a time."""
        ...

    def download(self, url: str, path: str) -> None:
        """Copy the object to the local file ``path``."""
        ...

    def create_upload(self, url: str) -> str: ...

    def upload_part(self, url: str, upload_id: str, number: int, body: bytes | memoryview) -> str: ...

    def copy_part(self, url: str, upload_id: str, number: int, source: str, start: int, end: int) -> str:
        """Part ``number`` is the bytes ``[start, end)`` of the object ``source``, copied by the store; its ETag."""
        ...

    def complete_upload(self, url: str, upload_id: str, parts: Sequence[tuple[int, str]]) -> None: ...

    def abort_upload(self, url: str, upload_id: str) -> None: ...

    def uploads(self, url: str) -> list[str]:
        """The ids of the multipart uploads left open for exactly this object."""
        ...


# --------------------------------------------------------------------------- the words


def storage_error(url: str, e: BaseException, attempts: int = 1, span: tuple[int, int] | None = None) -> StorageError:
    """The one translation of a store's failure into a ``StorageError``: the URL, what the store
    said, the bytes asked for (``span``) and the attempts made (when more than one)."""
    if isinstance(e, StorageError):
        return e  # said already
    said: str
    cls: type[StorageError] = StorageError
    if isinstance(e, NoSuchObject) and e.code == "NoSuchBucket":
        cls, said = ObjectMissing, f"the bucket {split(url)[0]} does not exist (or these credentials cannot see it)"
    elif isinstance(e, NoSuchObject) and e.code == "NoSuchKey":
        cls, said = ObjectMissing, "no such object"
    elif isinstance(e, NoSuchObject) and e.code:  # NoSuchUpload, and the like: the store's words
        cls, said = ObjectMissing, e.said
    elif isinstance(e, FileNotFoundError):
        cls, said = ObjectMissing, "no such object (or its bucket does not exist)"
    elif isinstance(e, PermissionError):
        said = f"access denied: {e.said if isinstance(e, S3Error) else e}"
    elif isinstance(e, S3Error):
        said = e.said
    elif isinstance(e, TypeError) and (unknown := re.search(r"unexpected keyword argument '(\w+)'", str(e))):
        # s3fs hands storage options to aiobotocore, which refuses a name it does not know at the first request
        said = f"the store's driver takes no storage option {unknown.group(1)!r} (see --storage-option in the README)"
    else:
        said = f"{type(e).__name__}: {e}"
    notes = [f"reading bytes {span[0]}-{span[1]}"] if span is not None else []
    if attempts > 1:
        notes.append(f"after {attempts} attempts")
    error = cls(f"{url}: {said}" + (f" ({', '.join(notes)})" if notes else ""))
    error.url, error.span, error.attempts = url, span, attempts
    error.transient = cls is not ObjectMissing and transient(e)
    return error


T = TypeVar("T")


class _Retried:
    """What both stores share: a policy, a tally, and the run of one request through them."""

    tally: Tally
    policy: Policy

    def _run(self, url: str, attempt: Callable[[], T], span: tuple[int, int] | None = None) -> T:
        try:
            return self.policy.run(attempt, self.tally)
        except GaveUp as g:
            raise storage_error(url, g.last, g.attempts, span) from None

    def _try(self, url: str, attempt: Callable[[], bytes], span: tuple[int, int] | None = None) -> bytes | StorageError:
        try:
            return self._run(url, attempt, span)
        except StorageError as e:
            return e


def _open_ranged(store: Store, url: str, block: int) -> BinaryIO:
    """``Store.open``: the object read ``block`` bytes at a time by ranged GETs, each retried by the store."""
    return io.BufferedReader(_Ranged(store, url, store.head(url).size), block)


class _Ranged(io.RawIOBase):
    """An object read by ranged GETs, for ``Store.open`` (inside a ``BufferedReader``)."""

    def __init__(self, store: Store, url: str, size: int):
        self.store, self.url, self.size, self.pos = store, url, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = max(0, {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        end = min(self.size, self.pos + len(buffer))
        if end <= self.pos:
            return 0
        data = self.store.get_range(self.url, self.pos, end)
        memoryview(buffer)[: len(data)] = data
        self.pos += len(data)
        return len(data)


# --------------------------------------------------------------------------- S3, im2rec's own client


def _glob_pattern(pattern: str) -> re.Pattern[str]:
    """A key pattern as a regular expression: ``**`` any characters, ``*`` and ``?`` within a
    folder, ``[...]`` (``[!...]``) a class."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (close := pattern.find("]", i + 2)) > 0:
            inner = pattern[i + 1 : close]
            out.append("[" + ("^" + inner[1:] if inner.startswith("!") else inner.replace("\\", "\\\\")) + "]")
            i = close
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def _wildcard(text: str) -> int:
    """Where the first wildcard of ``text`` is (its length when there is none)."""
    return min([i for i in (text.find(c) for c in "*?[") if i >= 0] or [len(text)])


class S3Store(_Retried):
    """The ``Store`` of ``s3://`` URLs on im2rec's own client (``s3client``): 0.2 ms of CPU a
    request, against s3fs's 3 ms. Requests that move many objects or ranges run ``CONCURRENCY``
    at once on the client's threads, each retried on its own."""

    multipart = True

    def __init__(self, client: S3Client, tally: Tally, policy: Policy):
        self.client, self.tally, self.policy = client, tally, policy

    @classmethod
    def for_url(cls, url: str, storage_options: Mapping[str, Any] | None, tally: Tally, policy: Policy) -> S3Store | None:
        client = s3client.client_for(url, storage_options)
        return cls(client, tally, policy) if client is not None else None

    # -- reading -------------------------------------------------------------- #

    def get(self, url: str) -> bytes:
        return self._run(url, self._getter(url, None))

    def get_range(self, url: str, start: int, end: int) -> bytes:
        return self._run(url, self._getter(url, (start, end)), (start, end))

    def _getter(self, url: str, span: tuple[int, int] | None) -> Callable[[], bytes]:
        """One attempt of a GET of ``url`` (of the bytes ``span``), its bytes counted."""
        bucket, key = split(url)
        headers = {"Range": f"bytes={span[0]}-{span[1] - 1}"} if span is not None else {}

        def attempt() -> bytes:
            data = self.client.request("GET", bucket, key, headers=headers).body
            self.tally.count(fetched=len(data))
            return data

        return attempt

    def get_many(self, urls: Sequence[str]) -> list[bytes | StorageError]:
        return self.client.map(lambda u: self._try(u, self._getter(u, None)), urls)

    def get_ranges(self, url: str, ranges: Sequence[tuple[int, int]]) -> list[bytes | StorageError]:
        return self.client.map(lambda r: self._try(url, self._getter(url, r), r), ranges)

    def open(self, url: str, block: int = OPEN_BLOCK) -> BinaryIO:
        return _open_ranged(self, url, block)

    def download(self, url: str, path: str) -> None:
        size = self.head(url).size
        with open(path, "wb") as out:
            starts = list(range(0, size, OPEN_BLOCK))
            for i in range(0, len(starts), DOWNLOAD_PARALLEL):
                for data in self.get_ranges(url, [(a, min(size, a + OPEN_BLOCK)) for a in starts[i : i + DOWNLOAD_PARALLEL]]):
                    if isinstance(data, StorageError):
                        raise data
                    out.write(data)

    def head(self, url: str) -> Info:
        bucket, key = split(url)
        headers = self._run(url, lambda: self.client.request("HEAD", bucket, key).headers)
        return Info(int(headers.get("content-length", 0)), headers.get("etag"))

    def exists(self, url: str) -> bool:
        bucket, key = split(url)
        try:
            if not key:
                self._run(url, lambda: self.client.request("HEAD", bucket))
                return True
            if not key.endswith("/"):
                try:
                    self.head(url)
                    return True
                except ObjectMissing:
                    pass
            return bool(self._list_page(url, bucket, key.rstrip("/") + "/", max_keys=1)[0])
        except ObjectMissing:
            return False

    def check_bucket(self, url: str) -> None:
        bucket = split(url)[0]
        try:
            self._run(f"{url.split('://', 1)[0]}://{bucket}", lambda: self.client.request("HEAD", bucket))
        except ObjectMissing:
            raise ObjectMissing(f"{url}: the bucket {bucket} does not exist (or these credentials cannot see it)") from None

    def _list_page(self, url: str, bucket: str, prefix: str, max_keys: int = 1000, token: str | None = None, delimiter: str | None = None) -> tuple[list[str], str | None]:
        """One page of ListObjectsV2: the keys, and the token of the next page (None: the last)."""
        query = {"list-type": "2", "prefix": prefix, "max-keys": str(max_keys)}
        if token:
            query["continuation-token"] = token
        if delimiter:
            query["delimiter"] = delimiter
        body = self._run(url, lambda: self.client.request("GET", bucket, query=query).body)
        keys = [r.get("Key", "") for r in xml_records(body, "Contents")]
        fields = xml_fields(body)
        more = fields.get("IsTruncated", "false").lower() == "true"
        return keys, (fields.get("NextContinuationToken") or None) if more else None

    def _keys(self, url: str, prefix: str, delimiter: str | None = None) -> list[str]:
        bucket = split(url)[0]
        found: list[str] = []
        token: str | None = None
        while True:
            keys, token = self._list_page(url, bucket, prefix, token=token, delimiter=delimiter)
            found += keys
            if token is None:
                return found

    def list_prefix(self, url: str, recursive: bool = True) -> list[str]:
        prefix = split(url)[1].rstrip("/")
        prefix = prefix + "/" if prefix else ""
        return [k[len(prefix) :] for k in self._keys(url, prefix, None if recursive else "/") if k.startswith(prefix) and k != prefix]

    def glob(self, url: str) -> list[str]:
        bucket, pattern = split(url)
        scheme = url.split("://", 1)[0]
        regex = _glob_pattern(pattern)
        return sorted(f"{scheme}://{bucket}/{k}" for k in self._keys(url, pattern[: _wildcard(pattern)]) if regex.match(k))

    # -- writing -------------------------------------------------------------- #

    def put(self, url: str, data: bytes | memoryview) -> None:
        bucket, key = split(url)
        self._run(url, lambda: self.client.request("PUT", bucket, key, body=data))

    def put_stream(self, url: str, src: Any, part: int = UPLOAD_PART) -> None:
        _put_stream(self, url, src, part)

    def delete(self, urls: Sequence[str]) -> None:
        def one(url: str) -> None:
            bucket, key = split(url)
            self._run(url, lambda: self.client.request("DELETE", bucket, key, ok=(200, 204, 404)))

        for failure in self.client.map(one, urls):
            if isinstance(failure, BaseException):
                raise failure

    # -- multipart uploads ---------------------------------------------------- #

    def create_upload(self, url: str) -> str:
        """A new multipart upload's id. A create retried after its answer was lost (not its work)
        made an upload nobody knows of: once one answers, the key's others are aborted."""
        bucket, key = split(url)
        tried = 0

        def attempt() -> bytes:
            nonlocal tried
            tried += 1
            return self.client.request("POST", bucket, key, query={"uploads": ""}).body

        upload_id = xml_fields(self._run(url, attempt)).get("UploadId")
        if not upload_id:
            raise StorageError(f"{url}: the store's answer to CreateMultipartUpload has no UploadId")
        if tried > 1:
            for other in self.uploads(url):
                if other != upload_id:
                    self.abort_upload(url, other)
        return upload_id

    def upload_part(self, url: str, upload_id: str, number: int, body: bytes | memoryview) -> str:
        bucket, key = split(url)
        query = {"partNumber": str(number), "uploadId": upload_id}
        return self._run(url, lambda: self.client.request("PUT", bucket, key, query=query, body=body).headers.get("etag", ""))

    def copy_part(self, url: str, upload_id: str, number: int, source: str, start: int, end: int) -> str:
        bucket, key = split(url)
        source_bucket, source_key = split(source)
        headers = {"x-amz-copy-source": quote(f"/{source_bucket}/{source_key}", safe="/~"), "x-amz-copy-source-range": f"bytes={start}-{end - 1}"}
        query = {"partNumber": str(number), "uploadId": upload_id}

        def attempt() -> str:
            answer = self.client.request("PUT", bucket, key, query=query, headers=headers)
            _raise_error_in_body("PUT", f"{bucket}/{key}?partNumber", answer.body)  # S3 may answer 200 and put the error in the body
            return xml_fields(answer.body).get("ETag", "")

        return self._run(url, attempt)

    def complete_upload(self, url: str, upload_id: str, parts: Sequence[tuple[int, str]]) -> None:
        bucket, key = split(url)
        xml = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>" for n, etag in sorted(parts))
        body = f"<CompleteMultipartUpload>{xml}</CompleteMultipartUpload>".encode()
        tried = 0

        def attempt() -> None:
            nonlocal tried
            tried += 1
            try:
                answer = self.client.request("POST", bucket, key, query={"uploadId": upload_id}, body=body)
            except NoSuchObject:
                if tried > 1 and self._completed(url, parts):  # an earlier attempt's answer was lost, not its work
                    return
                raise
            _raise_error_in_body("POST", f"{bucket}/{key}?uploadId", answer.body)

        self._run(url, attempt)

    def _completed(self, url: str, parts: Sequence[tuple[int, str]]) -> bool:
        try:
            etag = self.head(url).etag or ""
        except StorageError:
            return False
        expected = expected_etag(parts)
        return etag == expected if expected is not None else etag.strip('"').endswith(f"-{len(parts)}")

    def abort_upload(self, url: str, upload_id: str) -> None:
        bucket, key = split(url)
        self._run(url, lambda: self.client.request("DELETE", bucket, key, query={"uploadId": upload_id}, ok=(200, 204, 404)))

    def uploads(self, url: str) -> list[str]:
        bucket, key = split(url)
        found: list[str] = []
        markers: dict[str, str] = {}
        while True:
            query = {"uploads": "", "prefix": key, **markers}
            body = self._run(url, lambda q=query: self.client.request("GET", bucket, query=q).body)  # type: ignore[misc]
            found += [u.get("UploadId", "") for u in xml_records(body, "Upload") if u.get("Key") == key]
            fields = xml_fields(body)
            if fields.get("IsTruncated", "false").lower() != "true":
                return found
            markers = {"key-marker": fields.get("NextKeyMarker", ""), "upload-id-marker": fields.get("NextUploadIdMarker", "")}
            if not any(markers.values()):
                return found


def _raise_error_in_body(method: str, where: str, body: bytes) -> None:
    if b"<Error>" in body[:512]:
        fields = xml_fields(body)
        code, message = fields.get("Code", ""), fields.get("Message", "")
        raise S3Error(f"{method} {where}: {code}: {message}", 200, code, f"{code}: {message}")


def _put_stream(store: Store, url: str, src: Any, part: int) -> None:
    """``put_in_parts``, its failures said: the store's as they are, the stream's as a StorageError naming the URL."""
    try:
        put_in_parts(store, url, src, part)
    except OSError as e:  # the source's (a local disk)
        if isinstance(e, FileNotFoundError):
            raise
        raise storage_error(url, e) from None


# --------------------------------------------------------------------------- fsspec, for the rest


def filesystem(url: str, storage_options: Mapping[str, Any] | None = None, fresh: bool = False) -> tuple[Any, str]:
    """``(fsspec filesystem, path within it)`` for ``url``.

    Raises:
        StorageError: fsspec or the scheme's driver is not installed.
    """
    try:
        import fsspec
        from fsspec.core import split_protocol
    except ImportError:
        raise StorageError(f"{url}: reading URLs needs fsspec and the store's driver: pip install s3fs (im2rec's s3 extra; gcsfs, adlfs for the others)") from None
    protocol = split_protocol(url)[0] or "file"
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as e:
        extra = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}.get(protocol)
        hint = f": pip install {extra}" if extra else ""
        raise StorageError(f"{url}: no fsspec driver for {protocol}:// ({e}){hint}") from None
    options = dict(storage_options or {})
    if fresh:
        options["skip_instance_cache"] = True
    fs = cls(**options)
    return fs, object_path(url)


def object_path(url: str) -> str:
    """The path a filesystem of ``url``'s store names it by (the URL without its scheme)."""
    from fsspec.core import strip_protocol

    return str(strip_protocol(url))


def _single_attempt_options(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """botocore's own retries off, so that every retry is the seam's, with its backoff, and
    counted; ``TIMEOUT`` to connect and between bytes."""
    options = dict(storage_options or {})
    if url.split("://", 1)[0] in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        config["retries"] = {"total_max_attempts": 1}  # the count asked for is the seam's (``retries.check_options``)
        config.setdefault("connect_timeout", TIMEOUT)
        config.setdefault("read_timeout", TIMEOUT)
        options["config_kwargs"] = config
    return options


class FsspecStore(_Retried):
    """The ``Store`` of every other scheme (``gs://``, ``az://``, ``memory://``, ``file://``...) and of
    S3 with options only s3fs knows, on fsspec: the same verbs, retried and counted the same way
    (the driver's own retries off). Multipart verbs through s3fs's botocore client where the
    driver is s3fs. The filesystem is made in the process that uses it, again after a fork."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None, tally: Tally, policy: Policy):
        self.scheme = url.split("://", 1)[0].lower()
        self.options = _single_attempt_options(url, storage_options)
        self.tally, self.policy = tally, policy
        self._fs: Any = None
        self._pid = -1

    @property
    def fs(self) -> Any:
        if self._pid != os.getpid():
            fs, _ = filesystem(f"{self.scheme}://", self.options, fresh=self._pid != -1)
            if hasattr(fs, "retries"):  # s3fs retries some errors itself
                fs.retries = 1
            self._fs, self._pid = fs, os.getpid()
        return self._fs

    @property
    def multipart(self) -> bool:
        return self.scheme in ("s3", "s3a") and hasattr(self.fs, "call_s3")

    def _local_like(self) -> bool:
        return getattr(self.fs, "root_marker", "") == "/"  # file://, memory://: folders are real there

    # -- reading -------------------------------------------------------------- #

    def get(self, url: str) -> bytes:
        return self._counted(url, lambda: self.fs.cat_file(object_path(url)))

    def get_range(self, url: str, start: int, end: int) -> bytes:
        return self._counted(url, lambda: self.fs.cat_file(object_path(url), start=start, end=end), (start, end))

    def _counted(self, url: str, fetch: Callable[[], bytes], span: tuple[int, int] | None = None) -> bytes:
        def attempt() -> bytes:
            data = fetch()
            self.tally.count(fetched=len(data))
            return data

        return self._run(url, attempt, span)

    def _batch(self, keys: Sequence[Any], attempt: Callable[[list[Any]], list[Any]], name: Callable[[Any], tuple[str, tuple[int, int] | None]]) -> list[bytes | StorageError]:
        """fsspec's concurrent calls (``cat``, ``cat_ranges``) for many items at once, retried
        together (``Policy.run_many``): each item's bytes, or its error in the seam's words."""
        results = self.policy.run_many(keys, attempt, self.tally)
        self.tally.count(fetched=sum(len(got) for got, _ in results.values() if isinstance(got, bytes)))
        out: list[bytes | StorageError] = []
        for k in keys:
            got, tries = results[k]
            out.append(storage_error(name(k)[0], got, tries, name(k)[1]) if isinstance(got, BaseException) else got)
        return out

    def get_many(self, urls: Sequence[str]) -> list[bytes | StorageError]:
        def attempt(todo: list[str]) -> list[Any]:
            paths = [object_path(u) for u in todo]
            if len(paths) == 1:
                return [self.fs.cat_file(paths[0])]
            got = self.fs.cat(paths, on_error="return")
            return [got.get(p, FileNotFoundError(p)) for p in paths]

        return self._batch(urls, attempt, lambda u: (u, None))

    def get_ranges(self, url: str, ranges: Sequence[tuple[int, int]]) -> list[bytes | StorageError]:
        path = object_path(url)

        def attempt(todo: list[tuple[int, int]]) -> list[Any]:
            if len(todo) == 1:
                return [self.fs.cat_file(path, start=todo[0][0], end=todo[0][1])]
            return list(self.fs.cat_ranges([path] * len(todo), [a for a, _ in todo], [b for _, b in todo], on_error="return"))

        return self._batch(ranges, attempt, lambda r: (url, r))

    def head(self, url: str) -> Info:
        info = self._run(url, lambda: self.fs.info(object_path(url)))
        return Info(int(info["size"]), info.get("ETag") or info.get("etag") or info.get("md5Hash"))

    def exists(self, url: str) -> bool:
        return bool(self._run(url, lambda: self.fs.exists(object_path(url))))

    def check_bucket(self, url: str) -> None:
        path = object_path(url)
        if self._local_like() or "/" not in path.strip("/"):
            return  # a local-like store (file://, memory://): nothing to check
        bucket = path.strip("/").split("/", 1)[0]
        where = f"{self.scheme}://{bucket}"
        if self._run(where, lambda: self.fs.exists(bucket)):
            return
        with contextlib.suppress(ObjectMissing):  # exists() says False for an endpoint it cannot reach, too: ask again, for the real error
            self._run(where, lambda: self.fs.ls(bucket))
        raise ObjectMissing(f"{url}: the bucket {bucket} does not exist (or these credentials cannot see it)")

    def list_prefix(self, url: str, recursive: bool = True) -> list[str]:
        path = object_path(url).rstrip("/")
        found = self._run(url, lambda: self.fs.find(path, maxdepth=None if recursive else 1, withdirs=False))
        return [p[len(path) + 1 :] for p in found if p.startswith(path + "/")]

    def glob(self, url: str) -> list[str]:
        matches = sorted(self._run(url, lambda: self.fs.glob(object_path(url))))
        return [f"{self.scheme}://{m.lstrip('/')}" if self.scheme != "file" else f"file://{m}" for m in matches]

    def open(self, url: str, block: int = OPEN_BLOCK) -> BinaryIO:
        return _open_ranged(self, url, block)  # each read a ranged GET, retried here (the driver's file would not be)

    def download(self, url: str, path: str) -> None:
        self._run(url, lambda: self.fs.get_file(object_path(url), path))

    # -- writing -------------------------------------------------------------- #

    def put(self, url: str, data: bytes | memoryview) -> None:
        path = object_path(url)
        if self._local_like():
            self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        self._run(url, lambda: self.fs.pipe_file(path, bytes(data)))

    def put_stream(self, url: str, src: Any, part: int = UPLOAD_PART) -> None:
        if self.multipart:
            _put_stream(self, url, src, part)
            return
        path = object_path(url)

        def start() -> Any:
            if self._local_like():
                self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
            return self.fs.open(path, "wb")

        f = self._run(url, start)
        try:
            shutil.copyfileobj(src, f, 16 << 20)
        except BaseException as e:
            discard = getattr(f, "discard", None)  # a driver's abort (an unfinished upload dropped)
            if discard is not None:
                discard()
            f.closed = True  # nothing to flush or complete any more
            if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
                raise storage_error(url, e) from None
            raise
        self._run(url, f.close)

    def delete(self, urls: Sequence[str]) -> None:
        if not urls:
            return
        paths = [object_path(u) for u in urls]

        def attempt() -> None:
            there = [p for p in paths if self.fs.exists(p)]
            if there:
                self.fs.rm(there)

        self._run(urls[0], attempt)

    # -- multipart uploads, through s3fs's botocore client ---------------------- #

    def _call_s3(self, url: str, method: str, **kwargs: Any) -> Any:
        bucket, key = split(url)
        return self._run(url, lambda: self.fs.call_s3(method, Bucket=bucket, Key=key, **kwargs))

    def create_upload(self, url: str) -> str:
        return str(self._call_s3(url, "create_multipart_upload")["UploadId"])

    def upload_part(self, url: str, upload_id: str, number: int, body: bytes | memoryview) -> str:
        return str(self._call_s3(url, "upload_part", UploadId=upload_id, PartNumber=number, Body=bytes(body))["ETag"])

    def copy_part(self, url: str, upload_id: str, number: int, source: str, start: int, end: int) -> str:
        bucket, key = split(source)
        answer = self._call_s3(url, "upload_part_copy", UploadId=upload_id, PartNumber=number, CopySource={"Bucket": bucket, "Key": key}, CopySourceRange=f"bytes={start}-{end - 1}")
        return str(answer["CopyPartResult"]["ETag"])

    def complete_upload(self, url: str, upload_id: str, parts: Sequence[tuple[int, str]]) -> None:
        listed = [{"PartNumber": n, "ETag": etag} for n, etag in sorted(parts)]
        self._call_s3(url, "complete_multipart_upload", UploadId=upload_id, MultipartUpload={"Parts": listed})

    def abort_upload(self, url: str, upload_id: str) -> None:
        self._call_s3(url, "abort_multipart_upload", UploadId=upload_id)

    def uploads(self, url: str) -> list[str]:
        bucket, key = split(url)
        found: list[str] = []
        markers: dict[str, str] = {}
        while True:
            answer = self._run(url, lambda m=markers: self.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=key, **m))  # type: ignore[misc]
            found += [u["UploadId"] for u in answer.get("Uploads", []) if u.get("Key") == key]
            if not answer.get("IsTruncated"):
                return found
            markers = {"KeyMarker": answer.get("NextKeyMarker", ""), "UploadIdMarker": answer.get("NextUploadIdMarker", "")}


# --------------------------------------------------------------------------- the table

#: The store of a URL's scheme; a factory may decline (None: the options are s3fs's), and
#: ``FsspecStore`` does the work, as it does for every scheme not here.
STORES: dict[str, Callable[[str, Mapping[str, Any] | None, Tally, Policy], Store | None]] = {
    "s3": S3Store.for_url,
    "s3a": S3Store.for_url,
}


def store_for(url: str, storage_options: Mapping[str, Any] | None = None, *, tally: Tally | None = None, retries: int | None = None) -> Store:
    """The store of ``url`` with these options: its requests counted in ``tally`` (a new one if
    None) and retried ``retries`` times (if None: as ``config_kwargs.retries`` asks, else
    ``retries.RETRIES``)."""
    tally = tally if tally is not None else Tally()
    policy = Policy.default(retries if retries is not None else check_options(storage_options)[2])
    make = STORES.get(url.split("://", 1)[0].lower())
    store = make(url, storage_options, tally, policy) if make is not None else None
    return store if store is not None else FsspecStore(url, storage_options, tally, policy)
