"""A deterministic, synthetic image folder to try, test and benchmark im2rec on.

    python -m im2rec.synthetic OUT_DIR [--classes 20] [--per-class 50] [--size imagenet|large|small] [--seed 0]
    python -m im2rec.synthetic OUT_DIR --faces [--identities 20] [--per-identity 10] [--seed 0]

Writes ``OUT_DIR/class_0000/img_0000_00000.jpg`` ..., one sub-folder per class, as
``im2rec list`` expects. The pictures are generated, not copied: each class has its
own palette, each image a smooth background of several octaves of noise, a few
soft-edged shapes, texture and sensor-like grain, so that JPEG sizes and decode
costs are those of photos rather than of flat test patterns.

With ``--faces``, what the README's face-recognition commands start from, as
112x112 face-like JPEGs (a person keeps colours and proportions; background, pose,
expression and light change): ``OUT_DIR/faces/person_0000/face_0000_00000.jpg`` ...,
one sub-folder per identity, and ``OUT_DIR/pairs.tsv``, verification pairs over them
for ``im2rec bin build``; then, of other people, a miniature of insightface's
MS1M-ArcFace download: ``OUT_DIR/faces_emore/train.rec``, ``train.idx`` and
``property`` in insightface's layout (as many identities and faces), and the
verification sets ``lfw.bin``, ``cfp_fp.bin`` and ``agedb_30.bin`` (20 pairs each).

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
import functools
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..faces import LayoutResult, convert
from ..fsutil import atomic_open
from ..image import opencv
from ..recordio import IRHeader, RecordWriter, pack
from ..verification import build_bin

__all__ = ["SIZES", "CorpusSpec", "FaceSpec", "FacesResult", "make_corpus", "make_face", "make_faces", "make_image"]

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

    def files(self) -> Iterator[tuple[int, int, str]]:
        """``(class, number, relative path)`` of every image, in order."""
        for c in range(self.classes):
            for i in range(self.per_class):
                yield c, i, f"class_{c:04d}/img_{c:04d}_{i:05d}.jpg"


def _colours(rng: np.random.Generator, n: int, hue: tuple[int, int], sat: tuple[int, int], val: tuple[int, int]) -> np.ndarray:
    """``n`` BGR float32 colours drawn in the HSV ranges ``[lo, hi)`` (OpenCV's hue: 0..179)."""
    hsv = np.stack([rng.integers(*hue, n), rng.integers(*sat, n), rng.integers(*val, n)], axis=1).astype(np.uint8)
    return opencv().cvtColor(hsv[None], opencv().COLOR_HSV2BGR)[0].astype(np.float32)


def _palette(seed: int, cls: int) -> np.ndarray:
    """Four BGR colours shared by every image of a class."""
    return _colours(np.random.default_rng([seed, cls, 0xC01]), 4, (0, 180), (60, 230), (60, 250))


def _octaves(rng: np.random.Generator, h: int, w: int, channels: int, levels: int, decay: float) -> np.ndarray:
    """Value noise summed over octaves (coarse to fine), about zero mean, unit-ish amplitude."""
    cv2 = opencv()
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


def _ellipse(mask: np.ndarray, ox: int, oy: int, *, centre: tuple[int, int], axes: tuple[int, int], angle: float) -> None:
    opencv().ellipse(mask, (centre[0] - ox, centre[1] - oy), axes, angle, 0, 360, 1.0, -1, opencv().LINE_AA)


def _polygon(mask: np.ndarray, ox: int, oy: int, *, pts: np.ndarray) -> None:
    opencv().fillPoly(mask, [pts - np.array([ox, oy], np.int32)], 1.0, opencv().LINE_AA)


def _blend(
    img: np.ndarray,
    box: tuple[int, int, int, int],
    draw: Callable[[np.ndarray, int, int], object],
    sigma: float,
    shade: Callable[[int, int, int, int], np.ndarray],
) -> None:
    """Paint a soft-edged shape into ``img`` (float32, in place), working within ``box`` only.

    ``draw(mask, x0, y0)`` fills the shape with 1.0 in a mask whose top-left corner is
    ``(x0, y0)`` of the image; the mask is blurred by ``sigma``, and
    ``shade(y0, y1, x0, x1)`` gives the colour (or pixels) blended in. Neither is
    called when ``box`` lies outside the image.
    """
    cv2 = opencv()
    x0, y0 = max(0, int(box[0])), max(0, int(box[1]))
    x1, y1 = min(img.shape[1], int(box[2])), min(img.shape[0], int(box[3]))
    if x1 <= x0 or y1 <= y0:
        return
    mask = np.zeros((y1 - y0, x1 - x0), np.float32)
    draw(mask, x0, y0)
    mask = cv2.GaussianBlur(mask, (0, 0), sigma)[..., None]
    img[y0:y1, x0:x1] += mask * (shade(y0, y1, x0, x1) - img[y0:y1, x0:x1])


def _grain(img: np.ndarray, rng: np.random.Generator, fine: float, grain: float) -> None:
    """Full-resolution detail, in place: fine texture, then sensor-like grain; what makes JPEG sizes photo-like."""
    cv2 = opencv()
    h, w = img.shape[:2]
    texture = rng.standard_normal((h // 2 + 1, w // 2 + 1), dtype=np.float32)
    img += fine * cv2.resize(texture, (w, h), interpolation=cv2.INTER_LINEAR)[..., None]
    img += grain * rng.standard_normal((h, w, 3), dtype=np.float32)


def _background(rng: np.random.Generator, colors: np.ndarray, h: int, w: int) -> np.ndarray:
    """A smooth float32 background: the first two ``colors`` blended by noise, with colour noise on top."""
    mix = _octaves(rng, h, w, 1, 5, 0.6)[..., 0]
    t = (np.tanh(mix) + 1) / 2  # 0..1, the blend of two palette colours
    img = colors[0] * t[..., None] + colors[1] * (1 - t[..., None])
    img += 25 * _octaves(rng, h, w, 3, 6, 0.7)
    return img


def make_image(spec: CorpusSpec, cls: int, number: int) -> np.ndarray:
    """The BGR uint8 pixels of image ``number`` of class ``cls``."""
    cv2 = opencv()
    rng = np.random.default_rng([spec.seed, cls, number])
    lo, hi = SIZES[spec.size]
    short = int(rng.integers(lo, hi + 1))
    long_ = int(short * rng.uniform(4 / 3 * 0.95, 1.5))
    h, w = (short, long_) if rng.random() < 0.7 else (long_, short)  # mostly landscape, as photos are
    colors = _palette(spec.seed, cls)

    # The smooth parts are drawn at a shorter side of WORK_SIDE pixels, then enlarged: the
    # cost of an image is then mostly its full-size grain, whatever its size.
    sh, sw = max(8, round(h * WORK_SIDE / short)), max(8, round(w * WORK_SIDE / short))
    img = _background(rng, colors, sh, sw)
    texture = 30 * _octaves(rng, sh, sw, 3, 4, 0.8)  # the objects' own, shared
    for _ in range(int(rng.integers(3, 9))):  # soft-edged objects
        sigma = float(rng.uniform(1, 6))
        margin = int(3 * sigma) + 2
        if rng.random() < 0.6:
            cx, cy = int(rng.integers(0, sw)), int(rng.integers(0, sh))
            axes = (int(rng.integers(sw // 12, sw // 3)), int(rng.integers(sh // 12, sh // 3)))
            reach = max(axes) + margin
            box = (cx - reach, cy - reach, cx + reach + 1, cy + reach + 1)
            angle = float(rng.uniform(0, 180))
            draw = functools.partial(_ellipse, centre=(cx, cy), axes=axes, angle=angle)
        else:
            pts = rng.integers(0, [sw, sh], size=(int(rng.integers(3, 7)), 2)).astype(np.int32)
            (x0, y0), (x1, y1) = pts.min(axis=0) - margin, pts.max(axis=0) + margin + 1
            box = (x0, y0, x1, y1)
            draw = functools.partial(_polygon, pts=pts)
        _blend(img, box, draw, sigma, lambda y0, y1, x0, x1: colors[int(rng.integers(2, 4))] + texture[y0:y1, x0:x1])
    img = cv2.resize(img, (w, h), interpolation=cv2.INTER_CUBIC)
    _grain(img, rng, 14, 3)
    return np.clip(img, 0, 255).astype(np.uint8)


def _jpeg(img: np.ndarray, rng: np.random.Generator) -> bytes:
    """``img`` as a JPEG of quality 85-95, one in five progressive, as photos come."""
    cv2 = opencv()
    params = [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(85, 96))]
    if rng.random() < 0.2:
        params += [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]
    ok, buf = cv2.imencode(".jpg", img, params)
    assert ok
    return buf.tobytes()


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_open(path, "wb") as f:
        f.write(data)


def _encode(args: tuple[CorpusSpec, int, int, str, str]) -> int:
    spec, cls, number, rel, out_dir = args
    data = _jpeg(make_image(spec, cls, number), np.random.default_rng([spec.seed, cls, number, 0xE1C]))
    _write(os.path.join(out_dir, rel), data)
    return len(data)


def _one_thread() -> None:
    opencv().setNumThreads(1)  # one process per core: OpenCV's own threads would only contend


def make_corpus(out_dir: str, spec: CorpusSpec = CorpusSpec(), workers: int | None = None) -> tuple[int, int]:
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


# --------------------------------------------------------------------------- faces

FACE_SIDE = 112  # insightface's aligned crops
FACES_DIR = "faces"  # your own faces: one folder per identity
PAIRS_FILE = "pairs.tsv"  # verification pairs over FACES_DIR, for `im2rec bin build`
TRAIN_DIR = "faces_emore"  # what insightface publishes: train.rec/.idx, property, .bin sets
BINS = ("lfw", "cfp_fp", "agedb_30")

# Which people a face shows: the folder's, the training set's and each .bin's are different people.
_FOLDER, _TRAIN, _VERIFY = 0, 1, 2


@dataclass(frozen=True)
class FaceSpec:
    """What ``make_faces`` builds."""

    identities: int = 20
    per_identity: int = 10
    seed: int = 0
    pairs: int = 20  # of each .bin and of PAIRS_FILE; half same, half different where possible

    def files(self) -> Iterator[tuple[int, int, str]]:
        """``(identity, number, path relative to FACES_DIR)`` of every face of the folder, in order."""
        for p in range(self.identities):
            for i in range(self.per_identity):
                yield p, i, f"person_{p:04d}/face_{p:04d}_{i:05d}.jpg"


def make_face(spec: FaceSpec, identity: int, number: int, cohort: int = _FOLDER) -> np.ndarray:
    """The BGR uint8 pixels (112x112) of face ``number`` of ``identity``, an aligned crop as insightface's.

    An identity keeps its skin, hair, eye and lip colours and its proportions; each
    picture has its own background, pose, expression, light and grain. ``cohort``
    picks another set of people (0: the folder, 1: the training set, 2...: the ``.bin`` sets).
    """
    cv2 = opencv()
    traits = np.random.default_rng([spec.seed, cohort, identity, 0xFACE])
    rng = np.random.default_rng([spec.seed, cohort, identity, number])
    skin, lips = _colours(traits, 1, (4, 22), (40, 150), (100, 240))[0], _colours(traits, 1, (0, 8), (90, 170), (90, 200))[0]
    hair, iris = _colours(traits, 1, (0, 30), (20, 180), (15, 170))[0], _colours(traits, 1, (0, 120), (40, 200), (30, 110))[0]
    fw, fh, cy = traits.uniform(33, 41), traits.uniform(44, 52), traits.uniform(6, 10)  # face half-width, half-height, centre
    ex, ey, ew = traits.uniform(16, 19), traits.uniform(-6, -2), traits.uniform(6, 8.5)  # eyes: half-distance, height, size
    eh, brow, brow_t = ew * traits.uniform(0.45, 0.6), traits.uniform(7, 10), traits.uniform(1.5, 3)
    nose_y, nose_w = traits.uniform(14, 19), traits.uniform(5, 8)
    mouth_y, mouth_w = traits.uniform(31, 37), traits.uniform(10, 15)
    hair_t, long_hair, bald = traits.uniform(4, 12), traits.random() < 0.3, traits.random() < 0.1

    n = FACE_SIDE
    img = _background(rng, _colours(rng, 2, (0, 180), (10, 160), (40, 230)), n, n)
    skin_texture = 8 * _octaves(rng, n, n, 3, 4, 0.7)
    hair_texture = 25 * _octaves(rng, n, n, 1, 5, 0.8)  # strands: light and dark, not coloured
    theta = np.deg2rad(rng.normal(0, 5))  # what alignment leaves: a little roll, scale and shift
    scale = rng.uniform(0.92, 1.08)
    shift = n / 2 + rng.normal(0, 2.5, 2)
    yaw, gaze, mouth_open = rng.normal(0, 3), rng.normal(0, 1.5), rng.uniform(0.8, 6)
    rot = scale * np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])

    def oval(x: float, y: float, ax: float, ay: float, sigma: float, shade: Callable[[int, int, int, int], np.ndarray], tilt: float = 0.0) -> None:
        px, py = rot @ (x, y) + shift
        axes = (round(scale * ax * 16), round(scale * ay * 16))  # 4 fractional bits (shift=4): sub-pixel shapes
        reach = scale * max(ax, ay) + 3 * sigma + 2
        angle = np.rad2deg(theta) + tilt

        def draw(m: np.ndarray, ox: int, oy: int) -> None:
            cv2.ellipse(m, (round((px - ox) * 16), round((py - oy) * 16)), axes, angle, 0, 360, 1.0, -1, cv2.LINE_AA, 4)

        _blend(img, (int(px - reach), int(py - reach), int(px + reach) + 1, int(py + reach) + 1), draw, sigma, shade)

    def colour(c: np.ndarray) -> Callable[[int, int, int, int], np.ndarray]:
        return lambda y0, y1, x0, x1: c

    def textured(c: np.ndarray, texture: np.ndarray) -> Callable[[int, int, int, int], np.ndarray]:
        return lambda y0, y1, x0, x1: c + texture[y0:y1, x0:x1]

    if not bald:
        oval(0, cy - fh * 0.25 + (12 if long_hair else 0), fw + hair_t * 0.8, fh * 0.8 + hair_t + (14 if long_hair else 0), 2.0, textured(hair, hair_texture))
    oval(0, cy + fh + 10, fw * 0.6, 20, 2.0, colour(skin * 0.85))  # neck
    oval(0, cy, fw, fh, 1.5, textured(skin, skin_texture))
    if not bald:
        oval(0, cy - fh + hair_t * 0.5, fw, hair_t + 6, 1.5, textured(hair, hair_texture))
    for side in (-1, 1):
        oval(side * ex + yaw, ey - brow, ew * 1.2, brow_t, 1.0, colour(hair * 0.8), tilt=side * -8)
        oval(side * ex + yaw, ey, ew, eh, 0.8, colour(0.3 * skin + 0.7 * np.float32(230)))
        oval(side * ex + yaw + gaze, ey, eh * 0.9, eh * 0.9, 0.6, colour(iris))
    oval(yaw * 1.2, (ey + nose_y) / 2 + 2, nose_w * 0.5, (nose_y - ey) / 2, 2.5, colour(skin * 0.8))
    oval(yaw * 1.3, nose_y, nose_w, 3, 1.5, colour(skin * 0.7))
    oval(yaw * 0.8, mouth_y, mouth_w, mouth_open, 1.0, colour(lips))
    if mouth_open > 2.5:
        oval(yaw * 0.8, mouth_y, mouth_w * 0.7, mouth_open * 0.5, 0.8, colour(np.array([40, 30, 40], np.float32)))

    light = rng.uniform(0.7, 1.25) * (1 + rng.uniform(-0.25, 0.25) * np.linspace(-1, 1, n, dtype=np.float32))
    img *= light[None, :, None]  # brighter on one side
    _grain(img, rng, 5, 3)
    return np.clip(img, 0, 255).astype(np.uint8)


def _face_jpeg(spec: FaceSpec, identity: int, number: int, cohort: int) -> bytes:
    return _jpeg(make_face(spec, identity, number, cohort), np.random.default_rng([spec.seed, cohort, identity, number, 0xE1C]))


def _pairs(rng: np.random.Generator, identities: int, per_identity: int, count: int) -> list[tuple[tuple[int, int], tuple[int, int], bool]]:
    """``count`` pairs of ``(identity, number)``, alternately of one person and of two,
    as far as the sizes allow (one identity: every pair is of one person)."""
    pairs = []
    for p in range(count):
        same = identities == 1 or (p % 2 == 0 and per_identity > 1)
        if same:
            a = int(rng.integers(identities))
            i, j = (int(x) for x in rng.choice(per_identity, 2, replace=False)) if per_identity > 1 else (0, 0)
            pairs.append(((a, i), (a, j), True))
        else:
            a, b = (int(x) for x in rng.choice(identities, 2, replace=False))
            pairs.append(((a, int(rng.integers(per_identity))), (b, int(rng.integers(per_identity))), False))
    return pairs


def _pair_lines(pairs: Sequence[tuple[tuple[int, int], tuple[int, int], bool]], name: Callable[[int, int], str]) -> str:
    return "".join(f"{name(*a)}\t{name(*b)}\t{int(same)}\n" for a, b, same in pairs)


@dataclass(frozen=True)
class FacesResult:
    """What ``make_faces`` wrote."""

    faces: int  # images in FACES_DIR
    train: LayoutResult  # TRAIN_DIR/train.rec
    bins: tuple[str, ...]  # the .bin files
    pairs: str  # PAIRS_FILE


def make_faces(out_dir: str, spec: FaceSpec = FaceSpec()) -> FacesResult:
    """Write a small stand-in for a face-recognition set under ``out_dir`` (files there are replaced).

    * ``faces/person_0000/face_0000_00000.jpg`` ...: ``spec.identities`` folders of
      ``spec.per_identity`` 112x112 JPEGs, your own faces as ``im2rec list`` takes them;
    * ``pairs.tsv``: ``spec.pairs`` ``left TAB right TAB issame`` lines over ``faces/``,
      as ``im2rec bin build`` takes them;
    * ``faces_emore/train.rec``, ``train.idx``, ``property``: other people, as many,
      in insightface's layout (as in MS1M-ArcFace's ``faces_emore``), laid out by
      ``faces.convert``; ``faces_emore/lfw.bin``, ``cfp_fp.bin``, ``agedb_30.bin``:
      ``spec.pairs`` pairs each of yet other people, written by ``verification.build_bin``.

    Returns:
        What was written.

    Raises:
        ValueError: ``identities`` or ``per_identity`` below 1, or ``pairs`` below 1.
    """
    if spec.identities < 1 or spec.per_identity < 1 or spec.pairs < 1:
        raise ValueError(f"identities, per-identity and pairs must be at least 1, got {spec.identities}, {spec.per_identity}, {spec.pairs}")
    os.makedirs(out_dir, exist_ok=True)
    folder = os.path.join(out_dir, FACES_DIR)
    for p, i, rel in spec.files():
        _write(os.path.join(folder, rel), _face_jpeg(spec, p, i, _FOLDER))
    names = {(p, i): rel for p, i, rel in spec.files()}
    pairs = _pairs(np.random.default_rng([spec.seed, _FOLDER, 0xB1]), spec.identities, spec.per_identity, spec.pairs)
    pairs_path = os.path.join(out_dir, PAIRS_FILE)
    with atomic_open(pairs_path, "w", encoding="utf-8", newline="\n") as f:
        f.write(_pair_lines(pairs, lambda p, i: names[p, i]))

    train_dir = os.path.join(out_dir, TRAIN_DIR)
    bins = []
    with tempfile.TemporaryDirectory(prefix=".synthetic-", dir=out_dir) as tmp:
        plain = os.path.join(tmp, "plain.rec")
        with RecordWriter(plain, os.path.join(tmp, "plain.idx")) as writer:
            for key, (p, i, _) in enumerate(spec.files()):
                writer.write_idx(key, pack(IRHeader(0, float(p), key, 0), _face_jpeg(spec, p, i, _TRAIN)))
        train = convert(plain, os.path.join(train_dir, "train.rec"), "insightface", overwrite=True)
        for b, name in enumerate(BINS):
            cohort = _VERIFY + b
            # as many people as pairs, two pictures each: half the pairs of one person, half of two
            bin_pairs = _pairs(np.random.default_rng([spec.seed, cohort, 0xB1]), max(2, spec.pairs), 2, spec.pairs)
            root = os.path.join(tmp, name)
            for p, i in sorted({face for pair in bin_pairs for face in pair[:2]}):
                _write(os.path.join(root, f"{p:04d}_{i}.jpg"), _face_jpeg(spec, p, i, cohort))
            tsv = os.path.join(root, PAIRS_FILE)
            with open(tsv, "w", encoding="utf-8", newline="\n") as f:
                f.write(_pair_lines(bin_pairs, lambda p, i: f"{p:04d}_{i}.jpg"))
            bins.append(build_bin(tsv, root, os.path.join(train_dir, f"{name}.bin"), overwrite=True).path)
    return FacesResult(spec.identities * spec.per_identity, train, tuple(bins), pairs_path)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m im2rec.synthetic",
        description="\n\n".join(__doc__.split("\n\n")[2:4]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("out", help="the folder to fill (created if missing)")
    ap.add_argument("--classes", type=_positive, default=None, help="[default: 20]")
    ap.add_argument("--per-class", type=_positive, default=None, help="[default: 50]")
    ap.add_argument("--size", choices=sorted(SIZES), default=None, help="[default: imagenet]")
    ap.add_argument("--faces", action="store_true", help="face-recognition inputs instead of a class folder (see above)")
    ap.add_argument("--identities", type=_positive, default=None, help="--faces: people in faces/, and other people in faces_emore/train.rec [default: 20]")
    ap.add_argument("--per-identity", type=_positive, default=None, help="--faces: pictures of each [default: 10]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=_positive, default=None, help="processes [default: every core]; not with --faces, which takes a few seconds in one")
    args = ap.parse_args(argv)
    if "://" in args.out:
        ap.error(f"{args.out!r} is a URL: the generator writes a local folder (upload it afterwards, e.g. with `aws s3 sync`)")
    if args.faces:
        given = [f"--{name.replace('_', '-')}" for name in ("classes", "per_class", "size", "workers") if getattr(args, name) is not None]
        if given:
            ap.error(f"{', '.join(given)}: not with --faces (--identities and --per-identity size a face set)")
        face_spec = FaceSpec(20 if args.identities is None else args.identities, 10 if args.per_identity is None else args.per_identity, args.seed)
        try:
            result = make_faces(args.out, face_spec)
        except ValueError as e:
            ap.error(str(e))
        print(
            f"wrote {result.faces:,} faces of {face_spec.identities:,} identities to {os.path.join(args.out, FACES_DIR)} "
            f"(pairs: {result.pairs}); {result.train.images:,} faces of {result.train.identities:,} other identities "
            f"to {result.train.rec} (insightface layout), and {', '.join(result.bins)}",
            file=sys.stderr,
        )
        return
    if args.identities is not None or args.per_identity is not None:
        ap.error("--identities and --per-identity go with --faces (a class folder takes --classes and --per-class)")
    args.classes = 20 if args.classes is None else args.classes
    args.per_class = 50 if args.per_class is None else args.per_class
    spec = CorpusSpec(args.classes, args.per_class, args.size or "imagenet", args.seed)
    written, size = make_corpus(args.out, spec, args.workers)
    total = args.classes * args.per_class
    print(f"wrote {written:,} of {total:,} images ({size / 1e6:,.1f} MB) in {args.classes} classes to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
