"""RecordDataset decoding speed against cv2.imdecode alone on the same bytes, in one run.

    python benchmarks/bench_dataset.py [--corpus DIR] [--rounds 3]

Packs the 5,000-image corpus with `im2rec pack --resize 256` (the usual training
file), then decodes every record in a shuffled order:

* baseline: cv2.imdecode on the encoded bytes, already in memory (BGR);
* RecordDataset(mode="bgr")[i]: the same decode through the dataset (index lookup,
  header, labels, decode straight from the memory map);
* RecordDataset(mode="rgb")[i]: the default, plus the BGR->RGB conversion;
* the same in 2 threads of one process (a ThreadPoolExecutor, as torchdata's thread
  mappers or RecordLoader use), and the first 1,000 records packed as they are
  (``--pass-through``, ImageNet-like JPEGs) in 1 and 2 threads.

Goals: the dataset's overhead over the bare decode is at most 10%; 2 threads decode at
least 1.7x one thread (on 2 cores).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cv2
import numpy as np
from common import best_of, corpus, row

from im2rec import recordio
from im2rec.dataset import RecordDataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    root = args.corpus or corpus("imagenet")
    tmp = Path(tempfile.mkdtemp(prefix="im2rec-bench-ds-"))
    subprocess.run([sys.executable, "-m", "im2rec", "list", str(root), str(tmp / "d"), "-q"], check=True)
    subprocess.run([sys.executable, "-m", "im2rec", "pack", str(tmp / "d.lst"), str(root), str(tmp / "d.rec"), "--resize", "256", "-q"], check=True)
    cv2.setNumThreads(1)

    bgr, rgb = RecordDataset(tmp / "d.rec", mode="bgr"), RecordDataset(tmp / "d.rec")
    n = len(bgr)
    order = list(range(n))
    random.Random(0).shuffle(order)
    reader = recordio.RecordReader(tmp / "d.rec", tmp / "d.idx")
    offsets = np.sort(reader.index.offsets)
    encoded = [recordio.unpack(reader.read_at(int(offsets[i]))[0])[1] for i in order]
    assert np.array_equal(cv2.imdecode(np.frombuffer(encoded[0], np.uint8), cv2.IMREAD_COLOR), bgr[order[0]][0])

    def baseline():
        for data in encoded:
            cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)

    def through(ds):
        def loop():
            for i in order:
                ds[i]

        return loop

    print(f"{n} records of {tmp / 'd.rec'}, shuffled order, one thread (images/s, best of {args.rounds} interleaved rounds)")
    times = {"base": [], "bgr": [], "rgb": []}
    for _ in range(args.rounds):  # interleaved, so that a slow spell of the machine hits all three
        for name, fn in (("base", baseline), ("bgr", through(bgr)), ("rgb", through(rgb))):
            times[name].append(best_of(fn, 1)[0])
    subprocess.run([sys.executable, "-m", "im2rec", "pack", str(tmp / "d.lst"), str(root), str(tmp / "p.rec"), "--pass-through", "-q"], check=True)
    passed = RecordDataset(tmp / "p.rec")
    first = order[:1000]

    def threaded(ds, items, threads):
        def loop():
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(ds.__getitem__, items))

        return loop

    scaling = {"1": [], "2": [], "p1": [], "p2": []}
    for _ in range(args.rounds):
        for name, fn in (("1", through(rgb)), ("2", threaded(rgb, order, 2)), ("p1", threaded(passed, first, 1)), ("p2", threaded(passed, first, 2))):
            scaling[name].append(best_of(fn, 1)[0])
    base, ours_bgr, ours_rgb = (min(times[k]) for k in ("base", "bgr", "rgb"))
    row("cv2.imdecode alone (bytes in memory)", n / base, "img/s", 1.0)
    row("RecordDataset(mode='bgr')[i]", n / ours_bgr, "img/s", base / ours_bgr, f"overhead {ours_bgr / base - 1:+.1%} (goal <= +10%)")
    row("RecordDataset()[i] (RGB, the default)", n / ours_rgb, "img/s", base / ours_rgb, f"overhead {ours_rgb / base - 1:+.1%}")
    one, two = min(scaling["1"]), min(scaling["2"])
    row("RecordDataset()[i] in 2 threads", n / two, "img/s", one / two, "x one thread (goal >= 1.7x)")
    p1, p2 = min(scaling["p1"]), min(scaling["p2"])
    row("1,000 ImageNet-like JPEGs as they are, 1 thread", 1000 / p1, "img/s", 1.0)
    row("... in 2 threads", 1000 / p2, "img/s", p1 / p2, "x one thread (goal >= 1.7x)")


if __name__ == "__main__":
    main()
