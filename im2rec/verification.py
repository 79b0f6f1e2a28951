"""insightface's ``.bin`` verification sets (``lfw.bin``, ``cfp_fp.bin``, ``agedb_30.bin``), read safely.

A ``.bin`` is a pickle of ``(images, issame)``: images ``2i`` and ``2i+1`` form pair
``i``, and ``issame[i]`` says whether they show the same person. The images are
encoded files: Python 2 ``str`` in the published sets (pickled by Python 2),
``bytes`` in newer ones, or numpy uint8 arrays in those made by insightface's
eval-pack scripts.

Unpickling runs code: insightface's ``load_bin`` is a plain ``pickle.load``, so a
crafted ``.bin`` runs whatever it names. Here no ``.bin`` is ever given to
``pickle.load``: a restricted unpickler accepts only what these files contain
(tuples, lists, bytes and strings, bools and ints, and the three numpy globals that
rebuild a plain array) and refuses anything else before it is called.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import BinFormatError, Im2recError, ImageError, OutputExistsError
from .fsutil import atomic_open, make_parents
from .image import Damaged, ImageOptions, decode, encode, image_format, imdecode_checked, opencv

__all__ = ["VerificationPairs", "build_bin", "extract_bin", "load_bin", "read_pairs"]


def _numpy_globals() -> dict:
    try:  # numpy 2 moved numpy.core to numpy._core; pickles written by numpy 1 name the old module
        from numpy._core import multiarray
    except ImportError:  # numpy 1
        from numpy.core import multiarray  # type: ignore[no-redef]
    reconstruct = multiarray._reconstruct
    return {
        ("numpy.core.multiarray", "_reconstruct"): reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }


class _SafeUnpickler(pickle.Unpickler):
    """An unpickler that can build only what a ``.bin`` holds; any other global is refused."""

    def __init__(self, f: Any, path: str):
        super().__init__(f, encoding="bytes")  # Python 2 str -> bytes, as load_bin's fallback
        self._path = path
        self._allowed = _numpy_globals()

    def find_class(self, module: str, name: str) -> Any:
        found = self._allowed.get((module, name))
        if found is None:
            raise BinFormatError(
                f"{self._path}: refused: the pickle asks for {module}.{name}, which a verification set never needs; "
                f"loading it with pickle.load would run it (nothing was run)"
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise BinFormatError(f"{self._path}: refused: the pickle uses persistent ids, which a verification set never needs")


def _as_image_bytes(item: Any, path: str, i: int) -> bytes:
    if isinstance(item, (bytes, bytearray)):
        return bytes(item)
    if isinstance(item, np.ndarray):
        if item.dtype != np.uint8:
            raise BinFormatError(f"{path}: image {i} is a numpy array of {item.dtype}, not uint8 encoded bytes")
        return item.tobytes()
    if isinstance(item, str):  # a Python 2 str unpickled as text: its code points are the bytes
        try:
            return item.encode("latin-1")
        except UnicodeEncodeError:
            pass
    raise BinFormatError(f"{path}: image {i} is a {type(item).__name__}, not encoded image bytes")


def load_bin(path: str) -> tuple[list[bytes], list[bool]]:
    """``(images, issame)`` of a ``.bin``: encoded images as bytes, one bool per pair.

    Raises:
        BinFormatError: the file is not a ``(images, issame)`` pickle, holds something
            else than images and bools, or names any global beyond numpy's array
            constructors (such a file is refused before anything in it runs).
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        # First walk the opcodes (pickletools checks each length against the bytes left): the
        # C unpickler allocates what a length field says before it reads, so a damaged one of
        # 2**31 would take gigabytes before the file is found short.
        for _ in pickletools.genops(io.BytesIO(data)):
            pass
        obj = _SafeUnpickler(io.BytesIO(data), path).load()
    except BinFormatError:
        raise
    except Exception as e:  # a truncated or foreign file: pickle raises many kinds
        raise BinFormatError(f"{path}: not a readable verification set pickle: {type(e).__name__}: {e}") from None
    if not (isinstance(obj, (tuple, list)) and len(obj) == 2 and all(isinstance(x, (list, tuple)) for x in obj)):
        raise BinFormatError(f"{path}: expected a pickle of (list of images, list of issame bools), got {type(obj).__name__}")
    raw_images, raw_issame = obj
    images = [_as_image_bytes(item, path, i) for i, item in enumerate(raw_images)]
    issame: list[bool] = []
    for i, value in enumerate(raw_issame):
        if isinstance(value, (bool, np.bool_)) or (isinstance(value, int) and value in (0, 1)):
            issame.append(bool(value))
        else:
            raise BinFormatError(f"{path}: issame[{i}] is {value!r}, not a bool")
    if len(images) != 2 * len(issame):
        raise BinFormatError(f"{path}: {len(images)} images for {len(issame)} pairs; a pair is two images")
    return images, issame


_EXTENSIONS = {"JPEG": ".jpg", "PNG": ".png", "BMP": ".bmp", "WebP": ".webp", "GIF": ".gif", "TIFF": ".tiff"}


@dataclass
class BinResult:
    """What ``extract_bin`` or ``build_bin`` wrote."""

    path: str
    pairs: int
    images: int
    same: int


