import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
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


# --------------------------------------------------------------------------- real-size corpora

# The generator's ImageNet-like (about 70 KB) and large (about 2.5 MB, 10 MP) JPEGs, written by
# `python -m im2rec.synthetic` itself. A large one takes 1.4 s to generate: both folders are made
# once per session, in the background from the end of collection (while the other tests run),
# and a test waits for them only if they are not done by then.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
REAL_SIZE = {
    "imagenet": ["--classes", "4", "--per-class", "8", "--size", "imagenet", "--workers", "1"],
    # 4 images per worker of a default pack (every core): 2 task batches of 2 for each
    "large": ["--classes", "2", "--per-class", str(2 * CORES), "--size", "large"],
}
_real_size = {}


def _start_real_size():
    if _real_size:
        return
    base = Path(tempfile.mkdtemp(prefix="im2rec-real-size-"))
    _real_size["base"] = base
    for size, args in REAL_SIZE.items():
        command = [sys.executable, "-m", "im2rec.synthetic", str(base / size), *args]
        _real_size[size] = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pytest_collection_finish(session):
    if any("real_size_folders" in getattr(item, "fixturenames", ()) for item in session.items):
        _start_real_size()


def pytest_sessionfinish(session):
    for size in REAL_SIZE:
        proc = _real_size.get(size)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
    if "base" in _real_size:
        shutil.rmtree(_real_size["base"], ignore_errors=True)


@pytest.fixture(scope="session")
def real_size_folders() -> dict:
    """``{"imagenet": folder, "large": folder}``: the generator's real-size corpora (see REAL_SIZE)."""
    _start_real_size()
    folders = {}
    for size in REAL_SIZE:
        proc = _real_size[size]
        with deadline(600, f"generating the {size} corpus"):  # a hang guard
            _, err = proc.communicate()
        assert proc.returncode == 0, err
        folders[size] = _real_size["base"] / size
    return folders
