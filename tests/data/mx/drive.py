"""Run the MXNet recipes of ``recipes/`` and ``mx.image``/``mx.nd`` calls, under MXNet or ``im2rec.mx``.

    python drive.py WORK OUT.npz        # under MXNet 1.9.1's Python: what make.py keeps

``run(mx, recipes, work)`` is the same code for both: ``mx`` is ``mxnet`` or ``im2rec.mx``,
``recipes`` the folder of the recipes as ported for it (``port``: only import lines change),
``work`` a folder with the inputs (``images.rec``/``.idx``, ``det.rec``/``.idx``, ``det5.rec``, insightface's
``train.rec``/``.idx``). It returns ``{name: array}``; ``fingerprint`` keeps small arrays
whole and large ones as their sha256 and float64 sum.

Runs under MXNet's old numpy too: no numpy 2 API here.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import io
import os
import random
import re
import shutil
import sys
from pathlib import Path

import numpy as np

RECIPES = Path(__file__).resolve().parent / "recipes"
#: The recipe files, relative to ``recipes/``.
FILES = ("data.py", "image_iter.py", "ssd/dataset/__init__.py", "ssd/dataset/iterator.py", "ssd/tools/__init__.py", "ssd/tools/rand_sampler.py")
SMALL = 16384  # bytes: arrays up to this size are kept whole


def port(text: str, to_im2rec: bool) -> str:
    """A recipe's source with its import lines changed, and nothing else: ``mxnet`` to
    ``im2rec.mx`` (for im2rec), and insightface's unused ``import sklearn`` dropped (for both)."""
    out = []
    for line in text.splitlines(keepends=True):
        if line.strip() == "import sklearn":
            line = "# import sklearn (unused, and not installed here)\n"
        elif to_im2rec:
            line = re.sub(r"^(\s*)import mxnet as mx\b", r"\1import im2rec.mx as mx", line)
            line = re.sub(r"^(\s*)from mxnet(\.| )", r"\1from im2rec.mx\2", line)
        out.append(line)
    return "".join(out)


def write_recipes(folder: Path, to_im2rec: bool) -> Path:
    for name in FILES:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(port((RECIPES / name).read_text(), to_im2rec))
    return folder


def prepare(work: Path) -> Path:
    """``work`` filled with the inputs: ``images.rec``/``.idx`` of ``../iterators``, ``det.rec``
    packed from them and ``det.lst`` (as that folder's tests pack it), insightface's
    ``train.rec``/``.idx`` and one of its images as ``face.jpg``; ``det5.rec``: ``det.rec`` with one
    object width (5: the flag of the width-6 labels dropped), as ``ImageDetIter`` needs. Needs im2rec (not MXNet)."""
    from im2rec import recordio

    data = Path(__file__).resolve().parent.parent
    work.mkdir(parents=True, exist_ok=True)
    for name in ("images.rec", "images.idx", "images.lst", "det.lst"):
        shutil.copy(data / "iterators" / name, work / name)
    for name in ("train.rec", "train.idx"):
        shutil.copy(data / "insightface" / name, work / name)
    shutil.copy(sorted((data / "insightface" / "images").rglob("*.jpg"))[0], work / "face.jpg")
    images = recordio.RecordReader(work / "images.rec", work / "images.idx")
    for name, uniform in (("det", False), ("det5", True)):
        with recordio.RecordWriter(work / f"{name}.rec", work / f"{name}.idx") as w:
            for line in (work / "det.lst").read_text().splitlines():
                fields = line.split("\t")
                key, labels = int(fields[0]), [float(v) for v in fields[1:-1]]
                if uniform and labels[1] == 6:  # ImageDetIter needs one object width: the flag dropped
                    objects = np.array(labels[2:]).reshape(-1, 6)[:, :5]
                    labels = [2.0, 5.0, *objects.reshape(-1).tolist()]
                _, img = recordio.unpack(images.read(key))
                w.write_idx(key, recordio.pack(recordio.IRHeader(len(labels), labels, key, 0), img))
    return work


