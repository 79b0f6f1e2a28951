"""Throughput of `convert` and `combine` on a face-recognition set, beside a plain file copy, in one run.

    python benchmarks/bench_faces.py [--images 200000] [--rounds 3]

Builds a plain .rec of 112x112 JPEG faces (the insightface golden images, cycled;
payload bytes do not change the work) with integer identity labels, 50 images per
identity, as MS1M-style sets have. Then, best of --rounds, page cache warm:

* copy: shutil.copyfile of the .rec and its .idx (the floor: the same bytes moved),
  and the same followed by fsync (convert and combine make their outputs durable
  before renaming them into place);
* convert --layout insightface (grouping, identity and header records, property);
* convert --layout plain --shuffle (the DALI route: records read in random order);
* combine of the set with itself into an insightface set (twice the bytes; against two copies).

Each line gives MB/s of input read and the ratio to the copy (goal: 0.8x).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_of, row

from im2rec import faces, recordio

FACES = Path(__file__).resolve().parent.parent / "tests" / "data" / "insightface" / "images"


def build(path: Path, n: int) -> int:
    images = [p.read_bytes() for p in sorted(FACES.rglob("*.jpg"))]
    with recordio.RecordWriter(path, path.with_suffix(".idx")) as w:
        for i in range(n):
            w.write_idx(i, recordio.pack(recordio.IRHeader(0, float(i // 50), i, 0), images[i % len(images)]))
        return w.tell()


def clean(folder: Path) -> None:
    """Delete the previous round's outputs (untimed, before every contender's round)."""
    for p in folder.rglob("*"):
        if p.is_file() and p.name not in ("plain.rec", "plain.idx"):
            p.unlink()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="im2rec-bench-faces-") as tmp:
        d = Path(tmp)
        src = d / "plain.rec"
        size = build(src, args.images)
        mb = size / 1e6
        print(f"{args.images:,} face images, {mb:,.1f} MB ({size / args.images:,.0f} bytes per record)")

        def copy(times=1, sync=False):
            for k in range(times):
                for ext in (".rec", ".idx"):
                    shutil.copyfile(src.with_suffix(ext), d / f"copy{k}{ext}")
                    if sync:
                        with open(d / f"copy{k}{ext}", "rb") as f:
                            os.fsync(f.fileno())

        def best(fn) -> float:
            return best_of(fn, args.rounds, setup=lambda: clean(d))[0]

        t_copy = best(copy)
        t_sync = best(lambda: copy(sync=True))
        t_face = best(lambda: faces.convert(str(src), str(d / "face" / "train.rec"), "insightface"))
        t_shuf = best(lambda: faces.convert(str(src), str(d / "dali.rec"), "plain", shuffle=True))
        t_copy2 = best(lambda: copy(2))
        t_comb = best(lambda: faces.combine(str(d / "both" / "train.rec"), [str(src), str(src)], layout="insightface"))
        row("copy (.rec + .idx)", mb / t_copy, "MB/s", 1.0)
        row("copy, then fsync (outputs on disk, as ours)", mb / t_sync, "MB/s", t_copy / t_sync)
        row("convert --layout insightface", mb / t_face, "MB/s", t_copy / t_face)
        row("convert --layout plain --shuffle", mb / t_shuf, "MB/s", t_copy / t_shuf)
        row("copy twice", 2 * mb / t_copy2, "MB/s", 1.0)
        row("combine A A --layout insightface", 2 * mb / t_comb, "MB/s", t_copy2 / t_comb)
        row("convert --layout insightface", args.images / t_face / 1e3, "k rec/s")


if __name__ == "__main__":
    main()
