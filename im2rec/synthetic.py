"""A deterministic, synthetic image folder to try, test and benchmark im2rec on.

    python -m im2rec.synthetic OUT_DIR [--classes 20] [--per-class 50] [--size imagenet|large] [--seed 0]

Writes ``OUT_DIR/class_0000/img_0000_00000.jpg`` ..., one sub-folder per class, as
``im2rec list`` expects. The pictures are generated, not copied: each class has its
own palette, each image a smooth background of several octaves of noise, a few
soft-edged shapes, texture and sensor-like grain, so that JPEG sizes and decode
costs are those of photos rather than of flat test patterns.

``--size imagenet``: shorter side 300-500 px, aspect 3:4 to 3:2 (ImageNet's train set
is mostly 500x375 and 375x500); ``--size large``: shorter side 1500-3000 px
(phone-camera photos). Saved as JPEG, quality 85-95, one in five progressive.

The same arguments give the same pixels: every image is drawn from its own seed
(the run's seed, its class, its number), so a folder can be built in parallel or
extended without changing what is there. (The JPEG bytes also depend on the
OpenCV build that encodes them.)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence, Tuple

import numpy as np

from .fsutil import atomic_open
from .image import _cv2

__all__ = ["SIZES", "CorpusSpec", "make_image", "make_corpus"]

#: Shorter side range of each ``--size``, in pixels.
SIZES = {"imagenet": (300, 500), "large": (1500, 3000), "small": (48, 96)}
WORK_SIDE = 192


@dataclass(frozen=True)
class CorpusSpec:
    """What ``make_corpus`` builds."""

    classes: int = 20
    per_class: int = 50
    size: str = "imagenet"
    seed: int = 0

    def files(self) -> Iterator[Tuple[int, int, str]]:
        """``(class, number, relative path)`` of every image, in order."""
        for c in range(self.classes):
            for i in range(self.per_class):
                yield c, i, f"class_{c:04d}/img_{c:04d}_{i:05d}.jpg"


def _palette(seed: int, cls: int) -> np.ndarray:
    """Four BGR colours shared by every image of a class."""
    rng = np.random.default_rng([seed, cls, 0xC01])
    hsv = np.stack([rng.integers(0, 180, 4), rng.integers(60, 230, 4), rng.integers(60, 250, 4)], axis=1).astype(np.uint8)
    return _cv2().cvtColor(hsv[None], _cv2().COLOR_HSV2BGR)[0].astype(np.float32)


def _octaves(rng: np.random.Generator, h: int, w: int, channels: int, levels: int, decay: float) -> np.ndarray:
    """Value noise summed over octaves (coarse to fine), about zero mean, unit-ish amplitude."""
    cv2 = _cv2()
    out = np.zeros((h, w, channels), np.float32)
    amp = 1.0
    for level in range(levels):
        cells = 2 << level
        gh, gw = max(2, cells * h // max(h, w)), max(2, cells * w // max(h, w))
        grid = rng.standard_normal((gh, gw, channels)).astype(np.float32)
        layer = cv2.resize(grid, (w, h), interpolation=cv2.INTER_CUBIC)
        out += amp * layer.reshape(h, w, channels)
        amp *= decay
    return out


def make_image(spec: CorpusSpec, cls: int, number: int) -> np.ndarray:
    """The BGR uint8 pixels of image ``number`` of class ``cls``."""
    cv2 = _cv2()
    rng = np.random.default_rng([spec.seed, cls, number])
    lo, hi = SIZES[spec.size]
    short = int(rng.integers(lo, hi + 1))
    long_ = int(short * rng.uniform(4 / 3 * 0.95, 1.5))
    h, w = (short, long_) if rng.random() < 0.7 else (long_, short)  # mostly landscape, as photos are
    colors = _palette(spec.seed, cls)

    # The smooth parts are drawn at a shorter side of WORK_SIDE pixels, then enlarged: the
    # cost of an image is then mostly its full-size grain, whatever its size.
    sh, sw = max(8, round(h * WORK_SIDE / short)), max(8, round(w * WORK_SIDE / short))
    mix = _octaves(rng, sh, sw, 1, 5, 0.6)[..., 0]
    t = (np.tanh(mix) + 1) / 2  # 0..1, the blend of two palette colours
    img = colors[0] * t[..., None] + colors[1] * (1 - t[..., None])
    img += 25 * _octaves(rng, sh, sw, 3, 6, 0.7)
    texture = 30 * _octaves(rng, sh, sw, 3, 4, 0.8)  # the objects' own, shared
    for _ in range(int(rng.integers(3, 9))):  # soft-edged objects, blended within their bounding box
        sigma = float(rng.uniform(1, 6))
        margin = int(3 * sigma) + 2
        if rng.random() < 0.6:
            cx, cy = int(rng.integers(0, sw)), int(rng.integers(0, sh))
            axes = (int(rng.integers(sw // 12, sw // 3)), int(rng.integers(sh // 12, sh // 3)))
            reach = max(axes) + margin
            x0, y0, x1, y1 = cx - reach, cy - reach, cx + reach + 1, cy + reach + 1
            angle = float(rng.uniform(0, 180))
            draw = lambda m, ox, oy: cv2.ellipse(m, (cx - ox, cy - oy), axes, angle, 0, 360, 1.0, -1, cv2.LINE_AA)  # noqa: E731
        else:
            pts = rng.integers(0, [sw, sh], size=(int(rng.integers(3, 7)), 2)).astype(np.int32)
            (x0, y0), (x1, y1) = pts.min(axis=0) - margin, pts.max(axis=0) + margin + 1
            draw = lambda m, ox, oy: cv2.fillPoly(m, [pts - np.int32([ox, oy])], 1.0, cv2.LINE_AA)  # noqa: E731
        x0, y0, x1, y1 = max(0, int(x0)), max(0, int(y0)), min(sw, int(x1)), min(sh, int(y1))
        if x1 <= x0 or y1 <= y0:
            continue
        mask = np.zeros((y1 - y0, x1 - x0), np.float32)
        draw(mask, x0, y0)
        mask = cv2.GaussianBlur(mask, (0, 0), sigma)[..., None]
        shade = colors[int(rng.integers(2, 4))] + texture[y0:y1, x0:x1]
        img[y0:y1, x0:x1] += mask * (shade - img[y0:y1, x0:x1])
    img = cv2.resize(img, (w, h), interpolation=cv2.INTER_CUBIC)
    # Full-resolution detail: fine texture, then grain; what makes JPEG sizes photo-like.
    fine = rng.standard_normal((h // 2 + 1, w // 2 + 1), dtype=np.float32)
    img += 14 * cv2.resize(fine, (w, h), interpolation=cv2.INTER_LINEAR)[..., None]
    img += 3 * rng.standard_normal((h, w, 3), dtype=np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def _encode(args: Tuple[CorpusSpec, int, int, str, str]) -> int:
    spec, cls, number, rel, out_dir = args
    cv2 = _cv2()
    rng = np.random.default_rng([spec.seed, cls, number, 0xE1C])
    params = [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(85, 96))]
    if rng.random() < 0.2:
        params += [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]
    ok, buf = cv2.imencode(".jpg", make_image(spec, cls, number), params)
    assert ok
    path = os.path.join(out_dir, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_open(path, "wb") as f:
        f.write(buf.tobytes())
    return len(buf)


def _one_thread() -> None:
    _cv2().setNumThreads(1)  # one process per core: OpenCV's own threads would only contend


def make_corpus(out_dir: str, spec: CorpusSpec = CorpusSpec(), workers: Optional[int] = None) -> Tuple[int, int]:
    """Write the corpus of ``spec`` under ``out_dir``, skipping images already there.

    Returns:
        ``(images written, bytes written)``.
    """
    if spec.size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {spec.size!r}")
    todo = [(spec, c, i, rel, out_dir) for c, i, rel in spec.files() if not os.path.exists(os.path.join(out_dir, rel))]
    if workers == 1 or len(todo) < 8:
        sizes = [_encode(t) for t in todo]
    else:
        # Spawned, not forked: a fork of a process that has used OpenCV's thread pool can hang.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_one_thread) as pool:
            sizes = list(pool.map(_encode, todo, chunksize=16))
    return len(sizes), sum(sizes)


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m im2rec.synthetic", description=__doc__.split("\n\n")[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the folder to fill (created if missing)")
    ap.add_argument("--classes", type=int, default=20)
    ap.add_argument("--per-class", type=int, default=50)
    ap.add_argument("--size", choices=sorted(SIZES), default="imagenet")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None, help="processes [default: every core]")
    args = ap.parse_args(argv)
    spec = CorpusSpec(args.classes, args.per_class, args.size, args.seed)
    written, size = make_corpus(args.out, spec, args.workers)
    total = args.classes * args.per_class
    print(f"wrote {written:,} of {total:,} images ({size / 1e6:,.1f} MB) in {args.classes} classes to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