def fingerprint(name: str, a: np.ndarray) -> dict[str, np.ndarray]:
    a = np.asarray(a)
    if a.nbytes <= SMALL or a.dtype.kind not in "biuf":
        return {name: a}
    return {f"{name}#sha256": np.array(hashlib.sha256(a.tobytes()).hexdigest()), f"{name}#sum": np.array(a.astype(np.float64).sum()), f"{name}#shape": np.array(a.shape), f"{name}#dtype": np.array(a.dtype.str)}


def _np(x) -> np.ndarray:
    return x.asnumpy() if hasattr(x, "asnumpy") else np.asarray(x)


def _load(recipes: Path, module: str):
    for p in (str(recipes), str(recipes / "ssd")):
        if p not in sys.path:
            sys.path.insert(0, p)
    for m in [m for m in sys.modules if m in ("data", "image_iter", "dataset", "tools") or m.startswith(("dataset.", "tools."))]:
        del sys.modules[m]
    return importlib.import_module(module)


def _seed(mx, s: int) -> None:
    random.seed(s)
    np.random.seed(s)


def _epochs(it, epochs: int, prefix: str, out: dict, valid_rows: bool = False) -> None:
    """Each batch's data, label and pad; with ``valid_rows``, only the rows before the pad
    (FaceImageIter leaves the rest of a short batch uninitialised)."""
    for e in range(epochs):
        for b, batch in enumerate(it):
            n = len(_np(batch.data[0])) - (batch.pad or 0) if valid_rows else None
            out.update(fingerprint(f"{prefix}/e{e}/b{b}/data", _np(batch.data[0])[:n]))
            out.update(fingerprint(f"{prefix}/e{e}/b{b}/label", _np(batch.label[0])[:n]))
            out[f"{prefix}/e{e}/b{b}/pad"] = np.array(batch.pad if batch.pad is not None else -1)
        it.reset()


def _row_set(it, epochs: int, prefix: str, out: dict) -> None:
    """The distinct (pixels, label) rows of ``epochs`` epochs, order aside: for an iterator whose
    order is MXNet's C++ generator's, or whose mid-epoch ``reset`` depends on MXNet's prefetch
    threads (``ImageDetRecordIter`` on a small part). Also the batch count and shapes."""
    rows = set()
    shapes = set()
    for _ in range(epochs):
        for batch in it:
            data, label = _np(batch.data[0]), _np(batch.label[0])
            shapes.add(str((data.shape, data.dtype.str, label.shape)))
            n = len(data) - batch.pad
            for row, lab in zip(data[:n], label[:n]):
                rows.add(hashlib.sha256(np.ascontiguousarray(row).tobytes()).hexdigest() + " " + " ".join(repr(float(v)) for v in np.ravel(lab)))
        it.reset()
    out[f"{prefix}/rows"] = np.array(sorted(rows))
    out[f"{prefix}/shapes"] = np.array(sorted(shapes))


def data_py(mx, recipes: Path, work: Path, rec: str = "images", image_shape: str = "3,64,64", prefix: str = "data") -> dict:
    """MXNet's example/image-classification/common/data.py: get_rec_iter's train and val, SyntheticDataIter."""
    data = _load(recipes, "data")
    parser = argparse.ArgumentParser()
    data.add_data_args(parser)
    data.add_data_aug_args(parser)
    rec_path, idx_path = str(work / f"{rec}.rec"), str(work / f"{rec}.idx")
    args = parser.parse_args(["--data-train", rec_path, "--data-train-idx", idx_path, "--data-val", rec_path, "--data-val-idx", idx_path, "--image-shape", image_shape, "--data-nthreads", "2", "--num-classes", "4", "--num-examples", "19"])
    args.batch_size = 8
    out: dict = {}
    train, val = data.get_rec_iter(args)
    _epochs(val, 2, f"{prefix}/val", out)
    _row_set(train, 2, f"{prefix}/train", out)
    if prefix != "data":
        return out
    out["data/val/provide_data"] = np.array([str((d[0], tuple(d[1]))) for d in val.provide_data])
    out["data/val/provide_label"] = np.array([str((d[0], tuple(d[1]))) for d in val.provide_label])
    args.benchmark = 1
    np.random.seed(7)
    synthetic, _ = data.get_rec_iter(args)
    _epochs(synthetic, 2, "data/synthetic", out)
    out["data/synthetic/provide_data"] = np.array([str((d.name, tuple(d.shape), np.dtype(d.dtype).name)) for d in synthetic.provide_data])
    return out


