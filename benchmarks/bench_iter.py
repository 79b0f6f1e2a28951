"""One training epoch through im2rec's readers, MXNet's own, DALI's and a DataLoader, in one run.

    python benchmarks/bench_iter.py [--mxnet-python PATH] [--records 5000] [--rounds 1]

The 5,000 ImageNet-like JPEGs of the benchmark corpus (``python -m im2rec.synthetic
--classes 100 --per-class 50``, shorter side 300-500 px, built on first use) are packed as
they are (``--pass-through``). Every contender reads one epoch of them with ImageNet's
training recipe: ``data_shape=(3, 224, 224)``, ``resize=256``, ``rand_crop``,
``rand_mirror``, ImageNet's mean and std, batches of 64, float32 NCHW:

* MXNet 1.9.1's ``mx.io.ImageRecordIter`` with its defaults and with ``preprocess_threads=1``
  (needs ``--mxnet-python``, a Python with MXNet, or ``IM2REC_BENCH_MXNET_PYTHON``);
* ``im2rec.ImageRecordIter`` with the same arguments, with ``preprocess_threads=1``, and
  with its batches handed to torch (``torch.from_numpy``; torch imported, as in a training
  script);
* ``im2rec.RecordLoader`` with its defaults, doing the same work per image (im2rec's
  augmenter and normalisation as its ``transform``), returning a new array per image,
  and with ``transform(image, out=)`` writing each into its row of the batch;
* ``im2rec.RecordDataset`` in a ``torch.utils.data.DataLoader`` of 2 workers doing the same
  work (then the default collate), and the same with samples of one number (the work
  done, the decoded batches not sent between processes: what the rest costs is their IPC);
* NVIDIA DALI's CPU pipeline (``pip install nvidia-dali-cuda120``, ``device_id=None``):
  ``readers.mxnet``, ``decoders.image``, ``resize(resize_shorter=256)``,
  ``crop_mirror_normalize`` with a random crop and mirror, 2 threads.

Each runs in a process of its own. The figure is samples/s over the epoch, from the
making of the reader (after the imports: a training script has torch imported anyway) to
its end, the first batch included; the whole process's rate is beside it. Memory is the
peak PSS of its process tree. Ratios are to MXNet's defaults (else to im2rec's), and the
goals are printed at the end.
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

# Each contender: code that reads one epoch and prints {"samples": n, "epoch": seconds from the
# reader's making (after the imports) to the end}; the parent times the whole process.
MXNET = """
import json, sys, time, mxnet as mx
kw = json.loads(sys.argv[1])
T0 = time.perf_counter()
it = mx.io.ImageRecordIter(**kw)
n = 0
for b in it:
    b.data[0].wait_to_read()
    n += b.data[0].shape[0] - b.pad
print(json.dumps({"samples": n, "epoch": time.perf_counter() - T0}))
"""
IM2REC = """
import json, sys, time, im2rec
kw = json.loads(sys.argv[1])
torch_too = kw.pop("torch", False)
if torch_too:  # the batches handed to PyTorch, as a training loop would (torch imported, as for every torch reader)
    import torch
n = 0
T0 = time.perf_counter()
with im2rec.ImageRecordIter(**kw) as it:
    for b in it:
        x = torch.from_numpy(b.data[0]) if torch_too else b.data[0]
        n += x.shape[0] - b.pad
print(json.dumps({"samples": n, "epoch": time.perf_counter() - T0}))
"""
# The per-image work of the DataLoader's and RecordLoader's transform: im2rec's augmenter and normalisation.
WORK = """
import itertools, json, sys, time
import numpy as np, torch
import im2rec
from im2rec.mx.augment import ImageAugmenter, Normalizer

kw = json.loads(sys.argv[1])
aug = ImageAugmenter(data_shape=tuple(kw["data_shape"]), resize=kw["resize"], rand_crop=True)
norm = Normalizer(3, np.float32, mean=np.array([kw["mean_r"], kw["mean_g"], kw["mean_b"], 0.0]), std=np.array([kw["std_r"], kw["std_g"], kw["std_b"], 1.0]), scale=1.0)

draws = itertools.count()

def work(img, out=None):
    rng = np.random.default_rng(next(draws))  # a seeded stream per image, as the iterator's (no OS entropy read)
    img = aug.process(img, rng)
    out = np.empty(kw["data_shape"], np.float32) if out is None else out
    norm.write(img, out, bool(rng.random() < 0.5), rng)
    return out
"""
LOADER = WORK + """
from torch.utils.data import DataLoader

def transform(img):
    return torch.from_numpy(work(img))

def tiny(img):  # the same work, but a sample of one number: what the DataLoader costs beyond it is the batches' IPC
    transform(img)
    return torch.zeros(1)

