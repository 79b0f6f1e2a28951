"""``mx.image`` (``mx.img``) without MXNet: decode, resize and crop, the augmenters, ``ImageIter``.

MXNet 1.9.1's Python image module, written anew on ``mx.nd``: the same functions and classes,
the same arithmetic (float32, MXNet's sums, OpenCV 3.4.2's cubic resize, the interpolation
MXNet's ``imresize`` uses), and the same random draws from the same generators, in the same
order: Python's ``random`` for crops, flips, jitter and shuffles, numpy's for PCA lighting;
so ``random.seed(s)`` (or ``mx.random.seed(s)``) before a run gives MXNet's images. The
detection augmenters and ``ImageDetIter`` are in ``im2rec.mx.detection``, exported here too.

Images are ``mx.nd`` arrays, HxWxC, RGB, uint8 as decoded (float32 after ``CastAug``).
"""

from __future__ import annotations

import json
import logging
import numbers
import os
import random
from typing import Any

import numpy as np

from .. import recordio
from ..errors import ImageError
from ..image import opencv
from . import nd
from .augment import imdecode as _imdecode_np
from .batch import DataBatch, DataIter
from .kernels import resize as _cv_resize
from .nd import NDArray

log = logging.getLogger(__name__)

__all__ = [
    "Augmenter",
    "BrightnessJitterAug",
    "CastAug",
    "CenterCropAug",
    "ColorJitterAug",
    "ColorNormalizeAug",
    "ContrastJitterAug",
    "CreateAugmenter",
    "ForceResizeAug",
    "HorizontalFlipAug",
    "HueJitterAug",
    "ImageIter",
    "LightingAug",
    "RandomCropAug",
    "RandomGrayAug",
    "RandomOrderAug",
    "RandomSizedCropAug",
    "ResizeAug",
    "SaturationJitterAug",
    "SequentialAug",
    "center_crop",
    "color_normalize",
    "copyMakeBorder",
    "fixed_crop",
    "imdecode",
    "imread",
    "imresize",
    "random_crop",
    "random_size_crop",
    "resize_short",
    "scale_down",
]


# --------------------------------------------------------------------------- functions


def imdecode(buf: Any, flag: int = 1, to_rgb: bool = True, out: NDArray | None = None) -> NDArray:
    """``mx.image.imdecode``: an image's bytes (bytes, bytearray, a uint8 numpy array or NDArray)
    as an HxWx3 uint8 NDArray, RGB unless ``to_rgb=False``; HxWx1 for ``flag=0``.

    Raises:
        ValueError: ``buf`` is not bytes or an array (MXNet's words), or is empty.
        ImageError: the bytes cannot be decoded.
    """
    if not isinstance(buf, (bytes, bytearray, memoryview, np.ndarray)):
        raise ValueError("buf must be of type bytes, bytearray or numpy.ndarray,if you would like to input type str, please convert to bytes")
    img = _imdecode_np(buf, flag, to_rgb).view(NDArray)
    if out is not None:
        out[...] = img
        return out
    return img


def imread(filename: str | os.PathLike, flag: int = 1, to_rgb: bool = True, out: NDArray | None = None) -> NDArray:
    """``mx.image.imread``: a file's image, as ``imdecode`` gives it.

    Raises:
        OSError: the file cannot be read.
        ImageError: its bytes cannot be decoded (the message names the file).
    """
    with open(filename, "rb") as f:
        data = f.read()
    try:
        img = _imdecode_np(data, flag, to_rgb, name=f"{os.fspath(filename)}: imread").view(NDArray)
    except ImageError as e:
        raise ImageError(e.kind, f"{os.fspath(filename)}: {e}") from None
    if out is not None:
        out[...] = img
        return out
    return img


