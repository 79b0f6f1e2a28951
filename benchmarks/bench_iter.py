"""One training epoch through im2rec.ImageRecordIter, beside MXNet's own and a DataLoader, in one run.

    python benchmarks/bench_iter.py [--mxnet-python PATH] [--records 5000] [--rounds 1]

The 5,000 ImageNet-like JPEGs of the benchmark corpus (``python -m im2rec.synthetic
--classes 100 --per-class 50``, shorter side 300-500 px, built on first use) are packed as
they are (``--pass-through``). Every contender reads one epoch of them with ImageNet's
training recipe: ``data_shape=(3, 224, 224)``, ``resize=256``, ``rand_crop``,
``rand_mirror``, ImageNet's mean and std, batches of 64, float32 NCHW:

* MXNet 1.9.1's ``mx.io.ImageRecordIter`` with its defaults and with ``preprocess_threads=1``
  (needs ``--mxnet-python``, a Python with MXNet, or ``IM2REC_BENCH_MXNET_PYTHON``);
* ``im2rec.ImageRecordIter`` with the same arguments, and with ``preprocess_threads=1``;
* ``im2rec.RecordDataset`` in a ``torch.utils.data.DataLoader`` of 2 workers doing the same
  work per image (im2rec's augmenter and normalisation, then the default collate).

Each runs in a process of its own, timed from its start to the end of the epoch (opening
the files and the first batch included); memory is the peak PSS of its process tree.
Figures are samples/s and the ratio to MXNet's defaults (else to im2rec's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, corpus, row, run_sampled

ROOT = Path(__file__).resolve().parent.parent
RECIPE = {
    "data_shape": (3, 224, 224),
    "resize": 256,
    "rand_crop": True,
    "rand_mirror": True,
    "batch_size": 64,
    "mean_r": 123.68,
    "mean_g": 116.779,
    "mean_b": 103.939,
    "std_r": 58.395,
    "std_g": 57.12,
    "std_b": 57.375,
}

# Each contender: code that reads one epoch and prints {"samples": n} (the parent times it).
MXNET = """
import json, sys, mxnet as mx
kw = json.loads(sys.argv[1])
it = mx.io.ImageRecordIter(**kw)
n = 0
for b in it:
    b.data[0].wait_to_read()
    n += b.data[0].shape[0] - b.pad
print(json.dumps({"samples": n}))
"""
IM2REC = """
import json, sys, im2rec
kw = json.loads(sys.argv[1])
torch_too = kw.pop("torch", False)
if torch_too:  # the batches handed to PyTorch, as a training loop would (torch imported, as for every torch reader)
    import torch
n = 0
with im2rec.ImageRecordIter(**kw) as it:
    for b in it:
        x = torch.from_numpy(b.data[0]) if torch_too else b.data[0]
        n += x.shape[0] - b.pad
print(json.dumps({"samples": n}))
"""
LOADER = """
import json, sys
import numpy as np, torch
from torch.utils.data import DataLoader
import im2rec
from im2rec.augment import ImageAugmenter, Normalizer

kw = json.loads(sys.argv[1])
aug = ImageAugmenter(data_shape=tuple(kw["data_shape"]), resize=kw["resize"], rand_crop=True)
norm = Normalizer(3, np.float32, mean=np.array([kw["mean_r"], kw["mean_g"], kw["mean_b"], 0.0]), std=np.array([kw["std_r"], kw["std_g"], kw["std_b"], 1.0]), scale=1.0)

def transform(img):
    rng = np.random.default_rng()
    img = aug.process(img, rng)
    out = np.empty(kw["data_shape"], np.float32)
    norm.write(img, out, bool(rng.random() < 0.5), rng)
    return torch.from_numpy(out)

ds = im2rec.RecordDataset(kw["path_imgrec"], mode="bgr", transform=transform)
n = 0
for x, y in DataLoader(ds, batch_size=kw["batch_size"], shuffle=False, num_workers=2, **kw.get("data_loader", {})):
    n += x.shape[0]
print(json.dumps({"samples": n}))
"""
RECORD_LOADER = """
import json, sys
import numpy as np
import im2rec
from im2rec.augment import ImageAugmenter, Normalizer

kw = json.loads(sys.argv[1])
aug = ImageAugmenter(data_shape=tuple(kw["data_shape"]), resize=kw["resize"], rand_crop=True)
norm = Normalizer(3, np.float32, mean=np.array([kw["mean_r"], kw["mean_g"], kw["mean_b"], 0.0]), std=np.array([kw["std_r"], kw["std_g"], kw["std_b"], 1.0]), scale=1.0)

def transform(img):
    rng = np.random.default_rng()
    img = aug.process(img, rng)
    out = np.empty(kw["data_shape"], np.float32)
    norm.write(img, out, bool(rng.random() < 0.5), rng)
    return out

n = 0
with im2rec.RecordLoader(kw["path_imgrec"], kw["batch_size"], transform=transform, mode="bgr", **kw.get("loader", {})) as loader:
    for x, y in loader:
        n += x.shape[0]
print(json.dumps({"samples": n}))
"""
# NVIDIA DALI's CPU pipeline for the same recipe (DALI from PyPI: nvidia-dali-cuda120; device_id=None: no GPU)
DALI = """
import json, sys
from nvidia.dali import fn, pipeline_def, types

kw = json.loads(sys.argv[1])
bs = kw["batch_size"]

