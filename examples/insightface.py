"""Read an insightface face-recognition .rec (e.g. MS1M, Glint360K) without MXNet.

    python examples/insightface.py faces_emore/train.rec

(No face set at hand? `python -m im2rec.synthetic . --faces` writes a small one,
faces_emore/train.rec among it.)

insightface files hold a header at key 0 (flag > 0, labels [first identity key, end)),
the images at keys 1..N and one record per identity with its [start, end) image-key
range. RecordDataset detects the layout: it yields only the images with their
identity labels, and `identities` gives the ranges, as arcface's MXFaceDataset and
FaceImageIter read them.
"""

import sys

import numpy as np

from im2rec import RecordDataset

BATCH_IDENTITIES = 4  # a metric-learning batch: two images of each of this many identities


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python examples/insightface.py TRAIN.rec", file=sys.stderr)
        return 2
    path = args[0]
    ds = RecordDataset(path)  # mode="rgb": HWC uint8, as mx.image.imdecode gave
    if ds.insightface is None:
        print(f"{path}: no insightface header at key 0; read it as a plain RecordDataset", file=sys.stderr)
        return 1
    first, end = ds.insightface
    print(f"{len(ds)} images, {end - first} identities")
    if len(ds) == 0:
        return 0
    image, label = ds[0]
    print(f"first image: {image.shape}, identity {int(label)}")
    ranges = ds.identities
    sizes = ranges[:, 1] - ranges[:, 0]
    if sizes.size:
        print(f"images per identity: min {sizes.min()}, median {int(np.median(sizes))}, max {sizes.max()}")

    # A batch for metric learning: two images of each of BATCH_IDENTITIES identities, or of
    # every identity of a smaller set. An identity whose images all failed to pack has an
    # empty range; one with a single image gives it twice.
    rng = np.random.default_rng(0)
    candidates = np.flatnonzero(sizes > 0)
    for start, stop in ranges[rng.choice(candidates, min(BATCH_IDENTITIES, candidates.size), replace=False)]:
        keys = rng.choice(np.arange(start, stop), 2, replace=stop - start < 2)
        print([(int(k), int(ds[int(k) - 1][1])) for k in keys])  # (image key, identity); key k is item k - 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
