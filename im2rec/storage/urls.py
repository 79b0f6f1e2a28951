"""What a URL names and the small calls on it: is it a URL, ``--storage-option`` parsing, and
exists/read/write/list/expand/remove, each one call on the URL's store (``store.store_for``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import StorageError
from ..fsutil import is_url
from .store import store_for

__all__ = ["check_bucket", "exists", "expand", "is_url", "join", "list_files", "merge_options", "missing", "parse_storage_option", "read_any", "read_bytes", "remove", "there", "write_bytes"]


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


def exists(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``url`` names an object, a bucket, or a prefix that holds objects.

    Raises:
        StorageError: the store cannot say (after its retries).
    """
    return store_for(url, storage_options).exists(url)


def check_bucket(url: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Fail at once, before any work, when the bucket (container) of ``url`` is missing or
    cannot be reached with these credentials.

    Raises:
        StorageError: naming the bucket.
    """
    store_for(url, storage_options).check_bucket(url)


def read_bytes(url: str, storage_options: Mapping[str, Any] | None = None) -> bytes:
    """The whole object (for small files: a ``.idx``, a ``.lst``, a manifest).

    Raises:
        StorageError: the object is missing or cannot be read.
    """
    return store_for(url, storage_options).get(url)


def write_bytes(url: str, data: bytes, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write a small object in one request (on S3 a single PUT: it appears whole or not at all).

    Raises:
        StorageError: the object cannot be written.
    """
    store_for(url, storage_options).put(url, data)


def list_files(url: str, recursive: bool = True, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The objects under the prefix ``url`` (a "folder"), as ``/``-separated paths relative to it.

    Raises:
        StorageError: the prefix cannot be listed (a missing bucket, denied access).
    """
    return store_for(url, storage_options).list_prefix(url, recursive)


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
        matches = store_for(url, storage_options).glob(url)
        if not matches:
            raise StorageError(f"{url}: no object matches")
        found += matches
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
    if urls:
        store_for(urls[0], storage_options).delete(urls)
