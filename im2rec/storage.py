"""Object storage behind one seam: URLs (``s3://``, ``gs://``, ``memory://``, ...) through fsspec.

Everything that reads a ``.rec`` from a URL goes through ``RemoteSource``, the
byte-source interface of ``recordio.RecordReader`` implemented with ranged reads: a
record read by key is one request for exactly its bytes (the ``.idx`` says where the
next record starts), a sequential scan reads large blocks. The format core never
imports fsspec; a local path never reaches this module.

fsspec and the store's driver are optional extras (``pip install 'im2rec[s3]'`` for
S3; gcsfs, adlfs likewise). Credentials and endpoints come the way fsspec users set
them: the environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, profiles) or
``storage_options`` (``--storage-option KEY=VALUE`` on the command line).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import itertools
import os
import posixpath
import re
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from . import s3client
from .errors import OutputExistsError, StorageError

__all__ = [
    "RemoteSource",
    "StagedInput",
    "StagedOutput",
    "StoreUnreachable",
    "Streamer",
    "check_bucket",
    "exists",
    "expand",
    "fetch_in_order",
    "filesystem",
    "hold_at_least",
    "is_url",
    "join",
    "list_files",
    "merge_options",
    "missing",
    "parse_storage_option",
    "read_any",
    "read_bytes",
    "staging_base",
    "staging_dir",
    "there",
    "upload",
    "upload_stream",
    "write_bytes",
]

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
READAHEAD = 4 << 20  # bytes fetched at once when reading in order
T = TypeVar("T")


def is_url(path: Any) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path; ``file://`` counts as a URL."""
    return isinstance(path, str) and bool(_URL.match(path))


def parse_storage_option(text: str) -> tuple[str, Any]:
    """``"KEY=VALUE"`` -> ``(KEY, VALUE)``, VALUE as JSON when it parses (``anon=true``), else a string.
    ``client_kwargs.endpoint_url=...``-style dotted keys become nested dicts in ``merge_options``."""
    if "=" not in text:
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    import json

    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def merge_options(pairs: Any) -> dict[str, Any]:
    """Storage options from ``(key, value)`` pairs; a dotted key fills a nested dict."""
    options: dict[str, Any] = {}
    for key, value in pairs:
        target = options
        *outer, last = key.split(".")
        for part in outer:
            target = target.setdefault(part, {})
        target[last] = value
    return options


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


def _translate(url: str, e: BaseException) -> StorageError:
    if isinstance(e, StorageError):
        return e  # said already
    if isinstance(e, s3client.NoSuchObject) and e.code == "NoSuchBucket":
        return StorageError(f"{url}: the bucket {s3client.split(url)[0]} does not exist (or these credentials cannot see it)")
    if isinstance(e, s3client.NoSuchObject) and e.code == "NoSuchKey":
        return StorageError(f"{url}: no such object")
    if isinstance(e, FileNotFoundError):
        return StorageError(f"{url}: no such object (or its bucket does not exist)")
    if isinstance(e, PermissionError):
        return StorageError(f"{url}: access denied: {e.said if isinstance(e, s3client.S3Error) else e}")
    if isinstance(e, s3client.S3Error):
        return StorageError(f"{url}: {e.said}")
    unknown = re.search(r"unexpected keyword argument '(\w+)'", str(e)) if isinstance(e, TypeError) else None
    if unknown:  # s3fs hands storage options to aiobotocore, which refuses a name it does not know at the first request
        return StorageError(f"{url}: the store's driver takes no storage option {unknown.group(1)!r} (see --storage-option in the README)")
    return StorageError(f"{url}: {type(e).__name__}: {e}")


