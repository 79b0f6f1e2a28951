"""Reading speed of the format core, beside a naive reader, in one run.

    python benchmarks/bench_read.py [--corpus DIR] [--rounds 5] [--index-entries 1000000]

1. Packs the raw JPEG bytes of the 5,000-image corpus (`python -m im2rec.synthetic
   --classes 100 --per-class 50`, built on first use) into bench.rec/.idx with the core writer.
2. Random reads: MXIndexedRecordIO.read_idx over shuffled keys, against a naive
   reader that does what MXNet does (seek, read the 8-byte part header, read the payload).
3. Sequential iteration over every record, against the same naive reader.
4. Opening a 1,000,000-entry .idx, against MXNet 1.9.1's own parsing loop.

Figures are records/s (best of the rounds; median in brackets) and the ratio to the
naive reader. For reference, MXNet 1.9.1 on this machine kind does about 90,000
random reads/s on this file and opens a 1M-entry index in 0.35 s.
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_of, corpus, image_files, row

from im2rec import recordio

PART = struct.Struct("<II")


class NaiveReader:
    """Seek-and-read through a file object, as MXNet's C++ reader does."""

    def __init__(self, rec: str, idx: str):
        self.f = open(rec, "rb")  # noqa: SIM115 (the naive reader keeps its file open for the run, as MXNet's does)
        self.idx = naive_index(idx)

    def read_at(self, pos: int) -> bytes:
        self.f.seek(pos)
        _magic, lrec = PART.unpack(self.f.read(8))
        length = lrec & (2**29 - 1)
        data = self.f.read((length + 3) & ~3)
        return data[:length]

    def read_idx(self, key: int) -> bytes:
        return self.read_at(self.idx[key])

    def __iter__(self):
        self.f.seek(0)
        read = self.f.read
        while True:
            head = read(8)
            if not head:
                return
            _magic, lrec = PART.unpack(head)
            length = lrec & (2**29 - 1)
            yield read((length + 3) & ~3)[:length]


def naive_index(path: str) -> dict:
    """MXNet 1.9.1's MXIndexedRecordIO.open(): one Python iteration per line."""
    idx, keys = {}, []
    with open(path) as fin:
        for line in iter(fin.readline, ""):
            line = line.strip().split("\t")
            key = int(line[0])
            idx[key] = int(line[1])
            keys.append(key)
    return idx


def build_rec(root: Path, out: Path) -> int:
    files = image_files(root)
    with recordio.RecordWriter(out, out.with_suffix(".idx")) as w:
        for i, f in enumerate(files):
            w.write_idx(i, recordio.pack(recordio.IRHeader(0, float(i % 100), i, 0), f.read_bytes()))
    return len(files)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, help="image folder (default: the 5,000-image corpus, built on first use)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--index-entries", type=int, default=1_000_000)
    args = ap.parse_args()

    root = args.corpus or corpus("imagenet")
    tmp = Path(tempfile.mkdtemp(prefix="im2rec-bench-read-"))
    rec = tmp / "bench.rec"
    n = build_rec(root, rec)
    size = rec.stat().st_size
    print(f"{n} records, {size / 1e6:.1f} MB ({size / n / 1e3:.1f} KB per record) in {rec}")

    ours = recordio.MXIndexedRecordIO(rec.with_suffix(".idx"), rec, "r")
    naive = NaiveReader(str(rec), str(rec.with_suffix(".idx")))
    keys = list(range(n))
    random.Random(0).shuffle(keys)
    for k in keys[:50]:  # both readers return the same bytes
        assert ours.read_idx(k) == naive.read_idx(k)
    for key in keys:  # warm the page cache and our map once, so both start equal
        ours.read_idx(key)
        naive.read_idx(key)

    def random_ours():
        read = ours.read_idx
        for k in keys:
            read(k)

    def random_naive():
        read = naive.read_idx
        for k in keys:
            read(k)

    def seq_ours():
        for _ in ours._reader:
            pass

    def seq_naive():
        for _ in naive:
            pass

    print(f"\nrandom read_idx, {n} shuffled keys (records/s, best of {args.rounds}; median)")
    naive_best, naive_med = best_of(random_naive, args.rounds)
    ours_best, ours_med = best_of(random_ours, args.rounds)
    row("naive seek+read", n / naive_best, "rec/s", 1.0, f"(median {n / naive_med:,.0f})")
    row("im2rec MXIndexedRecordIO.read_idx", n / ours_best, "rec/s", naive_best / ours_best, f"(median {n / ours_med:,.0f})")
    row("  vs MXNet 1.9.1 reference (90,000/s)", n / ours_best, "rec/s", n / ours_best / 90_000, "goal >= 2x")

    print(f"\nsequential iteration over {n} records")
    naive_best, naive_med = best_of(seq_naive, args.rounds)
    ours_best, ours_med = best_of(seq_ours, args.rounds)
    row("naive read loop", n / naive_best, "rec/s", 1.0, f"(median {n / naive_med:,.0f})")
    row("im2rec RecordReader iteration", n / ours_best, "rec/s", naive_best / ours_best, f"(median {n / ours_med:,.0f})")

    m = args.index_entries
    big_rec = tmp / "big.rec"
    big_idx = tmp / "big.idx"
    rng = np.random.default_rng(0)
    offsets = np.cumsum(rng.integers(10_000, 200_000, m) // 4 * 4) - 0
    offsets -= offsets[0]
    with open(big_rec, "wb") as f:  # a sparse file as large as the offsets need
        f.truncate(int(offsets[-1]) + 64)
    recordio.write_index(big_idx, rng.permutation(m), offsets)
    print(f"\nopening a {m:,}-entry .idx ({big_idx.stat().st_size / 1e6:.1f} MB), seconds")

    def open_ours():
        recordio.MXIndexedRecordIO(big_idx, big_rec, "r").close()

    def open_naive():
        naive_index(str(big_idx))

    naive_best, _ = best_of(open_naive, max(2, args.rounds // 2))
    ours_best, ours_med = best_of(open_ours, args.rounds)
    row("MXNet 1.9.1 parsing loop", naive_best, "s", 1.0)
    row("im2rec MXIndexedRecordIO(...)", ours_best, "s", naive_best / ours_best, f"(median {ours_med:.3f} s)")
    row("  vs MXNet 1.9.1 reference (0.35 s)", ours_best, "s", 0.35 / ours_best, "goal >= 5x")
    ours.close()
    for p in tmp.iterdir():
        os.unlink(p)
    tmp.rmdir()


if __name__ == "__main__":
    main()