def ssd(mx, recipes: Path, work: Path) -> dict:
    """MXNet's example/ssd/dataset/iterator.py: DetRecordIter, deterministic (no random augmentation).

    DetRecordIter reads one batch and resets: where MXNet's next epoch then starts depends on
    how far its prefetch threads had read (on 19 records: after 1, 2 or no records, run to
    run), so the rows are compared order aside."""
    iterator = _load(recipes, "dataset.iterator")
    out: dict = {}
    it = iterator.DetRecordIter(str(work / "det.rec"), 5, (3, 64, 64))
    _row_set(it, 2, "ssd", out)
    out["ssd/provide_label"] = np.array(str([(n, tuple(s)) for n, s in it.provide_label]))
    fit = iterator.DetRecordIter(str(work / "det.rec"), 4, (3, 48, 40), resize_mode="fit", mean_pixels=[100, 110, 120], std_r=50.0, std_g=51.0, std_b=52.0)
    _row_set(fit, 1, "ssd_fit", out)
    return out


FACE_CONFIGS = {
    "plain": {},
    "mirror_mean": {"rand_mirror": True, "mean": [127.5, 127.5, 127.5]},
    "jitter_cutoff": {"rand_mirror": True, "color_jittering": 1, "cutoff": 48, "mean": [127.5, 127.5, 127.5]},
}


def faces(mx, recipes: Path, work: Path) -> dict:
    """insightface's recognition/arcface_mxnet/image_iter.py: FaceImageIter, seeded, as insightface trains."""
    image_iter = _load(recipes, "image_iter")
    out: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):  # FaceImageIter prints as it goes
        for name, kw in FACE_CONFIGS.items():
            _seed(mx, 11)
            it = image_iter.FaceImageIter(batch_size=8, data_shape=(3, 112, 112), path_imgrec=str(work / "train.rec"), shuffle=True, **kw)
            _epochs(it, 2, f"face/{name}", out, valid_rows=True)
        _seed(mx, 12)
        it = mx.io.PrefetchingIter(image_iter.FaceImageIter(batch_size=8, data_shape=(3, 112, 112), path_imgrec=str(work / "train.rec"), shuffle=True, rand_mirror=True))
        _epochs(it, 2, "face/prefetching", out, valid_rows=True)
        for ready in it.data_ready:  # its thread has begun the next epoch (drawing from random): let it finish
            ready.wait()
        del it
    return out


def image_iters(mx, recipes: Path, work: Path) -> dict:
    """mx.image.ImageIter and ImageDetIter, seeded, with most of their augmenters."""
    out: dict = {}
    _seed(mx, 5)
    it = mx.image.ImageIter(batch_size=8, data_shape=(3, 48, 48), path_imgrec=str(work / "images.rec"), path_imgidx=str(work / "images.idx"), shuffle=True, resize=56, rand_crop=True, rand_mirror=True, brightness=0.3, contrast=0.3, saturation=0.3, pca_noise=0.1, rand_gray=0.2, mean=True, std=True)
    _epochs(it, 2, "image_iter/jitter", out)
    _seed(mx, 6)
    it = mx.image.ImageIter(batch_size=8, data_shape=(3, 40, 40), path_imgrec=str(work / "images.rec"), path_imgidx=str(work / "images.idx"), shuffle=True, rand_crop=True, rand_resize=True, hue=0.2, inter_method=10)
    _epochs(it, 1, "image_iter/hue_resized", out)
    _seed(mx, 7)
    it = mx.image.ImageIter(batch_size=6, data_shape=(3, 32, 32), path_imgrec=str(work / "images.rec"), last_batch_handle="roll_over")
    _epochs(it, 3, "image_iter/roll_over", out)
    _seed(mx, 8)
    it = mx.image.ImageDetIter(batch_size=5, data_shape=(3, 64, 64), path_imgrec=str(work / "det5.rec"), path_imgidx=str(work / "det5.idx"), shuffle=True, rand_crop=0.7, rand_pad=0.5, rand_mirror=True, mean=True, std=True, brightness=0.2)
    _epochs(it, 2, "image_det_iter", out)
    out["image_det_iter/provide_label"] = np.array(str([(n, tuple(s)) for n, s in it.provide_label]))
    return out


