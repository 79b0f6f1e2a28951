"""The ordered process pool: order, bounded read-ahead, crashing workers."""

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import deadline

from im2rec.errors import WorkerError
from im2rec.packing.pool import OrderedPool


def square(x, context):
    if x % 7 == 3:
        time.sleep(0.01)  # out-of-order completion
    return x * x + context


def crash_on(x, context):
    if x in context:
        os.kill(os.getpid(), signal.SIGSEGV)
    return x


def crashed(item, reason):
    return ("crashed", item, reason)


@pytest.mark.slow
def test_results_in_order():
    with OrderedPool(square, 1, 3, crashed) as pool:
        assert list(pool.map(range(200))) == [x * x + 1 for x in range(200)]
        assert list(pool.map([])) == []


@pytest.mark.slow
def test_reads_ahead_only_a_bounded_window():
    consumed = []

    def items():
        for i in range(10_000):
            consumed.append(i)
            yield i

    with OrderedPool(square, 0, 2, crashed, max_batch=4, window=2) as pool:
        it = pool.map(items())
        for _ in range(10):
            next(it)
        time.sleep(0.2)
        assert len(consumed) <= 10 + 2 * 2 * 4 + 1


@pytest.mark.slow
def test_batches_shrink_for_large_results():
    with OrderedPool(square, 0, 2, crashed, weigh=lambda r: 1 << 20, batch_bytes=2 << 20) as pool:
        list(pool.map(range(20)))
        assert pool.batch_size == 2


@pytest.mark.slow
def test_a_crashing_item_is_reported_and_the_rest_survive():
    with OrderedPool(crash_on, {5, 17}, 2, crashed, max_batch=4) as pool:
        out = list(pool.map(range(30)))
    assert [o for o in out if isinstance(o, int)] == [x for x in range(30) if x not in (5, 17)]
    assert out[5] == ("crashed", 5, "the worker process was killed by signal SIGSEGV while processing this item")
    assert out[17][0] == "crashed"
    assert pool.crashes in (3, 4)  # each bad item kills its batch (or was queued behind one), then itself alone


@pytest.mark.slow
def test_close_reaps_every_worker():
    pool = OrderedPool(square, 0, 3, crashed)
    pids = [w.process.pid for w in pool._workers]
    it = pool.map(range(100))
    next(it)
    pool.close()
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive = os.waitpid(pid, os.WNOHANG) == (0, 0)
        except (ProcessLookupError, ChildProcessError):
            alive = False
        assert not alive


def die_at_start():
    os._exit(3)


@pytest.mark.slow
def test_workers_that_cannot_start_are_an_error_not_crashed_items():
    with OrderedPool(square, 0, 2, crashed, initializer=die_at_start) as pool, pytest.raises(WorkerError, match=r"worker processes exited with status 3 before doing any work, 3 times in a row"):
        list(pool.map(range(100)))


def test_a_crashing_item_under_plain_fork():
    """The start method `im2rec pack` uses from a clean process: crash recovery works the same."""
    ctx = multiprocessing.get_context("fork")
    with OrderedPool(crash_on, {4}, 2, crashed, mp_context=ctx) as pool:
        out = list(pool.map(range(12)))
    assert out[4] == ("crashed", 4, "the worker process was killed by signal SIGSEGV while processing this item")
    assert [o for o in out if isinstance(o, int)] == [x for x in range(12) if x != 4]


def start_method(setup):
    """The start method default_context picks in a fresh interpreter after running ``setup``."""
    code = textwrap.dedent(f"""
        {setup}
        from im2rec.packing.pool import default_context
        print(default_context(("colorsys",), fork_unsafe=("colorsys",)).get_start_method(),
              default_context(("colorsys",)).get_start_method())
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.slow
def test_fork_only_while_the_process_is_clean():
    assert start_method("") == ["fork", "forkserver"]  # never fork without knowing what is unsafe
    assert start_method("import colorsys") == ["forkserver", "forkserver"]
    threaded = "import threading, time; threading.Thread(target=time.sleep, args=(5,), daemon=True).start()"
    assert start_method(threaded) == ["forkserver", "forkserver"]


def sized(item, context):
    """A task of any size in, a result of the size it asks for out."""
    seed, _task_bytes, result_size = item
    return bytes([seed % 251]) * result_size


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_no_deadlock_with_large_tasks_and_large_results(workers):
    """Tasks and results both far over a pipe's buffer, in random sizes (up to 4 MB each
    way, 0 bytes too): the parent must never wait to send while a worker waits to be read.
    Before the feeder threads this hung on the first batch (the parent in write() of a
    task batch, the worker in write() of its results)."""
    rng = random.Random(workers)
    sizes = [(rng.choice([0, 1, 70_000, 1 << 20, 4 << 20, rng.randrange(5 << 20)]), rng.choice([0, 3, 150_000, 2 << 20, rng.randrange(5 << 20)])) for _ in range(120)]
    items = ((seed, b"t" * task, result) for seed, (task, result) in enumerate(sizes))
    with deadline(60, "OrderedPool.map"):
        with OrderedPool(sized, None, workers, crashed, weigh=len) as pool:
            for seed, out in enumerate(pool.map(items)):
                assert out == bytes([seed % 251]) * sizes[seed][1]
        assert seed == len(sizes) - 1
