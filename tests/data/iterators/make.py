"""Make tests/data/iterators: the inputs (packed by im2rec) and MXNet 1.9.1's batches for them.

    python tests/data/iterators/make.py --mxnet-python /path/to/mxvenv/bin/python

Inputs, all packed with ``im2rec pack --pass-through`` (the image bytes as generated):

* ``images.rec``/``.idx``/``.lst``: 12 generated photo-like JPEGs of 48-139 px
  (``im2rec.synthetic --size small``) and 7 odd ones (``tests/data/odd``: CMYK, EXIF-rotated,
  16-bit gray PNG, progressive, RGBA PNG, a 1x1 PNG; and a gray JPEG), 4 classes;
* ``two_labels.lst``: the same images with two labels each (for ``path_imglist``);
* ``multi.rec`` (from ``multi.lst``): the same images with three labels stored in each record;
* ``rgba.rec``: 6 of them as small RGBA PNGs (for ``data_shape`` with 4 channels);
* ``det.rec`` (from ``det.lst``): the same images with detection labels (``--pack-label``).

``multi.rec`` and ``det.rec`` are not kept: the tests pack them again from the images of
``images.rec`` and the lists, and check them against the sha256 in ``manifest.json``.

Then every configuration of ``configs.json`` runs through MXNet's own ``mx.io`` iterator
(MXNet's Python, given by ``--mxnet-python``): its first epoch's batches (data, label, pad),
its ``provide_data``/``provide_label`` and its number of batches go to ``golden.npz``, data
stored as uint8 where every value is a whole number in 0-255 (the un-normalised configs),
else as float32. ``mean.nd`` is the mean image MXNet wrote for the ``mean_img_create``
configuration. Rows are stored once each (``rows/<hash>``; ``<config>/data/<batch>`` lists a
batch's row names), in the smallest dtype that holds their values exactly. ``imdecode/KEY/
FLAG/TO_RGB`` holds the sha256 and shape of ``mx.image.imdecode`` of each image;
``epochs/E/labels`` and ``/pads`` three epochs of one configuration; ``cubic/KEY/WxH`` the
sha256 of MXNet's ``mx.image.imresize(..., interp=2)`` (OpenCV 3.4.2) of each image.
``tests/test_iterators.py`` compares im2rec's iterators with them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ODD = HERE.parent / "odd"

# Runs under MXNet's Python, in HERE: the first epoch of each configuration. Batches are kept
# as rows, each distinct row once (many configurations share their pixels), in the smallest
# dtype that holds its values exactly.
MXNET_SCRIPT = r"""
import hashlib, json, sys, numpy as np, mxnet as mx
configs = json.load(open("configs.json"))
CUBIC_SIZES = [(37, 23), (61, 90), (13, 13), (200, 150)]
out = {}

def exact(a):
    if np.all(a == np.round(a)):
        for t in (np.uint8, np.int8, np.int16):
            info = np.iinfo(t)
            if a.min() >= info.min and a.max() <= info.max:
                return a.astype(t)
    return a.astype(np.float32)

for name, c in configs.items():
    c = dict(c)
    kind = c.pop("iter")
    c.pop("note", None)
    it = getattr(mx.io, kind)(**c)
    n = 0
    for b in it:
        keys = []
        for row in b.data[0].asnumpy():
            row = exact(row)
            key = "rows/" + hashlib.sha1(row.tobytes() + str(row.dtype).encode()).hexdigest()[:16]
            out[key] = row
            keys.append(key)
        out[f"{name}/data/{n}"] = np.array(keys)
        out[f"{name}/label/{n}"] = b.label[0].asnumpy()
        out[f"{name}/pad/{n}"] = np.array(b.pad)
        n += 1
    out[f"{name}/batches"] = np.array(n)
    out[f"{name}/provide_data"] = np.array(it.provide_data[0].shape)
    out[f"{name}/provide_label"] = np.array(it.provide_label[0].shape)
for shuffle in (False,):  # three epochs: labels and pads only (the next epoch starts after the records lent to the last batch)
    it = mx.io.ImageRecordIter(path_imgrec="images.rec", path_imgidx="images.idx", path_imglist="two_labels.lst", label_width=2, data_shape=(3, 24, 24), batch_size=8, resize=28, shuffle=shuffle)
    for e in range(3):
        batches = list(it)
        out[f"epochs/{e}/labels"] = np.stack([b.label[0].asnumpy() for b in batches])
        out[f"epochs/{e}/pads"] = np.array([b.pad for b in batches])
        it.reset()