T0 = time.perf_counter()
ds = im2rec.RecordDataset(kw["path_imgrec"], mode="bgr", transform=tiny if kw.get("tiny") else transform)
n = 0
for x, y in DataLoader(ds, batch_size=kw["batch_size"], shuffle=False, num_workers=2, **kw.get("data_loader", {})):
    n += x.shape[0]
print(json.dumps({"samples": n, "epoch": time.perf_counter() - T0}))
"""
RECORD_LOADER = WORK + """
transform = work if kw.get("into") else (lambda img: work(img))  # with out=: each image written into its row

n = 0
T0 = time.perf_counter()
with im2rec.RecordLoader(kw["path_imgrec"], kw["batch_size"], transform=transform, mode="bgr", **kw.get("loader", {})) as loader:
    for x, y in loader:
        n += x.shape[0]
print(json.dumps({"samples": n, "epoch": time.perf_counter() - T0}))
"""
# NVIDIA DALI's CPU pipeline for the same recipe (DALI from PyPI: nvidia-dali-cuda120; device_id=None: no GPU)
DALI = """
import json, sys, time
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

T0 = time.perf_counter()
pipe = train()
pipe.build()
size = pipe.epoch_size("reader")
n = 0
while n < size:
    images, labels = pipe.run()
    n += min(bs, size - n)
print(json.dumps({"samples": n, "epoch": time.perf_counter() - T0}))
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


def run(python: str, code: str, kwargs: dict, env: dict) -> tuple[float, float, int, float]:
    """(seconds, peak MB, samples, epoch seconds) of one contender's epoch in a process of its own."""
    out = CACHE / "bench_iter.out"
    script = f"import sys; sys.stdout = open({str(out)!r}, 'w')\n" + textwrap.dedent(code)
    seconds, peak, _, _ = run_sampled([python, "-c", script, json.dumps(kwargs)], env)
    said = json.loads(out.read_text().strip().splitlines()[-1])
    return seconds, peak, said["samples"], said["epoch"]


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
        contenders.append(("im2rec.RecordLoader, transform(image, out=)", sys.executable, RECORD_LOADER, {"into": True}))
        contenders.append(("RecordDataset + DataLoader, 2 workers", sys.executable, LOADER, {}))
        contenders.append(("... the same work, samples of one number (no batch IPC)", sys.executable, LOADER, {"tiny": True}))
    if not args.no_dali:
        contenders.append(("NVIDIA DALI, CPU pipeline, 2 threads", sys.executable, DALI, {}))
    best: dict[str, tuple[float, float, int, float]] = {}
    for _ in range(args.rounds):
        for name, python, code, extra in contenders:
            seconds, peak, samples, epoch = run(python, code, {**kwargs, **extra}, env)
            if name not in best or epoch < best[name][3]:
                best[name] = (seconds, peak, samples, epoch)
    print(f"one epoch of {args.records:,} ImageNet-like JPEGs: {json.dumps({k: v for k, v in RECIPE.items()})}")
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}; best of {args.rounds} interleaved rounds")
    print("samples/s over the epoch (from the reader's making to its end; ratio to the first row), then over the whole process (imports included)")
    base_name = contenders[0][0]
    base = best[base_name][2] / best[base_name][3]
    mem_base = best[base_name][1]
    for name, *_ in contenders:
        seconds, peak, samples, epoch = best[name]
        rate = samples / epoch
        row(name, rate, "samples/s", rate / base, f"whole process {samples / seconds:,.0f}/s ({seconds:.1f} s), peak {peak:,.0f} MB ({peak / mem_base:.2f}x)")
    print(f"ratios: to {base_name}")

    def epoch_rate(name: str) -> float:
        return best[name][2] / best[name][3]

    if args.mxnet_python:
        print(f"one thread each: im2rec {epoch_rate('im2rec.ImageRecordIter, preprocess_threads=1') / epoch_rate('MXNet ImageRecordIter, preprocess_threads=1'):.2f}x MXNet (goal >= 1.0x); defaults: {epoch_rate('im2rec.ImageRecordIter, defaults') / epoch_rate('MXNet ImageRecordIter, defaults'):.2f}x (goal >= 1.5x)")
    if not args.no_loader:
        ours = max(epoch_rate("im2rec.RecordLoader, defaults"), epoch_rate("im2rec.RecordLoader, transform(image, out=)"))
        print(f"RecordLoader (the faster transform): {ours / epoch_rate('im2rec.ImageRecordIter, defaults'):.2f}x ImageRecordIter (goal >= 0.95x), {ours / epoch_rate('RecordDataset + DataLoader, 2 workers'):.2f}x RecordDataset + DataLoader (goal >= 1.8x)", end="")
        print(f", {ours / epoch_rate('NVIDIA DALI, CPU pipeline, 2 threads'):.2f}x DALI's CPU pipeline (goal >= 1.3x)" if not args.no_dali else "")


if __name__ == "__main__":
    main()
