import json
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests check behaviour, not speed: on shared, noisy machines a per-example
# deadline only makes them flaky.
settings.register_profile("im2rec", deadline=None)
settings.load_profile("im2rec")

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Golden files written by MXNet 1.9.1, copied from ../shared/golden."""
    return DATA


@pytest.fixture(scope="session")
def manifest() -> dict:
    return json.loads((DATA / "manifest.json").read_text())


class DeadlineExceeded(Exception):
    """Not a TimeoutError: that is an OSError, which code under test may catch as a broken pipe."""


@contextmanager
def deadline(seconds: int, what: str = "the call"):
    """Fail (DeadlineExceeded) instead of hanging when the block runs longer than ``seconds``.

    SIGALRM interrupts a blocking system call in the main thread (a pipe write, a wait),
    so a deadlock becomes a test failure within the test's own time, not a hung CI run.
    """

    def expire(signum, frame):
        raise DeadlineExceeded(f"{what} was still running after {seconds} s: a deadlock?")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