rec = mx.recordio.MXIndexedRecordIO("images.idx", "images.rec", "r")
for key in rec.keys:
    _, img = mx.recordio.unpack(rec.read_idx(key))
    for flag in (0, 1):
        for to_rgb in (True, False):
            a = mx.image.imdecode(img, flag=flag, to_rgb=to_rgb).asnumpy()
            out[f"imdecode/{key}/{flag}/{int(to_rgb)}"] = np.array([hashlib.sha256(a.tobytes()).hexdigest(), str(a.shape)])
    bgr = mx.image.imdecode(img, flag=1, to_rgb=False)
    for w, h in CUBIC_SIZES:  # OpenCV 3.4.2's cubic resize, as MXNet's wheels carry it
        a = mx.image.imresize(bgr, w, h, interp=2).asnumpy()
        out[f"cubic/{key}/{w}x{h}"] = np.array(hashlib.sha256(a.tobytes()).hexdigest())
np.savez_compressed("golden.npz", **out)
"""

BASE = {"path_imgrec": "images.rec", "path_imgidx": "images.idx", "data_shape": [3, 24, 24], "batch_size": 5}
IMAGENET = {"mean_r": 123.68, "mean_g": 116.779, "mean_b": 103.939, "std_r": 58.395, "std_g": 57.12, "std_b": 57.375}


def rec(**kw):
    return {"iter": "ImageRecordIter", **BASE, **kw}


def det(**kw):
    return {"iter": "ImageDetRecordIter", "path_imgrec": "det.rec", "data_shape": [3, 28, 28], "batch_size": 5, **kw}


CONFIGS = {
    "default": rec(note="no resize: centre crop of 28, images smaller than that enlarged first"),
    "no_idx": rec(path_imgidx=""),
    "resize": rec(resize=28),
    **{f"inter_{m}": rec(resize=28, inter_method=m) for m in (0, 2, 3, 4, 9)},
    "wide_shape": rec(resize=26, data_shape=[3, 20, 26]),
    "gray": rec(resize=28, data_shape=[1, 24, 24], mean_r=100.0, std_r=50.0, num_parts=2),
    "mirror_mean_std": rec(resize=28, mirror=True, num_parts=3, part_index=1, **IMAGENET),
    "scale": rec(resize=28, scale=1 / 255, mean_r=10.0, mean_g=20.0, mean_b=30.0, num_parts=3, part_index=2),
    "pad_fill": rec(resize=20, pad=4, fill_value=127),
    "uint8": rec(resize=28, dtype="uint8"),
    "uint8_mirror": rec(resize=28, dtype="uint8", mirror=True),
    "int8": rec(resize=28, dtype="int8", mean_r=128.0, mean_g=120.5, mean_b=100.0),
    "no_round_batch": rec(resize=28, round_batch=False),
    "batch_8": rec(resize=28, batch_size=8),
    "batch_30": rec(resize=28, batch_size=30, note="more than the records: the batch is filled from the start"),
    **{f"parts_idx_{k}": rec(resize=28, num_parts=3, part_index=k) for k in range(3)},
    **{f"parts_bytes_{k}": rec(resize=28, num_parts=3, part_index=k, path_imgidx="") for k in range(3)},
    "imglist": rec(resize=28, path_imglist="two_labels.lst", label_width=2),
    "multi_label": rec(resize=28, path_imgrec="multi.rec", path_imgidx="multi.idx", label_width=3),
    "rotate": rec(resize=28, rotate=30, fill_value=0),
    "img_size_limits": rec(resize=28, max_img_size=36.0, min_img_size=26.0),
    "crop_size": rec(resize=28, min_crop_size=20, max_crop_size=20),
    "random_resized_crop_defaults": rec(resize=28, random_resized_crop=True),
    "mean_img_create": rec(resize=28, mean_img="mean.nd", num_parts=3, note="MXNet writes mean.nd (missing at first) over the part, then uses it"),
    "rgba_pad_rotate": rec(path_imgrec="rgba.rec", path_imgidx="rgba.idx", resize=24, pad=2, rotate=20, fill_value=50, data_shape=[4, 24, 24], batch_size=3),
    "gray_rotate": rec(resize=28, data_shape=[1, 24, 24], rotate=45, dtype="uint8"),
    "rgba": rec(path_imgrec="rgba.rec", path_imgidx="rgba.idx", resize=28, data_shape=[4, 24, 24], mean_a=100.0, std_a=2.0, batch_size=3),
    "det_default": det(),
    "det_mean_std": det(mean_r=123.0, mean_g=117.0, mean_b=104.0, std_r=58.0, std_g=57.0, std_b=57.0, scale=0.5, num_parts=3, part_index=1),
    "det_shrink": det(resize_mode="shrink", data_shape=[3, 48, 32]),
    "det_fit": det(resize_mode="fit", data_shape=[3, 40, 32], mean_r=10.0, num_parts=3),
    "det_pad_width": det(label_pad_width=32, label_pad_value=-2.0),
    "det_gray": det(data_shape=[1, 28, 28]),
    "det_resize": det(resize=36, inter_method=2),
    "det_imglist": det(path_imglist="det.lst"),
    "det_no_round_batch": det(round_batch=False),
    **{f"det_parts_{k}": det(num_parts=2, part_index=k) for k in range(2)},
}


def im2rec(*args: object) -> None:
    subprocess.run([sys.executable, "-m", "im2rec", *map(str, args), "-q"], check=True)


def det_labels(i: int) -> list[float]:
    """A detection label: header [2, 5] (or [2, 6] with a 'difficult' flag), 1-3 boxes, and for
    every fifth image a box without area (MXNet drops it)."""
    rng = np.random.default_rng(i)
    width = 6 if i % 4 == 0 else 5
    label = [2.0, float(width)]
    for k in range(1 + i % 3):
        x0, y0 = rng.uniform(0, 0.6, 2).round(3)
        w, h = rng.uniform(0.2, 0.4, 2).round(3)
        label += [float(k % 3), float(x0), float(y0), float(x0 + w), float(y0 + h)] + ([float(k % 2)] if width == 6 else [])
    if i % 5 == 0:
        label += [1.0, 0.5, 0.5, 0.4, 0.6] + ([0.0] if width == 6 else [])
    return label


def make_inputs(work: Path) -> None:
    from im2rec.testing.synthetic import main as synthetic

    imgs = work / "imgs"
    synthetic([str(imgs), "--classes", "3", "--per-class", "4", "--size", "small", "--seed", "0", "--workers", "1"])
    odd = imgs / "class_0003"
    odd.mkdir()
    for f in sorted(ODD.iterdir()):
        shutil.copy(f, odd / f.name)
    import cv2

    cv2.imwrite(str(odd / "gray.jpg"), cv2.imread(str(imgs / "class_0000" / "img_0000_00000.jpg"), 0))
    im2rec("list", imgs, work / "images")
    im2rec("pack", work / "images.lst", imgs, HERE / "images.rec", "--pass-through", "--overwrite")
    shutil.copy(work / "images.lst", HERE / "images.lst")
    lines = [line.split("\t") for line in (work / "images.lst").read_text().splitlines()]
    (HERE / "two_labels.lst").write_text("".join(f"{i}\t{float(c) * 10 + 1:f}\t{int(i) % 7:f}\t{p}\n" for i, c, p in lines))
    (HERE / "multi.lst").write_text("".join(f"{i}\t{c}\t{float(i):f}\t{float(c) + 0.5:f}\t{p}\n" for i, c, p in lines))
    im2rec("pack", HERE / "multi.lst", imgs, HERE / "multi.rec", "--pass-through", "--label-width", "3", "--overwrite")
    (HERE / "det.lst").write_text("".join(f"{i}\t" + "\t".join(f"{v:g}" for v in det_labels(int(i))) + f"\t{p}\n" for i, _, p in lines))
    im2rec("pack", HERE / "det.lst", imgs, HERE / "det.rec", "--pass-through", "--pack-label", "--overwrite")
    rgba = work / "rgba"
    rgba.mkdir()
    for n, (_, _, p) in enumerate(lines[:6]):
        img = cv2.imread(str(imgs / p), cv2.IMREAD_COLOR)
        img = cv2.resize(img, (img.shape[1] * 40 // max(img.shape[:2]), img.shape[0] * 40 // max(img.shape[:2])), interpolation=cv2.INTER_AREA)
        alpha = np.linspace(40, 255, img.shape[1], dtype=np.uint8)[None, :].repeat(img.shape[0], 0)
        cv2.imwrite(str(rgba / f"{n}.png"), np.dstack([img, alpha]))
    (work / "rgba.lst").write_text("".join(f"{n}\t{c}\t{n}.png\n" for n, (_, c, _) in enumerate(lines[:6])))
    im2rec("pack", work / "rgba.lst", rgba, HERE / "rgba.rec", "--pass-through", "--overwrite")
    for f in HERE.glob("*.failed.tsv"):
        f.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mxnet-python", required=True, help="a Python with MXNet 1.9.1")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        make_inputs(Path(work))
    (HERE / "configs.json").write_text(json.dumps(CONFIGS, indent=1) + "\n")
    (HERE / "mean.nd").unlink(missing_ok=True)
    subprocess.run([args.mxnet_python, "-c", MXNET_SCRIPT], cwd=HERE, check=True)
    manifest = {f"{name}.rec": hashlib.sha256((HERE / f"{name}.rec").read_bytes()).hexdigest() for name in ("multi", "det")}
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for name in ("multi", "det"):
        (HERE / f"{name}.rec").unlink()
        (HERE / f"{name}.idx").unlink()


if __name__ == "__main__":
    main()
