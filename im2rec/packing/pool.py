"""An ordered, bounded process pool that survives crashing workers.

``OrderedPool.map(items)`` runs ``fn(item, context)`` in worker processes and
yields the results in the order of ``items``, like ``multiprocessing.Pool.imap``,
with three differences that ``pack`` needs:

* bounded: items are read from the iterator only when there is room (at most
  ``ahead`` items between the next result to yield and the last item sent), so
  memory does not grow with the number of items nor with one slow item;
* batches adapt to the result size (``weigh``), so megabyte-sized results are
  not piled up by the dozen;
* a worker that dies (a decoder segfault, the OOM killer) is replaced; the items
  it held are retried one by one, and an item that kills a worker on its own
  becomes ``crashed(item, reason)`` instead of hanging or stopping the run;
  workers that die before doing anything, three in a row, raise WorkerError.

Workers ignore SIGINT: the parent decides, and ``close()`` (also on Ctrl-C,
through the context manager) terminates and reaps every worker.

The invariant that keeps it free of deadlock, for tasks and results of any size
(``pack`` from a URL sends megabytes of fetched image bytes in each task batch,
and gets megabytes of records back): **the thread that reads results never
writes to a pipe.** Each worker has a feeder thread that sends its task batches;
the main thread only waits for results (or a dead worker) and reads them. So a
worker blocked on sending results is always read, and a feeder blocked on
sending tasks only waits for its worker to finish the batch before. Sending
tasks from the reading thread, as this pool once did, deadlocks as soon as a
task batch and a result batch are both larger than the pipes' buffers: the
parent waits in ``write()`` for the worker to read, while the worker waits in
``write()`` for the parent to read. ``tests/test_pool.py`` holds sizes of up to
5 MB each way.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import WorkerError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")
R = TypeVar("R")

Batch = list[tuple[int, Any]]  # (sequence number, item)


_PR_SET_PDEATHSIG = 1  # prctl option, from <linux/prctl.h>


def _die_with(parent: int) -> None:
    """Have Linux kill this forked worker when ``parent`` dies, even by SIGKILL.

    A forked worker holds copies of the parent's ends of every pipe, so a killed
    parent never shows up as end-of-file on its task pipe: the worker would wait
    for work forever. (Workers of a fork server hold only their own ends.)
    """
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before prctl took effect
        os._exit(1)


def _worker_main(
    tasks: Any,
    results: Any,
    fn: Callable[[Any, Any], Any],
    context: Any,
    quiet: bool,
    initializer: Callable[[], None] | None,
    parent: int | None = None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker inherits the parent's handler
    if parent is not None:
        _die_with(parent)
    if initializer is not None:
        initializer()
    if quiet:  # C libraries (libpng, libjpeg) print to fd 2; failures are reported as data instead
        faulthandler.disable()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    while True:
        try:
            batch = tasks.recv()
        except (EOFError, OSError):
            return
        if batch is None:
            return
        started = time.perf_counter()
        out = [(seq, fn(item, context)) for seq, item in batch]
        try:
            results.send((time.perf_counter() - started, out))
        except OSError:
            return


def _feed(tasks: Any, outbox: queue.SimpleQueue[Batch | None]) -> None:
    """A feeder thread: send the batches put in ``outbox`` to one worker, until None.

    Sending blocks while the worker is busy and its pipe is full; that is why it
    happens here and not in the thread that reads the results (see the module's
    docstring).
    """
    while True:
        batch = outbox.get()
        if batch is None:
            return
        try:
            tasks.send(batch)
        except OSError:  # the worker died: the reading thread sees its sentinel and retries its batches
            return


@dataclass
class _Worker:
    process: Any
    conn: multiprocessing.connection.Connection  # results come in here
    tasks: Any  # batches go out here, sent by the feeder thread
    outbox: queue.SimpleQueue[Batch | None] = field(default_factory=queue.SimpleQueue)
    feeder: threading.Thread | None = None
    batches: deque[tuple[Batch, bool]] = field(default_factory=deque)  # (batch, sent alone after a crash)
    served: bool = False  # has returned results at least once

    def start_feeder(self) -> None:
        self.feeder = threading.Thread(target=_feed, args=(self.tasks, self.outbox), name="im2rec-pool-feeder", daemon=True)
        self.feeder.start()

    def stop_feeder(self) -> None:
        """After the process has ended (so that a send in progress fails rather than blocks)."""
        self.outbox.put(None)
        if self.feeder is not None:
            self.feeder.join(timeout=5)


def _grow_pipe(conn: Any) -> None:
    """Let a worker hand over a whole batch of results without waiting for the parent to read."""
    setpipe = getattr(fcntl, "F_SETPIPE_SZ", 1031) if fcntl is not None else None
    if setpipe is None:
        return
    with contextlib.suppress(OSError):  # above /proc/sys/fs/pipe-max-size, or not a pipe
        fcntl.fcntl(conn.fileno(), setpipe, 1 << 20)


def default_context(preload: tuple[str, ...] = (), fork_unsafe: tuple[str, ...] = ()) -> Any:
    """Plain "fork" when this process is still clean, else "forkserver" (or "spawn").

    Forking a process that has already used OpenCV (or any library with a thread
    pool) copies a locked pool without its threads, and the child hangs on its first
    parallel call: a notebook that decoded one image before calling ``pack`` would
    freeze. So fork, which starts workers in milliseconds and shares the parent's
    imports, is used only when ``fork_unsafe`` names the libraries that matter, none
    of them is imported here yet and no other Python thread runs (the ``im2rec pack``
    command is such a process); otherwise a fork server, a clean process started
    once that workers fork from, with ``preload`` imported.
    """
    methods = multiprocessing.get_all_start_methods()
    clean = not any(m in sys.modules for m in fork_unsafe) and threading.active_count() == 1
    if fork_unsafe and clean and sys.platform.startswith("linux"):  # macOS lists fork, but its libraries break under it
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        if preload:
            ctx.set_forkserver_preload(list(preload))
        return ctx
    return multiprocessing.get_context("spawn")


def _average(mean: float, value: float) -> float:
    """An exponential moving average that starts at the first value."""
    return 0.9 * mean + 0.1 * value if mean else float(value)


def describe_exit(code: int | None) -> str:
    """How a process ended, from its exit code: "was killed by signal SIGSEGV", "exited with status 3"."""
    if code is not None and code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class OrderedPool(Generic[T, R]):
    """Run ``fn(item, context)`` over items in ``workers`` processes, results in order.

    Args:
        fn: a top-level function (it must pickle under every start method).
        context: a picklable value passed to every call (sent once per worker).
        workers: number of processes.
        crashed: builds the result of an item whose worker died on it, from the item
            and a description such as "killed by signal SIGSEGV".
        weigh: the size in bytes of a result, to size batches; None counts items only.
        max_batch: most items per batch.
        batch_bytes: aim for batches of at most about this many result bytes.
        batch_seconds: aim for batches of at most about this much work, so that the
            last batches do not leave workers idle.
        window: how many batches per worker may be in flight or waiting to be yielded;
            more than the two queued at each worker, so that one slow batch at the
            head does not stall the others.
        quiet_workers: send the workers' stderr to /dev/null.
        initializer: a top-level function each worker calls once at start.
        preload: modules the fork server imports once, so that workers start fast.
        fork_unsafe: modules (thread pools) that make plain fork unsafe once imported
            here; none given means never fork. See ``default_context``.
        mp_context: a multiprocessing context; default: see ``default_context``.
    """

    def __init__(
        self,
        fn: Callable[[T, Any], R],
        context: Any,
        workers: int,
        crashed: Callable[[T, str], R],
        *,
        weigh: Callable[[R], int] | None = None,
        max_batch: int = 16,
        batch_bytes: int = 4 << 20,
        batch_seconds: float = 0.05,
        window: int = 8,
        quiet_workers: bool = True,
        initializer: Callable[[], None] | None = None,
        preload: tuple[str, ...] = (),
        fork_unsafe: tuple[str, ...] = (),
        mp_context: Any = None,
    ):
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._fn, self._context, self._crashed, self._weigh = fn, context, crashed, weigh
        self._max_batch, self._batch_bytes, self._batch_seconds = max_batch, batch_bytes, batch_seconds
        self._window = window
        self._quiet, self._initializer = quiet_workers, initializer
        self._mp = mp_context or default_context(preload, fork_unsafe)
        self._workers: list[_Worker] = []
        self._avg_weight = 0.0  # bytes per result, moving average
        self._avg_seconds = 0.0  # work per item, moving average
        self.crashes = 0
        self._stillborn = 0  # workers in a row that died without returning anything
        try:
            for _ in range(workers):
                self._workers.append(self._start())
            for w in self._workers:  # once every worker is forked: see _start
                w.start_feeder()
        except BaseException:
            self.close()
            raise

    def _start(self) -> _Worker:
        task_in, task_out = self._mp.Pipe(duplex=False)
        result_in, result_out = self._mp.Pipe(duplex=False)
        _grow_pipe(result_out)
        parent = os.getpid() if self._mp.get_start_method() == "fork" else None
        args = (task_in, result_out, self._fn, self._context, self._quiet, self._initializer, parent)
        p = self._mp.Process(target=_worker_main, args=args, daemon=True)
        with warnings.catch_warnings():
            # A replacement worker is forked while the feeder threads run (Python 3.12+ warns of any
            # fork then). It is safe here: the child uses only its own two pipes, and a feeder holds
            # no lock that the child takes (CPython resets the import lock and the GIL in the child).
            warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
            p.start()
        task_in.close()
        result_out.close()
        return _Worker(p, result_in, task_out)

    @property
    def batch_size(self) -> int:
        if not self._avg_seconds:  # nothing measured yet: items may be megabytes each, and slow
            return min(2, self._max_batch)
        size = self._max_batch
        if self._avg_weight:
            size = min(size, int(self._batch_bytes // self._avg_weight))
        if self._avg_seconds:
            size = min(size, int(self._batch_seconds // self._avg_seconds))
        return max(1, size)

    def map(self, items: Iterable[T]) -> Iterator[R]:
        """Yield ``fn(item, context)`` for every item, in order."""
        source = enumerate(items)
        lookahead: tuple[int, T] | None = next(source, None)
        retry: deque[tuple[int, T]] = deque()  # items to resend alone after a crash
        done: dict[int, R] = {}
        next_out = 0
        workers = len(self._workers)

        while True:
            size = self.batch_size
            ahead = self._window * workers * size
            for w in self._workers:  # keep two batches queued at every worker
                while len(w.batches) < 2:
                    if retry:
                        batch, alone = [retry.popleft()], True
                    else:
                        batch, alone = [], False
                        while lookahead is not None and len(batch) < size and lookahead[0] < next_out + ahead:
                            batch.append(lookahead)
                            lookahead = next(source, None)
                        if not batch:
                            break
                    w.batches.append((batch, alone))
                    w.outbox.put(batch)  # never blocks: the feeder thread sends it
            if not any(w.batches for w in self._workers):
                break
            waitables: dict[Any, _Worker] = {w.conn: w for w in self._workers if w.batches}
            waitables.update({w.process.sentinel: w for w in self._workers if w.batches})
            for ready in multiprocessing.connection.wait(list(waitables)):
                w = waitables[ready]
                if w not in self._workers:  # already replaced in this round
                    continue
                if ready is w.conn:
                    try:
                        seconds, results = w.conn.recv()
                    except (EOFError, OSError):
                        self._replace(w, retry, done)
                        continue
                    w.batches.popleft()
                    w.served = True
                    self._avg_seconds = _average(self._avg_seconds, seconds / len(results))
                    for seq, result in results:
                        done[seq] = result
                        if self._weigh is not None:
                            self._avg_weight = _average(self._avg_weight, self._weigh(result))
                elif not w.conn.poll():  # dead, with no results left to read
                    self._replace(w, retry, done)
            while next_out in done:
                yield done.pop(next_out)
                next_out += 1
        while next_out in done:
            yield done.pop(next_out)
            next_out += 1

    def _replace(self, w: _Worker, retry: deque[tuple[int, T]], done: dict[int, R]) -> None:
        """A worker died: start another, retry its items alone, fail the one that killed it alone."""
        w.process.join(timeout=5)
        reason = f"the worker process {describe_exit(w.process.exitcode)} while processing this item"
        self.crashes += 1
        self._stillborn = 0 if w.served else self._stillborn + 1
        if self._stillborn >= 3:  # workers die before doing anything: do not blame the items
            raise WorkerError(
                f"worker processes {describe_exit(w.process.exitcode)} before doing any work, 3 times in a row; "
                f"a script that starts them must be importable and guard its entry point with "
                f"`if __name__ == \"__main__\":`"
            )
        # The first batch was in progress: if it held one item, that item killed the worker.
        # Every other item is retried alone, so that the culprit can be told apart.
        for i, (batch, alone) in enumerate(w.batches):
            if i == 0 and alone:
                seq, item = batch[0]
                done[seq] = self._crashed(item, reason)
            else:
                retry.extend(batch)
        w.stop_feeder()
        w.conn.close()
        w.tasks.close()
        new = self._start()
        new.start_feeder()
        self._workers[self._workers.index(w)] = new

    def close(self) -> None:
        """Stop every worker now and reap it (idempotent)."""
        for w in self._workers:
            if w.process.is_alive():
                w.process.terminate()
        for w in self._workers:
            w.process.join(timeout=5)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.stop_feeder()
            w.conn.close()
            w.tasks.close()
        self._workers = []

    def __enter__(self) -> OrderedPool[T, R]:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