def extract_bin(path: str, outdir: str, overwrite: bool = False) -> BinResult:
    """Write the images of a ``.bin`` with their original bytes (``OUTDIR/00000.jpg`` ...) and
    ``OUTDIR/pairs.tsv`` (``left TAB right TAB issame``, issame 1 or 0), which ``build_bin`` reads back.

    Raises:
        BinFormatError: as ``load_bin``.
        Im2recError: a file exists without ``overwrite``.
    """
    images, issame = load_bin(path)
    names = [f"{i:05d}{_EXTENSIONS.get(image_format(img[:16]) or '', '.bin')}" for i, img in enumerate(images)]
    pairs = os.path.join(outdir, "pairs.tsv")
    if not overwrite:
        for name in [*names, "pairs.tsv"]:
            if os.path.exists(os.path.join(outdir, name)):
                raise OutputExistsError(os.path.join(outdir, name))
    make_parents(pairs)
    for name, img in zip(names, images):
        with atomic_open(os.path.join(outdir, name), "wb") as f:
            f.write(img)
    with atomic_open(pairs, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(f"{names[2 * i]}\t{names[2 * i + 1]}\t{int(same)}\n" for i, same in enumerate(issame))
    return BinResult(pairs, len(issame), len(images), sum(issame))


def read_pairs(path: str) -> list[tuple[str, str, bool]]:
    """``(left, right, issame)`` of every line of a ``left TAB right TAB issame`` file.

    Raises:
        Im2recError: a malformed line, naming ``file:line``.
    """
    pairs = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            fields = line.rstrip("\r\n").split("\t")
            same = fields[2].strip().lower() if len(fields) == 3 else ""
            if len(fields) != 3 or same not in ("1", "0", "true", "false"):
                raise Im2recError(f"{path}:{lineno}: expected 'left<TAB>right<TAB>issame' with issame 1/0 or true/false, got {line.rstrip()!r}")
            pairs.append((fields[0], fields[1], same in ("1", "true")))
    if not pairs:
        raise Im2recError(f"{path}: no pairs")
    return pairs


def build_bin(pairs_path: str, root: str, out: str, resize: tuple[int, int] | None = None, overwrite: bool = False, quality: int = 95) -> BinResult:
    """Write a ``.bin`` from a pairs file: what insightface's ``load_bin`` reads unchanged.

    Args:
        pairs_path: ``left TAB right TAB issame`` lines, paths relative to ``root``.
        root: the images' folder.
        out: the ``.bin`` to write (pickle protocol 4, images as ``bytes``).
        resize: ``(width, height)``: decode, resize and re-encode every image as JPEG
            (insightface's sets are 112x112); default: the files' bytes unchanged.
        overwrite: replace an existing ``out``.
        quality: JPEG quality when resizing.

    Raises:
        Im2recError: a malformed pairs file, a missing or undecodable image, or an
            existing output without ``overwrite``.
    """
    if os.path.exists(out) and not overwrite:
        raise OutputExistsError(out)
    pairs = read_pairs(pairs_path)
    images: list[bytes] = []
    for lineno, (left, right, _) in enumerate(pairs, 1):
        for name in (left, right):
            file = os.path.join(root, name)
            try:
                with open(file, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise Im2recError(f"{pairs_path}:{lineno}: cannot read {file}: {e.strerror}") from None
            if resize:
                try:
                    img = decode(data, ImageOptions())
                    img = opencv().resize(img, resize, interpolation=opencv().INTER_LINEAR if img.shape[1] < resize[0] else opencv().INTER_AREA)
                    data = encode(img, ImageOptions(quality=quality))
                except ImageError as e:
                    raise Im2recError(f"{pairs_path}:{lineno}: {file}: {e}") from None
            images.append(data)
    make_parents(out)
    with atomic_open(out, "wb") as f:
        pickle.dump((images, [same for _, _, same in pairs]), f, protocol=4)
    return BinResult(out, len(pairs), len(images), sum(same for _, _, same in pairs))


def parse_size(text: str) -> tuple[int, int]:
    """``"112x112"`` -> ``(112, 112)`` (width x height)."""
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"expected WIDTHxHEIGHT such as 112x112, got {text!r}") from None
    if w < 1 or h < 1:
        raise ValueError(f"expected a positive size, got {text!r}")
    return w, h


class VerificationPairs:
    """A ``.bin`` verification set as a dataset of ``(image_a, image_b, issame)``.

    Images are decoded on access, RGB HWC uint8 by default (as ``mx.image.imdecode``
    gave insightface's evaluation), or with ``mode="bgr"``; ``transform`` is applied
    to each image. Works with ``torch.utils.data.DataLoader`` (it pickles as the
    encoded images).

    Args:
        path: the ``.bin``.
        mode: ``"rgb"`` or ``"bgr"``.
        transform: called on each decoded image.

    Raises:
        BinFormatError: as ``load_bin`` (a ``.bin`` that would run code is refused).
    """

    def __init__(self, path: str, mode: str = "rgb", transform: Callable[[np.ndarray], Any] | None = None):
        if mode not in ("rgb", "bgr"):
            raise ValueError(f"mode must be 'rgb' or 'bgr', got {mode!r}")
        self.path, self.mode, self.transform = path, mode, transform
        self.images, issame = load_bin(path)
        self.issame = np.array(issame, dtype=bool)
        self._damaged = Damaged("warn", hint=False)

    def __len__(self) -> int:
        return len(self.issame)

    def _image(self, i: int) -> Any:
        cv2 = opencv()
        checked = imdecode_checked(self.images[i], cv2.IMREAD_COLOR)
        if checked.image is None:
            raise BinFormatError(f"{self.path}: image {i} cannot be decoded" + (f" ({checked.damage})" if checked.damage else ""))
        img = self._damaged.image(f"{self.path}: image {i}", checked, len(self.images[i]))
        if self.mode == "rgb":
            img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        return self.transform(img) if self.transform else img

    def __getitem__(self, i: int) -> tuple[Any, Any, bool]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"pair {i} out of range ({len(self)} pairs)")
        i %= len(self)
        return self._image(2 * i), self._image(2 * i + 1), bool(self.issame[i])
