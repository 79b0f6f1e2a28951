"""MXNet's image augmenters and normalisation, one image at a time, in numpy and OpenCV.

This is ``src/io/image_aug_default.cc`` (``aug_default``, what ``ImageRecordIter``
applies), ``image_det_aug_default.cc`` (``det_aug_default``, ``ImageDetRecordIter``'s) and
the per-pixel step of ``iter_image_recordio_2.cc`` (``ProcessImage``: BGR to RGB, mirror,
``(x - mean) * scale / std``) and ``iter_normalize.h`` (the detection iterator's), written
from MXNet 1.9.1's source. Where MXNet's output is deterministic (resize, centre crop, a
fixed crop size, rotation by ``rotate``, padding, mirror, mean and std) the arithmetic is
MXNet's own: integer rounding of sizes, float32 intermediate values, the same OpenCV calls.
Where it is random, the same distributions are drawn from a numpy ``Generator`` the caller
gives (one per image), so that any number of threads gives the same pixels.

Images are OpenCV's: HxW (gray) or HxWxC uint8 in BGR(A) order, as ``cv2.imdecode`` gives.
A few of MXNet's augmenters crash or read out of bounds on a gray image (colour jitter,
HSL, PCA noise); here they work on one channel instead.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ImageError
from ..image import IGNORE_ORIENTATION, Checked, imdecode_checked, opencv
from .args import bounds
from .kernels import border, resize, round_half_away, saturate_u8, warp_affine

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_AUG",
    "DEFAULT_DET_AUG",
    "DetAugmenter",
    "DetLabel",
    "DetNormalizer",
    "ImageAugmenter",
    "Normalizer",
    "decode_for_iterator",
    "imdecode",
]

F32 = np.float32
#: ``GetInterMethod``'s codes: 0-4 are OpenCV's INTER_* values, 9 picks by direction, 10 at random.
INTER_CODES = (0, 1, 2, 3, 4, 9, 10)
#: ImageNet's RGB eigenvalues times eigenvectors, as ``aug_default`` keeps them for ``pca_noise``.
_EIGVEC = np.array(
    [
        [55.46 * -0.5675, 4.794 * 0.7192, 1.148 * 0.4009],
        [55.46 * -0.5808, 4.794 * -0.0045, 1.148 * -0.8140],
        [55.46 * -0.5836, 4.794 * -0.6948, 1.148 * 0.4203],
    ],
    dtype=F32,
)


def _inter_method(code: int, old_w: int, old_h: int, new_w: int, new_h: int, rng: np.random.Generator) -> int:
    """MXNet's ``GetInterMethod``: 9 is cubic to enlarge, area to shrink, else linear; 10 draws 0-4."""
    if code == 9:
        if new_w > old_w and new_h > old_h:
            return 2
        if new_w < old_w and new_h < old_h:
            return 3
        return 1
    if code == 10:
        return int(rng.integers(0, 5))
    return code


def _uniform(rng: np.random.Generator, low: float, high: float) -> float:
    """``std::uniform_real_distribution(low, high)`` as libstdc++ draws it: ``low + (high - low) * u``
    (also when ``high < low``, which MXNet's crop-box ranges can give and numpy refuses)."""
    return float(low + (high - low) * rng.random())


def _resize_shorter(img: np.ndarray, size: int, code: int, rng: np.random.Generator) -> np.ndarray:
    """The shorter edge to ``size``, the longer ``size * long // short`` (integer arithmetic)."""
    rows, cols = img.shape[:2]
    if rows > cols:
        new_h, new_w = size * rows // cols, size
    else:
        new_h, new_w = size, size * cols // rows
    return resize(img, (new_w, new_h), _inter_method(code, cols, rows, new_w, new_h, rng))


def _gray(img: np.ndarray) -> np.ndarray:
    # aug_default calls CV_RGB2GRAY on OpenCV's BGR pixels (so the weights of R and B are
    # swapped); kept, as it is what MXNet-trained models saw.
    return img if img.ndim == 2 else opencv().cvtColor(img, opencv().COLOR_RGB2GRAY)


def _shift_hls(img: np.ndarray, h: int, l: int, s: int) -> np.ndarray:  # noqa: E741 (MXNet's names)
    """Add ``h``, ``l``, ``s`` to the HLS channels (clipped to 180, 255, 255), as both augmenters do."""
    cv2 = opencv()
    if img.ndim == 2:  # one channel: lightness only
        return np.clip(img.astype(np.int16) + l, 0, 255).astype(np.uint8)
    hls = cv2.cvtColor(img, cv2.COLOR_BGR2HLS).astype(np.int16)
    for k, (shift, limit) in enumerate(((h, 180), (l, 255), (s, 255))):
        if shift:
            np.clip(hls[:, :, k] + shift, 0, limit, out=hls[:, :, k])
    return cv2.cvtColor(hls.astype(np.uint8), cv2.COLOR_HLS2BGR)