def imresize(src: Any, w: int, h: int, interp: int = 1, out: NDArray | None = None) -> NDArray:
    """``mx.image.imresize``: ``src`` (HxWxC) resized to ``w`` x ``h`` by ``cv::resize`` as MXNet's
    OpenCV computes it (``interp`` 0 nearest, 1 bilinear, 2 cubic, 3 area, 4 Lanczos)."""
    img = np.asarray(src)
    if int(interp) not in (0, 1, 2, 3, 4):
        raise ValueError(f"imresize: interp must be 0-4 (OpenCV's), got {interp}")
    res = _cv_resize(img, (int(w), int(h)), int(interp))
    if res.ndim == 2 and img.ndim == 3:
        res = res[:, :, None]
    if out is not None:
        out[...] = res
        return out
    return res.view(NDArray)


def scale_down(src_size: tuple[int, int], size: tuple[int, int]) -> tuple[int, int]:
    """``size`` (w, h) scaled down to fit in ``src_size``, its aspect ratio kept (MXNet's arithmetic)."""
    w: float
    h: float
    w, h = size
    sw, sh = src_size
    if sh < h:
        w, h = float(w * sh) / h, sh
    if sw < w:
        w, h = sw, float(h * sw) / w
    return int(w), int(h)


def copyMakeBorder(src: Any, top: int, bot: int, left: int, right: int, type: int = 0, value: float = 0.0, values: Any = ()) -> NDArray:
    """``mx.image.copyMakeBorder``: OpenCV's, ``type`` its border type (0: constant ``value`` or ``values``)."""
    cv2 = opencv()
    img = np.asarray(src)
    fill = tuple(float(v) for v in values) if values else (float(value),) * 4
    res = cv2.copyMakeBorder(img, int(top), int(bot), int(left), int(right), int(type), value=fill)
    if res.ndim == 2 and img.ndim == 3:
        res = res[:, :, None]
    return res.view(NDArray)


def _get_interp_method(interp: int, sizes: tuple[int, ...] = ()) -> int:
    """MXNet's: 9 picks by the sizes ``(old_h, old_w, new_h, new_w)``, 10 draws from ``random``."""
    if interp == 9:
        if sizes:
            oh, ow, nh, nw = sizes
            if nh > oh and nw > ow:
                return 2
            if nh < oh and nw < ow:
                return 3
            return 1
        return 2
    if interp == 10:
        return random.randint(0, 4)
    if interp not in (0, 1, 2, 3, 4):
        raise ValueError(f"Unknown interp method {interp}")
    return interp


def resize_short(src: Any, size: int, interp: int = 2) -> NDArray:
    """``mx.image.resize_short``: the shorter edge to ``size``, the other ``size * long // short``."""
    h, w = src.shape[:2]
    if h > w:
        new_h, new_w = size * h // w, size
    else:
        new_h, new_w = size, size * w // h
    return imresize(src, new_w, new_h, interp=_get_interp_method(interp, (h, w, new_h, new_w)))


def fixed_crop(src: Any, x0: int, y0: int, w: int, h: int, size: tuple[int, int] | None = None, interp: int = 2) -> NDArray:
    """``mx.image.fixed_crop``: ``src[y0:y0+h, x0:x0+w]``, resized to ``size`` (w, h) if given."""
    out = _nd(src)[y0 : y0 + h, x0 : x0 + w]
    if size is not None and (w, h) != tuple(size):
        out = imresize(out, *size, interp=_get_interp_method(interp, (h, w, size[1], size[0])))
    return out


def random_crop(src: Any, size: tuple[int, int], interp: int = 2) -> tuple[NDArray, tuple[int, int, int, int]]:
    """``mx.image.random_crop``: a crop of ``size`` (scaled down to fit) at a ``random`` place."""
    h, w = src.shape[:2]
    new_w, new_h = scale_down((w, h), size)
    x0 = random.randint(0, w - new_w)
    y0 = random.randint(0, h - new_h)
    return fixed_crop(src, x0, y0, new_w, new_h, size, interp), (x0, y0, new_w, new_h)


def center_crop(src: Any, size: tuple[int, int], interp: int = 2) -> tuple[NDArray, tuple[int, int, int, int]]:
    """``mx.image.center_crop``: the centre crop of ``size`` (scaled down to fit), resized to it."""
    h, w = src.shape[:2]
    new_w, new_h = scale_down((w, h), size)
    x0 = int((w - new_w) / 2)
    y0 = int((h - new_h) / 2)
    return fixed_crop(src, x0, y0, new_w, new_h, size, interp), (x0, y0, new_w, new_h)


