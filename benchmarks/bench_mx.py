"""insightface's FaceImageIter under MXNet 1.9.1 and ported to ``im2rec.mx``, on the same files, in one run.

    python benchmarks/bench_mx.py [--mxnet-python PATH] [--identities 250] [--per-identity 16] [--epochs 2]

A face set in insightface's layout (``python -m im2rec.synthetic --faces``: its
``faces_emore/train.rec``, 112x112 JPEGs, ``--identities`` people of ``--per-identity``
faces) is read by insightface's ``recognition/arcface_mxnet/image_iter.py`` (the copy in
``tests/data/mx/recipes``) as insightface trains with it: ``FaceImageIter(batch_size=128,
data_shape=(3, 112, 112), shuffle=True, rand_mirror=True)`` under ``mx.io.PrefetchingIter``;
then the same with colour jitter, cutoff and the mean (``color_jittering=1, cutoff=48,
mean=127.5``). Each runs in a process of its own, seeded, for ``--epochs`` epochs; under
MXNet (``--mxnet-python``, a Python with MXNet 1.9.1, or ``IM2REC_BENCH_MXNET_PYTHON``) with
the recipe as published, under im2rec with its import lines ported (``drive.port``). The
figure is faces/s from the making of the iterator to the end of the last epoch, after the
imports; the batches are checked equal between the two (sha256 of each batch). Goal:
im2rec at least as fast as MXNet (1.0x).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, row

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "data" / "mx"))
import drive  # noqa: E402 (the recipes and their port)

CONFIGS = {
    "insightface's (rand_mirror)": {"rand_mirror": True},
    "jitter, cutoff, mean": {"rand_mirror": True, "color_jittering": 1, "cutoff": 48, "mean": [127.5, 127.5, 127.5]},
}

RUN = r"""
import hashlib, json, random, sys, time
import numpy as np
{imports}
sys.path.insert(0, {recipes!r})
import contextlib, io
import image_iter
config, epochs = json.loads({config!r}), {epochs}
random.seed(0); np.random.seed(0)
hashes = []
with contextlib.redirect_stdout(io.StringIO()):
    t = time.perf_counter()
    it = mx.io.PrefetchingIter(image_iter.FaceImageIter(batch_size=128, data_shape=(3, 112, 112), path_imgrec={rec!r}, shuffle=True, **config))
    n = 0
    for e in range(epochs):
        for batch in it:
            data = batch.data[0].asnumpy()
            n += len(data) - batch.pad
            hashes.append(hashlib.sha256(data.tobytes()).hexdigest())
        it.reset()
    seconds = time.perf_counter() - t
    for ready in it.data_ready:
        ready.wait()
print(json.dumps({{"faces": n, "seconds": seconds, "hashes": hashes}}))
"""


def face_set(identities: int, per_identity: int) -> Path:
    out = CACHE / f"faces-{identities}x{per_identity}"
    if not (out / ".complete").exists():
        print(f"building a face set in {out} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "im2rec.synthetic", str(out), "--faces", "--identities", str(identities), "--per-identity", str(per_identity)], check=True, stdout=subprocess.DEVNULL)
        (out / ".complete").touch()
    return out / "faces_emore" / "train.rec"


def run(python: str, imports: str, recipes: Path, rec: Path, config: dict, epochs: int) -> dict:
    code = RUN.format(imports=imports, recipes=str(recipes), config=json.dumps(config), epochs=epochs, rec=str(rec))
    out = subprocess.run([python, "-c", textwrap.dedent(code)], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")})
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mxnet-python", default=os.environ.get("IM2REC_BENCH_MXNET_PYTHON"))
    ap.add_argument("--identities", type=int, default=250)
    ap.add_argument("--per-identity", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    rec = face_set(args.identities, args.per_identity)
    with tempfile.TemporaryDirectory(prefix="im2rec-bench-mx-") as tmp:
        ours = drive.write_recipes(Path(tmp) / "im2rec", to_im2rec=True)
        theirs = drive.write_recipes(Path(tmp) / "mxnet", to_im2rec=False)
        print(f"{args.identities * args.per_identity:,} faces of {args.identities} people ({rec}), {args.epochs} epochs, batches of 128")
        for name, config in CONFIGS.items():
            mine = run(sys.executable, "import im2rec.mx as mx", ours, rec, config, args.epochs)
            rate = mine["faces"] / mine["seconds"]
            if not args.mxnet_python:
                row(f"im2rec.mx, {name}", rate, "faces/s", None, "(no --mxnet-python: MXNet not run)")
                continue
            ref = run(args.mxnet_python, "import mxnet as mx", theirs, rec, config, args.epochs)
            ref_rate = ref["faces"] / ref["seconds"]
            same = "same batches" if ref["hashes"] == mine["hashes"] else f"BATCHES DIFFER ({sum(a != b for a, b in zip(ref['hashes'], mine['hashes']))} of {len(ref['hashes'])})"
            row(f"MXNet 1.9.1, {name}", ref_rate, "faces/s", 1.0)
            row(f"im2rec.mx, {name}", rate, "faces/s", rate / ref_rate, f"{same}; goal 1.0x: {'met' if rate >= ref_rate else 'NOT met'}")


if __name__ == "__main__":
    main()