@dataclass(frozen=True)
class ImageAugmenter:
    """``aug_default``: MXNet's ``DefaultImageAugmentParam``, with its defaults.

    ``process(img, rng)`` is ``DefaultImageAugmenter::Process``: resize the shorter edge,
    an affine warp (rotation, shear, scale, aspect, size limits), padding, a random resized
    crop or a crop of ``min/max_crop_size``, else a centre (or random) crop of
    ``data_shape``, then brightness/contrast/saturation, HSL shifts and PCA noise. The
    result is ``data_shape[1] x data_shape[2]``.
    """

    data_shape: tuple[int, int, int]
    resize: int = -1
    rand_crop: bool = False
    random_resized_crop: bool = False
    max_rotate_angle: int = field(default=0, metadata=bounds(lower=0))
    max_aspect_ratio: float = 0.0
    min_aspect_ratio: float | None = None
    max_shear_ratio: float = 0.0
    max_crop_size: int = -1
    min_crop_size: int = -1
    max_random_scale: float = field(default=1.0, metadata=bounds(above=0))
    min_random_scale: float = field(default=1.0, metadata=bounds(above=0))
    max_random_area: float = 1.0
    min_random_area: float = 1.0
    max_img_size: float = 1e10
    min_img_size: float = 0.0
    brightness: float = 0.0
    contrast: float = 0.0
    saturation: float = 0.0
    pca_noise: float = 0.0
    random_h: int = 0
    random_s: int = 0
    random_l: int = 0
    rotate: int = -1
    fill_value: int = 255
    inter_method: int = 1
    pad: int = field(default=0, metadata=bounds(lower=0))
    rotate_list: tuple[int, ...] = ()  # MXNet's undeclared extra: an angle drawn from these

    def aspect_range(self) -> tuple[float, float]:
        """``(min, max)`` aspect ratio: ``[1 - max, 1 + max]`` unless ``min_aspect_ratio`` is set."""
        if self.min_aspect_ratio is not None:
            return float(F32(self.min_aspect_ratio)), float(F32(self.max_aspect_ratio))
        return float(F32(1) - F32(self.max_aspect_ratio)), float(F32(1) + F32(self.max_aspect_ratio))

    def warps(self) -> bool:
        """Whether ``process`` applies the affine warp (MXNet's condition, random or not)."""
        lo, hi = self.aspect_range()
        return bool(
            self.max_rotate_angle > 0
            or self.max_shear_ratio > 0
            or self.rotate > 0
            or len(self.rotate_list) > 0
            or F32(self.max_random_scale) != 1
            or F32(self.min_random_scale) != 1
            or (not self.random_resized_crop and (lo != 1 or hi != 1))
            or F32(self.max_img_size) != F32(1e10)
            or F32(self.min_img_size) != 0
        )

    def check(self) -> list[tuple[str, str]]:
        """The argument combinations MXNet refuses, as ``(argument, message)`` pairs."""
        problems = []
        if self.inter_method not in INTER_CODES:
            problems.append(("inter_method", f"invalid inter_method {self.inter_method}: valid values are 0-4, 9 and 10"))
        elif self.inter_method == 0 and self.warps():
            problems.append(("inter_method", "inter_method 0 (nearest) cannot be used with rotation, shear, scale, aspect or image-size changes: MXNet's warp needs 1-4, 9 or 10"))
        if self.random_resized_crop and (F32(self.min_random_scale) != 1 or F32(self.max_random_scale) != 1 or self.min_crop_size != -1 or self.max_crop_size != -1 or self.rand_crop):
            problems.append(("random_resized_crop", "random_resized_crop conflicts with min_random_scale, max_random_scale, min_crop_size, max_crop_size and rand_crop"))
        if self.random_resized_crop:
            lo, hi = self.aspect_range()
            if self.max_random_area != 1 or self.min_random_area != 1 or lo != 1 or hi != 1:
                if lo <= 0:
                    problems.append(("min_aspect_ratio", f"random_resized_crop needs an aspect ratio above 0, got {lo:g}"))
                if self.min_random_area > self.max_random_area:
                    problems.append(("min_random_area", f"min_random_area {self.min_random_area:g} is above max_random_area {self.max_random_area:g}"))
                if lo > hi:
                    problems.append(("min_aspect_ratio", f"min_aspect_ratio {lo:g} is above max_aspect_ratio {hi:g}"))
        elif (self.max_crop_size != -1 or self.min_crop_size != -1) and self.max_crop_size < self.min_crop_size:
            problems.append(("max_crop_size", f"max_crop_size {self.max_crop_size} is below min_crop_size {self.min_crop_size}"))
        return problems

    def process(self, img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One image through ``aug_default``.

        Raises:
            ValueError: the image is smaller than ``max_crop_size`` (MXNet's check).
        """
        cv2 = opencv()
        _, out_h, out_w = self.data_shape
        res = _resize_shorter(img, self.resize, self.inter_method, rng) if self.resize != -1 else img
        if self.warps():
            res = self._warp(res, rng)
        if self.pad > 0:
            p = self.pad
            res = cv2.copyMakeBorder(res, p, p, p, p, cv2.BORDER_CONSTANT, value=border(self.fill_value))

        cropped = False
        if self.random_resized_crop:
            lo, hi = self.aspect_range()
            if self.max_random_area != 1 or self.min_random_area != 1 or lo != 1 or hi != 1:
                rows, cols = res.shape[:2]
                area = F32(rows * cols)
                for _ in range(10):
                    rand_area = F32(_uniform(rng, self.min_random_area, self.max_random_area))
                    ratio = F32(_uniform(rng, lo, hi))
                    target = area * rand_area
                    y_area = int(round_half_away(math.sqrt(target / ratio)))
                    x_area = int(round_half_away(math.sqrt(target * ratio)))
                    if rng.random() > 0.5:
                        y_area, x_area = x_area, y_area
                    if y_area <= rows and x_area <= cols:
                        y = int(rng.integers(0, rows - y_area + 1))
                        x = int(rng.integers(0, cols - x_area + 1))
                        code = _inter_method(self.inter_method, x_area, y_area, out_w, out_h, rng)
                        res = resize(res[y : y + y_area, x : x + x_area], (out_w, out_h), code)
                        cropped = True
                        break
        elif self.max_crop_size != -1 or self.min_crop_size != -1:
            rows, cols = res.shape[:2]
            if cols < self.max_crop_size or rows < self.max_crop_size:
                raise ValueError(f"the image ({cols}x{rows} after resize and padding) is smaller than max_crop_size {self.max_crop_size}")
            size = int(rng.integers(self.min_crop_size, self.max_crop_size + 1))
            y, x = rows - size, cols - size
            if self.rand_crop:
                y, x = int(rng.integers(0, y + 1)), int(rng.integers(0, x + 1))
            else:
                y, x = y // 2, x // 2
            code = _inter_method(self.inter_method, size, size, out_w, out_h, rng)
            res = resize(res[y : y + size, x : x + size], (out_w, out_h), code)
            cropped = True

        if not cropped:
            res = self._centre_crop(res, rng)
        if self.brightness > 0 or self.contrast > 0 or self.saturation > 0:
            res = self._jitter(res, rng)
        if self.random_h != 0 or self.random_s != 0 or self.random_l != 0:
            r = [(rng.random() + 4 * F32(rng.random())) / 5 for _ in range(3)]
            h, s, l = (int(F32(v) * limit * 2 - limit) for v, limit in zip(r, (self.random_h, self.random_s, self.random_l)))  # noqa: E741
            res = _shift_hls(res, h, l, s)
        if self.pca_noise > 0:
            alpha = np.array([rng.normal(0, self.pca_noise) for _ in range(3)], dtype=F32)
            pca_rgb = _EIGVEC @ alpha
            shift = pca_rgb[::-1] if res.ndim == 3 else pca_rgb.mean(keepdims=True)  # BGR order
            shift = np.concatenate([shift, np.zeros(res.shape[2] - 3, F32)]) if res.ndim == 3 and res.shape[2] > 3 else shift
            res = np.clip(np.trunc(res.astype(F32) + shift), 0, 255).astype(np.uint8)
        return res

    def _warp(self, res: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Rotation, shear, scale and aspect by one ``warpAffine``, in MXNet's float32 arithmetic."""
        s = F32(rng.random()) * F32(self.max_shear_ratio) * F32(2) - F32(self.max_shear_ratio)
        angle = int(rng.integers(-self.max_rotate_angle, self.max_rotate_angle + 1))
        if self.rotate > 0:
            angle = self.rotate
        if self.rotate_list:
            angle = self.rotate_list[int(rng.integers(0, len(self.rotate_list)))]
        a = F32(math.cos(angle / 180.0 * math.pi))
        b = F32(math.sin(angle / 180.0 * math.pi))
        scale = ratio = F32(1)
        if not self.random_resized_crop:
            scale = F32(rng.random()) * (F32(self.max_random_scale) - F32(self.min_random_scale)) + F32(self.min_random_scale)
            lo, hi = self.aspect_range()
            ratio = F32(rng.random()) * (F32(hi) - F32(lo)) + F32(lo)
        hs = F32(2) * scale / (F32(1) + ratio)
        ws = ratio * hs
        rows, cols = res.shape[:2]
        new_w = max(F32(self.min_img_size), min(F32(self.max_img_size), scale * F32(cols)))
        new_h = max(F32(self.min_img_size), min(F32(self.max_img_size), scale * F32(rows)))
        m = np.zeros((2, 3), dtype=F32)
        m[0, 0] = hs * a - s * b * ws
        m[1, 0] = -b * ws
        m[0, 1] = hs * b + s * a * ws
        m[1, 1] = a * ws
        centre_w = m[0, 0] * F32(cols) + m[0, 1] * F32(rows)
        centre_h = m[1, 0] * F32(cols) + m[1, 1] * F32(rows)
        m[0, 2] = (new_w - centre_w) / F32(2)
        m[1, 2] = (new_h - centre_h) / F32(2)
        size = (int(new_w), int(new_h))
        code = _inter_method(self.inter_method, cols, rows, size[0], size[1], rng)
        return warp_affine(res, m, size, code, self.fill_value)

    def _centre_crop(self, res: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Enlarge an image smaller than ``data_shape`` (float32 size arithmetic), then crop it."""
        _, out_h, out_w = self.data_shape
        rows, cols = res.shape[:2]
        code = _inter_method(self.inter_method, cols, rows, out_w, out_h, rng)
        if rows < out_h:
            new_cols = int(F32(out_h) / F32(rows) * F32(cols))
            res = resize(res, (new_cols, out_h), code)
        rows, cols = res.shape[:2]
        if cols < out_w:
            new_rows = int(F32(out_w) / F32(cols) * F32(rows))
            res = resize(res, (out_w, new_rows), code)
        rows, cols = res.shape[:2]
        if rows < out_h or cols < out_w:
            raise ValueError(f"the image ({cols}x{rows}) is smaller than data_shape ({out_w}x{out_h})")
        y, x = rows - out_h, cols - out_w
        if self.rand_crop:
            y, x = int(rng.integers(0, y + 1)), int(rng.integers(0, x + 1))
        else:
            y, x = y // 2, x // 2
        return res[y : y + out_h, x : x + out_w]

    def _jitter(self, res: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Brightness, contrast and saturation, in a random order, as OpenCV's convertTo/addWeighted do."""
        alpha_b = 1.0 + F32(_uniform(rng, -self.brightness, self.brightness))
        alpha_c = 1.0 + F32(_uniform(rng, -self.contrast, self.contrast))
        alpha_s = 1.0 + F32(_uniform(rng, -self.saturation, self.saturation))
        for step in rng.permutation(3):
            if step == 0:
                res = saturate_u8(res.astype(F32) * F32(alpha_b))
            elif step == 1:
                mean = float(_gray(res).mean())
                res = saturate_u8(res.astype(F32) * F32(alpha_c) + F32((1 - alpha_c) * mean))
            elif res.ndim == 3:
                gray = _gray(res).astype(F32)[:, :, None]
                res = saturate_u8(res.astype(F32) * F32(alpha_s) + gray * F32(1 - alpha_s))
        return res


class Normalizer:
    """``ProcessImage``: an augmented image into one row of the batch (CHW, RGB(A) order).

    ``float32`` (and ``float16``/``float64``, computed in float32): ``(x - mean) * mult + bias``
    with ``mult = contrast * scale / std`` and ``bias = illumination * scale / std``
    (``max_random_contrast`` and ``max_random_illumination`` draw the two per image);
    ``mean`` is ``mean_r/g/b/a`` or a mean image. ``uint8``: the pixels. ``int8``:
    ``x - round(mean)``, saturated. ``mirror`` flips the row left to right.
    """

    def __init__(self, channels: int, dtype: np.dtype, *, mean: np.ndarray, std: np.ndarray, scale: float, mean_img: np.ndarray | None = None, max_random_contrast: float = 0.0, max_random_illumination: float = 0.0):
        self.channels = channels
        self.dtype = np.dtype(dtype)
        self.scale = F32(scale)
        self.std = std.astype(F32)[:channels]
        self.mean = mean.astype(F32)[:channels]
        self.mean_img = mean_img
        self.max_random_contrast = F32(max_random_contrast)
        self.max_random_illumination = F32(max_random_illumination)
        if self.dtype == np.int8:
            base = mean_img if mean_img is not None else self.mean[:, None, None]
            self.mean_int = round_half_away(base.astype(np.float64)).astype(np.int16)

    def factors(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """This image's ``mult`` and ``bias`` per channel (the draws MXNet makes, in its order)."""
        contrast = (F32(rng.random()) * self.max_random_contrast * F32(2) - self.max_random_contrast + F32(1)) * self.scale
        illumination = (F32(rng.random()) * self.max_random_illumination * F32(2) - self.max_random_illumination) * self.scale
        return (contrast / self.std).astype(F32), (illumination / self.std).astype(F32)

    def write(self, res: np.ndarray, out: np.ndarray, mirrored: bool, rng: np.random.Generator) -> None:
        """Fill ``out`` (C, H, W) from ``res`` (H, W[, C], BGR(A)); the random factors from ``rng``."""
        planes = res[None] if res.ndim == 2 else res.transpose(2, 0, 1)
        order = (0,) if res.ndim == 2 else (2, 1, 0, 3)[: planes.shape[0]]
        floats = self.dtype.kind == "f"
        if floats:
            mult, bias = self.factors(rng)
        for k, src in enumerate(order):
            plane = planes[src]
            dst = out[k, :, ::-1] if mirrored else out[k]
            if self.dtype == np.uint8:
                dst[...] = plane
            elif self.dtype == np.int8:
                np.clip(plane.astype(np.int16) - self.mean_int[k], -128, 127, out=dst, casting="unsafe")
            elif self.dtype == np.float32:
                mean = self.mean_img[k] if self.mean_img is not None else self.mean[k]
                np.subtract(plane, mean, out=dst, dtype=F32)
                np.multiply(dst, mult[k], out=dst)
                np.add(dst, bias[k], out=dst)
            else:  # float16 / float64: MXNet's float32 values, then cast
                mean = self.mean_img[k] if self.mean_img is not None else self.mean[k]
                dst[...] = (np.subtract(plane, mean, dtype=F32) * mult[k] + bias[k]).astype(self.dtype)


# --------------------------------------------------------------------------- detection


class DetLabel:
    """``ImageDetLabel``: a packed detection label ``[header_width, object_width, extra header...,
    (id, xmin, ymin, xmax, ymax, extra...) x N]`` (coordinates relative to the image, 0-1).

    Objects without area (``xmax <= xmin`` or ``ymax <= ymin``, such as the -1 rows a
    ``--pack-label`` list pads with) are dropped, as MXNet drops them.
    """

    def __init__(self, raw: np.ndarray):
        raw = np.asarray(raw, dtype=F32)
        if raw.size < 7:
            raise ValueError(f"a detection label needs at least 7 numbers (2 of header, 5 of one object), got {raw.size}")
        header_width, self.object_width = int(raw[0]), int(raw[1])
        if header_width < 2:
            raise ValueError(f"a detection label's header width (its first number) must be at least 2, got {raw[0]:g}")
        if self.object_width < 5:
            raise ValueError(f"a detection label's object width (its second number) must be at least 5, got {raw[1]:g}")
        if (raw.size - header_width) % self.object_width:
            raise ValueError(f"a detection label of {raw.size} numbers does not hold whole objects of {self.object_width} after a header of {header_width}")
        self.header = raw[:header_width].copy()
        objects = raw[header_width:].reshape(-1, self.object_width)
        self.objects = objects[(objects[:, 3] > objects[:, 1]) & (objects[:, 4] > objects[:, 2])].copy()

    def to_array(self) -> np.ndarray:
        return np.concatenate([self.header, self.objects.reshape(-1)])

    def project(self, x: F32, y: F32, w: F32, h: F32, objects: np.ndarray | None = None) -> np.ndarray:
        """``ImageDetObject::Project``: the objects' coordinates in the box ``(x, y, w, h)``, clipped to 0-1."""
        o = (self.objects if objects is None else objects).copy()
        o[:, 1] = np.maximum(F32(0), (o[:, 1] - x) / w)
        o[:, 2] = np.maximum(F32(0), (o[:, 2] - y) / h)
        o[:, 3] = np.minimum(F32(1), (o[:, 3] - x) / w)
        o[:, 4] = np.minimum(F32(1), (o[:, 4] - y) / h)
        return o

    def mirror(self) -> None:
        left = self.objects[:, 1].copy()
        self.objects[:, 1] = F32(1) - self.objects[:, 3]
        self.objects[:, 3] = F32(1) - left

    def try_crop(self, box: tuple[F32, F32, F32, F32], sampler: dict[str, float], emit_mode: str, emit_overlap_thresh: float) -> bool:
        """``TryCrop``: whether one object meets the sampler's overlap and coverage ranges; if so,
        keep the objects the emit rule keeps (their centre in the box, or overlap above the
        threshold), projected into the box. False when none would remain."""
        if not len(self.objects):
            return True
        x, y, w, h = box
        o = self.objects
        ix = np.maximum(F32(0), np.minimum(x + w, o[:, 3]) - np.maximum(x, o[:, 1]))
        iy = np.maximum(F32(0), np.minimum(y + h, o[:, 4]) - np.maximum(y, o[:, 2]))
        inter = (ix * iy).astype(F32)
        gt_area = ((o[:, 3] - o[:, 1]) * (o[:, 4] - o[:, 2])).astype(F32)
        crop_area = F32(w * h)
        ok = np.ones(len(o), dtype=bool)
        lo, hi = sampler["min_crop_overlaps"], sampler["max_crop_overlaps"]
        if lo > 0 or hi < 1:
            with np.errstate(divide="ignore", invalid="ignore"):
                iou = np.where(inter > 0, inter / (crop_area + gt_area - inter), F32(0))
            ok &= (iou >= lo) & (iou <= hi)
        lo, hi = sampler["min_crop_sample_coverages"], sampler["max_crop_sample_coverages"]
        if lo > 0 or hi < 1:
            c = inter / crop_area
            ok &= (c >= lo) & (c <= hi)
        lo, hi = sampler["min_crop_object_coverages"], sampler["max_crop_object_coverages"]
        if lo > 0 or hi < 1:
            c = inter / gt_area
            ok &= (c >= lo) & (c <= hi)
        if not ok.any():
            return False
        if emit_mode == "center":
            cx = (o[:, 1] + o[:, 3]) * F32(0.5)
            cy = (o[:, 2] + o[:, 4]) * F32(0.5)
            keep = (cx >= x) & (cx < x + w) & (cy >= y) & (cy < y + h)
        else:
            keep = inter / gt_area > F32(emit_overlap_thresh)
        if not keep.any():
            return False
        self.objects = self.project(x, y, w, h, o[keep])
        return True


#: The crop-sampler arguments of ``det_aug_default``, each one value or one per sampler.
CROP_SAMPLER_ARGS = (
    "min_crop_scales",
    "max_crop_scales",
    "min_crop_aspect_ratios",
    "max_crop_aspect_ratios",
    "min_crop_overlaps",
    "max_crop_overlaps",
    "min_crop_sample_coverages",
    "max_crop_sample_coverages",
    "min_crop_object_coverages",
    "max_crop_object_coverages",
    "max_crop_trials",
)
RESIZE_MODES = ("force", "shrink", "fit")
CROP_EMIT_MODES = ("center", "overlap")


@dataclass(frozen=True)
class DetAugmenter:
    """``det_aug_default``: MXNet's ``DefaultImageDetAugmentParam``, with its defaults.

    ``process(img, label, rng)`` resizes the shorter edge, shifts hue, saturation and
    lightness and scales contrast (each with its probability), mirrors, pads and crops at
    random (boxes follow the pixels), then fits ``data_shape`` by ``resize_mode``:
    ``force`` (stretch to it), ``shrink`` (only larger images, aspect kept) or ``fit``
    (aspect kept). The image may then be smaller than ``data_shape``: the iterator places
    it at the top left.
    """

    data_shape: tuple[int, int, int]
    resize: int = -1
    rand_crop_prob: float = 0.0
    min_crop_scales: tuple[float, ...] = (0.0,)
    max_crop_scales: tuple[float, ...] = (1.0,)
    min_crop_aspect_ratios: tuple[float, ...] = (1.0,)
    max_crop_aspect_ratios: tuple[float, ...] = (1.0,)
    min_crop_overlaps: tuple[float, ...] = (0.0,)
    max_crop_overlaps: tuple[float, ...] = (1.0,)
    min_crop_sample_coverages: tuple[float, ...] = (0.0,)
    max_crop_sample_coverages: tuple[float, ...] = (1.0,)
    min_crop_object_coverages: tuple[float, ...] = (0.0,)
    max_crop_object_coverages: tuple[float, ...] = (1.0,)
    num_crop_sampler: int = 1
    crop_emit_mode: str = field(default="center", metadata=bounds(choices=CROP_EMIT_MODES))
    emit_overlap_thresh: float = 0.3
    max_crop_trials: tuple[int, ...] = (25,)
    rand_pad_prob: float = 0.0
    max_pad_scale: float = field(default=1.0, metadata=bounds(above=0))
    max_random_hue: int = 0
    random_hue_prob: float = 0.0
    max_random_saturation: int = 0
    random_saturation_prob: float = 0.0
    max_random_illumination: int = 0
    random_illumination_prob: float = 0.0
    max_random_contrast: float = 0.0
    random_contrast_prob: float = 0.0
    rand_mirror_prob: float = 0.0
    fill_value: int = 127
    inter_method: int = 1
    resize_mode: str = field(default="force", metadata=bounds(choices=RESIZE_MODES))

    def samplers(self) -> list[dict[str, float]]:
        """One dict of crop-sampler settings per sampler (a single value serves every sampler)."""
        n = self.num_crop_sampler
        out: list[dict[str, float]] = [{} for _ in range(max(n, 0))]
        for name in CROP_SAMPLER_ARGS:
            values = getattr(self, name)
            for i in range(n):
                out[i][name] = values[0] if len(values) == 1 else values[i]
        return out

    def check(self) -> list[tuple[str, str]]:
        """The argument values MXNet refuses, as ``(argument, message)`` pairs."""
        problems = []
        if self.inter_method not in INTER_CODES:
            problems.append(("inter_method", f"invalid inter_method {self.inter_method}: valid values are 0-4, 9 and 10"))
        for name in CROP_SAMPLER_ARGS:
            values = getattr(self, name)
            if (self.num_crop_sampler == 1 and len(values) != 1) or (self.num_crop_sampler > 1 and len(values) not in (1, self.num_crop_sampler)):
                problems.append((name, f"{name} has {len(values)} values for {self.num_crop_sampler} crop samplers (give one, or one per sampler)"))
        if problems:
            return problems
        for i, s in enumerate(self.samplers()):
            at = f" (sampler {i})" if self.num_crop_sampler > 1 else ""
            if s["min_crop_scales"] < 0:
                problems.append(("min_crop_scales", f"min_crop_scales must be at least 0{at}, got {s['min_crop_scales']:g}"))
            if s["max_crop_scales"] > 1:
                problems.append(("max_crop_scales", f"max_crop_scales must be at most 1{at}, got {s['max_crop_scales']:g}"))
            if not s["max_crop_scales"] > s["min_crop_scales"]:
                problems.append(("max_crop_scales", f"max_crop_scales must be above min_crop_scales{at}"))
            if s["min_crop_aspect_ratios"] < 0:
                problems.append(("min_crop_aspect_ratios", f"min_crop_aspect_ratios must be at least 0{at}"))
            for kind in ("aspect_ratios", "overlaps", "sample_coverages", "object_coverages"):
                if s[f"max_crop_{kind}"] < s[f"min_crop_{kind}"]:
                    problems.append((f"max_crop_{kind}", f"max_crop_{kind} must be at least min_crop_{kind}{at}"))
        if self.emit_overlap_thresh < 0:
            problems.append(("emit_overlap_thresh", f"emit_overlap_thresh must be at least 0, got {self.emit_overlap_thresh:g}"))
        return problems

    def process(self, img: np.ndarray, raw_label: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One image and its packed label through ``det_aug_default``.

        Raises:
            ValueError: the label is not a detection label (see ``DetLabel``).
        """
        cv2 = opencv()
        res = _resize_shorter(img, self.resize, self.inter_method, rng) if self.resize != -1 else img
        label = DetLabel(raw_label)

        if self.random_hue_prob > 0 or self.random_saturation_prob > 0 or self.random_illumination_prob > 0 or self.random_contrast_prob > 0:
            h = int(F32(_uniform(rng, -1, 1)) * self.max_random_hue)
            s = int(F32(_uniform(rng, -1, 1)) * self.max_random_saturation)
            l = int(F32(_uniform(rng, -1, 1)) * self.max_random_illumination)  # noqa: E741
            c = F32(_uniform(rng, -1, 1)) * F32(self.max_random_contrast)
            h = h if rng.random() < self.random_hue_prob else 0
            s = s if rng.random() < self.random_saturation_prob else 0
            l = l if rng.random() < self.random_illumination_prob else 0  # noqa: E741
            c = c if rng.random() < self.random_contrast_prob else F32(0)
            if h or s or l:
                res = _shift_hls(res, h, l, s)
            if abs(c) > 1e-3:
                res = saturate_u8(res.astype(F32) * (c + F32(1)))

        if self.rand_mirror_prob > 0 and rng.random() < self.rand_mirror_prob:
            label.mirror()
            res = cv2.flip(res, 1)

        if self.rand_pad_prob > 0 and self.max_pad_scale > 1 and rng.random() < self.rand_pad_prob:
            scale = F32(_uniform(rng, 1, self.max_pad_scale))
            if scale >= F32(1.05):
                x0, y0 = F32(_uniform(rng, 0, scale - 1)), F32(_uniform(rng, 0, scale - 1))
                label.objects = label.project(-x0, -y0, scale, scale)
                rows, cols = res.shape[:2]
                left, top = int(x0 * F32(cols)), int(y0 * F32(rows))
                right, bottom = int((scale - x0 - F32(1)) * F32(cols)), int((scale - y0 - F32(1)) * F32(rows))
                res = cv2.copyMakeBorder(res, top, bottom, left, right, cv2.BORDER_CONSTANT, value=border(self.fill_value))

        if self.rand_crop_prob > 0 and self.num_crop_sampler > 0 and rng.random() < self.rand_crop_prob:
            samplers = self.samplers()
            for i in rng.permutation(len(samplers)):
                sampler = samplers[int(i)]
                done = False
                for _ in range(int(sampler["max_crop_trials"])):
                    rows, cols = res.shape[:2]
                    box = self._crop_box(sampler, F32(cols) / F32(rows), rng)
                    bx, by, bw, bh = box
                    if int(bh * F32(rows)) < 1 or int(bw * F32(cols)) < 1:
                        continue  # a box of no pixel (MXNet's resize would abort on it): another trial
                    if label.try_crop(box, sampler, self.crop_emit_mode, self.emit_overlap_thresh):
                        left, top = int(bx * F32(cols)), int(by * F32(rows))
                        res = res[top : top + int(bh * F32(rows)), left : left + int(bw * F32(cols))]
                        done = True
                        break
                if done:
                    break

        rows, cols = res.shape[:2]
        _, out_h, out_w = self.data_shape
        if self.resize_mode == "force":
            res = resize(res, (out_w, out_h), _inter_method(self.inter_method, cols, rows, out_w, out_h, rng))
        elif (self.resize_mode == "shrink" and (rows > out_h or cols > out_w)) or self.resize_mode == "fit":
            ratio = min(F32(out_h) / F32(rows), F32(out_w) / F32(cols))
            new_h, new_w = int(ratio * F32(rows)), int(ratio * F32(cols))
            res = resize(res, (new_w, new_h), _inter_method(self.inter_method, cols, rows, new_w, new_h, rng))
        return res, label.to_array()

    @staticmethod
    def _crop_box(s: dict[str, float], aspect: F32, rng: np.random.Generator) -> tuple[F32, F32, F32, F32]:
        """``GenerateCropBox``: a box (relative x, y, w, h) of random scale and aspect ratio."""
        scale = F32(_uniform(rng, s["min_crop_scales"], s["max_crop_scales"])) + F32(1e-12)
        lo = max(F32(s["min_crop_aspect_ratios"]) / aspect, scale * scale)
        hi = min(F32(s["max_crop_aspect_ratios"]) / aspect, F32(1.0 / (scale * scale)))
        ratio = F32(math.sqrt(F32(_uniform(rng, lo, hi))))
        w = min(F32(1), scale * ratio)
        h = min(F32(1), scale / ratio)
        return F32(_uniform(rng, 0, 1 - w)), F32(_uniform(rng, 0, 1 - h)), w, h


class DetNormalizer:
    """``ImageDetNormalizeIter``: ``((x - mean) / std) * scale`` on the whole row, padding included;
    ``mean`` only when one of ``mean_r/g/b/a`` is above 0 (else the mean image, if any), ``std``
    per channel only where it is above 0, as MXNet does."""

    def __init__(self, channels: int, *, mean: np.ndarray, std: np.ndarray, scale: float, mean_img: np.ndarray | None = None):
        self.channels = channels
        self.mean = mean.astype(F32)[:channels] if (mean > 0).any() else None
        self.mean_img = mean_img if self.mean is None else None
        self.std = std.astype(F32)[:channels]
        self.scale = F32(scale)

    def apply(self, row: np.ndarray) -> None:
        """Normalise ``row`` (C, H, W float32) in place."""
        if self.mean is not None:
            row -= self.mean[:, None, None]
        elif self.mean_img is not None:
            row -= self.mean_img
        for k in range(self.channels):
            if self.std[k] > 0:
                row[k] /= self.std[k]
        if self.scale != 1:
            row *= self.scale


#: The defaults, for reference (``ImageAugmenter``'s and ``DetAugmenter``'s own).
DEFAULT_AUG = ImageAugmenter(data_shape=(3, 224, 224))
DEFAULT_DET_AUG = DetAugmenter(data_shape=(3, 300, 300))


# --------------------------------------------------------------------------- decoding


def decode_for_iterator(buf: Any, channels: int) -> Checked:
    """A record's image as MXNet 1.9.1's ``ImageRecordIter`` decodes it for ``data_shape[0]``
    channels (``cv::imdecode``): gray (HxW) for 1, BGR for 3, EXIF orientation applied; as
    stored for 4 (16 bits taken to 8). The image is None when it cannot be decoded; a
    damaged one comes with the decoder's words (``image.imdecode_checked``)."""
    if channels != 4:
        return imdecode_checked(buf, 0 if channels == 1 else 1)
    img, damage = imdecode_checked(buf, -1)
    if img is not None and img.dtype != np.uint8:
        img = (img >> 8).astype(np.uint8) if img.dtype == np.uint16 else None
    return Checked(img, damage)


def imdecode(buf: Any, flag: int = 1, to_rgb: bool = True, *, name: str = "imdecode") -> np.ndarray:
    """``mx.image.imdecode`` in numpy: the image in ``buf`` (bytes, a memoryview or a uint8
    array) as an HxWx3 uint8 array, RGB unless ``to_rgb=False`` (then OpenCV's BGR), or
    HxWx1 gray for ``flag=0``.

    As MXNet, a JPEG or PNG is decoded without applying its EXIF orientation; other formats
    are decoded by OpenCV as they are. A damaged JPEG is decoded as MXNet decodes it, with
    a warning naming the damage (libjpeg's words).

    Raises:
        ValueError: ``flag`` is negative, or ``buf`` is empty.
        ImageError: the bytes cannot be decoded (``kind`` ``"corrupt"``).
    """
    if int(flag) < 0:
        raise ValueError(f"imdecode: flag must be 0 (gray) or 1 (colour), got {flag}")
    cv2 = opencv()
    data = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else np.ascontiguousarray(buf, dtype=np.uint8).reshape(-1)
    if data.size == 0:
        raise ValueError("imdecode: the buffer is empty")
    mode = cv2.IMREAD_GRAYSCALE if flag == 0 else cv2.IMREAD_COLOR
    if (data[0] == 0xFF and data[1:2].tobytes() == b"\xd8") or data[:4].tobytes() == b"\x89PNG":
        mode |= IGNORE_ORIENTATION
    img, damage = imdecode_checked(data, mode)
    if img is None:
        raise ImageError("corrupt", f"imdecode: {data.size} bytes that cannot be decoded as an image" + (f" ({damage})" if damage else ""))
    if damage:
        log.warning("%s: %d bytes: %s: the image is damaged", name, data.size, damage)
    if flag == 0:
        return img[:, :, None]
    if to_rgb:
        cv2.cvtColor(img, cv2.COLOR_BGR2RGB, dst=img)
    return img
