"""Packing speed and memory, measured side by side in one run.

    python benchmarks/bench_pack.py [--corpus imagenet|large] [--workers 2] [--repeat 2]
                                    [--mxnet-python PATH]

For each corpus (ImageNet-like: 5,000 images, shorter side 300-500 px; large:
phone-sized photos, 1,500-3,000 px), these contenders pack the same list:

* the per-core limit: a plain single-process loop (read, cv2.imdecode, cv2.resize,
  cv2.imencode), OpenCV on one thread; `workers x limit` is the goal line; and the
  same loop in `workers` processes on disjoint shares, with nothing else running:
  the ceiling this (virtual, shared) machine really allows;
* MXNet's own tools/im2rec.py, when --mxnet-python (or $IM2REC_BENCH_MXNET_PYTHON)
  names a Python where `import mxnet` works. MXNet 1.9.1 still installs on
  Python 3.11 next to an old numpy, in a venv of its own (about 430 MB):
      python3.11 -m venv /tmp/mxvenv
      /tmp/mxvenv/bin/pip install mxnet==1.9.1 'numpy<1.24' opencv-python-headless
      python benchmarks/bench_pack.py --mxnet-python /tmp/mxvenv/bin/python
* an im2rec.py-style pipeline, always: MXNet's tools/im2rec.py structure (a feeding
  loop, one multiprocessing.Queue per worker, cv2.imread, an unbounded reorder
  buffer in a writer process) rebuilt on im2rec's record writer, without MXNet's
  import time or its extra threads;
* `im2rec pack`, as a user runs it (a subprocess of the CLI).

Each is run --repeat times, interleaved; the best time counts. Our package is
byte-compiled first, as a pip install does. Peak memory is the largest sum of PSS
over the whole process tree, sampled every 20 ms, for lists of 5,000 and 20,000
entries (the 20,000-entry list names each image four times).
"""

from __future__ import annotations

import argparse
import compileall
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cv2
import numpy as np
from common import corpus, row

from im2rec import recordio
from im2rec.lst import ListEntry, read_lst, write_lst

# --------------------------------------------------------------------------- memory of a process tree


def _children(pid: int) -> list:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_pss_mb(pid: int) -> float:
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += _pss_kb(p)
        stack += _children(p)
    return total / 1024


def run_measured(cmd: list) -> tuple:
    """Run a command; return (seconds, peak PSS of its process tree in MB, CPU seconds of the tree).

    The CPU time (user + system of the command and every child it waited for) does
    not count time spent waiting for a shared core, so it tells overhead apart from
    a noisy neighbour.
    """
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    peak = 0.0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, tree_pss_mb(proc.pid))
        time.sleep(0.02)
    seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{cmd} failed with status {proc.returncode}")
    return seconds, peak, usage.ru_utime + usage.ru_stime


# --------------------------------------------------------------------------- contenders


def naive_loop(entries, root: Path, resize: int) -> tuple:
    """The per-core limit: (images/s, CPU seconds) of read + imdecode + resize + imencode on one thread."""
    cv2.setNumThreads(1)
    t, cpu = time.perf_counter(), time.process_time()
    for e in entries:
        data = (root / e.path).read_bytes()
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        h, w = img.shape[:2]
        size = (resize, h * resize // w) if h > w else (w * resize // h, resize)
        img = cv2.resize(img, size)
        cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])
    return len(entries) / (time.perf_counter() - t), time.process_time() - cpu


def _naive_share(args) -> None:
    entries, root, resize, part, parts = args
    naive_loop(entries[part::parts], root, resize)


