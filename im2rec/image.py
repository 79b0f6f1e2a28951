"""Per-image work for ``pack``: check, decode, crop, resize and re-encode one image.

OpenCV lives here. ``transform`` follows MXNet's ``tools/im2rec.py``: decode with
the ``--color`` flag (EXIF orientation applied as ``cv2.imread`` does, except for
``-1``), square centre crop (margin ``(long - short) // 2``), then resize so the
shorter edge is ``resize`` and the longer ``long * resize // short``, then encode.

Three things it does beyond im2rec.py:

* a JPEG whose shorter edge is at least 3x the target is decoded at 1/2, 1/4
  or 1/8 scale by libjpeg's DCT scaling (``cv2.IMREAD_REDUCED_*``), which is
  several times faster and, being a proper low-pass, aliases less than a full
  decode followed by a linear resize (``reduced_decode=False`` turns it off);
* bad files are recognised before decoding where possible (empty, not an image,
  truncated JPEG, too many pixels), and every failure raises ImageError with a
  one-line reason instead of crashing the run;
* an image whose alpha channel is not fully opaque is noticed (``Decoded.transparent``):
  ``--color 1`` and ``0`` drop alpha as im2rec.py does, which packs a picture kept in
  the alpha channel as a blank image. The pixels stay im2rec.py's unless
  ``alpha_background`` asks to composite such images over a colour.

Transparency is looked for only where the header says alpha may be there (PNG
colour types 4 and 6 or a tRNS chunk, WebP with its alpha flag, 32-bit BMP, and
formats whose header is not parsed: GIF, TIFF, AVIF, JPEG 2000); JPEGs never
have it. Such a file is decoded a second time with ``IMREAD_UNCHANGED``, except
an 8-bit PNG without EXIF with ``color`` 1, whose colour channels libpng returns
unchanged either way (one decode gives both).
"""

from __future__ import annotations

import logging
import random
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np

from .errors import ImageError, OptionError

log = logging.getLogger(__name__)
_T = TypeVar("_T")


def opencv() -> Any:
    """OpenCV, imported on first use: listing and --pass-through never need it (0.1 s, 30 MB)."""
    import cv2

    return cv2

__all__ = [
    "INTER_METHODS",
    "Decoded",
    "ImageOptions",
    "Transformed",
    "check_passthrough",
    "composite",
    "decode_image",
    "format_color",
    "image_info",
    "parse_color",
    "parse_inter_method",
    "transform",
    "transform_image",
]

#: im2rec.cc's inter_method codes; 0-4 are OpenCV's own INTER_* values.
INTER_METHODS = {
    "nearest": 0,
    "linear": 1,
    "cubic": 2,
    "area": 3,
    "lanczos": 4,
    "auto": 9,
    "random": 10,
}

#: Pillow's default decompression-bomb limit (Image.MAX_IMAGE_PIXELS).
DEFAULT_MAX_PIXELS = 89_478_485

ENCODINGS = (".jpg", ".png")
_REDUCED = {  # (color flag, factor) -> the cv2.IMREAD_REDUCED_* imdecode flag
    (1, 2): 17,  # IMREAD_REDUCED_COLOR_2
    (1, 4): 33,  # IMREAD_REDUCED_COLOR_4
    (1, 8): 65,  # IMREAD_REDUCED_COLOR_8
    (0, 2): 16,  # IMREAD_REDUCED_GRAYSCALE_2
    (0, 4): 32,  # IMREAD_REDUCED_GRAYSCALE_4
    (0, 8): 64,  # IMREAD_REDUCED_GRAYSCALE_8
}


def init_worker() -> None:
    """Per-process setup for pack workers: one OpenCV thread each (the pool is the parallelism)."""
    cv2 = opencv()
    cv2.setNumThreads(1)
    if hasattr(cv2, "utils") and hasattr(cv2.utils, "logging"):
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)


def parse_inter_method(value: str) -> int:
    """An ``--inter-method`` value (a name above or im2rec.cc's number) as its code."""
    v = value.strip().lower()
    if v in INTER_METHODS:
        return INTER_METHODS[v]
    if v.isdigit() and int(v) in INTER_METHODS.values():
        return int(v)
    names = ", ".join(f"{k} ({c})" for k, c in INTER_METHODS.items())
    raise ValueError(f"unknown interpolation {value!r}: use one of {names}")


#: The colours ``parse_color`` knows by name, as (R, G, B).
NAMED_COLORS = {"white": (255, 255, 255), "black": (0, 0, 0)}

RGB = tuple[int, int, int]


def parse_color(value: str) -> RGB:
    """An ``--alpha-background`` value as (R, G, B): ``white``, ``black``, ``#RRGGBB`` or ``R,G,B`` (0-255 each).

    Raises:
        ValueError: naming the value and the accepted forms.
    """
    v = value.strip().lower()
    if v in NAMED_COLORS:
        return NAMED_COLORS[v]
    try:
        if v.startswith("#") and len(v) == 7:
            return (int(v[1:3], 16), int(v[3:5], 16), int(v[5:7], 16))
        parts = [p.strip() for p in v.split(",")]
        if len(parts) == 3 and all(p.isdigit() and int(p) <= 255 for p in parts):
            return (int(parts[0]), int(parts[1]), int(parts[2]))
    except ValueError:
        pass
    raise ValueError(f"{value!r} is not a colour: use white, black, #RRGGBB or R,G,B (each 0-255)")


