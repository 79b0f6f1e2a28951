"""How a store's transient failure is retried, inside the store seam (``store``): what is
``transient`` (5xx, throttling, a request timeout, a reset, a stall, a body cut short), the
``Policy`` (``RETRIES`` more attempts, exponential backoff with full jitter from
``RETRY_DELAY``, ``Retry-After`` honoured, no new attempt ``RETRY_WITHIN`` seconds after the
first), and the ``Tally`` of requests and retries a caller reads.
"""

from __future__ import annotations

import datetime
import email.utils
import random
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import OptionError
from .http import ProtocolError, SetupError, TunnelRefused

__all__ = ["RETRIES", "RETRY_AFTER_MOST", "RETRY_DELAY", "RETRY_WITHIN", "TIMEOUT", "Policy", "Tally", "check_options", "retry_after", "transient"]

#: How often a transient failure (a timeout, a 5xx, throttling, a dropped connection) is retried.
RETRIES = 4

RETRY_DELAY = 0.2  # seconds: the first backoff's ceiling, doubled for each retry (full jitter below it)

#: Seconds after a request's first attempt past which no retry starts: a request ends within
#: about this plus one timeout, however the store fails.
RETRY_WITHIN = 60.0

#: The longest ``Retry-After`` waited for (a store asking for more is given up on, the next
#: attempt's wait bounded by ``RETRY_WITHIN`` anyway).
RETRY_AFTER_MOST = 20.0

#: Seconds a request may wait for a connection or for the next bytes before it fails (and is
#: retried), unless ``storage_options`` say otherwise (``config_kwargs.read_timeout``,
#: ``connect_timeout``): botocore's own 60 s made a stalled store take minutes to surface.
TIMEOUT = 15

#: The S3 error codes that say "later", whatever their status.
TRANSIENT_CODES = frozenset({"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling", "ThrottlingException", "RequestThrottled", "TooManyRequestsException"})
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def transient(e: BaseException) -> bool:
    """Whether trying again may mend ``e``: a 5xx or throttling answer, no answer, a reset, a
    timeout, a body cut short. Not: a missing object, a refusal, a request the store rejects, an
    answer that is not HTTP, a certificate that does not verify, a bad option."""
    status = getattr(e, "status", None)
    if isinstance(status, int) and status:  # the store answered (S3Error)
        return status in TRANSIENT_STATUS or getattr(e, "code", "") in TRANSIENT_CODES
    cause = getattr(e, "cause", None) or e  # an unanswered S3Error carries the transport's failure
    if isinstance(cause, TunnelRefused):
        return cause.status >= 500
    if isinstance(cause, (ProtocolError, SetupError, ssl.SSLCertVerificationError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)):
        return False
    if isinstance(cause, OSError):
        return True
    # fsspec drivers' own exceptions (aiohttp's, google's, asyncio's timeout): retried, but never a programming error
    return not isinstance(cause, (ValueError, TypeError, KeyError, AttributeError, NotImplementedError, ImportError, AssertionError))


def _number(options: Mapping[str, Any], name: str, whole: bool, least: float) -> float | None:
    value = options.get(name.rsplit(".", 1)[-1])
    if value is None:
        return None
    try:
        number = float(value) if not whole else int(str(value)) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < least or number != number:
        kind = "a whole number" if whole else "a number of seconds"
        raise OptionError(f"{name}: expected {kind} of {least:g} or more, got {value!r}", "--storage-option")
    return number


def check_options(storage_options: Mapping[str, Any] | None) -> tuple[float | None, float | None, int | None]:
    """``(read_timeout, connect_timeout, retries)`` the options ask for (None: not said), checked:
    botocore's ``config_kwargs.read_timeout``/``connect_timeout`` (seconds, more than 0) and
    ``config_kwargs.retries.total_max_attempts`` (every attempt, 1 or more) or ``max_attempts``
    (those after the first), as a boto3 or s3fs user sets them.

    Raises:
        OptionError: a value that is not such a number (``--storage-option``'s fault).
    """
    config = dict((storage_options or {}).get("config_kwargs") or {})
    read = _number(config, "config_kwargs.read_timeout", False, 0.001)
    connect = _number(config, "config_kwargs.connect_timeout", False, 0.001)
    asked = dict(config.get("retries") or {})
    total = _number(asked, "config_kwargs.retries.total_max_attempts", True, 1)
    more = _number(asked, "config_kwargs.retries.max_attempts", True, 0)
    retries = int(total) - 1 if total is not None else int(more) if more is not None else None
    return read, connect, retries