def naive_parallel(entries, root: Path, resize: int, workers: int) -> tuple:
    """The machine's real ceiling: (images/s, CPU seconds) of `workers` plain loops on disjoint shares."""
    ctx = multiprocessing.get_context("fork")
    t, before = time.perf_counter(), os.times()
    procs = [ctx.Process(target=_naive_share, args=((entries, root, resize, k, workers),)) for k in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    after = os.times()
    cpu = after.children_user + after.children_system - before.children_user - before.children_system
    return len(entries) / (time.perf_counter() - t), cpu


def _im2rec_py_encode(args, i, item, q_out):
    root, resize, pass_through = args
    index, path, label = item
    header = recordio.IRHeader(0, label, index, 0)
    fullpath = os.path.join(root, path)
    if pass_through:
        with open(fullpath, "rb") as fin:
            q_out.put((i, recordio.pack(header, fin.read()), item))
        return
    img = cv2.imread(fullpath, 1)
    if img is None:
        q_out.put((i, None, item))
        return
    if resize:
        if img.shape[0] > img.shape[1]:
            newsize = (resize, img.shape[0] * resize // img.shape[1])
        else:
            newsize = (img.shape[1] * resize // img.shape[0], resize)
        img = cv2.resize(img, newsize)
    q_out.put((i, recordio.pack_img(header, img, quality=95, img_fmt=".jpg"), item))


def _im2rec_py_read_worker(args, q_in, q_out):
    while True:
        deq = q_in.get()
        if deq is None:
            break
        i, item = deq
        _im2rec_py_encode(args, i, item, q_out)


def _im2rec_py_write_worker(q_out, out):
    record = recordio.MXIndexedRecordIO(out[:-4] + ".idx", out, "w")
    buf, count, more = {}, 0, True
    while more:
        deq = q_out.get()
        if deq is not None:
            i, s, item = deq
            buf[i] = (s, item)
        else:
            more = False
        while count in buf:
            s, item = buf.pop(count)
            if s is not None:
                record.write_idx(item[0], s)
            count += 1
    record.close()


def im2rec_py_style(lst: str, root: str, out: str, workers: int, resize: int, pass_through: bool) -> None:
    """MXNet tools/im2rec.py's --num-thread pipeline, on im2rec's recordio."""
    items = [(e.index, e.path, e.labels[0]) for e in read_lst(lst)]
    args = (root, resize, pass_through)
    q_in = [multiprocessing.Queue(1024) for _ in range(workers)]
    q_out = multiprocessing.Queue(1024)
    readers = [multiprocessing.Process(target=_im2rec_py_read_worker, args=(args, q_in[i], q_out)) for i in range(workers)]
    for p in readers:
        p.start()
    writer = multiprocessing.Process(target=_im2rec_py_write_worker, args=(q_out, out))
    writer.start()
    for i, item in enumerate(items):
        q_in[i % len(q_in)].put((i, item))
    for q in q_in:
        q.put(None)
    for p in readers:
        p.join()
    q_out.put(None)
    writer.join()


# --------------------------------------------------------------------------- main


def mxnet_im2rec(python: str) -> str:
    """The path of tools/im2rec.py in the MXNet installed for ``python``."""
    code = "import os, mxnet; print(os.path.join(os.path.dirname(mxnet.__file__), 'tools', 'im2rec.py'))"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if out.returncode or not Path(out.stdout.strip()).exists():
        raise SystemExit(f"--mxnet-python {python}: cannot find mxnet/tools/im2rec.py ({out.stderr.strip().splitlines()[-1:]})")
    return out.stdout.strip()


def contenders(lst: Path, root: Path, tmp: Path, args, flags: list) -> dict:
    """name -> (command, output .rec) for one mode; im2rec.py takes PREFIX and writes PREFIX.rec."""
    w = str(args.workers)
    py_args = ["0", "1"] if flags else ["256", "0"]
    found = {
        "im2rec.py-style": ([sys.executable, __file__, "--im2rec-py", str(lst), str(root), str(tmp / "py.rec"), w, *py_args], tmp / "py.rec"),
        "im2rec pack": (
            [sys.executable, "-m", "im2rec", "pack", str(lst), str(root), str(tmp / "ours.rec"), "--workers", w, "--overwrite", "-q"]
            + (flags or ["--resize", "256"]),
            tmp / "ours.rec",
        ),
    }
    if args.mxnet_python:
        prefix = tmp / "mx" / lst.stem
        prefix.parent.mkdir(exist_ok=True)
        shutil.copy(lst, prefix.with_suffix(".lst"))
        cmd = [args.mxnet_python, mxnet_im2rec(args.mxnet_python), str(prefix), str(root) + os.sep, "--num-thread", w]
        found["MXNet im2rec.py"] = (cmd + (flags or ["--resize", "256"]), prefix.with_suffix(".rec"))
    return found


def bench_corpus(name: str, root: Path, tmp: Path, args) -> None:
    lst = tmp / f"{name}.lst"
    subprocess.run([sys.executable, "-m", "im2rec", "list", str(root), str(lst)[:-4], "-q"], check=True)
    entries = read_lst(lst)
    n = len(entries)
    modes = {"resize 256": []}
    if name == "imagenet":
        modes["pass-through"] = ["--pass-through"]
    print(f"\n== {name}: {n:,} images in {root} ({sum((root / e.path).stat().st_size for e in entries) / 1e6:.0f} MB), --workers {args.workers}")
    limits, ceilings, results, outputs = [], [], {}, {}
    rounds: dict = {}  # (mode, who) -> seconds of each round, for ratios within a round
    for _ in range(args.repeat):
        limits.append(naive_loop(entries, root, 256))
        ceilings.append(naive_parallel(entries, root, 256, args.workers))
        for mode, flags in modes.items():
            for who, (cmd, out) in contenders(lst, root, tmp, args, flags).items():
                measured = run_measured(cmd)
                rounds.setdefault((mode, who), []).append(measured[0])
                outputs[(mode, who)] = out.read_bytes() if mode == "pass-through" else None
                best = results.get((mode, who))
                if best is None or measured[0] < best[0]:
                    results[(mode, who)] = measured
    limit, limit_cpu = max(limits)
    goal = args.workers * limit
    per_img = lambda cpu: f"CPU {cpu / n * 1e3:.2f} ms/img"  # noqa: E731
    row("per-core limit (plain loop, 1 thread)", limit, "img/s", None, f"goal line {args.workers} x limit = {goal:,.0f} img/s; {per_img(limit_cpu)}")
    ceiling, ceiling_cpu = max(ceilings)
    row(f"{args.workers} plain loops in parallel", ceiling, "img/s", ceiling / goal, f"of {args.workers} x limit: what this machine allows; {per_img(ceiling_cpu)}")
    for mode in modes:
        ours = n / results[(mode, "im2rec pack")][0]
        for (m, who), (seconds, mb, cpu) in results.items():
            if m != mode:
                continue
            rate = n / seconds
            vs = "" if who == "im2rec pack" else f"; im2rec pack is {ours / rate:.2f}x this"
            row(f"{who}, {mode}", rate, "img/s", rate / goal, f"of {args.workers} x limit; {seconds:.2f} s, {per_img(cpu)}, peak {mb:.0f} MB{vs}")
    pack_s, _, pack_cpu = results[("resize 256", "im2rec pack")]
    print(
        f"  im2rec pack, resize 256: {n / pack_s / ceiling:.2f}x the speed of the plain loops in parallel, "
        f"{pack_cpu / ceiling_cpu:.2f}x their CPU time (start-up, list, pool and writing included)"
    )
    # This machine's speed drifts by 10-20% from minute to minute: ratios taken within
    # each round, where the contenders ran back to back, vary less than ratios of bests.
    ours = rounds[("resize 256", "im2rec pack")]
    paired = [f"{n / s / rate:.2f}" for s, (rate, _) in zip(ours, ceilings)]
    print(f"  per round, im2rec pack / plain loops in parallel: {', '.join(paired)} (median {statistics.median(map(float, paired)):.2f})")
    for (mode, who), seconds in rounds.items():
        if who != "im2rec pack":
            mine = rounds[(mode, "im2rec pack")]
            paired = [f"{theirs / s:.2f}" for s, theirs in zip(mine, seconds)]
            print(f"  per round, im2rec pack vs {who}, {mode}: {', '.join(paired)}x (median {statistics.median(map(float, paired)):.2f}x)")
            if mode == "resize 256":  # what a pipeline with no overhead at all would reach
                bare = [f"{rate * theirs / n:.2f}" for (rate, _), theirs in zip(ceilings, seconds)]
                print(f"  per round, plain loops in parallel vs {who}, {mode}: {', '.join(bare)}x (median {statistics.median(map(float, bare)):.2f}x)")
    if "pass-through" in modes:
        ours = outputs[("pass-through", "im2rec pack")]
        same = {who: data == ours for (m, who), data in outputs.items() if m == "pass-through" and who != "im2rec pack"}
        print(f"  pass-through .rec byte-identical to im2rec pack's: {same}")


def bench_memory(root: Path, tmp: Path, args) -> None:
    lst = tmp / "imagenet.lst"
    entries = read_lst(lst)
    print(f"\n== memory: peak PSS of all im2rec processes, --resize 256 --workers {args.workers}")
    for copies in (1, 4):
        big = tmp / f"x{copies}.lst"
        write_lst(big, [ListEntry(c * len(entries) + e.index, e.labels, e.path) for c in range(copies) for e in entries])
        cmd = [sys.executable, "-m", "im2rec", "pack", str(big), str(root), str(tmp / "mem.rec"), "--workers", str(args.workers), "--resize", "256", "--overwrite", "-q"]
        seconds, mb, _ = run_measured(cmd)
        row(f"{copies * len(entries):,} images", mb, "MB", None, f"{seconds:.1f} s")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--im2rec-py":
        lst, root, out, workers, resize, pass_through = sys.argv[2:8]
        im2rec_py_style(lst, root, out, int(workers), int(resize), pass_through == "1")
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", choices=["imagenet", "large"], help="default: both")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--mxnet-python", default=os.environ.get("IM2REC_BENCH_MXNET_PYTHON"), help="a Python with MXNet installed")
    args = ap.parse_args()
    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "im2rec"), quiet=1)
    tmp = Path(tempfile.mkdtemp(prefix="im2rec-bench-pack-"))
    try:
        for name in args.corpus or ["imagenet", "large"]:
            bench_corpus(name, corpus(name), tmp, args)
        if not args.no_memory and (not args.corpus or "imagenet" in args.corpus):
            bench_memory(corpus("imagenet"), tmp, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