def color_normalize(src: Any, mean: Any, std: Any = None) -> Any:
    """``mx.image.color_normalize``: ``src -= mean``, ``src /= std``, in place (as MXNet's)."""
    if mean is not None:
        src -= mean
    if std is not None:
        src /= std
    return src


def random_size_crop(src: Any, size: tuple[int, int], area: Any, ratio: tuple[float, float], interp: int = 2, **kwargs: Any) -> tuple[NDArray, tuple[int, int, int, int]]:
    """``mx.image.random_size_crop``: a crop of a random area (a fraction of the image, in
    ``area``) and aspect ratio (log-uniform in ``ratio``), resized to ``size``; after 10
    misses, the centre crop."""
    h, w = src.shape[:2]
    src_area = h * w
    if "min_area" in kwargs:
        area = kwargs.pop("min_area")
    if kwargs:
        raise TypeError(f"unexpected keyword arguments for random_size_crop: {sorted(kwargs)}")
    if isinstance(area, numbers.Number):
        area = (area, 1.0)
    for _ in range(10):
        target_area = random.uniform(area[0], area[1]) * src_area
        log_ratio = (np.log(ratio[0]), np.log(ratio[1]))
        new_ratio = np.exp(random.uniform(*log_ratio))
        new_w = round(np.sqrt(target_area * new_ratio))
        new_h = round(np.sqrt(target_area / new_ratio))
        if new_w <= w and new_h <= h:
            x0 = random.randint(0, w - new_w)
            y0 = random.randint(0, h - new_h)
            return fixed_crop(src, x0, y0, new_w, new_h, size, interp), (x0, y0, new_w, new_h)
    return center_crop(src, size, interp)


def _nd(x: Any) -> NDArray:
    return x if isinstance(x, NDArray) else np.asarray(x).view(NDArray)


# --------------------------------------------------------------------------- augmenters


class Augmenter:
    """``mx.image.Augmenter``: an image in, an image out; ``dumps()`` its name and arguments as JSON."""

    def __init__(self, **kwargs: Any):
        self._kwargs = {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()}

    def dumps(self) -> Any:
        return json.dumps([type(self).__name__.lower(), self._kwargs])

    def __call__(self, src: Any) -> Any:
        raise NotImplementedError("Must override implementation.")


class SequentialAug(Augmenter):
    """The augmenters ``ts``, one after the other."""

    def __init__(self, ts: list[Augmenter]):
        super().__init__()
        self.ts = ts

    def dumps(self) -> Any:
        return [type(self).__name__.lower(), [x.dumps() for x in self.ts]]

    def __call__(self, src: Any) -> Any:
        for aug in self.ts:
            src = aug(src)
        return src


class ResizeAug(Augmenter):
    """The shorter edge to ``size`` (``resize_short``)."""

    def __init__(self, size: int, interp: int = 2):
        super().__init__(size=size, interp=interp)
        self.size, self.interp = size, interp

    def __call__(self, src: Any) -> Any:
        return resize_short(src, self.size, self.interp)


class ForceResizeAug(Augmenter):
    """Exactly ``size`` (w, h), the aspect ratio not kept."""

    def __init__(self, size: tuple[int, int], interp: int = 2):
        super().__init__(size=size, interp=interp)
        self.size, self.interp = size, interp

    def __call__(self, src: Any) -> Any:
        sizes = (src.shape[0], src.shape[1], self.size[1], self.size[0])
        return imresize(src, *self.size, interp=_get_interp_method(self.interp, sizes))


class RandomCropAug(Augmenter):
    """A crop of ``size`` at a random place (``random_crop``)."""

    def __init__(self, size: tuple[int, int], interp: int = 2):
        super().__init__(size=size, interp=interp)
        self.size, self.interp = size, interp

    def __call__(self, src: Any) -> Any:
        return random_crop(src, self.size, self.interp)[0]


