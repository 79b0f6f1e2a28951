"""Listing speed and memory: `im2rec list` on trees of 50,000 to 200,000 (empty) files.

    python benchmarks/bench_list.py [--sizes 50000,100000,200000] [--classes 1000]

Beside it, in the same run, the algorithm of MXNet's im2rec.py --list --recursive
(os.walk with followlinks, sort, shuffle, write), in a subprocess too. Prints seconds,
microseconds per file (flat when listing is linear) and peak memory (max RSS).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import row

IM2REC_PY = r'''
import os, random, sys, resource
root, prefix = sys.argv[1], sys.argv[2]
exts = ['.jpeg', '.jpg', '.png']
def list_image(root):
    i = 0
    cat = {}
    for path, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        files.sort()
        for fname in files:
            fpath = os.path.join(path, fname)
            suffix = os.path.splitext(fname)[1].lower()
            if os.path.isfile(fpath) and (suffix in exts):
                if path not in cat:
                    cat[path] = len(cat)
                yield (i, os.path.relpath(fpath, root), cat[path])
                i += 1
image_list = list(list_image(root))
random.seed(100)
random.shuffle(image_list)
with open(prefix + '.lst', 'w') as fout:
    for item in image_list:
        fout.write('%d\t%f\t%s\n' % (item[0], item[2], item[1]))
'''

MEASURE = r'''
import resource, sys, time
mode, args = sys.argv[1], sys.argv[2:]
t = time.perf_counter()
if mode == "im2rec.py":
    sys.argv = ["im2rec.py", *args]
    exec(compile(IM2REC_PY, "<im2rec.py>", "exec"), {"__name__": "__main__"})
elif mode == "im2rec":
    from im2rec.cli import main
    main(args, standalone_mode=False)
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
'''


def make_tree(root: Path, n: int, classes: int) -> None:
    per = n // classes
    for c in range(classes):
        d = root / f"n{c:08d}"
        d.mkdir(parents=True)
        for i in range(per):
            (d / f"n{c:08d}_{i}.JPEG").touch()


def measure(args: list) -> tuple:
    code = f"IM2REC_PY = {IM2REC_PY!r}\n{MEASURE}"
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    seconds, rss_kb = out.stdout.strip().splitlines()[-1].split()
    return float(seconds), int(rss_kb) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="50000,100000,200000")
    ap.add_argument("--classes", type=int, default=1000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="im2rec-bench-list-"))
    try:
        base = measure(["nothing"])
        print(f"interpreter alone: {base[1]:.0f} MB max RSS")
        for n in map(int, args.sizes.split(",")):
            root = tmp / f"tree{n}"
            t = time.perf_counter()
            make_tree(root, n, args.classes)
            print(f"\n{n:,} files in {args.classes} folders (made in {time.perf_counter() - t:.1f} s)")
            ref_s, ref_mb = measure(["im2rec.py", str(root), str(tmp / "ref")])
            ours_s, ours_mb = measure(["im2rec", "list", str(root), str(tmp / "ours"), "--quiet"])
            same = (tmp / "ref.lst").read_bytes() == (tmp / "ours.lst").read_bytes()
            row("im2rec.py --list algorithm", ref_s, "s", 1.0, f"{ref_s / n * 1e6:.1f} us/file, {ref_mb:.0f} MB")
            row("im2rec list", ours_s, "s", ref_s / ours_s, f"{ours_s / n * 1e6:.1f} us/file, {ours_mb:.0f} MB; identical lists: {same}")
            shutil.rmtree(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