def functions(mx, recipes: Path, work: Path) -> dict:
    """mx.image's functions and augmenters and mx.nd's, on seeded random inputs."""
    nd, image = mx.nd, mx.image
    rs = np.random.RandomState(3)
    img = rs.randint(0, 256, (37, 23, 3)).astype(np.uint8)
    src = nd.array(img, dtype="uint8")
    out: dict = {}
    for interp in range(5):
        out[f"imresize/{interp}/up"] = _np(image.imresize(src, 50, 61, interp=interp))
        out[f"imresize/{interp}/down"] = _np(image.imresize(src, 11, 17, interp=interp))
    out["resize_short"] = _np(image.resize_short(src, 30))
    out["resize_short/9"] = _np(image.resize_short(src, 15, interp=9))
    out["center_crop"] = _np(image.center_crop(src, (20, 15))[0])
    out["center_crop/bigger"] = _np(image.center_crop(src, (40, 45))[0])
    out["fixed_crop"] = _np(image.fixed_crop(src, 3, 4, 10, 12, (16, 16)))
    random.seed(1)
    crop, box = image.random_crop(src, (20, 15))
    out["random_crop"], out["random_crop/box"] = _np(crop), np.array(box)
    crop, box = image.random_size_crop(src, (20, 15), 0.3, (0.75, 1.33))
    out["random_size_crop"], out["random_size_crop/box"] = _np(crop), np.array(box)
    f = nd.array(img.astype(np.float32))
    out["color_normalize"] = _np(image.color_normalize(f.copy(), nd.array([123.68, 116.28, 103.53]), nd.array([58.395, 57.12, 57.375])))
    jpeg = (work / "face.jpg").read_bytes()
    for flag in (0, 1):
        for to_rgb in (False, True):
            out.update(fingerprint(f"imdecode/{flag}/{int(to_rgb)}", _np(image.imdecode(jpeg, flag=flag, to_rgb=to_rgb))))
    augs = {
        "brightness": image.BrightnessJitterAug(0.4),
        "contrast": image.ContrastJitterAug(0.4),
        "saturation": image.SaturationJitterAug(0.4),
        "hue": image.HueJitterAug(0.3),
        "color_jitter": image.ColorJitterAug(0.2, 0.3, 0.4),
        "lighting": image.LightingAug(0.1, np.array([55.46, 4.794, 1.148]), np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]])),
        "gray": image.RandomGrayAug(1.0),
        "flip": image.HorizontalFlipAug(1.0),
        "cast": image.CastAug(),
        "normalize": image.ColorNormalizeAug(nd.array([1.0, 2.0, 3.0]), nd.array([2.0, 3.0, 4.0])),
    }
    for name, aug in augs.items():
        _seed(mx, 2)
        out[f"aug/{name}"] = _np(aug(nd.array(img.astype(np.float32))))
    for name, kw in {"default": {}, "everything": {"resize": 30, "rand_crop": True, "rand_resize": True, "rand_mirror": True, "mean": True, "std": True, "brightness": 0.1, "contrast": 0.1, "saturation": 0.1, "hue": 0.1, "pca_noise": 0.1, "rand_gray": 0.3}}.items():
        _seed(mx, 4)
        x = src
        for aug in image.CreateAugmenter((3, 20, 16), **kw):
            x = aug(x)
        out[f"create_augmenter/{name}"] = _np(x)
        out[f"create_augmenter/{name}/names"] = np.array([type(a).__name__ for a in image.CreateAugmenter((3, 20, 16), **kw)])
    a = nd.array(rs.uniform(-50, 300, (7, 5, 3)).astype(np.float32))
    u = nd.array(rs.randint(0, 256, (4, 6)), dtype="uint8")
    out["nd/array/list"] = _np(nd.array([1, 2, 3]))
    out["nd/array/int64"] = _np(nd.array(np.arange(4)))
    out["nd/array/scalar"] = _np(nd.array(5))
    out["nd/sum"] = _np(nd.sum(a))
    out["nd/sum/axis2"] = _np(nd.sum(a, axis=2, keepdims=True))
    out["nd/sum/axis01"] = _np(nd.sum(a, axis=(0, 1)))
    out["nd/sum/exclude"] = _np(nd.sum(a, axis=1, exclude=True))
    out["nd/sum/method"] = _np(a.sum())
    out["nd/mean"] = _np(nd.mean(a))
    out["nd/mean/axis0"] = _np(nd.mean(a, axis=0))
    out["nd/max"] = _np(nd.max(a, axis=1))
    out["nd/min"] = _np(a.min())
    out["nd/u8/mul"] = _np(u * 2.7)
    out["nd/u8/div"] = _np(u / 3)
    out["nd/u8/add"] = _np(u + 0.9)
    out["nd/u8/sub"] = _np(u - 300)
    out["nd/u8/rsub"] = _np(200 - u)
    out["nd/f32/mul"] = _np(a * 0.1)
    out["nd/f32/rdiv"] = _np(1.0 / (a + 100))
    out["nd/gt"] = _np(a > 10)
    out["nd/eq"] = _np(u == u[0:1])
    out["nd/dot/2d"] = _np(nd.dot(a[0], nd.array(rs.uniform(-1, 1, (3, 4)))))
    out["nd/dot/3d"] = _np(nd.dot(a, nd.array(rs.uniform(-1, 1, (3, 3)))))
    out["nd/flip"] = _np(nd.flip(a, axis=1))
    out["nd/flip/data"] = _np(nd.flip(data=a, axis=0))
    out["nd/transpose"] = _np(nd.transpose(a, axes=(2, 0, 1)))
    out["nd/transpose/none"] = _np(nd.transpose(a))
    out["nd/concat"] = _np(nd.concat(a, a, dim=1))
    out["nd/stack"] = _np(nd.stack(a, a, axis=1))
    out["nd/clip"] = _np(nd.clip(a, 0, 255))
    out["nd/cast"] = _np(nd.cast(a, dtype="uint8"))
    out["nd/astype/int32"] = _np(a.astype("int32"))
    out["nd/reshape/0-1"] = _np(a.reshape((0, -1)))
    out["nd/reshape/-3"] = _np(a.reshape((-3, 0)))
    out["nd/reshape/-2"] = _np(a.reshape((7, -2)))
    out["nd/getitem/shape"] = np.array(a[1, 2, 0].shape)
    out["nd/getitem/value"] = _np(a[1, 2, 0])
    out["nd/ones"] = _np(nd.ones((2, 3)))
    out["nd/zeros/dtype"] = np.array(np.dtype(nd.zeros((2,)).dtype).name)
    out["nd/full"] = _np(nd.full((2, 2), 3.5))
    b = nd.zeros((3, 4))
    b[1][:] = 5
    b[2, 1:3] = nd.array([7, 8])
    b[0] += 1.5
    out["nd/setitem"] = _np(b)
    c = nd.array(img.astype(np.float32))
    c *= 1.1
    c -= nd.array([[[1.0, 2.0, 3.0]]])
    c[2:5, 3:9, :] = 128
    out["nd/inplace"] = _np(c)
    out["nd/asscalar"] = np.array(nd.array([3.25]).asscalar())
    out["nd/context"] = np.array(str(a.context))
    out["nd/astype_same"] = np.array(a.astype("float32", copy=False) is a)
    return out