class RandomSizedCropAug(Augmenter):
    """A crop of random area and aspect ratio, resized to ``size`` (``random_size_crop``)."""

    def __init__(self, size: tuple[int, int], area: Any, ratio: tuple[float, float], interp: int = 2, **kwargs: Any):
        super().__init__(size=size, area=area, ratio=ratio, interp=interp)
        self.size = size
        self.area = kwargs.pop("min_area") if "min_area" in kwargs else area
        if kwargs:
            raise TypeError(f"unexpected keyword arguments for RandomSizedCropAug: {sorted(kwargs)}")
        self.ratio, self.interp = ratio, interp

    def __call__(self, src: Any) -> Any:
        return random_size_crop(src, self.size, self.area, self.ratio, self.interp)[0]


class CenterCropAug(Augmenter):
    """The centre crop of ``size`` (``center_crop``)."""

    def __init__(self, size: tuple[int, int], interp: int = 2):
        super().__init__(size=size, interp=interp)
        self.size, self.interp = size, interp

    def __call__(self, src: Any) -> Any:
        return center_crop(src, self.size, self.interp)[0]


class RandomOrderAug(Augmenter):
    """The augmenters ``ts`` in an order drawn by ``random.shuffle`` (of ``ts`` itself, as MXNet's)."""

    def __init__(self, ts: list[Augmenter]):
        super().__init__()
        self.ts = ts

    def dumps(self) -> Any:
        return [type(self).__name__.lower(), [x.dumps() for x in self.ts]]

    def __call__(self, src: Any) -> Any:
        random.shuffle(self.ts)
        for t in self.ts:
            src = t(src)
        return src


_GRAY = (0.299, 0.587, 0.114)


class BrightnessJitterAug(Augmenter):
    """``src *= 1 + uniform(-brightness, brightness)``, in place."""

    def __init__(self, brightness: float):
        super().__init__(brightness=brightness)
        self.brightness = brightness

    def __call__(self, src: Any) -> Any:
        alpha = 1.0 + random.uniform(-self.brightness, self.brightness)
        src *= alpha
        return src


class ContrastJitterAug(Augmenter):
    """Towards (or away from) the image's mean gray: ``src * alpha + mean_gray * (1 - alpha)``."""

    def __init__(self, contrast: float):
        super().__init__(contrast=contrast)
        self.contrast = contrast
        self.coef = nd.array([[_GRAY]])

    def __call__(self, src: Any) -> Any:
        alpha = 1.0 + random.uniform(-self.contrast, self.contrast)
        gray = src * self.coef
        gray = (3.0 * (1.0 - alpha) / gray.size) * nd.sum(gray)
        src *= alpha
        src += gray
        return src


class SaturationJitterAug(Augmenter):
    """Towards (or away from) each pixel's gray: ``src * alpha + gray * (1 - alpha)``."""

    def __init__(self, saturation: float):
        super().__init__(saturation=saturation)
        self.saturation = saturation
        self.coef = nd.array([[_GRAY]])

    def __call__(self, src: Any) -> Any:
        alpha = 1.0 + random.uniform(-self.saturation, self.saturation)
        gray = src * self.coef
        gray = nd.sum(gray, axis=2, keepdims=True)
        gray *= 1.0 - alpha
        src *= alpha
        src += gray
        return src


class HueJitterAug(Augmenter):
    """A rotation of the hue by ``uniform(-hue, hue) * 180`` degrees, in YIQ space."""

    _TYIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
    _ITYIQ = np.array([[1.0, 0.956, 0.621], [1.0, -0.272, -0.647], [1.0, -1.107, 1.705]])

    def __init__(self, hue: float):
        super().__init__(hue=hue)
        self.hue = hue
        self.tyiq, self.ityiq = self._TYIQ, self._ITYIQ

    def __call__(self, src: Any) -> Any:
        alpha = random.uniform(-self.hue, self.hue)
        u, w = np.cos(alpha * np.pi), np.sin(alpha * np.pi)
        bt = np.array([[1.0, 0.0, 0.0], [0.0, u, -w], [0.0, w, u]])
        t = np.dot(np.dot(self.ityiq, bt), self.tyiq).T
        return nd.dot(src, nd.array(t))


