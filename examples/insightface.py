"""Read an insightface face-recognition .rec (e.g. MS1M, Glint360K) without MXNet.

    python examples/insightface.py faces_emore/train.rec

insightface files hold a header at key 0 (flag > 0, labels [first identity key, end)),
the images at keys 1..N and one record per identity with its [start, end) image-key
range. RecordDataset detects the layout: it yields only the images with their
identity labels, and `identities` gives the ranges, as arcface's MXFaceDataset and
FaceImageIter read them.
"""

import sys

import numpy as np

from im2rec import RecordDataset

ds = RecordDataset(sys.argv[1])  # mode="rgb": HWC uint8, as mx.image.imdecode gave
if ds.insightface is None:
    sys.exit(f"{sys.argv[1]}: no insightface header at key 0; read it as a plain RecordDataset")
first, end = ds.insightface
print(f"{len(ds)} images, {end - first} identities")
image, label = ds[0]
print(f"first image: {image.shape}, identity {int(label)}")
ranges = ds.identities
sizes = ranges[:, 1] - ranges[:, 0]
print(f"images per identity: min {sizes.min()}, median {int(np.median(sizes))}, max {sizes.max()}")

# A batch for metric learning: two images of each of 4 identities.
rng = np.random.default_rng(0)
for start, stop in ranges[rng.choice(len(ranges), 4, replace=False)]:
    keys = rng.choice(np.arange(start, stop), 2, replace=stop - start < 2)
    print([(int(k), ds[int(k) - 1][1]) for k in keys])  # image key k is item k - 1