def format_color(rgb: RGB) -> str:
    """(R, G, B) as ``#RRGGBB``."""
    return "#" + "".join(f"{c:02X}" for c in rgb)


@dataclass(frozen=True)
class ImageOptions:
    """How each image is processed; the defaults are im2rec.py's (``resize=0`` keeps the size).

    Attributes:
        resize: shorter edge in pixels after resizing; 0 keeps the size.
        center_crop: crop the central square first.
        quality: JPEG quality 1-100 (default 95) or PNG compression 0-9 (default 9: im2rec.py
            passes its quality 95 as the level, which OpenCV clamps to 9; the same bytes).
        encoding: ``.jpg`` or ``.png``.
        color: imdecode flag: 1 colour, 0 gray, -1 unchanged (alpha and 16 bits kept).
        inter_method: a code of INTER_METHODS (1, linear, as im2rec.py).
        pass_through: store the file's bytes as they are (cheap checks only, no decode).
        reduced_decode: decode large JPEGs at reduced scale when resizing allows it.
        max_pixels: refuse images with more pixels than this, before decoding them.
        alpha_background: (R, G, B), 0-255: composite images that have transparency over
            this colour (``colour * a + background * (1 - a)``) instead of dropping their
            alpha channel as im2rec.py does; opaque images keep im2rec.py's pixels.
            Needs a decode with ``color`` 1 or 0 (``-1`` keeps alpha; ``pass_through``
            does not decode).
    """

    resize: int = 0
    center_crop: bool = False
    quality: int | None = None
    encoding: str = ".jpg"
    color: int = 1
    inter_method: int = 1
    pass_through: bool = False
    reduced_decode: bool = True
    max_pixels: int = DEFAULT_MAX_PIXELS
    alpha_background: RGB | None = None

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {self.encoding!r}")
        if self.color not in (-1, 0, 1):
            raise ValueError(f"color must be 1, 0 or -1, got {self.color}")
        if self.inter_method not in INTER_METHODS.values():
            raise ValueError(f"unknown inter_method {self.inter_method}")
        if self.resize < 0:
            raise ValueError(f"resize must be 0 or more, got {self.resize}")
        if self.quality is not None:
            lo, hi = (1, 100) if self.encoding == ".jpg" else (0, 9)
            if not lo <= self.quality <= hi:
                kind = "JPEG quality" if self.encoding == ".jpg" else "PNG compression"
                raise OptionError(f"{kind} must be between {lo} and {hi}, got {self.quality}", "--quality")
        if self.alpha_background is not None:
            bg = tuple(self.alpha_background)
            if len(bg) != 3 or not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and 0 <= c <= 255 for c in bg):
                raise ValueError(f"alpha_background must be (R, G, B) with each 0-255, got {self.alpha_background!r}")
            object.__setattr__(self, "alpha_background", tuple(int(c) for c in bg))  # a list (from JSON) becomes a tuple
            if self.pass_through:
                raise OptionError("--alpha-background composites decoded images: it cannot be combined with --pass-through, which stores the files unchanged")
            if self.color == -1:
                raise OptionError("--alpha-background cannot be combined with --color -1, which keeps the alpha channel: use --color 1 or 0")

    @property
    def encode_params(self) -> list:
        cv2 = opencv()
        if self.encoding == ".jpg":
            return [cv2.IMWRITE_JPEG_QUALITY, 95 if self.quality is None else self.quality]
        return [cv2.IMWRITE_PNG_COMPRESSION, 9 if self.quality is None else self.quality]


# --------------------------------------------------------------------------- headers

_SIGNATURES = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000"),
    (b"#?RADIANCE", "HDR"),
    (b"v/1\x01", "EXR"),
)


def image_format(data: bytes) -> str | None:
    """The image format named by the file's first bytes, or None if none is recognised."""
    for sig, name in _SIGNATURES:
        if data.startswith(sig):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    if data[4:12] in (b"ftypavif", b"ftypavis"):
        return "AVIF"
    if len(data) > 2 and data[0:1] == b"P" and data[1:2] in b"123456" and data[2:3].isspace():
        return "PNM"
    return None


def _jpeg_walk(data: bytes | memoryview, to_scan: bool) -> tuple[tuple[int, int, int] | None, int | None]:
    """A JPEG's marker segments walked: its frame header's (height, width, components) and the
    offset of its first SOS marker (None where not found). Stops at the frame unless ``to_scan``."""
    i, n = 2, len(data)
    frame = None
    while i + 4 <= n:
        if data[i] != 0xFF:
            return frame, None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        if marker == 0xDA:
            return frame, i
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and i + 10 <= n:
            height, width = struct.unpack_from(">HH", data, i + 5)
            frame = (height, width, data[i + 9])
            if not to_scan:
                return frame, None
        i += 2 + ((data[i + 2] << 8) | data[i + 3])
    return frame, None


def _jpeg_info(data: bytes) -> tuple[int, int, int] | None:
    """(width, height, offset of the first SOS marker) from the JPEG marker segments."""
    frame, sos = _jpeg_walk(data, to_scan=True)
    return (frame[1], frame[0], sos) if frame and sos is not None else None


def _jpeg_frame(data: bytes | memoryview) -> tuple[int, int, int] | None:
    """(height, width, components) from a JPEG's frame header (SOFn), or None."""
    return _jpeg_walk(data, to_scan=False)[0]


