"""``im2rec inspect --grid``: a contact sheet of sample records, to see at a glance that
images are upright, cropped and labelled as intended.

Each tile is one record's image, shrunk to fit, captioned with its key and its label
(the class folder's name when a ``PREFIX.classes.tsv`` written by ``im2rec list`` is
found). A record that cannot be read or decoded gets a marked tile saying why; the
sheet is drawn all the same.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import HeaderError, Im2recError, ImageError, RecordIOError
from .fsutil import atomic_open
from .image import ImageOptions, decode, opencv
from .inspection import Problem, label_name, open_rec, reason_in, record_entries
from .lst import find_classes, read_classes
from .recordio import RecordReader, insightface_header, unpack

__all__ = ["SheetResult", "contact_sheet"]

CAPTION = 18  # pixels under each tile
PAD = 4  # pixels between tiles and around the sheet
BACKGROUND = (40, 40, 40)  # BGR
MARK = (40, 40, 200)  # BGR red: a record that could not be shown

# Where ``im2rec list PREFIX`` puts its class map, seen from the names that come after it:
# PREFIX_train.rec, PREFIX_0_val.rec, PREFIX-00001-of-00004.rec (a part), PREFIX-00002.rec (a shard).


@dataclass
class SheetResult:
    """What ``contact_sheet`` drew."""

    path: str
    tiles: int = 0
    marked: list[Problem] = field(default_factory=list)  # records shown as a marked tile, and why
    columns: int = 0
    rows: int = 0
    width: int = 0
    height: int = 0
    classes: str | None = None  # the class map used for captions


def _caption(key: Any, labels: Sequence[float], names: dict[float, str]) -> str:
    first = names.get(labels[0], label_name(labels[0]))
    if first == ".":  # images directly in ROOT, as classes.tsv names them
        first = f"{label_name(labels[0])} (root)"
    more = f" +{len(labels) - 1}" if len(labels) > 1 else ""
    return f"{key}: {first}{more}"


def _fit(img: np.ndarray, tile: int) -> np.ndarray:
    """The image shrunk (never enlarged beyond the tile) to fit a tile x tile square, as 3-channel BGR uint8."""
    cv2 = opencv()
    if img.dtype != np.uint8:
        img = (img / 257).astype(np.uint8) if img.dtype == np.uint16 else np.clip(img, 0, 255).astype(np.uint8)
    if img.ndim == 2:
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    elif img.shape[2] == 4:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2BGR)
    h, w = img.shape[:2]
    scale = tile / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(img, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)


def _text(canvas: np.ndarray, text: str, x: int, y: int, width: int, color: tuple[int, int, int]) -> None:
    """ASCII text (OpenCV's Hershey fonts have no other glyphs), cut to ``width`` pixels."""
    cv2 = opencv()
    text = text.encode("ascii", "replace").decode("ascii")
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, 0.38
    while text and cv2.getTextSize(text, font, scale, 1)[0][0] > width:
        text = text[:-2] + "~" if len(text) > 1 else ""
    cv2.putText(canvas, text, (x, y), font, scale, color, 1, cv2.LINE_AA)


def _marked(tile: int, why: str) -> np.ndarray:
    cv2 = opencv()
    img = np.full((tile, tile, 3), MARK, np.uint8)
    cv2.line(img, (0, 0), (tile - 1, tile - 1), (255, 255, 255), 2)
    cv2.line(img, (0, tile - 1), (tile - 1, 0), (255, 255, 255), 2)
    _text(img, why, 4, tile // 2 - 6, tile - 8, (255, 255, 255))
    return img


def _tile_image(reader: RecordReader, key: Any, offset: int, names: dict[float, str], tile: int, marked: list[Problem]) -> tuple[np.ndarray, str]:
    try:
        header, body = unpack(reader.read_at(offset)[0])
    except (RecordIOError, HeaderError) as e:
        marked.append(Problem(offset, key, f"damaged record: {reason_in(e, reader.path)}"))
        return _marked(tile, "damaged"), f"{key}: damaged"
    key = header.id if key is None else key
    labels = [float(x) for x in np.atleast_1d(header.label)]
    try:
        img = decode(bytes(body), ImageOptions(color=-1))
    except ImageError as e:
        marked.append(Problem(offset, key, f"{e.said}: {e}"))
        return _marked(tile, "damaged" if e.damaged else "not an image" if e.kind == "not-an-image" else "undecodable"), _caption(key, labels, names)
    return _fit(img, tile), _caption(key, labels, names)


def contact_sheet(
    rec: str,
    out: str,
    samples: int = 64,
    seed: int = 0,
    tile: int = 128,
    classes: str | None = None,
    storage_options: dict | None = None,
) -> SheetResult:
    """Draw ``samples`` records of ``rec``, chosen with ``seed``, on one image written to ``out``.

    Args:
        rec: the ``.rec`` (its ``.idx`` is used when it exists; insightface header and
            identity records are left out).
        out: the sheet; its extension (``.jpg``, ``.png``, ...) chooses the encoding.
        samples: how many records (all, if the file has fewer).
        seed: the sample's seed: the same seed draws the same records.
        tile: the side of each tile, in pixels.
        classes: a ``label TAB folder`` file for the captions; default: the
            ``PREFIX.classes.tsv`` of ``im2rec list`` next to ``rec``, if any.
        storage_options: fsspec's options when ``rec`` is a URL.

    Returns:
        A SheetResult; damaged or undecodable records are drawn as marked tiles and
        listed in ``marked``.

    Raises:
        Im2recError: ``rec`` is missing or holds no record, the class map is
            malformed, or ``out`` has an extension OpenCV cannot write.
    """
    cv2 = opencv()
    reader, index = open_rec(rec, storage_options=storage_options)
    with reader:
        problems: list[Problem] = []
        entries = list(record_entries(reader, problems))
        face = insightface_header(reader) if index is not None else None
        if face:
            entries = [(k, o) for k, o in entries if isinstance(k, int) and 1 <= k < face[0]]
        if not entries:
            raise Im2recError(f"{rec}: no record to draw")
        chosen = sorted(random.Random(seed).sample(entries, min(samples, len(entries))), key=lambda e: e[1])
        result = SheetResult(out, classes=classes or find_classes(rec, storage_options))
        names = read_classes(result.classes, storage_options) if result.classes else {}
        result.tiles = len(chosen)
        result.columns = math.ceil(math.sqrt(len(chosen)))
        result.rows = math.ceil(len(chosen) / result.columns)
        result.width = PAD + result.columns * (tile + PAD)
        result.height = PAD + result.rows * (tile + CAPTION + PAD)
        canvas = np.full((result.height, result.width, 3), BACKGROUND, np.uint8)
        for i, (key, offset) in enumerate(chosen):
            img, caption = _tile_image(reader, key, offset, names, tile, result.marked)
            x = PAD + (i % result.columns) * (tile + PAD)
            y = PAD + (i // result.columns) * (tile + CAPTION + PAD)
            h, w = img.shape[:2]
            canvas[y + (tile - h) // 2 : y + (tile - h) // 2 + h, x + (tile - w) // 2 : x + (tile - w) // 2 + w] = img
            _text(canvas, caption, x + 2, y + tile + CAPTION - 5, tile - 4, (230, 230, 230))
    ext = os.path.splitext(out)[1].lower() or ".jpg"
    try:
        ok, buf = cv2.imencode(ext, canvas, [cv2.IMWRITE_JPEG_QUALITY, 90] if ext in (".jpg", ".jpeg") else [])
    except cv2.error:
        ok = False
    if not ok:
        raise Im2recError(f"{out}: OpenCV cannot write a {ext} image; use .jpg or .png")
    with atomic_open(out, "wb") as f:
        f.write(buf.tobytes())
    return result