def exists(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    client = s3client.client_for(url, storage_options)
    if client is not None:
        bucket, key = s3client.split(url)
        try:
            if key and not key.endswith("/"):
                with contextlib.suppress(FileNotFoundError):
                    client.head(bucket, key)
                    return True
            return client.has_prefix(bucket, key.rstrip("/") + "/") if key else bool(client.request("HEAD", bucket))
        except FileNotFoundError:
            return False
        except Exception as e:
            raise _translate(url, e) from None
    fs, path = filesystem(url, storage_options)
    try:
        return bool(fs.exists(path))
    except Exception as e:
        raise _translate(url, e) from None


def check_bucket(url: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Fail at once, before any work, when the bucket (container) of ``url`` is missing or
    cannot be reached with these credentials.

    Raises:
        StorageError: naming the bucket.
    """
    client = s3client.client_for(url, storage_options)
    if client is not None:
        bucket = s3client.split(url)[0]
        try:
            client.request("HEAD", bucket)
        except FileNotFoundError:
            raise StorageError(f"{url}: the bucket {bucket} does not exist (or these credentials cannot see it)") from None
        except Exception as e:
            raise _translate(f"{url.split('://', 1)[0]}://{bucket}", e) from None
        return
    fs, path = filesystem(url, storage_options)
    if getattr(fs, "root_marker", "") == "/" or "/" not in path.strip("/"):
        return  # a local-like store (file://, memory://): nothing to check
    bucket = path.strip("/").split("/", 1)[0]
    try:
        there = fs.exists(bucket)
    except Exception as e:
        raise _translate(f"{url.split('://', 1)[0]}://{bucket}", e) from None
    if not there:
        try:  # exists() says False for an endpoint it cannot reach, too: ask again, for the real error
            fs.ls(bucket)
        except FileNotFoundError:
            pass
        except Exception as e:
            raise _translate(f"{url.split('://', 1)[0]}://{bucket}", e) from None
        raise StorageError(f"{url}: the bucket {bucket} does not exist (or these credentials cannot see it)")


def read_bytes(url: str, storage_options: Mapping[str, Any] | None = None) -> bytes:
    """The whole object (for small files: a ``.idx``, a ``.lst``, a manifest).

    Raises:
        StorageError: the object is missing or cannot be read.
    """
    client = s3client.client_for(url, storage_options)
    if client is not None:
        try:
            return client.get(*s3client.split(url))
        except Exception as e:
            raise _translate(url, e) from None
    fs, path = filesystem(url, storage_options)
    try:
        return fs.cat_file(path)
    except Exception as e:
        raise _translate(url, e) from None


def write_bytes(url: str, data: bytes, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write a small object in one request (on S3 a single PUT: it appears whole or not at all).

    Raises:
        StorageError: the object cannot be written.
    """
    client = s3client.client_for(url, storage_options)
    if client is not None:
        try:
            client.put(*s3client.split(url), data)
            return
        except Exception as e:
            raise _translate(url, e) from None
    fs, path = filesystem(url, storage_options)
    try:
        fs.pipe_file(path, data)
    except Exception as e:
        raise _translate(url, e) from None


def list_files(url: str, recursive: bool = True, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The objects under the prefix ``url`` (a "folder"), as ``/``-separated paths relative to it.

    Raises:
        StorageError: the prefix cannot be listed (a missing bucket, denied access).
    """
    fs, path = filesystem(url, storage_options)
    path = path.rstrip("/")
    try:
        found = fs.find(path, maxdepth=None if recursive else 1, withdirs=False)
    except Exception as e:
        raise _translate(url, e) from None
    return [p[len(path) + 1 :] for p in found if p.startswith(path + "/")]


def expand(urls: Iterable[str], storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """URLs with ``*``, ``?`` or ``[...]`` replaced by the objects they match, sorted (a shell
    cannot expand them: they name objects in a store); other URLs as they are.

    Raises:
        StorageError: a pattern matches nothing.
    """
    found: list[str] = []
    for url in urls:
        if not any(c in url.split("://", 1)[-1] for c in "*?["):
            found.append(url)
            continue
        fs, path = filesystem(url, storage_options)
        try:
            matches = sorted(fs.glob(path))
        except Exception as e:
            raise _translate(url, e) from None
        if not matches:
            raise StorageError(f"{url}: no object matches")
        scheme = url.split("://", 1)[0]
        found += [f"{scheme}://{m.lstrip('/')}" if scheme != "file" else f"file://{m}" for m in matches]
    return found


def there(path: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``path`` exists: a local path, or a URL's object."""
    return exists(path, storage_options) if is_url(path) else os.path.exists(path)


def read_any(path: str, storage_options: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of a small file: a local path, or a URL's object."""
    if is_url(path):
        return read_bytes(path, storage_options)
    with open(path, "rb") as f:
        return f.read()


def missing(path: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """How to say that ``path`` is not there: "no such file" for a path; for a URL "no such
    object", or, when it is its bucket that is missing, that the bucket does not exist."""
    if not is_url(path):
        return f"{path}: no such file"
    try:
        check_bucket(path, storage_options)
    except StorageError as e:
        return str(e)
    return f"{path}: no such object"


def join(root: str, path: str) -> str:
    """``root/path`` for a URL root."""
    return root.rstrip("/") + "/" + path


#: How often a transient failure (a timeout, a 5xx, throttling, a dropped connection) is retried.
RETRIES = 4
RETRY_DELAY = 0.2  # seconds before the first retry; doubled each time


class FetchStats:
    """What ``fetch_in_order`` did: requests retried after a transient failure."""

    def __init__(self) -> None:
        self.retried = 0


def _permanent(e: BaseException) -> bool:
    """A failure that trying again will not mend: a missing object, a refusal, a request the store rejects."""
    if isinstance(e, s3client.S3Error) and 400 <= e.status < 500 and e.status not in (408, 429):
        return True
    return isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError))


K = TypeVar("K")


def _with_retries(todo: list[K], attempt: Callable[[list[K]], list[Any]], retries: int, retried: Callable[[int], None]) -> dict[K, Any]:
    """``{item: what attempt gave}`` (bytes, or the exception) for each of ``todo``.

    ``attempt(items)`` fetches several at once and gives a result or an exception for each
    (or raises, for all). What failed, but for a missing object or denied access, is tried
    again, up to ``retries`` times, after ``RETRY_DELAY`` seconds, doubled each time;
    ``retried(n)`` counts the n items of each new try.
    """
    results: dict[K, Any] = {}
    delay = RETRY_DELAY
    for round_ in range(retries + 1):
        try:
            got = attempt(todo)
        except Exception as e:
            got = [e] * len(todo)
        results.update(zip(todo, got))
        todo = [k for k in todo if isinstance(results[k], BaseException) and not _permanent(results[k])]
        if not todo or round_ == retries:
            break
        retried(len(todo))
        time.sleep(delay)
        delay *= 2
    return results


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
            fs_cache["fs"] = _single_attempt(filesystem(url, _single_attempt_options(url, storage_options), fresh=True)[0])
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

        results = _with_retries(list(dict.fromkeys(paths)), attempt, RETRIES, count)
        return [
            _translate(url, results[p]) if isinstance(results[p], BaseException) else results[p]
            for url, p in zip(urls, paths)
        ], [isinstance(results[p], BaseException) and not _permanent(results[p]) for p in paths]

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


#: Seconds an S3 request may wait for a connection or for the next bytes before it fails (and is
#: retried), unless ``storage_options`` say otherwise (``config_kwargs.read_timeout``): botocore's
#: own 60 s made a stalled store take minutes to surface through the retries.
TIMEOUT = 15


def _single_attempt_options(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """For fetching images and records: botocore's own retries off (unless the options set
    them), so that every retry is ours, with its backoff, and counted; ``TIMEOUT`` to connect
    and between bytes."""
    options = dict(storage_options or {})
    if url.split("://", 1)[0] in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("retries", {"total_max_attempts": 1})
        config.setdefault("connect_timeout", TIMEOUT)
        config.setdefault("read_timeout", TIMEOUT)
        options["config_kwargs"] = config
    return options


def _single_attempt(fs: Any) -> Any:
    if hasattr(fs, "retries"):  # s3fs retries some errors itself
        fs.retries = 1
    return fs


def remove(urls: list[str], storage_options: Mapping[str, Any] | None = None) -> None:
    """Delete the objects of ``urls`` that exist (one store)."""
    if not urls:
        return
    fs, _ = filesystem(urls[0], storage_options)
    paths = [object_path(u) for u in urls]
    try:
        fs.rm([p for p in paths if fs.exists(p)])
    except FileNotFoundError:
        pass
    except Exception as e:
        raise _translate(urls[0], e) from None


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
        _upload_parts(client, src, url, block_size or PART)
        return
    fs, path = filesystem(url, storage_options)
    try:
        if getattr(fs, "root_marker", "") == "/":  # file://, memory://: folders are real there
            fs.makedirs(posixpath.dirname(path), exist_ok=True)
        f = fs.open(path, "wb", **({"block_size": block_size} if block_size else {}))
    except Exception as e:
        raise _translate(url, e) from None
    try:
        shutil.copyfileobj(src, f, 16 << 20)
    except BaseException as e:
        discard = getattr(f, "discard", None)  # s3fs: abort the multipart upload
        if discard is not None:
            discard()
        f.closed = True  # nothing to flush or complete any more
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
            raise _translate(url, e) from None
        raise
    try:
        f.close()
    except Exception as e:
        raise _translate(url, e) from None


#: Bytes of the first 1,000 parts of a multipart upload; the next 1,000 are twice as large, and
#: so on: S3 takes at most 10,000 parts of 5 MiB or more (but the last): 55,000 x 16 MiB, about
#: 920 GB; a part in flight, read into memory, costs 16 MB for any .rec under 16 GB.
PART = 16 << 20
#: Parts of one upload sent at once (each held in memory while it is sent).
PARTS_IN_FLIGHT = 2


def part_size(number: int, first: int = PART) -> int:
    """The size of part ``number`` (from 1) of an upload whose first parts are ``first`` bytes: see ``PART``."""
    return first * (1 + (number - 1) // 1000)


def _upload_parts(client: s3client.S3Client, src: Any, url: str, first: int) -> None:
    """``upload_stream`` through the S3 client: one PUT for what fits in a part, else a
    multipart upload, ``PARTS_IN_FLIGHT`` parts at once, aborted on any failure."""
    bucket, key = s3client.split(url)
    head = _read_full(src, first)
    if len(head) < first:
        try:
            client.put(bucket, key, head)
        except Exception as e:
            raise _translate(url, e) from None
        return
    try:
        upload_id = client.create_upload(bucket, key)
    except Exception as e:
        raise _translate(url, e) from None
    parts: list[tuple[int, str]] = []
    try:
        with ThreadPoolExecutor(PARTS_IN_FLIGHT, thread_name_prefix="im2rec-upload") as pool:
            pending: list[Any] = []
            number, body = 1, head
            while body:
                pending.append(pool.submit(lambda n, b: (n, client.upload_part(bucket, key, upload_id, n, b)), number, body))
                while len(pending) >= PARTS_IN_FLIGHT:
                    parts.append(pending.pop(0).result())
                number += 1
                body = _read_full(src, part_size(number, first))
            parts += [f.result() for f in pending]
        client.complete_upload(bucket, key, upload_id, parts)
    except BaseException as e:
        with contextlib.suppress(Exception):
            client.abort_upload(bucket, key, upload_id)
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
            raise _translate(url, e) from None
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

    PART = PART

    def __init__(self, url: str, local: str, storage_options: Mapping[str, Any] | None = None, part: int = PART):
        import concurrent.futures

        self.url, self.local, self.part = url, local, part
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
            raise _translate(url, e) from None

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
                raise _translate(self.url, e) from None

    def feed(self, size: int, flush: Callable[[], None]) -> None:
        """The local file is ``size`` bytes long: send the next part if a whole one is there
        (``flush`` puts the writer's buffer on disk first)."""
        part = self.part_size(self._next)
        if size - self.sent < part:
            return
        self._wait()
        flush()
        self._pending = self._pool.submit(self._send, self._next, self.sent, self.sent + part)
        self._next += 1
        self.sent += part

    def part_size(self, number: int) -> int:
        """The size of part ``number`` (from 1): see ``PART``."""
        return part_size(number, self.part)

    def finish(self, size: int) -> None:
        """Send the rest of the (closed) file and complete the upload: the object appears."""
        try:
            self._wait()
            while self.sent < size or not self._parts:
                end = min(size, self.sent + self.part_size(self._next))
                self._send(self._next, self.sent, end)
                self._next += 1
                self.sent = end
            self._complete()
        except Exception as e:
            self.abort()
            raise _translate(self.url, e) from None
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

    Transient failures (timeouts, 5xx, throttling, dropped connections) are retried
    ``retries`` times with backoff (counted in ``retried``); a missing object or a denied
    access fails at once. With ``cache`` (a ``cache.BlockCache``), ranges are looked up
    on local disk first and stored there once fetched.

    The filesystem object is made in the process that reads, and again after a
    fork; pickling sends only the URL, the options and the cache's folder, so DataLoader
    workers under fork and spawn each open their own connection.

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
        retries: int = RETRIES,
    ):
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.cache, self.retries = cache, retries
        self._pid = -1
        self._fs: Any = None
        self._path = ""
        self.requests = 0  # ranged reads sent to the store (retries included)
        self.retried = 0  # of which retries after a transient failure
        self.fetched = 0  # bytes received
        self._held: dict[int, bytes] = {}  # start -> bytes (their order of use: _HELD)
        self._starts: list[int] = []  # sorted starts of _held
        self._hint: tuple[int, int] | None = None
        if size is None:
            client = s3client.client_for(url, self.storage_options)
            try:
                if client is not None:
                    info = client.head(*s3client.split(url))
                else:
                    fs, path = self._filesystem()
                    info = fs.info(path)
            except Exception as e:
                raise _translate(url, e) from None
            size = int(info["size"])
            etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
        self.size, self.etag = size, etag
        self._key: str | None = None

    def _filesystem(self) -> tuple[Any, str]:
        if self._pid != os.getpid():  # new process (fork, spawn or first use): a connection of our own
            fs, self._path = filesystem(self.url, _single_attempt_options(self.url, self.storage_options), fresh=self._pid != -1)
            self._fs = _single_attempt(fs)
            self._pid = os.getpid()
        return self._fs, self._path

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
        client = s3client.client_for(self.url, self.storage_options)
        if client is not None:
            bucket, key = s3client.split(self.url)

            def get(todo: list[tuple[int, int]]) -> list[Any]:
                return client.map(lambda r: client.get(bucket, key, r[0], r[1]), todo)
        else:
            fs, path = self._filesystem()

            def get(todo: list[tuple[int, int]]) -> list[Any]:
                if len(todo) == 1:
                    return [fs.cat_file(path, start=todo[0][0], end=todo[0][1])]
                return fs.cat_ranges([path] * len(todo), [a for a, _ in todo], [b for _, b in todo], on_error="return")

        def attempt(todo: list[tuple[int, int]]) -> list[Any]:
            self.requests += len(todo)
            got = get(todo)
            return [
                StorageError(f"{self.url}: asked for bytes {a}-{b}, the store sent {len(data)}") if isinstance(data, bytes) and len(data) != b - a else data
                for (a, b), data in zip(todo, got)
            ]

        def count(n: int) -> None:
            self.retried += n

        results = _with_retries(list(ranges), attempt, self.retries, count)
        for r in ranges:
            failure = results[r]
            if isinstance(failure, BaseException):
                tries = f" after {self.retries} retries" if not _permanent(failure) and self.retries else ""
                error = StorageError(f"{_translate(self.url, failure)} (reading bytes {r[0]}-{r[1]}{tries})")
                error.url, error.span = self.url, r
                raise error from None
        self.fetched += sum(b - a for a, b in ranges)
        return [results[r] for r in ranges]

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


# --------------------------------------------------------------------------- outputs and inputs staged locally


def staging_base() -> str:
    """Where URL outputs are written before they are uploaded (and URL inputs downloaded):
    ``$IM2REC_STAGING``, or the system's temporary folder."""
    user = f"-{os.getuid()}" if hasattr(os, "getuid") else ""  # one per user: the folder is not shared
    return os.environ.get("IM2REC_STAGING") or os.path.join(tempfile.gettempdir(), f"im2rec-staging{user}")


def staging_dir(url: str, kind: str = "") -> str:
    """The staging folder of the output at ``url``: one per URL (and ``kind`` of command), under
    ``staging_base()``, so that a rerun (``--resume``) finds what the interrupted one wrote."""
    return os.path.join(staging_base(), kind + hashlib.sha256(url.encode()).hexdigest()[:16])


def _split_url(url: str) -> tuple[str, str]:
    """``s3://b/out/t.rec`` -> ``("s3://b/out", "t.rec")``; a trailing ``/`` (a folder) is dropped."""
    folder, _, name = url.rstrip("/").rpartition("/")
    if not name or folder.endswith(":/"):
        raise StorageError(f"{url}: name an object or a folder inside a bucket (s3://BUCKET/NAME)")
    return folder, name


class _Staging:
    """A staging folder of its own under ``staging_base()``, removed by ``close`` (or the ``with``)."""

    _dir = ""

    def _make(self, prefix: str) -> str:
        os.makedirs(staging_base(), exist_ok=True)
        self._dir = tempfile.mkdtemp(prefix=prefix, dir=staging_base())
        return self._dir

    def close(self) -> None:
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class StagedOutput(_Staging):
    """A command's output that may be a URL: the command writes ``path``, a local name.

    For a local target ``path`` is the target itself and nothing else happens. For a
    URL it is the same name in a new local staging folder (``staging_base()``); when
    the ``with`` block ends without error every file the command wrote there (the
    output, its siblings such as ``.idx`` and ``property``, a folder's contents) is
    uploaded next to the URL, each object appearing only complete (``upload``), and
    ``.idx`` files last, since readers look for them; the staging folder is removed
    either way. So no command ever writes a local path that begins with ``s3:``.

    Checked before any work: the bucket exists, and without ``overwrite`` the target
    is not there yet. Checked again before the first upload: no object the command
    produced would replace one (without ``overwrite``).

    Raises:
        StorageError: a missing bucket, an existing object, a failed upload.
    """

    def __init__(self, target: str, storage_options: Mapping[str, Any] | None = None, overwrite: bool = False, folder: bool = False):
        self.target = target
        self.remote = is_url(target)
        self._options = storage_options
        self._overwrite = overwrite
        self._shown = ""  # the staging folder, kept after it is removed
        if not self.remote:
            self.path = target
            return
        self._folder, name = _split_url(target)
        check_bucket(target, storage_options)
        if not overwrite and not folder and exists(target, storage_options):  # a folder may hold other files
            raise OutputExistsError(target)
        self._shown = self._make("out-")
        self.path = os.path.join(self._dir, name)

    def shown(self, text: str) -> str:
        """``text`` (a path the command wrote, or a message naming some) with the staging
        folder replaced by the URL's folder: what to show the user."""
        if not self._shown:
            return text
        return text.replace(self._shown + os.sep, self._folder + "/").replace(self._shown, self._folder)

    def upload(self) -> list[str]:
        """Send what the command wrote; returns the URLs written."""
        if not self.remote:
            return []
        files = sorted(os.path.join(d, f) for d, _, names in os.walk(self._dir) for f in names)
        urls = {path: self.shown(path).replace(os.sep, "/") for path in files}
        if not self._overwrite:
            fs, _ = filesystem(self.target, self._options)
            taken = [u for u in urls.values() if fs.exists(object_path(u))]
            if taken:
                raise OutputExistsError(taken[0])
        first = [p for p in files if not p.endswith(".idx")]
        with ThreadPoolExecutor(8) as pool:  # a folder of extracted images: many small objects
            list(pool.map(lambda p: upload(p, urls[p], self._options), first))
        for path in files:
            if path.endswith(".idx"):  # last: a reader that finds the .idx finds the .rec whole
                upload(path, urls[path], self._options)
        return [urls[p] for p in files]

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        try:
            if kind is None:
                self.upload()
        finally:
            self.close()


class StagedInput(_Staging):
    """An input that a command reads as a local file: for a URL, a downloaded copy in a new
    staging folder, with the ``siblings`` it reads beside it (the URLs of its ``.idx`` and
    ``property``, say: those that exist), removed when the ``with`` block ends. ``path`` is
    the name to read (None for no ``source``).

    Raises:
        StorageError: the object is missing or cannot be read.
    """

    def __init__(self, source: str | None, siblings: tuple[str, ...] = (), storage_options: Mapping[str, Any] | None = None):
        self.source = source
        self.path = source
        if source is None or not is_url(source):
            return
        _, name = _split_url(source)
        fs, path = filesystem(source, storage_options)
        self.path = os.path.join(self._make("in-"), name)
        try:
            try:
                fs.get_file(path, self.path)
            except Exception as e:
                raise _translate(source, e) from None
            for sibling in siblings:
                try:
                    fs.get_file(object_path(sibling), os.path.join(self._dir, _split_url(sibling)[1]))
                except FileNotFoundError:
                    pass
                except Exception as e:
                    raise _translate(sibling, e) from None
        except BaseException:
            self.close()
            raise

    def shown(self, text: str) -> str:
        """``text`` (a message naming the local copy) with the copy named by its URL."""
        if self.path is None or self.source is None or self.path == self.source:
            return text
        return text.replace(self.path, self.source)
