"""How close the default (reduced-scale JPEG decoding) comes to im2rec.py's full decode, and how much faster.

    python benchmarks/bench_fidelity.py [--corpus imagenet|large] [--resize 256] [--count 200]

For each image of the corpus (built on first use by im2rec.synthetic), packs it
twice with the same options, as `im2rec pack` does: by default (a JPEG whose
shorter edge is at least 3x the target is decoded at 1/2, 1/4 or 1/8 scale by
libjpeg) and with --full-decode (cv2.imread's full-size decode, then the resize:
im2rec.py's pixels). Prints the share of images decoded reduced, whether every
output has the same dimensions, the mean absolute difference of the decoded
outputs (0-255 levels, over every pixel and channel, and its worst image), and
the time of both paths, measured side by side in this run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import corpus, image_files, row

from im2rec.image import ImageOptions, _reduction, image_info, transform


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", choices=["imagenet", "large"], default="large")
    ap.add_argument("--resize", type=int, default=256)
    ap.add_argument("--center-crop", action="store_true")
    ap.add_argument("--count", type=int, default=200)
    args = ap.parse_args()
    cv2.setNumThreads(1)
    files = image_files(corpus(args.corpus))[: args.count]
    reduced_opts = ImageOptions(resize=args.resize, center_crop=args.center_crop)
    full_opts = ImageOptions(resize=args.resize, center_crop=args.center_crop, reduced_decode=False)
    diffs, reduced, same_size = [], 0, 0
    t_reduced = t_full = 0.0
    for path in files:
        data = path.read_bytes()
        reduced += _reduction(image_info(data), reduced_opts) > 1
        t = time.perf_counter()
        a = transform(data, reduced_opts)
        t_reduced += time.perf_counter() - t
        t = time.perf_counter()
        b = transform(data, full_opts)
        t_full += time.perf_counter() - t
        ia = cv2.imdecode(np.frombuffer(a, np.uint8), cv2.IMREAD_COLOR)
        ib = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR)
        if ia.shape == ib.shape:
            same_size += 1
            diffs.append(float(np.abs(ia.astype(np.int16) - ib).mean()))
    n = len(files)
    crop = " --center-crop" if args.center_crop else ""
    print(f"{args.corpus} corpus, {n} JPEGs, --resize {args.resize}{crop}")
    row("decoded at reduced scale", 100 * reduced / n, "% images")
    row("same dimensions as the full decode", 100 * same_size / n, "% images")
    if diffs:
        row("mean |difference|, all images", float(np.mean(diffs)), "levels")
        row("mean |difference|, reduced ones only", float(np.mean([d for d in diffs if d > 0] or [0])), "levels")
        row("worst image", max(diffs), "levels")
    row("full decode (im2rec.py's pixels)", 1000 * t_full / n, "ms/image", 1.0)
    row("reduced decode (the default)", 1000 * t_reduced / n, "ms/image", t_full / t_reduced)


if __name__ == "__main__":
    main()