def retry_after(e: BaseException) -> float | None:
    """The seconds an answer's ``Retry-After`` asks for (a number, or an HTTP date), or None."""
    value = getattr(e, "retry_after", None)
    if not value:
        return None
    value = str(value).strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


class Tally:
    """What the requests of a store did: ``requests`` sent (retries included), ``retried``
    (attempts after a transient failure), ``fetched`` (body bytes received). Safe across threads."""

    def __init__(self) -> None:
        self.requests = self.retried = self.fetched = 0
        self._lock = threading.Lock()

    def count(self, requests: int = 0, retried: int = 0, fetched: int = 0) -> None:
        with self._lock:
            self.requests += requests
            self.retried += retried
            self.fetched += fetched


T = TypeVar("T")
K = TypeVar("K")


class GaveUp(Exception):
    """The last failure of a request, with how many ``attempts`` it had (raised by ``Policy.run``)."""

    def __init__(self, last: BaseException, attempts: int):
        super().__init__(str(last))
        self.last, self.attempts = last, attempts


@dataclass(frozen=True)
class Policy:
    """How one request is retried: up to ``retries`` more attempts while its failure is
    ``transient``; before retry n (from 0) a wait drawn uniformly from [0, ``delay`` * 2**n]
    (full jitter: throttled clients spread out), or the answer's ``Retry-After`` if longer (at
    most ``RETRY_AFTER_MOST``); no retry that would start ``within`` seconds after the first."""

    retries: int = RETRIES
    delay: float = RETRY_DELAY
    within: float = RETRY_WITHIN

    @classmethod
    def default(cls, retries: int | None = None) -> Policy:
        """The policy of this module's constants as they are now (tests lower ``RETRY_DELAY``)."""
        return cls(RETRIES if retries is None else retries, RETRY_DELAY, RETRY_WITHIN)

    def wait(self, n: int, failure: BaseException, started: float) -> float | None:
        """Seconds to wait before retry ``n`` (from 0) after ``failure``, or None: give up (a
        permanent failure, the count or the time bound reached)."""
        if n >= self.retries or not transient(failure):
            return None
        wait = random.uniform(0, self.delay * 2**n)
        asked = retry_after(failure)
        if asked is not None:
            wait = max(wait, min(asked, RETRY_AFTER_MOST))
        return None if time.monotonic() - started + wait > self.within else wait

    def run(self, attempt: Callable[[], T], tally: Tally | None = None, sleep: Callable[[float], Any] = time.sleep) -> T:
        """``attempt()``, retried as the policy says; each attempt counted in ``tally``.

        Raises:
            GaveUp: the last failure (permanent, or transient past the bound) and the attempts made.
        """
        started = time.monotonic()
        n = 0
        while True:
            if tally is not None:
                tally.count(requests=1, retried=1 if n else 0)
            try:
                return attempt()
            except Exception as e:
                wait = self.wait(n, e, started)
                if wait is None:
                    raise GaveUp(e, n + 1) from None
                sleep(wait)
                n += 1

    def run_many(self, keys: Sequence[K], attempt: Callable[[list[K]], Sequence[Any]], tally: Tally | None = None) -> dict[K, tuple[Any, int]]:
        """``run`` for a driver that makes many requests in one call (fsspec's ``cat``):
        ``attempt(todo)`` gives a result or an exception for each (or raises, for all); the
        failures that may mend are tried again together, after the longest wait any of them
        asks for. ``{key: (result or exception, attempts)}``."""
        results: dict[K, tuple[Any, int]] = {}
        todo = list(dict.fromkeys(keys))
        started = time.monotonic()
        n = 0
        while todo:
            if tally is not None:
                tally.count(requests=len(todo), retried=len(todo) if n else 0)
            try:
                got = list(attempt(todo))
            except Exception as e:
                got = [e] * len(todo)
            results.update((k, (g, n + 1)) for k, g in zip(todo, got))
            waits = {k: self.wait(n, g, started) for k, g in zip(todo, got) if isinstance(g, BaseException)}
            todo = [k for k, w in waits.items() if w is not None]
            if todo:
                time.sleep(max(w for w in waits.values() if w is not None))
                n += 1
        return results