def image_info(data: bytes) -> tuple[str, int, int] | None:
    """(format, width, height) read from the header of a JPEG, PNG, GIF, BMP or WebP, else None."""
    info = _header(data)
    return info[:3] if info else None


def _header(data: bytes) -> tuple[str, int, int, int] | None:
    """(format, width, height, offset of the JPEG scan or 0) from the file's header."""
    fmt = image_format(data)
    try:
        if fmt == "JPEG":
            info = _jpeg_info(data)
            return (fmt, info[0], info[1], info[2]) if info else None
        if fmt == "PNG" and data[12:16] == b"IHDR":
            w, h = struct.unpack_from(">II", data, 16)
            return fmt, w, h, 0
        if fmt == "GIF":
            w, h = struct.unpack_from("<HH", data, 6)
            return fmt, w, h, 0
        if fmt == "BMP":
            w, h = struct.unpack_from("<ii", data, 18)
            return fmt, abs(w), abs(h), 0
        if fmt == "WebP":
            chunk = data[12:16]
            if chunk == b"VP8X":
                w = int.from_bytes(data[24:27], "little") + 1
                h = int.from_bytes(data[27:30], "little") + 1
                return fmt, w, h, 0
            if chunk == b"VP8L":
                bits = int.from_bytes(data[21:25], "little")
                return fmt, (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, 0
            if chunk == b"VP8 ":
                w, h = struct.unpack_from("<HH", data, 26)
                return fmt, w & 0x3FFF, h & 0x3FFF, 0
    except struct.error:
        return None
    return None


def _describe_start(data: bytes) -> str:
    head = data[:12]
    text = head.decode("ascii", "replace")
    if all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return f"it starts with {text.strip()!r} (text)"
    return f"it starts with bytes {head[:8].hex(' ')}"


#: A PNG's last chunk: IEND, empty, with its (fixed) CRC.
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"


def _check_header(data: bytes, max_pixels: int) -> tuple[str, int, int] | None:
    """Checks common to every mode: empty, known format, complete JPEG and PNG, pixel count."""
    if not data:
        raise ImageError("empty", "the file is empty (0 bytes)")
    header = _header(data)
    if header is None:
        return None
    fmt, w, h, sos = header
    if w * h > max_pixels:
        raise ImageError(
            "too-large", f"{fmt} of {w}x{h} = {w * h:,} pixels is above --max-pixels {max_pixels:,} (a decompression bomb?)"
        )
    if fmt == "JPEG" and data.rfind(b"\xff\xd9") < sos:
        raise ImageError("corrupt", f"truncated JPEG: no end-of-image marker after byte {sos} ({len(data):,} bytes)")
    if fmt == "PNG" and data.rfind(PNG_END) < 0:
        raise ImageError("corrupt", f"truncated PNG: no IEND chunk ({len(data):,} bytes)")
    return fmt, w, h


def check_passthrough(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
    """The checks made on a file stored as-is: not empty, a known image format, not truncated (JPEG, PNG), not too large.

    Raises:
        ImageError: the file is not an image that can be stored.
    """
    if _check_header(data, max_pixels) is None and image_format(data) is None:
        raise ImageError("not-an-image", _describe_start(data))


# --------------------------------------------------------------------------- transform


#: Reduced decoding starts when the shorter edge is at least this many times the target:
#: below it a full decode keeps MXNet's pixels (its golden files are 2x reductions).
REDUCE_FROM_RATIO = 3


def _reduction(info: tuple[str, int, int] | None, opts: ImageOptions) -> int:
    """The largest libjpeg scale-down (8, 4, 2) that keeps the shorter edge >= the target."""
    if not (opts.reduced_decode and opts.resize and info and info[0] == "JPEG" and opts.color in (0, 1)):
        return 1
    short = min(info[1], info[2])
    if short < REDUCE_FROM_RATIO * opts.resize:
        return 1
    for factor in (8, 4, 2):
        if -(-short // factor) >= opts.resize:  # libjpeg rounds scaled sizes up
            return factor
    return 1


def _interpolation(code: int, src: tuple[int, int], dst: tuple[int, int], index: int) -> int:
    cv2 = opencv()
    if code == 9:  # auto, as im2rec.cc: cubic to enlarge, area to shrink, else linear
        if dst[0] > src[0] and dst[1] > src[1]:
            return cv2.INTER_CUBIC
        if dst[0] < src[0] and dst[1] < src[1]:
            return cv2.INTER_AREA
        return cv2.INTER_LINEAR
    if code == 10:  # random, but reproducible: drawn from the record's index
        return random.Random(index).randrange(5)
    return code


def _to_8bit(img: np.ndarray) -> np.ndarray:
    if img.dtype == np.uint8:
        return img
    if img.dtype == np.uint16:
        return (img.astype(np.uint32) * 255 // 65535).astype(np.uint8)
    return np.clip(img.astype(np.float32) * 255.0, 0, 255).astype(np.uint8)


def _tiff_orientation(data: bytes | memoryview, tiff: int) -> int:
    """The Orientation tag (1-8) of the TIFF structure (EXIF) at ``data[tiff:]``, 1 when it has none."""
    endian = "<" if data[tiff : tiff + 2] == b"II" else ">"
    ifd = tiff + struct.unpack_from(endian + "I", data, tiff + 4)[0]
    for e in range(struct.unpack_from(endian + "H", data, ifd)[0]):
        tag, _type, _count, value = struct.unpack_from(endian + "HHIH", data, ifd + 2 + 12 * e)
        if tag == 0x0112:
            return value if 1 <= value <= 8 else 1
    return 1


def _jpeg_orientation(data: bytes | memoryview) -> int:
    """The EXIF orientation (1-8) of a JPEG, 1 when it has none or it cannot be read."""
    i, n = 2, len(data)
    try:
        while i + 4 <= n and data[i] == 0xFF:
            marker, seglen = data[i + 1], (data[i + 2] << 8) | data[i + 3]
            if marker == 0xDA:
                return 1
            if marker == 0xE1 and data[i + 4 : i + 10] == b"Exif\0\0":
                return _tiff_orientation(data, i + 10)
            i += 2 + seglen
    except struct.error:
        pass
    return 1


def _full_size(data: bytes, info: tuple[str, int, int], factor: int, shape: tuple[int, ...], color: int) -> tuple[int, int]:
    """(height, width) a full-size decode would have given, for an image decoded at 1/``factor``.

    libjpeg rounds scaled sizes up, and imdecode applies the EXIF rotation (as a full
    decode does): the decoded shape says which way, unless both ways round alike.
    """
    width, height = info[1], info[2]
    straight = (-(-height // factor), -(-width // factor))
    if straight[0] == straight[1] and height != width and color != -1:  # a square after scaling: ask EXIF
        return (width, height) if _jpeg_orientation(data) in (5, 6, 7, 8) else (height, width)
    return (height, width) if tuple(shape[:2]) == straight else (width, height)


# --------------------------------------------------------------------------- the checked decode

#: The beginnings of libjpeg's warnings about damaged data (jerror.h's JWRN_*): a decoder that
#: meets one goes on, grey where the data was lost.
JPEG_DAMAGE = ("Corrupt JPEG data: ", "Premature end of JPEG file", "Invalid SOS parameters", "Inconsistent progression sequence", "Huffman table 0x", "Bogus ")
_SCALED = {16: 2, 17: 2, 32: 4, 33: 4, 64: 8, 65: 8}  # IMREAD_REDUCED_* -> its scale-down
IGNORE_ORIENTATION = 128  # cv2.IMREAD_IGNORE_ORIENTATION


class Checked(NamedTuple):
    """A decoded image (None when none could be made) and what its decoder said of damage, in its words."""

    image: np.ndarray | None
    damage: str | None = None


def imdecode_checked(data: bytes | memoryview | np.ndarray, flag: int = 1) -> Checked:
    """``cv2.imdecode(data, flag)``'s pixels, and the damage the decoder met, as a result.

    A JPEG is decoded by libjpeg-turbo through simplejpeg: the same library, DCT and
    upsampling as OpenCV's (its pixels are OpenCV's, byte for byte: tests/test_decode.py),
    but its warnings come back as values instead of lines on stderr. A damaged JPEG is
    decoded all the same (what MXNet trains on, grey where the data is lost) and said.
    A PNG's chunks are checked (structure, the CRC of each critical chunk) before libpng
    sees it: a bad one is refused by libpng anyway, which would print its error. Other
    formats, and the rare JPEG turbojpeg does not take, go to ``cv2.imdecode``.
    Nothing here holds a lock or touches file descriptor 2: threads decode in parallel.

    Args:
        data: the file's bytes.
        flag: an imdecode flag: 1 (BGR), 0 (gray), -1 (unchanged), ``IMREAD_REDUCED_*``,
            with ``IGNORE_ORIENTATION`` or not.
    """
    buf = data.reshape(-1) if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    if buf.size > 3 and buf[0] == 0xFF and buf[1] == 0xD8:
        checked = _jpeg_checked(buf, flag)
        if checked is not None:
            return checked
    elif buf.size > 8 and buf[:8].tobytes() == b"\x89PNG\r\n\x1a\n":
        damage = png_damage(buf.data)
        if damage is not None:
            return Checked(None, damage)
    cv2 = opencv()
    try:
        return Checked(cv2.imdecode(buf, flag))
    except cv2.error as e:
        return Checked(None, "OpenCV could not decode it: " + (str(e).strip().splitlines()[-1] if str(e).strip() else "OpenCV error"))


def _jpeg_checked(buf: np.ndarray, flag: int) -> Checked | None:
    """A JPEG through turbojpeg (None: one it does not take, left to OpenCV)."""
    import simplejpeg

    frame = _jpeg_frame(buf.data)
    if frame is None:
        return None  # no frame header where one should be: libjpeg through OpenCV decides
    height, width, components = frame
    if components not in (1, 3, 4):
        return None
    unchanged = flag == -1
    gray = components == 1 if unchanged else not flag & 1
    cmyk = components == 4
    args: dict[str, Any] = {"colorspace": "CMYK" if cmyk else "GRAY" if gray else "BGR"}
    factor = 1 if unchanged else _SCALED.get(flag & ~IGNORE_ORIENTATION, 1)
    if factor > 1 and min(height, width) >= 16:  # below 8 px an edge scales the same by several factors
        args.update(min_height=-(-height // factor), min_width=-(-width // factor), min_factor=factor)
    damage = None
    try:
        img = simplejpeg.decode_jpeg(buf, strict=True, **args)
    except ValueError as e:
        said = str(e)
        damage = said if said.startswith(JPEG_DAMAGE) else None  # not "unknown JFIF revision number 2.05"
        try:
            img = simplejpeg.decode_jpeg(buf, strict=False, **args)
        except ValueError:
            if damage is not None:
                return Checked(None, damage)
            return None  # not turbojpeg's (12-bit, ...): OpenCV's libjpeg may take it
    if cmyk:
        img = _from_cmyk(img, gray)
    elif gray:
        img = img.reshape(img.shape[:2])
    if not unchanged and not flag & IGNORE_ORIENTATION:
        orientation = _jpeg_orientation(buf.data)
        if orientation != 1:
            img = _orient(img, orientation)
    return Checked(img, damage)


def _from_cmyk(cmyk: np.ndarray, gray: bool) -> np.ndarray:
    """OpenCV's CMYK to BGR (or gray) for Adobe's inverted CMYK, as its JPEG decoder does it."""
    k = cmyk[..., 3].astype(np.int32)
    c, m, y = ((k - (((255 - cmyk[..., i].astype(np.int32)) * k) >> 8)) for i in range(3))
    if gray:  # icvCvt_CMYK2Gray_8u: BT.601 weights in 14 bits
        return ((y * 1868 + m * 9617 + c * 4899 + (1 << 13)) >> 14).astype(np.uint8)
    return np.stack([y, m, c], axis=-1).astype(np.uint8)


def png_damage(data: bytes | memoryview) -> str | None:
    """What is wrong with a PNG's chunks (structure, a critical chunk's CRC), or None.

    libpng refuses such a file (after printing its error): said here, in-band, first.
    An ancillary chunk's bad CRC is not damage (libpng drops that chunk and goes on)."""
    i, n = 8, len(data)
    while True:
        if i + 12 > n:
            return f"PNG: truncated: no IEND chunk ({n:,} bytes)"
        length = int.from_bytes(data[i : i + 4], "big")
        kind = bytes(data[i + 4 : i + 8])
        if not kind.isalpha() or length > 0x7FFFFFFF:
            return f"PNG: no chunk at byte {i}: its type would be {kind!r}"
        end = i + 8 + length
        if end + 4 > n:
            return f"PNG: truncated: the {kind.decode()} chunk at byte {i} needs {length:,} bytes, {max(0, n - i - 12):,} are there"
        if kind[0] < 0x61 and zlib.crc32(data[i + 4 : end]) != int.from_bytes(data[end : end + 4], "big"):  # upper case: critical
            return f"PNG: the {kind.decode()} chunk at byte {i} fails its CRC (damaged data)"
        if kind == b"IEND":
            return None
        i = end + 4


#: What a reader does with a record whose image is damaged: ``"warn"`` (its pixels, as MXNet
#: trains on them, and one warning), ``"skip"`` (left out) or ``"raise"``.
DAMAGE_POLICIES = ("warn", "skip", "raise")


def check_damage_policy(on_damaged: str) -> str:
    if on_damaged not in DAMAGE_POLICIES:
        raise ValueError(f"on_damaged must be one of {', '.join(repr(p) for p in DAMAGE_POLICIES)}, got {on_damaged!r}")
    return on_damaged


class SkipRecord(Exception):
    """A damaged record left out (``on_damaged="skip"``): the reader takes the next instead."""


def next_good(item: int, count: int, read: Callable[[int], _T], what: str) -> _T:
    """``read(item)``, or, when that record is left out (``SkipRecord``), ``read`` of the next
    item after it (wrapping at ``count``) that is not: a skipped record's place taken, so that
    batches and epochs keep their size.

    Raises:
        ImageError: every one of the ``count`` records (of ``what``) is left out.
    """
    for step in range(count):
        try:
            return read((item + step) % count)
        except SkipRecord:
            continue
    raise ImageError("corrupt", f"{what}: all {count:,} records are damaged (on_damaged='skip')")


class Damaged:
    """What one reader met of damaged images: each such record warned of once, counted,
    and handled as ``on_damaged`` says. Safe from any thread."""

    def __init__(self, on_damaged: str, hint: bool = True):
        self.policy = check_damage_policy(on_damaged)
        self.hint = hint  # the warning says `im2rec verify REC --decode`, REC the file ``where`` names
        self.records: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.records)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def image(self, where: str | Callable[[], str], checked: Checked, size: int) -> np.ndarray:
        """``checked``'s image to use for the record ``where`` names ("x.rec: record 7 (byte 123)";
        or a function that says it, called only for a damaged one), whose image has ``size`` bytes.

        Raises:
            ImageError: it cannot be decoded (``"warn"``, ``"raise"``), or is damaged (``"raise"``).
            SkipRecord: it is damaged or cannot be decoded (``"skip"``).
        """
        image, damage = checked
        if image is not None and damage is None:
            return image
        if callable(where):
            where = where()
        with self._lock:
            first = where not in self.records
            self.records.add(where)
        if self.policy == "skip":
            if first:
                log.warning("%s: %s: left out (on_damaged='skip')", where, damage or "the image cannot be decoded")
            raise SkipRecord(where)
        if image is None:
            raise ImageError("corrupt", f"{where}: the image cannot be decoded ({size:,} bytes" + (f": {damage})" if damage else ")"))
        if self.policy == "raise":
            raise ImageError("corrupt", f"{where}: {damage}: the image is damaged (on_damaged='raise')")
        if first:  # decoded all the same, grey where the data is lost: said, not silently
            hint = f" (`im2rec verify {where.split(': record ', 1)[0]} --decode` lists every such record)" if self.hint else ""
            log.warning("%s: %s: the image is damaged%s", where, damage, hint)
        return image


def damage_words(damage: str) -> str:
    """A decoder's words of damage as a failure says them ("premature end of data segment")."""
    if not damage.startswith(JPEG_DAMAGE):
        return damage
    text = damage.removeprefix("Corrupt JPEG data: ").strip()
    return text[:1].lower() + text[1:]


def _decode_with_flag(data: bytes, opts: ImageOptions, info: tuple[str, int, int] | None) -> tuple[np.ndarray, tuple[int, int]]:
    """im2rec.py's decode (``opts.color``, at reduced scale when allowed) and the full-size (height, width).

    An image libjpeg decodes only with a warning of damaged data is a failure (``corrupt``),
    named by that warning, as one it cannot decode: its pixels are partly made up."""
    factor = _reduction(info, opts)
    img, damage = imdecode_checked(data, _REDUCED[(opts.color, factor)] if factor > 1 else opts.color)
    if damage is not None:
        raise ImageError("corrupt", damage_words(damage), damaged=img is not None)
    if img is None:
        fmt = info[0] if info else image_format(data)
        if fmt is None:
            raise ImageError("not-an-image", _describe_start(data))
        raise ImageError("corrupt", f"OpenCV could not decode the {fmt} data (corrupt or truncated)")
    if info is None and img.shape[0] * img.shape[1] > opts.max_pixels:
        h, w = img.shape[:2]
        raise ImageError("too-large", f"{w}x{h} = {w * h:,} pixels is above --max-pixels {opts.max_pixels:,}")
    full = _full_size(data, info, factor, img.shape, opts.color) if factor > 1 and info else img.shape[:2]
    return img, (int(full[0]), int(full[1]))


# --------------------------------------------------------------------------- alpha


class _PngFacts(NamedTuple):
    alpha: bool  # an alpha channel (colour types 4, 6) or a tRNS chunk
    gray_key: int | None  # a gray PNG's transparent value (tRNS), in the units imdecode returns
    animated: bool  # an APNG (acTL): frames are blended, so both decodes are made


def _png_chunks(data: bytes, until_idat: bool) -> Iterator[tuple[bytes, int, int]]:
    """(type, offset of its data, length) of each chunk of a PNG, up to IEND or the first IDAT."""
    i, n = 8, len(data)
    while i + 8 <= n:
        length, kind = struct.unpack_from(">I4s", data, i)
        if until_idat and kind == b"IDAT":
            return
        yield kind, i + 8, length
        if kind == b"IEND":
            return
        i += 12 + length


def _png_facts(data: bytes) -> _PngFacts:
    """What the chunks before the image data say about transparency (tRNS must come before IDAT)."""
    color_type, depth = data[25], data[24]
    trns: bytes | None = None
    animated = False
    for kind, start, length in _png_chunks(data, until_idat=True):
        if kind == b"tRNS":
            trns = data[start : start + length]
        elif kind == b"acTL":
            animated = True
    gray_key = None
    if color_type == 0 and trns is not None and len(trns) >= 2 and depth in (1, 2, 4, 8, 16):
        key = struct.unpack_from(">H", trns)[0]
        gray_key = key * (255 // ((1 << depth) - 1)) if depth < 8 else key  # libpng expands 1, 2, 4 bits to 8
    return _PngFacts(color_type in (4, 6) or trns is not None, gray_key, animated)


def _png_orientation(data: bytes) -> int:
    """The EXIF orientation of a PNG's eXIf chunk (wherever it is: OpenCV reads it after IDAT too)."""
    try:
        for kind, start, _length in _png_chunks(data, until_idat=False):
            if kind == b"eXIf":
                return _tiff_orientation(data, start)
    except struct.error:
        pass
    return 1


def _webp_orientation(data: bytes) -> int:
    """The EXIF orientation of a WebP's EXIF chunk (raw TIFF, or after an ``Exif\\0\\0`` prefix)."""
    i, n = 12, len(data)
    try:
        while i + 8 <= n:
            kind, size = data[i : i + 4], struct.unpack_from("<I", data, i + 4)[0]
            if kind == b"EXIF":
                start = i + 8 + (6 if data[i + 8 : i + 14] == b"Exif\0\0" else 0)
                return _tiff_orientation(data, start)
            i += 8 + size + (size & 1)
    except struct.error:
        pass
    return 1


def _may_have_alpha(data: bytes, fmt: str | None, png: _PngFacts | None) -> bool:
    """Whether the header leaves room for an alpha channel (else the image is not decoded twice)."""
    if fmt in ("JPEG", "PNM", "HDR"):
        return False
    if fmt == "PNG":
        return png is not None and png.alpha
    if fmt == "WebP":
        chunk = data[12:16]
        if chunk == b"VP8X":
            return len(data) > 20 and bool(data[20] & 0x10)
        if chunk == b"VP8L":
            return len(data) >= 25 and bool(int.from_bytes(data[21:25], "little") >> 28 & 1)
        return False  # lossy VP8 without VP8X: no alpha
    if fmt == "BMP":
        return len(data) >= 30 and struct.unpack_from("<H", data, 28)[0] == 32
    return True  # GIF, TIFF, AVIF, JPEG 2000, or a format the header does not tell: look


def _opaque(dtype: np.dtype) -> float:
    return float(np.iinfo(dtype).max) if np.issubdtype(dtype, np.integer) else 1.0


def _with_alpha(raw: np.ndarray | None, png: _PngFacts | None) -> np.ndarray | None:
    """``raw`` (an IMREAD_UNCHANGED decode) as BGRA when it has transparency, else None.

    A gray PNG with a tRNS value is returned by OpenCV without alpha: it is made from the key.
    """
    if raw is None:
        return None
    if raw.ndim == 3 and raw.shape[2] == 4:
        return raw if raw[..., 3].min() < _opaque(raw.dtype) else None
    if raw.ndim == 2 and png is not None and png.gray_key is not None:
        hidden = raw == png.gray_key
        if not hidden.any():
            return None
        alpha = np.where(hidden, 0, _opaque(raw.dtype)).astype(raw.dtype)
        return np.dstack([raw, raw, raw, alpha])
    return None


def _orient(img: np.ndarray, orientation: int) -> np.ndarray:
    """Turn an image as an EXIF orientation says (what imdecode does to every flag but UNCHANGED)."""
    if orientation == 2:
        img = img[:, ::-1]
    elif orientation == 3:
        img = img[::-1, ::-1]
    elif orientation == 4:
        img = img[::-1]
    elif orientation == 5:
        img = img.swapaxes(0, 1)
    elif orientation == 6:
        img = img.swapaxes(0, 1)[:, ::-1]
    elif orientation == 7:
        img = img.swapaxes(0, 1)[::-1, ::-1]
    elif orientation == 8:
        img = img.swapaxes(0, 1)[::-1]
    return np.ascontiguousarray(img)


def composite(image: np.ndarray, background: RGB) -> np.ndarray:
    """A BGRA image over an opaque colour: 8-bit BGR ``colour * a + background * (1 - a)``, rounded.

    ``a`` is the alpha channel scaled to [0, 1] (by 255, 65535, or 1.0 for float images);
    colour channels are scaled to 0-255 likewise. Alpha is taken as straight (PNG's, WebP's).

    Args:
        image: height x width x 4, BGRA, 8 or 16 bits or float.
        background: (R, G, B), 0-255.
    """
    bg = np.array(background[::-1])
    if image.dtype == np.uint8:  # exact integers: 255 * 255 + 127 fits 16 bits
        colour, alpha = image[..., :3].astype(np.uint16), image[..., 3:].astype(np.uint16)
        return ((colour * alpha + bg.astype(np.uint16) * (255 - alpha) + 127) // 255).astype(np.uint8)
    scale = _opaque(image.dtype)
    colour = np.clip(image[..., :3].astype(np.float32) / scale, 0, 1) * 255
    alpha = np.clip(image[..., 3:].astype(np.float32) / scale, 0, 1)
    return np.rint(colour * alpha + bg.astype(np.float32) * (1 - alpha)).astype(np.uint8)


class Decoded(NamedTuple):
    """A decoded image, the (height, width) a full-size decode has, and whether it had transparency."""

    image: np.ndarray
    full: tuple[int, int]
    transparent: bool = False  # an alpha channel not fully opaque, dropped by color 1/0 or composited


def _unchanged(data: bytes) -> np.ndarray | None:
    cv2 = opencv()
    try:
        return cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error:
        return None


def decode_image(data: bytes, opts: ImageOptions, detect_transparency: bool = True) -> Decoded:
    """Decode with the ``--color`` flag (at reduced scale when the target allows) and look for transparency.

    With ``color`` 1 or 0 the pixels are im2rec.py's (alpha dropped), unless the image
    has transparency and ``opts.alpha_background`` is set: then it is composited over
    that colour, turned as its EXIF orientation says, as the plain decode is.

    Args:
        data: the image file's bytes.
        opts: how to decode.
        detect_transparency: look for transparency (a second decode of files that may
            have alpha); without it, only ``alpha_background`` makes the decoder look.

    Raises:
        ImageError: the bytes are empty, not an image, truncated, corrupt or too large.
    """
    info = _check_header(data, opts.max_pixels)
    fmt = info[0] if info else image_format(data)
    look = opts.color != -1 and (detect_transparency or opts.alpha_background is not None)
    png = _png_facts(data) if look and fmt == "PNG" and len(data) > 25 else None
    if not (look and _may_have_alpha(data, fmt, png)):
        return Decoded(*_decode_with_flag(data, opts, info))
    one_decode = png is not None and info is not None and opts.color == 1 and not png.animated and _png_orientation(data) == 1
    raw = _unchanged(data) if one_decode else None
    if raw is not None and raw.dtype == np.uint8 and raw.ndim == 3 and raw.shape[2] == 4:
        # libpng returns the colour channels of an 8-bit RGBA decode as IMREAD_COLOR does
        # (tests/test_image.py checks it on every kind of PNG with alpha): one decode serves.
        rgba = _with_alpha(raw, png)
        if rgba is not None and opts.alpha_background is not None:
            return Decoded(composite(rgba, opts.alpha_background), (raw.shape[0], raw.shape[1]), True)
        colour = opencv().cvtColor(raw, opencv().COLOR_BGRA2BGR)  # alpha dropped; 25x faster than a numpy copy
        return Decoded(colour, (raw.shape[0], raw.shape[1]), rgba is not None)
    img, full = _decode_with_flag(data, opts, info)  # im2rec.py's pixels, and its errors for a bad file
    rgba = _with_alpha(raw if one_decode else _unchanged(data), png)
    if rgba is None:
        return Decoded(img, full, False)
    if opts.alpha_background is None:
        return Decoded(img, full, True)
    orientation = _png_orientation(data) if fmt == "PNG" else _webp_orientation(data) if fmt == "WebP" else 1
    out = composite(_orient(rgba, orientation), opts.alpha_background)
    if out.shape[:2] != img.shape[:2]:
        raise ImageError("error", f"its alpha channel ({rgba.shape[1]}x{rgba.shape[0]}) does not line up with the decoded image ({img.shape[1]}x{img.shape[0]})")
    if opts.color == 0:
        out = opencv().cvtColor(out, opencv().COLOR_BGR2GRAY)
    return Decoded(out, full, True)


def decode_sized(data: bytes, opts: ImageOptions) -> tuple[np.ndarray, tuple[int, int]]:
    """``decode``, and the (height, width) a full-size decode would have had.

    ``crop_resize`` takes every size and crop from that full size, so that a reduced
    decode gives exactly the output dimensions of a full one (im2rec.py's).
    """
    decoded = decode_image(data, opts, detect_transparency=False)
    return decoded.image, decoded.full


def decode(data: bytes, opts: ImageOptions) -> np.ndarray:
    """Decode an image with the ``--color`` flag, at reduced scale when the target allows
    (composited over ``opts.alpha_background`` when it has transparency and that is set).

    Raises:
        ImageError: the bytes are empty, not an image, truncated, corrupt or too large.
    """
    return decode_image(data, opts, detect_transparency=False).image


def output_size(height: int, width: int, opts: ImageOptions) -> tuple[int, int]:
    """(width, height) of the stored image for a full-size image of ``height`` x ``width``:
    im2rec.py's centre crop, then its integer resize rule."""
    if opts.center_crop:
        height = width = min(height, width)
    if not opts.resize:
        return width, height
    n = opts.resize
    return (n, height * n // width) if height > width else (width * n // height, n)


def crop_resize(img: np.ndarray, opts: ImageOptions, index: int = 0, full: tuple[int, int] | None = None) -> np.ndarray:
    """im2rec.py's centre crop then resize (shorter edge = ``opts.resize``).

    Args:
        img: the decoded image, at full size or reduced by libjpeg.
        opts: the crop and resize options.
        index: the record's index (seeds ``inter_method`` random).
        full: (height, width) of the full-size image when ``img`` was decoded
            reduced: sizes and the crop window are taken from it, so that the output
            has exactly the dimensions a full decode gives.
    """
    h, w = img.shape[:2]
    full_h, full_w = full or (h, w)
    if opts.center_crop and h != w:
        # The crop window of the full image, in img's pixels (the same pixels when not reduced).
        if full_h > full_w:
            top = min(h - w, round((full_h - full_w) // 2 * h / full_h)) if (h, w) != (full_h, full_w) else (full_h - full_w) // 2
            img = img[top : top + w]
        elif full_w > full_h:
            left = min(w - h, round((full_w - full_h) // 2 * w / full_w)) if (h, w) != (full_h, full_w) else (full_w - full_h) // 2
            img = img[:, left : left + h]
        h, w = img.shape[:2]
    size = output_size(full_h, full_w, opts)
    if size != (w, h):
        img = opencv().resize(img, size, interpolation=_interpolation(opts.inter_method, (w, h), size, index))
    return img


def encode(img: np.ndarray, opts: ImageOptions) -> bytes:
    """Encode with ``opts.encoding`` and its quality.

    Raises:
        ImageError: OpenCV cannot encode the image.
    """
    cv2 = opencv()
    if opts.encoding == ".jpg":
        img = _to_8bit(img)  # JPEG holds 8 bits; OpenCV would saturate 16-bit values
    try:
        ok, buf = cv2.imencode(opts.encoding, img, opts.encode_params)
    except cv2.error as e:
        ok, buf = False, str(e).strip().splitlines()[-1:]
    if not ok:
        raise ImageError("encode-failed", f"OpenCV could not encode it as {opts.encoding} ({img.shape}, {img.dtype})")
    return buf.tobytes()


class Transformed(NamedTuple):
    """The bytes to store for one image, and whether it had transparency (see ``Decoded``)."""

    data: bytes
    transparent: bool = False


def transform_image(data: bytes, opts: ImageOptions, index: int = 0) -> Transformed:
    """The bytes to store for one image file: decoded, cropped, resized and re-encoded (or as-is),
    and whether the image had transparency that ``--color`` dropped or ``alpha_background`` filled.

    Args:
        data: the image file's bytes.
        opts: how to process it.
        index: the record's index (seeds ``inter_method`` random).

    Raises:
        ImageError: the image cannot be packed; ``kind`` says why.
    """
    if opts.pass_through:
        check_passthrough(data, opts.max_pixels)
        return Transformed(data)
    decoded = decode_image(data, opts)
    return Transformed(encode(crop_resize(decoded.image, opts, index, decoded.full), opts), decoded.transparent)


def transform(data: bytes, opts: ImageOptions, index: int = 0) -> bytes:
    """The bytes to store for one image file: decoded, cropped, resized and re-encoded (or as-is).

    Args:
        data: the image file's bytes.
        opts: how to process it.
        index: the record's index (seeds ``inter_method`` random).

    Returns:
        The encoded image.

    Raises:
        ImageError: the image cannot be packed; ``kind`` says why.
    """
    if opts.pass_through:
        check_passthrough(data, opts.max_pixels)
        return data
    img, full = decode_sized(data, opts)
    return encode(crop_resize(img, opts, index, full), opts)
