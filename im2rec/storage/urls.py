"""What a URL names and the small calls on it: is it a URL, its filesystem (fsspec, imported when used),
``--storage-option`` parsing, exists/read/write/list/remove, and the one translation of a store's
failure into a ``StorageError`` that names the URL (``storage_error``).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import StorageError
from . import s3client

__all__ = ["check_bucket", "exists", "expand", "filesystem", "is_url", "join", "list_files", "merge_options", "missing", "object_path", "parse_storage_option", "read_any", "read_bytes", "remove", "storage_error", "there", "write_bytes"]

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


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


def storage_error(url: str, e: BaseException) -> StorageError:
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
            raise storage_error(url, e) from None
    fs, path = filesystem(url, storage_options)
    try:
        return bool(fs.exists(path))
    except Exception as e:
        raise storage_error(url, e) from None


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
            raise storage_error(f"{url.split('://', 1)[0]}://{bucket}", e) from None
        return
    fs, path = filesystem(url, storage_options)
    if getattr(fs, "root_marker", "") == "/" or "/" not in path.strip("/"):
        return  # a local-like store (file://, memory://): nothing to check
    bucket = path.strip("/").split("/", 1)[0]
    try:
        there = fs.exists(bucket)
    except Exception as e:
        raise storage_error(f"{url.split('://', 1)[0]}://{bucket}", e) from None
    if not there:
        try:  # exists() says False for an endpoint it cannot reach, too: ask again, for the real error
            fs.ls(bucket)
        except FileNotFoundError:
            pass
        except Exception as e:
            raise storage_error(f"{url.split('://', 1)[0]}://{bucket}", e) from None
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
            raise storage_error(url, e) from None
    fs, path = filesystem(url, storage_options)
    try:
        return fs.cat_file(path)
    except Exception as e:
        raise storage_error(url, e) from None


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
            raise storage_error(url, e) from None
    fs, path = filesystem(url, storage_options)
    try:
        fs.pipe_file(path, data)
    except Exception as e:
        raise storage_error(url, e) from None


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
        raise storage_error(url, e) from None
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
            raise storage_error(url, e) from None
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
        raise storage_error(urls[0], e) from None
