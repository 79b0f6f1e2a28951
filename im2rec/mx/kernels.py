"""OpenCV 3.4.2's arithmetic, the OpenCV inside MXNet 1.9.1's wheels, where later OpenCVs differ.

MXNet's pixels come from its bundled OpenCV: cubic resizing and bilinear affine warps are
computed here as 3.4.2 computes them (integer and float32 steps, its rounding), so that
batches match MXNet's value for value on any OpenCV installed; the other interpolations,
which did not change, are OpenCV's own. Also C's rounding and OpenCV's saturation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..image import opencv

__all__ = ["border", "resize", "resize_cubic", "round_half_away", "saturate_u8", "warp_affine"]

F32 = np.float32


def border(fill: int) -> tuple[int, int, int, int]:
    """MXNet's border colour, ``cv::Scalar(fill, fill, fill)``: the fourth (alpha) value is 0."""
    return (fill, fill, fill, 0)


def round_half_away(x: Any) -> Any:
    """C's ``std::round`` (halves away from zero), where numpy's rounds halves to even."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


_RESIZE_COEF_SCALE = 2048  # OpenCV's INTER_RESIZE_COEF_SCALE: 11 bits of fixed point


def _cubic_taps(n_src: int, n_dst: int) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV's source offsets and fixed-point cubic weights (A = -0.75) of each output position."""
    scale = 1.0 / (n_dst / n_src)
    f = ((np.arange(n_dst) + 0.5) * scale - 0.5).astype(F32)
    first = np.floor(f).astype(np.int64)
    x = (f - first.astype(F32)).astype(F32)
    a, one = F32(-0.75), F32(1)
    c0 = ((a * (x + one) - F32(5) * a) * (x + one) + F32(8) * a) * (x + one) - F32(4) * a
    c1 = ((a + F32(2)) * x - (a + F32(3))) * x * x + one
    c2 = ((a + F32(2)) * (one - x) - (a + F32(3))) * (one - x) * (one - x) + one
    c3 = one - c0 - c1 - c2
    weights = np.rint(np.stack([c0, c1, c2, c3], axis=1) * F32(_RESIZE_COEF_SCALE)).astype(np.int64)
    return first, weights


