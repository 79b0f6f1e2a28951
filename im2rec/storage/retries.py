"""How a transient failure is retried: ``RETRIES`` times after ``RETRY_DELAY`` seconds, doubled each time;
what is ``permanent`` (a missing object, a refusal); botocore's own retries off so that every retry is ours
(``single_attempt_options``), with ``TIMEOUT`` to connect and between bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from . import s3client

__all__ = ["RETRIES", "RETRY_DELAY", "TIMEOUT", "permanent", "single_attempt", "single_attempt_options", "with_retries"]

#: How often a transient failure (a timeout, a 5xx, throttling, a dropped connection) is retried.
RETRIES = 4


RETRY_DELAY = 0.2  # seconds before the first retry; doubled each time


def permanent(e: BaseException) -> bool:
    """A failure that trying again will not mend: a missing object, a refusal, a request the store rejects."""
    if isinstance(e, s3client.S3Error) and 400 <= e.status < 500 and e.status not in (408, 429):
        return True
    return isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError))


K = TypeVar("K")


def with_retries(todo: list[K], attempt: Callable[[list[K]], list[Any]], retries: int, retried: Callable[[int], None]) -> dict[K, Any]:
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
        todo = [k for k in todo if isinstance(results[k], BaseException) and not permanent(results[k])]
        if not todo or round_ == retries:
            break
        retried(len(todo))
        time.sleep(delay)
        delay *= 2
    return results


#: Seconds an S3 request may wait for a connection or for the next bytes before it fails (and is
#: retried), unless ``storage_options`` say otherwise (``config_kwargs.read_timeout``): botocore's
#: own 60 s made a stalled store take minutes to surface through the retries.
TIMEOUT = 15


def single_attempt_options(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
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


def single_attempt(fs: Any) -> Any:
    if hasattr(fs, "retries"):  # s3fs retries some errors itself
        fs.retries = 1
    return fs