class ColorJitterAug(RandomOrderAug):
    """Brightness, contrast and saturation jitter (those above 0), in a random order."""

    def __init__(self, brightness: float, contrast: float, saturation: float):
        ts: list[Augmenter] = []
        if brightness > 0:
            ts.append(BrightnessJitterAug(brightness))
        if contrast > 0:
            ts.append(ContrastJitterAug(contrast))
        if saturation > 0:
            ts.append(SaturationJitterAug(saturation))
        super().__init__(ts)


class LightingAug(Augmenter):
    """AlexNet's PCA lighting noise: ``alpha ~ np.random.normal(0, alphastd, 3)``."""

    def __init__(self, alphastd: float, eigval: Any, eigvec: Any):
        super().__init__(alphastd=alphastd, eigval=eigval, eigvec=eigvec)
        self.alphastd, self.eigval, self.eigvec = alphastd, eigval, eigvec

    def __call__(self, src: Any) -> Any:
        alpha = np.random.normal(0, self.alphastd, size=(3,))
        rgb = np.dot(self.eigvec * alpha, self.eigval)
        src += nd.array(rgb)
        return src


class ColorNormalizeAug(Augmenter):
    """``(src - mean) / std``, in place (``color_normalize``)."""

    def __init__(self, mean: Any, std: Any):
        super().__init__(mean=mean, std=std)
        self.mean = mean if mean is None or isinstance(mean, NDArray) else nd.array(mean)
        self.std = std if std is None or isinstance(std, NDArray) else nd.array(std)

    def __call__(self, src: Any) -> Any:
        return color_normalize(src, self.mean, self.std)


class RandomGrayAug(Augmenter):
    """With probability ``p``, gray in all three channels."""

    def __init__(self, p: float):
        super().__init__(p=p)
        self.p = p
        self.mat = nd.array([[0.21, 0.21, 0.21], [0.72, 0.72, 0.72], [0.07, 0.07, 0.07]])

    def __call__(self, src: Any) -> Any:
        if random.random() < self.p:
            src = nd.dot(src, self.mat)
        return src


class HorizontalFlipAug(Augmenter):
    """With probability ``p``, mirrored left to right."""

    def __init__(self, p: float):
        super().__init__(p=p)
        self.p = p

    def __call__(self, src: Any) -> Any:
        if random.random() < self.p:
            src = nd.flip(src, axis=1)
        return src


class CastAug(Augmenter):
    """Cast to ``typ`` (float32 by default)."""

    def __init__(self, typ: str = "float32"):
        super().__init__(type=typ)
        self.typ = typ

    def __call__(self, src: Any) -> Any:
        return src.astype(self.typ)


EIGVAL = np.array([55.46, 4.794, 1.148])
EIGVEC = np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]])
_MEAN = (123.68, 116.28, 103.53)
_STD = (58.395, 57.12, 57.375)


def mean_std(mean: Any, std: Any, as_array: Any) -> tuple[Any, Any]:
    """``True`` for ImageNet's mean and std; else an array of 1 or 3 values, or None."""
    if mean is True:
        mean = as_array(_MEAN)
    elif mean is not None and not (isinstance(mean, np.ndarray) and mean.shape[0] in (1, 3)):
        raise ValueError(f"mean must be True, None or an array of 1 or 3 values, got {mean!r}")
    if std is True:
        std = as_array(_STD)
    elif std is not None and not (isinstance(std, np.ndarray) and std.shape[0] in (1, 3)):
        raise ValueError(f"std must be True, None or an array of 1 or 3 values, got {std!r}")
    return mean, std