def resize_cubic(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``cv::resize(..., INTER_CUBIC)`` of a uint8 image as OpenCV 3.4.2 computes it, the
    OpenCV inside MXNet 1.9.1's wheels (later versions round differently: up to one level).

    The horizontal pass is integer arithmetic on 11-bit weights; the vertical pass is
    float32 for the first ``8 * (width * channels // 8)`` values of a row (3.4.2's SSE2
    loop: ``((s0*b0 + s1*b1) + s2*b2) + s3*b3``, rounded half to even) and 22-bit fixed
    point for the rest; edges repeat the border pixel.
    """
    w, h = size
    src = img if img.ndim == 3 else img[:, :, None]
    rows, cols, channels = src.shape
    if (w, h) == (cols, rows):
        return img.copy()
    x0, xw = _cubic_taps(cols, w)
    y0, yw = _cubic_taps(rows, h)
    width = w * channels
    yi = np.clip(y0[:, None] + np.arange(-1, 3)[None, :], 0, rows - 1)
    used = np.unique(yi)  # the source rows the vertical pass reads
    # horizontal: OpenCV's integer sums, computed in float32, where they are exact (< 2**24)
    xi = np.clip(x0[None, :] + np.arange(-1, 3)[:, None], 0, cols - 1)
    taps = np.take(src.reshape(rows, cols * channels)[used], (xi[:, :, None] * channels + np.arange(channels)).reshape(4 * width), axis=1)
    taps = taps.astype(F32).reshape(len(used), 4, width)
    weights = np.repeat(xw.T.astype(F32), channels, axis=1)
    horizontal = taps[:, 0] * weights[0]
    for k in (1, 2, 3):
        horizontal += taps[:, k] * weights[k]
    at = np.searchsorted(used, yi)
    n = width // 8 * 8
    out = np.empty((h, width), dtype=np.uint8)
    beta = (yw.astype(F32) * (F32(1) / F32(_RESIZE_COEF_SCALE * _RESIZE_COEF_SCALE))).astype(F32)
    head = horizontal[:, :n]
    acc = head[at[:, 0]] * beta[:, 0:1]
    for k in (1, 2, 3):
        acc += head[at[:, k]] * beta[:, k : k + 1]
    out[:, :n] = np.clip(np.rint(acc, out=acc), 0, 255)
    if n < width:
        tail = horizontal[:, n:].astype(np.int64)
        fixed = sum(tail[at[:, k]] * yw[:, k : k + 1] for k in range(4))
        out[:, n:] = np.clip((fixed + (1 << 21)) >> 22, 0, 255)
    out = out.reshape(h, w, channels)
    return out if img.ndim == 3 else out[:, :, 0]


def resize(img: np.ndarray, size: tuple[int, int], code: int) -> np.ndarray:
    """``cv::resize`` as MXNet 1.9.1 gets it: OpenCV's own, but cubic as its 3.4.2 computes it."""
    if code == 2 and img.dtype == np.uint8:
        return resize_cubic(img, size)
    return opencv().resize(img, size, interpolation=code)


def warp_affine(img: np.ndarray, m: np.ndarray, size: tuple[int, int], code: int, fill: int) -> np.ndarray:
    """``cv::warpAffine(img, m, size, code, BORDER_CONSTANT, fill)`` as MXNet 1.9.1 gets it.

    Bilinear (and area, which warpAffine treats as bilinear) is computed here as OpenCV
    3.4.2 does, the OpenCV inside MXNet's wheels (OpenCV 5 computes it differently, up to 4
    levels apart): the inverse map in double, source coordinates in 1/32 pixel steps
    (``X0 + adelta`` at 10 bits, rounded half to even), 15-bit weights, and the fill value
    for the neighbours outside the image. Other interpolations are OpenCV's own.
    ``fill`` is MXNet's ``cv::Scalar(fill, fill, fill)``: an alpha channel is filled with 0.
    """
    cv2 = opencv()
    if code not in (1, 3) or img.dtype != np.uint8:
        return cv2.warpAffine(img, m, size, flags=code, borderMode=cv2.BORDER_CONSTANT, borderValue=border(fill))
    w, h = size
    src = img if img.ndim == 3 else img[:, :, None]
    rows, cols, channels = src.shape
    m0, m1, m2, m3, m4, m5 = (float(v) for v in np.asarray(m, dtype=np.float64).reshape(6))
    det = m0 * m4 - m1 * m3
    det = 1.0 / det if det != 0 else 0.0
    a11, a22 = m4 * det, m0 * det
    m0, m1, m3, m4 = a11, m1 * -det, m3 * -det, a22
    m2, m5 = -m0 * m2 - m1 * m5, -m3 * m2 - m4 * m5
    xs, ys = np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64)
    adelta, bdelta = np.rint(m0 * xs * 1024).astype(np.int64), np.rint(m3 * xs * 1024).astype(np.int64)
    x0, y0 = np.rint((m1 * ys + m2) * 1024).astype(np.int64) + 16, np.rint((m4 * ys + m5) * 1024).astype(np.int64) + 16
    big_x, big_y = (x0[:, None] + adelta[None, :]) >> 5, (y0[:, None] + bdelta[None, :]) >> 5
    sx, sy = np.clip(big_x >> 5, -32768, 32767), np.clip(big_y >> 5, -32768, 32767)
    fx, fy = big_x & 31, big_y & 31
    weights = ((32 - fy) * (32 - fx) * 32, (32 - fy) * fx * 32, fy * (32 - fx) * 32, fy * fx * 32)
    cval = np.array(border(fill)[:channels], dtype=np.int64).clip(0, 255)
    total = np.zeros((h, w, channels), dtype=np.int64)
    for weight, (dy, dx) in zip(weights, ((0, 0), (0, 1), (1, 0), (1, 1))):
        yy, xx = sy + dy, sx + dx
        inside = (yy >= 0) & (yy < rows) & (xx >= 0) & (xx < cols)
        values = np.where(inside[:, :, None], src[np.clip(yy, 0, rows - 1), np.clip(xx, 0, cols - 1)], cval)
        total += weight[:, :, None] * values
    out = np.clip((total + (1 << 14)) >> 15, 0, 255).astype(np.uint8)
    outside = (sx >= cols) | (sx + 1 < 0) | (sy >= rows) | (sy + 1 < 0)
    out[outside] = cval
    return out if img.ndim == 3 else out[:, :, 0]


def saturate_u8(x: np.ndarray) -> np.ndarray:
    """OpenCV's ``saturate_cast<uchar>`` of float values: rounded to nearest (even), clipped."""
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)