def data_iters(mx, recipes: Path, work: Path) -> dict:
    """mx.io's Python iterators: NDArrayIter (each last_batch_handle, shuffled, a dict of inputs),
    ResizeIter around it, PrefetchingIter joining two."""
    out: dict = {}
    rs = np.random.RandomState(9)
    x, y = rs.uniform(0, 1, (10, 3)).astype(np.float32), np.arange(10)
    for handle in ("pad", "discard", "roll_over"):
        np.random.seed(3)
        it = mx.io.NDArrayIter(x, y, batch_size=4, shuffle=handle == "pad", last_batch_handle=handle)
        out[f"ndarray_iter/{handle}/provide"] = np.array(str([(d.name, tuple(d.shape), np.dtype(d.dtype).name) for d in it.provide_data + it.provide_label]))
        for e in range(3):
            for b, batch in enumerate(it):
                out[f"ndarray_iter/{handle}/e{e}/b{b}/data"] = _np(batch.data[0])
                out[f"ndarray_iter/{handle}/e{e}/b{b}/label"] = _np(batch.label[0])
                out[f"ndarray_iter/{handle}/e{e}/b{b}/pad"] = np.array(batch.pad)
            it.reset()
    it = mx.io.NDArrayIter({"a": x, "b": x * 2}, {"y": y}, batch_size=3)
    out["ndarray_iter/dict/names"] = np.array([d.name for d in it.provide_data + it.provide_label])
    batch = it.next()
    out["ndarray_iter/dict/b"] = _np(batch.data[1])
    resized = mx.io.ResizeIter(mx.io.NDArrayIter(x, y, batch_size=4), 5)
    for e in range(2):
        out[f"resize_iter/e{e}/labels"] = np.array([_np(b.label[0]) for b in resized])
        resized.reset()
    joined = mx.io.PrefetchingIter([mx.io.NDArrayIter(x, y, batch_size=5), mx.io.NDArrayIter(x * 3, y + 1, batch_size=5, data_name="other", label_name="other_label")])
    out["prefetching/provide"] = np.array(str([(d[0], tuple(d[1])) for d in joined.provide_data + joined.provide_label]))
    for b, batch in enumerate(joined):
        out[f"prefetching/b{b}/data"] = np.stack([_np(d) for d in batch.data])
        out[f"prefetching/b{b}/label"] = np.stack([_np(d) for d in batch.label])
    for ready in joined.data_ready:
        ready.wait()
    return out


def data_real(mx, recipes: Path, work: Path) -> dict:
    """data.py's iterators on ``real.rec`` (packed by a test from real-size images), 3x224x224."""
    return data_py(mx, recipes, work, rec="real", image_shape="3,224,224", prefix="real")


CASES = {"data_real": data_real, "data": data_py, "ssd": ssd, "faces": faces, "image_iters": image_iters, "functions": functions, "data_iters": data_iters}


GOLDEN_CASES = ("data", "ssd", "faces", "image_iters", "functions", "data_iters")


def run(mx, recipes: Path, work: Path, cases=GOLDEN_CASES) -> dict:
    out: dict = {}
    old = os.getcwd()
    os.chdir(work)
    try:
        for name in cases:
            out.update(CASES[name](mx, recipes, work))
    finally:
        os.chdir(old)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--case", action="append", choices=list(CASES), help="the cases to run (default: the golden ones)")
    args = parser.parse_args()
    import mxnet as mx

    recipes = args.work / "recipes"
    shutil.rmtree(recipes, ignore_errors=True)
    write_recipes(recipes, to_im2rec=False)
    np.savez_compressed(args.out, **run(mx, recipes, args.work, tuple(args.case or GOLDEN_CASES)))


if __name__ == "__main__":
    main()