def CreateAugmenter(
    data_shape: tuple[int, int, int],
    resize: int = 0,
    rand_crop: bool = False,
    rand_resize: bool = False,
    rand_mirror: bool = False,
    mean: Any = None,
    std: Any = None,
    brightness: float = 0,
    contrast: float = 0,
    saturation: float = 0,
    hue: float = 0,
    pca_noise: float = 0,
    rand_gray: float = 0,
    inter_method: int = 2,
) -> list[Augmenter]:
    """``mx.image.CreateAugmenter``: MXNet's list of augmenters for these options, in its order:
    resize, crop (random-sized, random or centre), mirror, cast to float32, colour jitter,
    hue, PCA lighting, random gray, normalisation (``mean=True``/``std=True``: ImageNet's)."""
    auglist: list[Augmenter] = []
    if resize > 0:
        auglist.append(ResizeAug(resize, inter_method))
    crop_size = (data_shape[2], data_shape[1])
    if rand_resize:
        if not rand_crop:
            raise ValueError("CreateAugmenter: rand_resize needs rand_crop")
        auglist.append(RandomSizedCropAug(crop_size, 0.08, (3.0 / 4.0, 4.0 / 3.0), inter_method))
    elif rand_crop:
        auglist.append(RandomCropAug(crop_size, inter_method))
    else:
        auglist.append(CenterCropAug(crop_size, inter_method))
    if rand_mirror:
        auglist.append(HorizontalFlipAug(0.5))
    auglist.append(CastAug())
    if brightness or contrast or saturation:
        auglist.append(ColorJitterAug(brightness, contrast, saturation))
    if hue:
        auglist.append(HueJitterAug(hue))
    if pca_noise > 0:
        auglist.append(LightingAug(pca_noise, EIGVAL, EIGVEC))
    if rand_gray > 0:
        auglist.append(RandomGrayAug(rand_gray))
    mean, std = mean_std(mean, std, nd.array)
    if mean is not None or std is not None:
        auglist.append(ColorNormalizeAug(mean, std))
    return auglist


# --------------------------------------------------------------------------- ImageIter