@pipeline_def(batch_size=bs, num_threads=kw.get("dali_threads", 2), device_id=None)
def train():
    jpegs, labels = fn.readers.mxnet(path=kw["path_imgrec"], index_path=kw["path_imgidx"], random_shuffle=False, name="reader")
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.resize(images, resize_shorter=kw["resize"])
    mirror = fn.random.coin_flip(probability=0.5)
    images = fn.crop_mirror_normalize(images, crop=kw["data_shape"][1:], crop_pos_x=fn.random.uniform(range=(0, 1)), crop_pos_y=fn.random.uniform(range=(0, 1)),
                                      mirror=mirror, mean=[kw["mean_r"], kw["mean_g"], kw["mean_b"]], std=[kw["std_r"], kw["std_g"], kw["std_b"]],
                                      dtype=types.FLOAT, output_layout="CHW")
    return images, labels

pipe = train()
pipe.build()
size = pipe.epoch_size("reader")
n = 0
while n < size:
    images, labels = pipe.run()
    n += min(bs, size - n)
print(json.dumps({"samples": n}))
"""


def packed(records: int) -> Path:
    """The corpus packed as it is (the first ``records`` images in list order)."""
    out = CACHE / f"iter-{records}"
    rec = out / "train.rec"
    if not rec.exists():
        out.mkdir(parents=True, exist_ok=True)
        root = corpus("imagenet")
        im2rec = [sys.executable, "-m", "im2rec"]
        subprocess.run([*im2rec, "list", str(root), str(out / "all"), "-q"], check=True)
        lines = (out / "all.lst").read_text().splitlines(keepends=True)[:records]
        (out / "train.lst").write_text("".join(lines))
        subprocess.run([*im2rec, "pack", str(out / "train.lst"), str(root), str(rec), "--pass-through", "-q"], check=True)
    return rec


def run(python: str, code: str, kwargs: dict, env: dict) -> tuple[float, float, int]:
    """(seconds, peak MB, samples) of one contender's epoch in a process of its own."""
    out = CACHE / "bench_iter.out"
    script = f"import sys; sys.stdout = open({str(out)!r}, 'w')\n" + textwrap.dedent(code)
    seconds, peak, _, _ = run_sampled([python, "-c", script, json.dumps(kwargs)], env)
    return seconds, peak, json.loads(out.read_text().strip().splitlines()[-1])["samples"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mxnet-python", default=os.environ.get("IM2REC_BENCH_MXNET_PYTHON"), help="a Python with MXNet 1.9.1, for its ImageRecordIter")
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=1, help="epochs of each contender, interleaved; the best is shown")
    ap.add_argument("--no-loader", action="store_true", help="leave out RecordLoader and the DataLoader (they need torch)")
    ap.add_argument("--no-dali", action="store_true", help="leave out NVIDIA DALI (pip install nvidia-dali-cuda120)")
    args = ap.parse_args()
    rec = packed(args.records)
    kwargs = {**RECIPE, "path_imgrec": str(rec), "path_imgidx": str(rec.with_suffix(".idx"))}
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "")}
    env.pop("OMP_NUM_THREADS") if not env["OMP_NUM_THREADS"] else None
    contenders = []
    if args.mxnet_python:
        contenders += [("MXNet ImageRecordIter, defaults", args.mxnet_python, MXNET, {}), ("MXNet ImageRecordIter, preprocess_threads=1", args.mxnet_python, MXNET, {"preprocess_threads": 1})]
    contenders += [("im2rec.ImageRecordIter, defaults", sys.executable, IM2REC, {}), ("im2rec.ImageRecordIter, preprocess_threads=1", sys.executable, IM2REC, {"preprocess_threads": 1})]
    if not args.no_loader:
        contenders.append(("im2rec.ImageRecordIter, batches to torch", sys.executable, IM2REC, {"torch": True}))
        contenders.append(("im2rec.RecordLoader, defaults", sys.executable, RECORD_LOADER, {}))
        contenders.append(("RecordDataset + DataLoader, 2 workers", sys.executable, LOADER, {}))
    if not args.no_dali:
        contenders.append(("NVIDIA DALI, CPU pipeline, 2 threads", sys.executable, DALI, {}))
    best: dict[str, tuple[float, float, int]] = {}
    for _ in range(args.rounds):
        for name, python, code, extra in contenders:
            seconds, peak, samples = run(python, code, {**kwargs, **extra}, env)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, peak, samples)
    print(f"one epoch of {args.records:,} ImageNet-like JPEGs: {json.dumps({k: v for k, v in RECIPE.items()})}")
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    base_name = contenders[0][0]
    base = best[base_name][2] / best[base_name][0]
    mem_base = best[base_name][1]
    for name, *_ in contenders:
        seconds, peak, samples = best[name]
        rate = samples / seconds
        row(name, rate, "samples/s", rate / base, f"{seconds:.1f} s, peak {peak:,.0f} MB ({peak / mem_base:.2f}x)")
    print(f"ratios: to {base_name}")
    if args.mxnet_python:
        one = best["MXNet ImageRecordIter, preprocess_threads=1"]
        ours_one = best["im2rec.ImageRecordIter, preprocess_threads=1"]
        print(f"one thread each: im2rec {ours_one[2] / ours_one[0] / (one[2] / one[0]):.2f}x MXNet")


if __name__ == "__main__":
    main()
