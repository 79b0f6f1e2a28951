"""Throughput and memory of `im2rec export` and `im2rec import`, beside `im2rec convert`, in one run.

    python benchmarks/bench_bridges.py [--images 200000] [--rounds 3] [--only webdataset,parquet,mds,litdata]
    PYTHONPATH=. /work/venv-bench/bin/python benchmarks/bench_bridges.py   # with the peers' own writers

Builds the face set of `bench_faces.py` (112x112 JPEGs, integer identity labels, 50 images
per identity: a plain .rec), then, best of --rounds, page cache warm, each in this process:

* convert --layout plain: the baseline, every payload copied once into a new .rec;
* export --format F: the .rec to F's shards; import --format F: those shards back to a .rec
  (pass-through, the default), checked byte-identical to the input;
* for mds and litdata, when their packages can be imported (the venv of the peers), their
  own writers fed from a folder of the same JPEGs (`im2rec extract` of the .rec, page cache
  warm): MosaicML's MDSWriter with the same columns, litdata's optimize (2 workers, its
  default chunk size as ours): what a user without im2rec would run. Each in a child
  process (streaming gets a stand-in torchvision, as in bench_train.py).

Each line gives records/s and the ratio to convert (goal: 0.8x for webdataset and parquet,
both ways). Then peak memory (RSS of a child process running the CLI) for export and import
at a quarter and at the whole of the set: flat when it does not grow with the size.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_faces import build
from bench_train import TORCHVISION_STUB
from common import best_of, row

from im2rec import exchange, faces, inspection
from im2rec.image import ImageOptions
from im2rec.packing import PackOptions

FORMATS = ("webdataset", "parquet", "mds", "litdata")


def peak_rss_mb(cmd: list[str]) -> float:
    """Peak RSS of a child process (MB): one child per call, so RUSAGE_CHILDREN's maximum is its own
    only when it is the largest so far: each call runs in a fresh intermediate process."""
    code = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True).stdout
    return int(out.split()[-1]) / 1024


def peer_write(fmt: str, folder: Path, out: Path) -> float:
    """Seconds for the format's own writer to write the images of ``folder`` (``extract``'s
    layout: LABEL/KEY.jpg, listed in its .lst) to ``out``; run in a child process."""
    import time

    lst = next(folder.glob("*.lst"))
    rows = [line.rstrip("\n").split("\t") for line in lst.open()]
    started = time.perf_counter()
    if fmt == "mds":
        from streaming import MDSWriter

        with MDSWriter(out=str(out), columns={"key": "str", "image": "bytes", "label": "int"}, size_limit=64 << 20) as w:
            for key, label, path in rows:
                w.write({"key": key, "image": (folder / path).read_bytes(), "label": int(float(label))})
    else:
        from litdata import optimize

        optimize(fn=_litdata_item, inputs=[(k, float(lab), str(folder / p)) for k, lab, p in rows], output_dir=str(out), chunk_bytes="64MB", num_workers=2)
    return time.perf_counter() - started


def _litdata_item(row):
    key, label, path = row
    with open(path, "rb") as f:
        return {"key": key, "image": f.read(), "label": int(label)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(FORMATS))
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer:
        print(peer_write(args.peer, Path(args.folder), Path(args.out)))
        return
    formats = [f for f in args.only.split(",") if f]
    opts = PackOptions(image=ImageOptions(pass_through=True), overwrite=True)
    with tempfile.TemporaryDirectory(prefix="im2rec-bench-bridges-") as tmp:
        d = Path(tmp)
        src = d / "plain.rec"
        size = build(src, args.images)
        print(f"{args.images:,} face images, {size / 1e6:,.1f} MB ({size / args.images:,.0f} bytes per record)")
        n = args.images

        def clean() -> None:
            for p in d.iterdir():
                if p.name not in ("plain.rec", "plain.idx", "keep"):
                    shutil.rmtree(p) if p.is_dir() else p.unlink()

        def best(fn) -> float:
            return best_of(fn, args.rounds, setup=clean)[0]

        t_convert = best(lambda: faces.convert(str(src), str(d / "copy.rec"), "plain"))
        row("convert --layout plain (baseline)", n / t_convert / 1e3, "k rec/s", 1.0)
        keep = d / "keep"
        keep.mkdir()
        for fmt in formats:
            try:
                t_export = best(lambda fmt=fmt: exchange.export_rec(str(src), str(d / fmt), fmt))
            except Exception as e:  # a format whose library is missing here
                row(f"export --format {fmt}", 0, "k rec/s", note=f"skipped: {e}")
                continue
            exchange.export_rec(str(src), str(keep / fmt), fmt)
            t_import = best(lambda fmt=fmt: exchange.import_samples(str(keep / fmt), str(d / "back.rec"), fmt, opts))
            exchange.import_samples(str(keep / fmt), str(keep / "back.rec"), fmt, opts)
            same = filecmp.cmp(src, keep / "back.rec", shallow=False) and filecmp.cmp(d / "plain.idx", keep / "back.idx", shallow=False)
            row(f"export --format {fmt}", n / t_export / 1e3, "k rec/s", t_convert / t_export)
            row(f"import --format {fmt}", n / t_import / 1e3, "k rec/s", t_convert / t_import, note="round trip byte-identical" if same else "ROUND TRIP DIFFERS")
        peers = [f for f in formats if f in ("mds", "litdata") and (keep / f).exists()]
        if peers:
            folder = d / "folder"
            inspection.extract_rec(str(src), str(folder))
            stub = d / "stub"
            for rel, text in TORCHVISION_STUB.items():
                (stub / "torchvision" / rel).parent.mkdir(parents=True, exist_ok=True)
                (stub / "torchvision" / rel).write_text(text)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stub), str(Path(__file__).resolve().parent.parent)]))
            for fmt in peers:
                times = []
                for _ in range(args.rounds):
                    out = d / f"peer-{fmt}"
                    shutil.rmtree(out, ignore_errors=True)
                    cmd = [sys.executable, __file__, "--peer", fmt, "--folder", str(folder), "--out", str(out)]
                    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    if proc.returncode:
                        row(f"{fmt}'s own writer from a folder", 0, "k rec/s", note=f"failed: {proc.stderr.strip().splitlines()[-1:]}")
                        break
                    times.append(float(proc.stdout.split()[-1]))
                if times:
                    row(f"{fmt}'s own writer from a folder", n / min(times) / 1e3, "k rec/s", t_convert / min(times))
            shutil.rmtree(folder)
        quarter = d / "quarter.rec"
        build(quarter, max(1, n // 4))
        for fmt in formats:
            if not (keep / fmt).exists():
                continue
            mem = []
            for rec in (quarter, src):
                out = d / f"mem-{fmt}"
                mem.append(peak_rss_mb([sys.executable, "-m", "im2rec", "export", str(rec), str(out), "--format", fmt, "-q"]))
                mem.append(peak_rss_mb([sys.executable, "-m", "im2rec", "import", str(out), str(d / "mem.rec"), "--format", fmt, "-q", "--overwrite"]))
                shutil.rmtree(out)
            row(f"peak RSS export {fmt}: {n // 4:,} -> {n:,} records", mem[2], "MB", note=f"from {mem[0]:,.0f} MB")
            row(f"peak RSS import {fmt}: {n // 4:,} -> {n:,} records", mem[3], "MB", note=f"from {mem[1]:,.0f} MB")
        os.sync()


if __name__ == "__main__":
    main()