class ImageIter(DataIter):
    """``mx.image.ImageIter``: batches from a ``.rec`` (``path_imgrec``, with ``path_imgidx`` for
    shuffling and parts), a ``.lst`` of files (``path_imglist`` under ``path_root``) or a list
    (``imglist``), each image decoded, put through ``aug_list`` (or ``CreateAugmenter(data_shape,
    **kwargs)``) and transposed to CHW, in this thread, as MXNet's.

    ``shuffle`` permutes by ``random.shuffle`` at every ``reset``; ``last_batch_handle`` is
    ``'pad'`` (the last batch filled from the start, ``pad`` counting them), ``'discard'`` or
    ``'roll_over'``; a part is ``N // num_parts`` images (MXNet's, the rest left out).
    """

    def __init__(
        self,
        batch_size: int,
        data_shape: tuple[int, int, int],
        label_width: int = 1,
        path_imgrec: str | None = None,
        path_imglist: str | None = None,
        path_root: str | None = None,
        path_imgidx: str | None = None,
        shuffle: bool = False,
        part_index: int = 0,
        num_parts: int = 1,
        aug_list: list[Any] | None = None,
        imglist: list[Any] | None = None,
        data_name: str = "data",
        label_name: str = "softmax_label",
        dtype: str = "float32",
        last_batch_handle: str = "pad",
        **kwargs: Any,
    ):
        super().__init__()
        if not (path_imgrec or path_imglist or isinstance(imglist, list)):
            raise ValueError(f"{type(self).__name__}: give path_imgrec, path_imglist or imglist")
        if dtype not in ("int32", "float32", "int64", "float64"):
            raise ValueError(f"{dtype} label not supported")
        if last_batch_handle not in ("pad", "discard", "roll_over"):
            raise ValueError(f"last_batch_handle must be 'pad', 'discard' or 'roll_over', got {last_batch_handle!r}")
        self.imgrec: Any = None
        self.imgidx: list[int] | None = None
        if path_imgrec:
            if path_imgidx:
                self.imgrec = recordio.MXIndexedRecordIO(path_imgidx, path_imgrec, "r")
                self.imgidx = list(self.imgrec.keys)
            else:
                self.imgrec = recordio.MXRecordIO(path_imgrec, "r")
        imgkeys: list[Any] = []
        self.imglist: dict[Any, tuple[NDArray, str]] | None = None
        if path_imglist:
            self.imglist = {}
            with open(path_imglist) as fin:
                for lineno, line in enumerate(iter(fin.readline, ""), 1):
                    parts = line.strip().split("\t")
                    try:
                        index, label = int(parts[0]), nd.array(parts[1:-1], dtype=dtype)
                    except (ValueError, IndexError):
                        raise ValueError(f"{path_imglist}:{lineno}: not a list line (index TAB labels TAB path): {line.strip()!r}") from None
                    self.imglist[index] = (label, parts[-1])
                    imgkeys.append(index)
        elif isinstance(imglist, list):
            self.imglist = {}
            for number, img in enumerate(imglist, 1):
                key = str(number)
                if len(img) > 2:
                    label = nd.array(img[:-1], dtype=dtype)
                elif isinstance(img[0], numbers.Number):
                    label = nd.array([img[0]], dtype=dtype)
                else:
                    label = nd.array(img[0], dtype=dtype)
                self.imglist[key] = (label, img[-1])
                imgkeys.append(key)
        self.path_root = path_root
        self.check_data_shape(data_shape)
        self.provide_data: list[Any] = [(data_name, (batch_size, *data_shape))]
        self.provide_label: list[Any] = [(label_name, (batch_size, label_width))] if label_width > 1 else [(label_name, (batch_size,))]
        self.batch_size = batch_size
        self.data_shape = data_shape
        self.label_width = label_width
        self.shuffle = shuffle
        self.seq: list[Any] | None
        if self.imgrec is None:
            self.seq = imgkeys
        elif shuffle or num_parts > 1 or path_imgidx:
            if self.imgidx is None:
                raise ValueError(f"{type(self).__name__}: shuffle and num_parts need path_imgidx")
            self.seq = self.imgidx
        else:
            self.seq = None
        if num_parts > 1:
            if part_index >= num_parts:
                raise ValueError(f"part_index {part_index} must be less than num_parts {num_parts}")
            assert self.seq is not None
            step = len(self.seq) // num_parts
            self.seq = self.seq[part_index * step : (part_index + 1) * step]
        self.auglist: list[Any] = CreateAugmenter(data_shape, **kwargs) if aug_list is None else aug_list
        self.cur = 0
        self._allow_read = True
        self.last_batch_handle = last_batch_handle
        self.num_image = len(self.seq) if self.seq is not None else None
        self._cache_data: NDArray | None = None
        self._cache_label: NDArray | None = None
        self._cache_idx: int | None = None
        self.reset()

    def reset(self) -> None:
        """The next epoch (reshuffled with ``shuffle``); ``roll_over``'s carried rows are kept."""
        if self.seq is not None and self.shuffle:
            random.shuffle(self.seq)
        if self.last_batch_handle != "roll_over" or self._cache_data is None:
            if self.imgrec is not None:
                self.imgrec.reset()
            self.cur = 0
            self._allow_read = True

    def hard_reset(self) -> None:
        """The next epoch, dropping ``roll_over``'s carried rows."""
        if self.seq is not None and self.shuffle:
            random.shuffle(self.seq)
        if self.imgrec is not None:
            self.imgrec.reset()
        self.cur = 0
        self._allow_read = True
        self._cache_data = self._cache_label = self._cache_idx = None

    def next_sample(self) -> tuple[Any, Any]:
        """The next image's label and bytes.

        Raises:
            StopIteration: at the end of the epoch.
        """
        if self._allow_read is False:
            raise StopIteration
        if self.seq is not None:
            if self.cur >= len(self.seq):
                if self.last_batch_handle != "discard":
                    self.cur = 0
                raise StopIteration
            idx = self.seq[self.cur]
            self.cur += 1
            if self.imgrec is not None:
                header, img = recordio.unpack(self.imgrec.read_idx(idx))
                return (header.label, img) if self.imglist is None else (self.imglist[idx][0], img)
            assert self.imglist is not None
            label, fname = self.imglist[idx]
            return label, self.read_image(fname)
        s = self.imgrec.read()
        if s is None:
            if self.last_batch_handle != "discard":
                self.imgrec.reset()
            raise StopIteration
        header, img = recordio.unpack(s)
        return header.label, img

    def _batchify(self, batch_data: NDArray, batch_label: NDArray, start: int = 0) -> int:
        i = start
        try:
            while i < self.batch_size:
                label, s = self.next_sample()
                data = self.imdecode(s)
                try:
                    self.check_valid_image(data)
                except RuntimeError as e:
                    log.debug("Invalid image, skipping:  %s", e)
                    continue
                data = self.augmentation_transform(data)
                batch_data[i] = self.postprocess_data(data)
                batch_label[i] = label
                i += 1
        except StopIteration:
            if not i:
                raise
        return i

    def next(self) -> DataBatch:
        c, h, w = self.data_shape
        if self._cache_data is not None:
            assert self._cache_label is not None and self._cache_idx is not None
            batch_data, batch_label, i = self._cache_data, self._cache_label, self._cache_idx
        else:
            batch_data = nd.zeros((self.batch_size, c, h, w))
            batch_label = self._new_label()
            i = self._batchify(batch_data, batch_label)
        pad = self.batch_size - i
        if pad != 0:
            if self.last_batch_handle == "discard":
                raise StopIteration
            if self.last_batch_handle == "roll_over" and self._cache_data is None:
                self._cache_data, self._cache_label, self._cache_idx = batch_data, batch_label, i
                raise StopIteration
            self._batchify(batch_data, batch_label, i)
            if self.last_batch_handle == "pad":
                self._allow_read = False
            else:
                self._cache_data = self._cache_label = self._cache_idx = None
        return DataBatch([batch_data], [batch_label], pad=pad)

    def _new_label(self) -> NDArray:
        """A batch's labels before they are written (MXNet's: uninitialised)."""
        return nd.empty(self.provide_label[0][1])

    def check_data_shape(self, data_shape: tuple[int, ...]) -> None:
        if len(data_shape) != 3:
            raise ValueError("data_shape should have length 3, with dimensions CxHxW")
        if data_shape[0] != 3:
            raise ValueError("This iterator expects inputs to have 3 channels.")

    def check_valid_image(self, data: Any) -> None:
        if len(data[0].shape) == 0:
            raise RuntimeError("Data shape is wrong")

    def imdecode(self, s: Any) -> NDArray:
        """The image of bytes ``s``.

        Raises:
            RuntimeError: it cannot be decoded; the message names the image (MXNet's words,
                then the decoder's).
        """
        try:
            return imdecode(s)
        except Exception as e:
            raise RuntimeError(f"{self._locate()}, {e}") from None

    def _locate(self) -> str:
        count = self.num_image or 1
        idx = self.seq[(self.cur % count) - 1] if self.seq is not None else (self.cur % count) - 1
        if self.imglist is not None:
            return f"Broken image filename: {self.imglist[idx][1]}"
        return f"Broken image index: {idx}"

    def read_image(self, fname: str) -> bytes:
        with open(os.path.join(self.path_root or "", fname), "rb") as fin:
            return fin.read()

    def augmentation_transform(self, data: Any, *label: Any) -> Any:
        for aug in self.auglist:
            data = aug(data)
        return data

    def postprocess_data(self, datum: Any) -> NDArray:
        return nd.transpose(datum, axes=(2, 0, 1))


_OUT_OF_SCOPE = {
    "imrotate": "torchvision.transforms.v2.functional.rotate",
    "random_rotate": "torchvision.transforms.v2.RandomRotation",
}


def __getattr__(name: str) -> Any:
    if name in ("CreateDetAugmenter", "ImageDetIter", "DetAugmenter", "DetBorrowAug", "DetRandomSelectAug", "DetHorizontalFlipAug", "DetRandomCropAug", "DetRandomPadAug", "CreateMultiRandCropAugmenter", "detection"):
        from . import detection

        return detection if name == "detection" else getattr(detection, name)
    instead = _OUT_OF_SCOPE.get(name, "OpenCV or torchvision")
    raise AttributeError(f"mx.image.{name} is not in im2rec.mx: use {instead} instead")
