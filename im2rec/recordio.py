"""The RecordIO format core: byte-exact MXNet/dmlc ``.rec`` and ``.idx`` files.

Standard library and numpy only (cv2 is imported inside ``pack_img`` and
``unpack_img``, on first use), so that reading and writing records never pulls
in click, OpenCV or tqdm.

One *frame* on disk (the spec's and dmlc's *part*, the word the error messages keep; every frame
starts at a 4-aligned file offset; little-endian)::

    offset  size     field
    0       4        magic   0xCED7230A, the bytes 0A 23 D7 CE
    4       4        lrec    cflag << 29 | length   (cflag: bits 31..29, length: bits 28..0)
    8       length   data
    8+len   0..3     zero padding up to a multiple of 4, not counted in length

    cflag 0  the whole record in one frame
    cflag 1  first frame of a record      (only 0 and 1 start a record)
    cflag 2  middle frame
    cflag 3  last frame

The writer (dmlc ``RecordIOWriter::WriteRecord``) splits a payload wherever the
magic word sits at a 4-aligned payload offset: the 4 magic bytes are dropped
from the data and become the boundary between frames; the reader puts them back.
Unaligned occurrences stay in the data. So inside a file the magic occurs at
4-aligned offsets only as a frame head, which is what lets readers resync.

The image-record payload that ``pack`` builds starts with the IRHeader::

    offset  type          field
    0       uint32 LE     flag    number of float32 labels after the header (0: scalar label)
    4       float32 LE    label   the scalar label (0.0 when flag > 0)
    8       uint64 LE     id      im2rec stores the .lst index here
    16      uint64 LE     id2     reserved, 0
    24      float32 x flag        the labels, when flag > 0
    24+4*flag             the encoded image (or any bytes)

The ``.idx`` file is text, one line per record: ``key<TAB>offset<LF>``, where
offset is the byte offset of the record's first frame head.
"""

from __future__ import annotations

import contextlib
import mmap
import numbers
import operator
import os
import struct
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, NamedTuple, Protocol, TypeVar, Union

import numpy as np

from .errors import (
    BadFlagError,
    BadMagicError,
    HeaderError,
    Im2recError,
    IndexFormatError,
    IndexOffsetError,
    RecordIOError,
    RecordTooLargeError,
    TruncatedRecordError,
)
from .fsutil import atomic_open, is_url

__all__ = [
    "FRAME_HEAD_SIZE",
    "IRHEADER_SIZE",
    "MAGIC",
    "MAX_RECORD_SIZE",
    "SIBLINGS",
    "Headers",
    "IRHeader",
    "Im2recError",
    "MXIndexedRecordIO",
    "MXRecordIO",
    "RecordIOError",
    "RecordIndex",
    "RecordReader",
    "RecordWriter",
    "cflag_of",
    "format_index",
    "frame",
    "header_size",
    "idx_path_of",
    "insightface_header",
    "length_of",
    "pack",
    "pack_img",
    "parse_index",
    "read_headers",
    "read_index",
    "sibling",
    "unpack",
    "unpack_img",
    "write_index",
]

PathLike = Union[str, "os.PathLike[str]"]

MAGIC = 0xCED7230A
MAGIC_BYTES = struct.pack("<I", MAGIC)
_FRAME_HEAD = struct.Struct("<II")  # magic, lrec
#: lrec's low 29 bits are the frame's length, its top 3 bits the cflag.
LENGTH_MASK = (1 << 29) - 1
#: dmlc refuses records of 2**29 bytes or more: the length field has 29 bits.
MAX_RECORD_SIZE = LENGTH_MASK
#: The zero bytes after a frame of ``length`` bytes, indexed by ``length % 4``.
PADDING = (b"", b"\0\0\0", b"\0\0", b"\0")
_IOV_MAX = 1024  # buffers per writev call (Linux's IOV_MAX)

IRHEADER_STRUCT = struct.Struct("<IfQQ")  # flag, label, id, id2
IRHEADER_SIZE = IRHEADER_STRUCT.size  # 24
_Word = TypeVar("_Word", int, np.ndarray)  # a header word, or an array of them
#: Bytes in front of every frame: the magic, then lrec (the cflag in its top 3 bits, the length below).
FRAME_HEAD_SIZE = _FRAME_HEAD.size  # 8


def cflag_of(lrec: _Word) -> _Word:
    """A frame's continuation flag, from its lrec word: 0 whole, 1 first, 2 middle, 3 last (numpy arrays too)."""
    return lrec >> 29


def length_of(lrec: _Word) -> _Word:
    """A frame's length in bytes, from its lrec word (numpy arrays too)."""
    return lrec & LENGTH_MASK


def header_size(flag: _Word) -> _Word:
    """Bytes of an IRHeader followed by ``flag`` float32 labels (flag 0: the one label inside it); numpy arrays too."""
    return IRHEADER_SIZE + 4 * flag
#: A record in one frame with its IRHeader, as numpy sees its first 32 bytes: the frame
#: header, then the IRHeader (what ``faces`` rewrites in place when it copies records).
RECORD_HEAD = np.dtype([("magic", "<u4"), ("lrec", "<u4"), ("flag", "<u4"), ("label", "<f4"), ("id", "<u8"), ("id2", "<u8")])


# --------------------------------------------------------------------------- #
# IRHeader and pack/unpack (mxnet.recordio semantics)
# --------------------------------------------------------------------------- #


class IRHeader(NamedTuple):
    """The header MXNet puts in front of every image record.

    Attributes:
        flag: number of float32 labels stored after the header; 0 for a scalar label.
        label: the scalar label (a float), or the labels as a float32 array when flag > 0.
        id: a 64-bit unsigned id; im2rec stores the ``.lst`` index here.
        id2: a second 64-bit unsigned id, normally 0.
    """

    flag: int
    label: Any
    id: int
    id2: int


def _check_id(name: str, value: Any) -> int:
    if type(value) is int and 0 <= value < 1 << 64:  # the common case, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"IRHeader.{name} must be an integer, got {value!r}")
    value = int(value)
    if not 0 <= value < 1 << 64:
        raise ValueError(f"IRHeader.{name} must be in [0, 2**64), got {value}")
    return value


def pack(header: IRHeader | tuple[Any, Any, Any, Any], s: bytes) -> bytes:
    """Pack an IRHeader and a payload into one record payload, as ``mx.recordio.pack``.

    A scalar label (any ``numbers.Number``) is stored in the header with flag 0.
    Anything else is converted to a float32 array, flattened, and stored after the
    header with flag = its size (the header's label field is then 0.0). The
    caller's flag is always replaced, as MXNet does.

    Args:
        header: ``IRHeader(flag, label, id, id2)`` or a 4-tuple.
        s: the payload that follows the header (usually an encoded image).

    Returns:
        The packed bytes.

    Raises:
        TypeError, ValueError: an id that is not an integer in [0, 2**64).
    """
    _flag, label, id_, id2 = header
    id_ = _check_id("id", id_)
    id2 = _check_id("id2", id2)
    if isinstance(label, numbers.Number):
        return IRHEADER_STRUCT.pack(0, label, id_, id2) + bytes(s)
    labels = np.asarray(label, dtype=np.float32)
    return IRHEADER_STRUCT.pack(labels.size, 0.0, id_, id2) + labels.tobytes() + bytes(s)


def unpack(s: bytes) -> tuple[IRHeader, bytes]:
    """Split a record payload into its IRHeader and the bytes after it, as ``mx.recordio.unpack``.

    Args:
        s: a record payload written by ``pack``.

    Returns:
        ``(header, rest)``. When ``header.flag > 0``, ``header.label`` is a read-only
        float32 array of ``flag`` labels and ``rest`` starts after them; otherwise
        ``header.label`` is a float.

    Raises:
        HeaderError: ``s`` is shorter than the header and the labels it announces.
    """
    if len(s) < IRHEADER_SIZE:
        raise HeaderError(f"record of {len(s)} bytes is too short for the {IRHEADER_SIZE}-byte IRHeader")
    header = IRHeader._make(IRHEADER_STRUCT.unpack_from(s, 0))
    flag = header.flag
    if flag == 0:
        return header, s[IRHEADER_SIZE:]
    end = header_size(flag)
    if len(s) < end:
        raise HeaderError(
            f"record of {len(s)} bytes is too short for its IRHeader with flag {flag} "
            f"({flag} float32 labels need {end} bytes)"
        )
    labels = np.frombuffer(s, dtype=np.float32, count=flag, offset=IRHEADER_SIZE)
    return header._replace(label=labels), s[end:]


def pack_img(
    header: IRHeader | tuple[Any, Any, Any, Any],
    img: np.ndarray,
    quality: int = 95,
    img_fmt: str = ".jpg",
) -> bytes:
    """Encode an image with OpenCV and pack it with ``header``, as ``mx.recordio.pack_img``.

    Args:
        header: the IRHeader to pack.
        img: an OpenCV image (BGR, BGRA or gray, HWC uint8).
        quality: JPEG quality (1-100) for ``.jpg``/``.jpeg``, PNG compression (0-9) for ``.png``.
        img_fmt: the encoding, as a file extension.

    Returns:
        The packed record payload.

    Raises:
        Im2recError: OpenCV could not encode the image.
    """
    import cv2

    fmt = img_fmt.lower()
    if fmt in (".jpg", ".jpeg"):
        params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)]
    elif fmt == ".png":
        # MXNet passes its default of 95 straight through; OpenCV's range is 0-9.
        params = [cv2.IMWRITE_PNG_COMPRESSION, min(max(int(quality), 0), 9)]
    else:
        params = []
    ok, buf = cv2.imencode(img_fmt, img, params)
    if not ok:
        raise Im2recError(f"OpenCV could not encode the image as {img_fmt}")
    return pack(header, buf.tobytes())


def unpack_img(s: bytes, iscolor: int = -1) -> tuple[IRHeader, np.ndarray | None]:
    """Unpack a record and decode its image with ``cv2.imdecode``, as ``mx.recordio.unpack_img``.

    Args:
        s: a record payload.
        iscolor: the ``cv2.imdecode`` flag: 1 colour (BGR), 0 gray, -1 unchanged.

    Returns:
        ``(header, image)``; the image is BGR(A) or gray, or None if it cannot be decoded.

    Raises:
        HeaderError: ``s`` is too short for its header.
    """
    import cv2

    header, img = unpack(s)
    return header, cv2.imdecode(np.frombuffer(img, dtype=np.uint8), iscolor)


# --------------------------------------------------------------------------- #
# Writing
# --------------------------------------------------------------------------- #


_NUMPY_SCAN_FROM = 1024  # bytes; below it bytes.find wins, above it a vectorised compare does


def _escape_points(payload: bytes | bytearray) -> list[int]:
    """Payload offsets where dmlc splits the record: the magic word at 4-aligned offsets.

    An aligned match always ends at or before ``len - len % 4``, so every aligned
    match qualifies; unaligned ones stay in the data.
    """
    if len(payload) >= _NUMPY_SCAN_FROM:
        found = np.frombuffer(payload, dtype="<u4", count=len(payload) // 4) == MAGIC
        return (np.flatnonzero(found) * 4).tolist() if found.any() else []
    points = []
    i = payload.find(MAGIC_BYTES)
    while i >= 0:
        if i & 3:
            i = payload.find(MAGIC_BYTES, i + 1)
        else:
            points.append(i)
            i = payload.find(MAGIC_BYTES, i + 4)
    return points


def _frames(payload: bytes | bytearray) -> list[Any]:
    """The pieces of one record as it lies in a ``.rec``: frame heads, payload slices, padding."""
    n = len(payload)
    points = _escape_points(payload)
    if not points:
        return [_FRAME_HEAD.pack(MAGIC, n), payload, PADDING[n & 3]]
    view = memoryview(payload)
    pieces: list[Any] = []
    start = 0
    for i in points:
        pieces += [_FRAME_HEAD.pack(MAGIC, (1 if start == 0 else 2) << 29 | (i - start)), view[start:i]]
        start = i + 4
    pieces += [_FRAME_HEAD.pack(MAGIC, 3 << 29 | (n - start)), view[start:], PADDING[n & 3]]
    return pieces


def frame(payload: bytes) -> bytes:
    """One record as it lies in a ``.rec`` file, ready for ``RecordWriter.write_framed``.

    Framing costs a scan of the payload; doing it where the payload is made (a
    ``pack`` worker) leaves the single writing process only a copy to do.

    Raises:
        RecordTooLargeError: ``payload`` is 2**29 bytes or more.
    """
    data = _as_payload(payload)
    if len(data) > MAX_RECORD_SIZE:
        raise RecordTooLargeError(
            f"record of {len(data)} bytes is too large: RecordIO records must be under 2**29 ({1 << 29}) bytes"
        )
    return b"".join(_frames(data))


def splits_header(first_frame_length: int, flag: int) -> bool:
    """Whether a record whose first frame holds ``first_frame_length`` bytes is split inside
    its IRHeader or labels (``flag`` float32 labels after the 24-byte header).

    That happens when a header word (flag, label, an id half) or a label equals the
    magic ``0xCED7230A``: the writer escapes it as it escapes any aligned magic, and
    MXNet writes the same bytes and reads them back. DALI's ``fn.readers.mxnet`` reads
    the 24-byte header straight after the first frame head, and fails on such records.
    """
    return first_frame_length < header_size(flag)


def _first_frame_splits_header(length: int, head: bytes) -> bool:
    # A first frame of under 4 bytes holds not even the flag; else the flag says how long the header is.
    return length < 4 or splits_header(length, int.from_bytes(head[:4], "little"))


def framed_splits_header(framed: bytes) -> bool:
    """``splits_header`` for a record as ``frame`` returns it (cheap unless it is multi-frame)."""
    lrec = int.from_bytes(framed[4:8], "little")
    if cflag_of(lrec) != 1:
        return False
    return _first_frame_splits_header(length_of(lrec), framed[8:12])


def record_splits_header(reader: RecordReader, offset: int) -> bool:
    """``splits_header`` for the multi-frame record at ``offset`` of ``reader``."""
    return _first_frame_splits_header(reader.frames(offset)[0][2], reader.head_at(offset, 4))


def _as_payload(buf: Any) -> bytes | bytearray:
    if isinstance(buf, (bytes, bytearray)):
        return buf
    if isinstance(buf, (memoryview, np.ndarray)):
        return bytes(buf)
    raise TypeError(f"a record payload must be bytes, not {type(buf).__name__}")


class RecordWriter:
    """Writes records to a ``.rec`` file and, optionally, their ``key<TAB>offset`` lines to a ``.idx``.

    The ``.idx`` lines are written by the same object as the records, so the two
    cannot drift apart. Use it as a context manager; it closes what it opened.

    Args:
        rec: path of the ``.rec`` to create (truncated if it exists), or a binary
            file object positioned where the next record goes (not closed here).
        idx: path of the ``.idx`` to create, a text file object, or None.
    """

    def __init__(self, rec: PathLike | IO[bytes], idx: PathLike | IO[str] | None = None):
        self._own_rec = not hasattr(rec, "write")
        self._rec: IO[bytes] = open(rec, "wb") if isinstance(rec, (str, os.PathLike)) else rec  # noqa: SIM115 (the writer owns it: closed by close())
        self.path = str(rec) if self._own_rec else str(getattr(rec, "name", "<stream>"))
        self._pos = 0 if self._own_rec else self._rec.tell()
        self._own_idx = idx is not None and not hasattr(idx, "write")
        self._idx: IO[str] | None
        if self._own_idx:
            try:
                self._idx = open(idx, "w", encoding="ascii", newline="\n")  # type: ignore[arg-type]  # noqa: SIM115 (closed by close())
            except BaseException:
                self._rec.close()
                raise
        else:
            self._idx = idx  # type: ignore[assignment]
        self.closed = False

    def tell(self) -> int:
        """The byte offset where the next record will start."""
        return self._pos

    @property
    def file(self) -> IO[bytes]:
        """The ``.rec`` file object being written."""
        return self._rec

    def write(self, payload: bytes) -> int:
        """Append one record.

        Args:
            payload: the record's bytes (any length below 2**29).

        Returns:
            The byte offset of the record's first frame head.

        Raises:
            RecordTooLargeError: ``payload`` is 2**29 bytes or more; nothing is written.
            TypeError: ``payload`` is not bytes-like.
        """
        data = _as_payload(payload)
        n = len(data)
        pos = self._pos
        if n > MAX_RECORD_SIZE:
            raise RecordTooLargeError(
                f"{self.path}: record of {n} bytes at byte {pos} is too large: "
                f"RecordIO records must be under 2**29 ({1 << 29}) bytes"
            )
        w = self._rec.write
        size = 0
        for piece in _frames(data):
            w(piece)
            size += len(piece)
        self._pos = pos + size
        return pos

    def write_framed(self, framed: bytes) -> int:
        """Append one record framed by ``frame()`` (one copy, no scan).

        Returns:
            The byte offset of the record.

        Raises:
            ValueError: ``framed`` does not start with a frame head or is not 4-byte aligned.
        """
        if framed[:4] != MAGIC_BYTES or len(framed) & 3:
            raise ValueError(f"{self.path}: write_framed() takes the bytes of frame(), not a payload")
        pos = self._pos
        self._rec.write(framed)
        self._pos = pos + len(framed)
        return pos

    def write_framed_many(self, keys: Sequence[Any], framed: Any, starts: Sequence[int]) -> int:
        """Append several records framed back to back in one buffer, and their ``.idx`` lines.

        Args:
            keys: the records' keys.
            framed: the records as ``frame`` gives them, concatenated: one buffer, or a
                list of buffers (written with one ``writev`` per 1,024, without joining them).
            starts: each record's offset within ``framed``.

        Returns:
            The byte offset of the first record.
        """
        if self._idx is None:
            raise ValueError(f"{self.path}: this RecordWriter has no .idx to write keys to")
        pos = self._pos
        if isinstance(framed, list) and hasattr(os, "writev"):
            self._rec.flush()  # then the file offset is ours: write the pieces straight to it
            fd, size = self._rec.fileno(), 0
            for i in range(0, len(framed), _IOV_MAX):
                chunk = framed[i : i + _IOV_MAX]
                want = sum(len(b) for b in chunk)
                done = os.writev(fd, chunk)
                if done < want:  # a short write (a signal, a full disk): finish it piece by piece
                    self._write_rest(fd, chunk, done)
                size += want
        else:
            if isinstance(framed, list):
                framed = b"".join(framed)
            self._rec.write(framed)
            size = len(framed)
        self._pos = pos + size
        self._idx.write(format_index(keys, (pos + s for s in starts)))
        return pos

    @staticmethod
    def _write_rest(fd: int, chunk: Sequence[Any], done: int) -> None:
        for b in chunk:
            n = len(b)
            if done >= n:
                done -= n
                continue
            view = memoryview(b)[done:]
            while len(view):
                view = view[os.write(fd, view) :]
            done = 0

    def write_idx(self, key: Any, payload: bytes) -> int:
        """Append one record and its ``key<TAB>offset`` line to the ``.idx``.

        Returns:
            The byte offset of the record.
        """
        return self._indexed(key, self.write, payload)

    def write_framed_idx(self, key: Any, framed: bytes) -> int:
        """Append one record framed by ``frame()`` and its ``key<TAB>offset`` line to the ``.idx``."""
        return self._indexed(key, self.write_framed, framed)

    def _indexed(self, key: Any, write: Callable[[bytes], int], data: bytes) -> int:
        if self._idx is None:
            raise ValueError(f"{self.path}: this RecordWriter has no .idx to write keys to")
        pos = write(data)
        self._idx.write(f"{key}\t{pos}\n")  # format_index's line, without building a list per record
        return pos

    def flush(self) -> None:
        """Flush both files to the operating system."""
        self._rec.flush()
        if self._idx is not None:
            self._idx.flush()

    def close(self) -> None:
        """Close the files this writer opened (idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            if self._own_idx and self._idx is not None:
                self._idx.close()
        finally:
            if self._own_rec:
                self._rec.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------- #
# The .idx file
# --------------------------------------------------------------------------- #

_INT64_DIGITS = 18  # tokens of up to 18 digits always fit in int64


def _parse_index_fast(data: bytes) -> np.ndarray | None:
    """Parse a canonical ``.idx`` (``digits TAB digits LF`` lines) with numpy.

    Returns an (n, 2) int64 array, or None when the text is not canonical (CR,
    spaces, blank lines, signs, huge numbers, anything odd): the caller then
    parses it line by line, which also names the bad line.
    """
    if not data:
        return np.zeros((0, 2), dtype=np.int64)
    if not data.endswith(b"\n"):
        data += b"\n"
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.max() > ord("9"):
        return None
    seps = np.flatnonzero(buf < ord("0"))  # TAB, LF and anything else that is not a digit
    if seps.size % 2 or seps[0] == 0:
        return None
    kinds = buf[seps]
    if not ((kinds[0::2] == 9).all() and (kinds[1::2] == 10).all()):
        return None
    gaps = np.diff(seps)
    if (gaps.size and (gaps.min() < 2 or gaps.max() > _INT64_DIGITS + 1)) or seps[0] > _INT64_DIGITS:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        values = np.fromstring(data, dtype=np.int64, sep=" ")
    if values.size != seps.size:
        return None
    return values.reshape(-1, 2)


def _parse_index_lines(data: bytes, path: str, key_type: Callable[[str], Any]) -> tuple[list[Any], list[int], list[int]]:
    """Parse an ``.idx`` line by line: any whitespace, CRLF and blank lines accepted.

    Returns the keys, the offsets and the 1-based line number of each entry.
    """
    keys: list[Any] = []
    offsets: list[int] = []
    lines: list[int] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        at = data.count(b"\n", 0, e.start) + 1
        raise IndexFormatError(f"{path}:{at}: not UTF-8 text (byte {e.start})") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            raise IndexFormatError(f"{path}:{lineno}: expected 'key<TAB>offset', got {line!r}")
        try:
            key = key_type(fields[0])
        except (TypeError, ValueError):
            raise IndexFormatError(f"{path}:{lineno}: key {fields[0]!r} is not a valid {getattr(key_type, '__name__', key_type)}") from None
        if not (fields[1].isascii() and fields[1].isdigit()):
            raise IndexFormatError(f"{path}:{lineno}: offset {fields[1]!r} is not a non-negative integer")
        offset = int(fields[1])
        if offset >= 1 << 63:
            raise IndexOffsetError(f"{path}:{lineno}: offset {offset} is impossibly large")
        keys.append(key)
        offsets.append(offset)
        lines.append(lineno)
    return keys, offsets, lines


class RecordIndex:
    """The parsed ``.idx`` of a ``.rec``: keys and offsets in line order, and a key lookup.

    Integer keys are held in numpy arrays: a 1,000,000-line index is parsed without
    a Python loop per line. When the keys are a permutation of a contiguous range
    (what im2rec, insightface and DALI's rec2idx write) a key is found by one
    array lookup; otherwise by binary search. As in MXNet, when a key appears on
    several lines the last line wins, and ``keys`` keeps every line.

    Attributes:
        path: the ``.idx`` path.
        offsets: int64 array of offsets, in line order.
        key_list: int64 array (integer keys) or list (other key types), in line order.
    """

    def __init__(self, path: str, keys: np.ndarray | list[Any], offsets: np.ndarray, line_numbers: np.ndarray | None = None):
        self.path = path
        self.key_list = keys
        self.offsets = offsets
        # 1-based line of each entry, when it may differ from position + 1 (blank lines).
        self._line_numbers = line_numbers
        self._table: np.ndarray | None = None  # contiguous keys: entry of key - base
        self._base = 0
        self._sorted_keys: np.ndarray | None = None
        self._sorted_entries: np.ndarray | None = None
        self._dict: dict | None = None
        if isinstance(keys, np.ndarray):
            self._build_array_lookup(keys)
        else:
            self._dict = {k: i for i, k in enumerate(keys)}

    def _build_array_lookup(self, keys: np.ndarray) -> None:
        n = keys.size
        if n == 0:
            self._table = np.zeros(0, dtype=np.int64)
            return
        base, top = int(keys.min()), int(keys.max())
        if top - base < n:
            table = np.full(top - base + 1, -1, dtype=np.int64)
            table[keys - base] = np.arange(n, dtype=np.int64)
            if np.count_nonzero(table >= 0) == n:  # no duplicate keys
                self._table, self._base = table, base
                return
        order = np.argsort(keys, kind="stable")
        skeys = keys[order]
        last = np.ones(n, dtype=bool)
        last[:-1] = skeys[1:] != skeys[:-1]  # the last line of each run of equal keys wins
        self._sorted_keys, self._sorted_entries = skeys[last], order[last]

    def __len__(self) -> int:
        return len(self.offsets)

    def entry(self, key: Any) -> int:
        """The position (0-based line among entries) of ``key``. Raises KeyError if absent."""
        if self._dict is not None:
            return self._dict[key]
        k = key
        if type(k) is not int:
            try:
                k = operator.index(key)
            except TypeError:
                raise KeyError(key) from None
        table = self._table
        if table is not None:
            i = k - self._base
            if 0 <= i < table.size:
                e = int(table[i])
                if e >= 0:
                    return e
            raise KeyError(key)
        assert self._sorted_keys is not None and self._sorted_entries is not None
        if not -(1 << 63) <= k < 1 << 63:
            raise KeyError(key)
        i = int(self._sorted_keys.searchsorted(k))
        if i < self._sorted_keys.size and int(self._sorted_keys[i]) == k:
            return int(self._sorted_entries[i])
        raise KeyError(key)

    def offset(self, key: Any) -> int:
        """The byte offset of ``key``'s record. Raises KeyError if absent."""
        return int(self.offsets[self.entry(key)])

    def line_of(self, entry: int) -> int:
        """The 1-based ``.idx`` line number of an entry, for error messages."""
        if self._line_numbers is not None:
            return int(self._line_numbers[entry])
        return entry + 1

    def keys(self) -> list[Any]:
        """Every key as a Python list, in line order (duplicates kept)."""
        k = self.key_list
        return k.tolist() if isinstance(k, np.ndarray) else list(k)

    def __contains__(self, key: Any) -> bool:
        try:
            self.entry(key)
        except KeyError:
            return False
        return True

    def subset(self, keep: np.ndarray) -> RecordIndex:
        """The entries where ``keep`` (a bool array, one per entry) is true, with their line numbers."""
        entries = np.flatnonzero(keep)
        keys: np.ndarray | list[Any] = self.key_list[keep] if isinstance(self.key_list, np.ndarray) else [self.key_list[int(e)] for e in entries]
        return RecordIndex(self.path, keys, self.offsets[keep], np.array([self.line_of(int(e)) for e in entries], dtype=np.int64))

    def validate(self, rec_size: int, rec_path: str) -> None:
        """Check that every offset could be a record head inside a file of ``rec_size`` bytes.

        Raises:
            IndexOffsetError: an offset is not a multiple of 4 or lies beyond the file.
        """
        offsets = self.offsets
        if not offsets.size:
            return
        bad = np.flatnonzero((offsets & 3) != 0)
        if bad.size:
            e = int(bad[0])
            raise IndexOffsetError(
                f"{self.path}:{self.line_of(e)}: offset {int(offsets[e])} is not a record head "
                f"(records start at multiples of 4)"
            )
        bad = np.flatnonzero(offsets > rec_size - 8)
        if bad.size:
            e = int(bad[0])
            raise IndexOffsetError(
                f"{self.path}:{self.line_of(e)}: offset {int(offsets[e])} lies beyond the end of "
                f"{rec_path} ({rec_size} bytes)"
            )


def read_index(path: PathLike, key_type: Callable[[str], Any] = int, storage_options: dict | None = None) -> RecordIndex:
    """Read a ``.idx`` file.

    Args:
        path: the ``.idx`` path, or a URL (read through ``URLS``, with ``storage_options``).
        key_type: how keys are parsed (``int`` as in MXNet, or e.g. ``str``).

    Returns:
        A RecordIndex.

    Raises:
        IndexFormatError: a line is not ``key<TAB>offset``, naming ``file:line``.
        OSError: the file cannot be read.
    """
    path = os.fspath(path)
    if is_url(path):
        data = _urls(path).read(path, storage_options)
    else:
        with open(path, "rb") as f:
            data = f.read()
    return parse_index(data, path, key_type)


def parse_index(data: bytes, path: str, key_type: Callable[[str], Any] = int) -> RecordIndex:
    """A RecordIndex from the text of a ``.idx`` (``path`` names it in errors); see ``read_index``.

    Raises:
        IndexFormatError: a line is not ``key<TAB>offset``, naming ``path:line``.
    """
    if key_type is int:
        pairs = _parse_index_fast(data)
        if pairs is not None:
            return RecordIndex(path, np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1]))
    keys, offsets, lines = _parse_index_lines(data, path, key_type)
    key_array: np.ndarray | list[Any] = keys
    if key_type is int and all(-(1 << 63) <= k < 1 << 63 for k in keys):
        key_array = np.array(keys, dtype=np.int64)
    return RecordIndex(path, key_array, np.array(offsets, dtype=np.int64), np.array(lines, dtype=np.int64))


def format_index(keys: Iterable[Any], offsets: Iterable[int]) -> str:
    """The ``.idx`` text of these entries: one ``key<TAB>offset<LF>`` line each, in order.

    Every ``.idx`` im2rec writes is made of these lines (``RecordWriter`` writes one per
    record as it goes): the one place the line format is written down.
    """
    keys = keys.tolist() if isinstance(keys, np.ndarray) else keys
    offsets = offsets.tolist() if isinstance(offsets, np.ndarray) else offsets
    return "".join(f"{k}\t{o}\n" for k, o in zip(keys, offsets))


def write_index(path: PathLike, keys: Any, offsets: Any) -> None:
    """Write a ``.idx`` file (``format_index``'s lines) under ``path``, replacing it whole
    (written beside it, fsynced, then renamed: a reader never sees half an index).

    Args:
        path: the ``.idx`` to create.
        keys: the keys, in line order.
        offsets: the byte offsets, same length as ``keys``.
    """
    if len(keys) != len(offsets):
        raise ValueError(f"{len(keys)} keys but {len(offsets)} offsets")
    with atomic_open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(format_index(keys, offsets))


# --------------------------------------------------------------------------- #
# File names
# --------------------------------------------------------------------------- #

#: The files that go with ``OUT.rec``, each ``OUT`` + suffix (``property``: the folder's).
SIBLINGS = {
    "idx": ".idx",  # the index
    "rec": ".rec",  # the .rec packed from PREFIX.lst (pack's default output)
    "failed": ".failed.tsv",  # pack: the images that could not be packed
    "resume": ".resume.json",  # pack: the command of an unfinished run, for --resume
    "layout": ".layout",  # a part of a pack --layout insightface run
    "images": ".images.rec",  # pack --layout insightface: the images in list order, before the layout
    "shards": ".shards.json",  # pack --shard-size: the manifest
    "sources": ".sources.tsv",  # combine: the label map
    "classes": ".classes.tsv",  # list: label<TAB>folder (PREFIX.classes.tsv, found beside PREFIX.rec)
    "property": "property",  # insightface: num_classes,height,width, beside the .rec
}


def sibling(rec: PathLike, kind: str) -> str:
    """The path of the ``kind`` file that goes with ``rec`` (see ``SIBLINGS``): same folder,
    same stem, for a path or a URL alike. ``property`` is the folder's own file (a local
    path is made absolute for it, as insightface's readers look for it beside the ``.rec``).

    Raises:
        KeyError: an unknown kind.
    """
    rec = os.fspath(rec)
    suffix = SIBLINGS[kind]
    if kind == "property":
        if is_url(rec):
            return rec.rsplit("/", 1)[0] + "/" + suffix
        return os.path.join(os.path.dirname(os.path.abspath(rec)), suffix)
    return os.path.splitext(rec)[0] + suffix


def idx_path_of(rec: PathLike) -> str:
    """The ``.idx`` of a ``.rec``: same folder, same stem (as Gluon's RecordFileDataset)."""
    return sibling(rec, "idx")


# --------------------------------------------------------------------------- #
# Reading
# --------------------------------------------------------------------------- #


class ByteSource(Protocol):
    """What ``RecordReader`` reads a ``.rec`` through: the interface of a read-only memory map.

    Locally it is the ``mmap`` itself (sliced and unpacked from without a copy). For a URL, a
    ``RangedSource`` implements it with ranged reads (``storage.RemoteSource``), which this
    module gets through ``URLS`` and never imports.
    """

    def __len__(self) -> int: ...

    def __getitem__(self, s: slice, /) -> bytes: ...

    def find(self, sub: bytes, start: int = ..., /) -> int: ...


class RangedSource(ByteSource, Protocol):
    """A ``ByteSource`` whose reads are requests: told the next read's extent (``hint``), asked to
    fetch many ranges at once (``prefetch``), closed when the reader is."""

    size: int

    def hint(self, start: int, end: int) -> None: ...

    def prefetch(self, ranges: Iterable[tuple[int, int]]) -> None: ...

    def close(self) -> None: ...


class UrlAccess(Protocol):
    """How the format core reads a URL without importing what does it: the package sets
    ``URLS`` (``im2rec/__init__.py``, on ``storage``, loaded at the first URL)."""

    def source(self, url: str, storage_options: dict | None, **options: Any) -> RangedSource:
        """The ``.rec`` at ``url`` as a byte source (``options``: ``RecordReader``'s ``source_options``)."""
        ...

    def read(self, url: str, storage_options: dict | None) -> bytes:
        """The whole (small) object at ``url``: a ``.idx``."""
        ...


#: What reads URLs for this module (see ``UrlAccess``); None only if the package did not set it.
URLS: UrlAccess | None = None


def _urls(url: str) -> UrlAccess:
    if URLS is None:
        raise Im2recError(f"{url}: reading a URL needs im2rec's storage, which `import im2rec` sets up")
    return URLS


class Cut(NamedTuple):
    """What a ``.rec`` cut short (a partial download, a full disk) has lost: the ``.idx`` entries
    whose records are not in it, whole. ``keys`` are theirs, in file order."""

    rec: str
    size: int
    keys: list[Any]

    def message(self) -> str:
        n = len(self.keys)
        which = f"key {self.keys[0]}" if n == 1 else f"in file order the first is key {self.keys[0]}, the last key {self.keys[-1]}"
        return (
            f"{self.rec}: the file ends at byte {self.size:,}: it was cut (a partial download?): {n:,} record{'s' * (n != 1)} "
            f"of its .idx ({which}) {'are' if n != 1 else 'is'} not in it; `im2rec index {self.rec} --overwrite` rebuilds the .idx from what is there"
        )


class RecordReader:
    """Reads a ``.rec`` file by offset, by key, or in order, through its ``source``: a
    read-only memory map of a local file, or for a URL ranged reads (``storage.RemoteSource``).

    The source holds no file position, so one reader can be used from threads and from
    processes forked after it was opened; pickling sends only the paths and the
    parsed index, and the copy maps (or opens) the file again. Every malformed byte raises a
    RecordIOError naming the file and the byte offset; a corrupt length is checked
    against the file size before anything is allocated.

    Args:
        rec: path or URL of the ``.rec``.
        idx: path or URL of its ``.idx``, or None for sequential and offset access only.
        key_type: how ``.idx`` keys are parsed (``int`` as in MXNet).
        storage_options: fsspec's options, for a URL.
        source_options: for a URL, ``storage.RemoteSource``'s keyword arguments (``cache``,
            ``retries``).
        on_cut: a file cut short (its ``.idx`` names records past its end): ``"raise"``
            (TruncatedRecordError, saying what is lost and how to mend it), or ``"skip"``:
            the records that are there are read, ``cut`` says what is not.

    Raises:
        OSError: a file cannot be opened.
        IndexFormatError, IndexOffsetError: the ``.idx`` is malformed or points outside the file.
    """

    def __init__(
        self,
        rec: PathLike,
        idx: PathLike | None = None,
        *,
        key_type: Callable[[str], Any] = int,
        storage_options: dict | None = None,
        source_options: dict | None = None,
        on_cut: str = "raise",
    ):
        self.path = os.fspath(rec)
        self.source_options = source_options
        self.idx_path = os.fspath(idx) if idx is not None else None
        self.key_type = key_type
        self.storage_options = storage_options
        self._map()
        self.index: RecordIndex | None = None
        self.cut: Cut | None = None  # with on_cut="skip": what the file lost
        self._ends: np.ndarray | None = None  # remote: the .idx offsets, sorted
        if self.idx_path is not None:
            self.index = read_index(self.idx_path, key_type, storage_options=storage_options)
            keep, cut = self.cut_of(self.index)
            if cut is not None:
                if on_cut != "skip":
                    raise TruncatedRecordError(cut.message(), self.size)
                self.cut, self.index = cut, self.index.subset(keep)
            self.index.validate(self.size, self.path)

    def cut_of(self, index: RecordIndex) -> tuple[np.ndarray, Cut | None]:
        """Which entries of ``index`` have their record in the file, whole (a bool array), and
        what a file cut short lost: the entries past its end and (read locally) the record its
        end falls in."""
        offsets = index.offsets
        lost = offsets > self.size - 8
        within = np.flatnonzero(~lost & ((offsets & 3) == 0))
        if within.size and not self.remote:
            last = int(within[np.argmax(offsets[within])])
            try:
                self.extent(int(offsets[last]))
            except TruncatedRecordError:
                lost[last] = True
            except RecordIOError:
                pass  # damage, not a cut: reading that record says so
        if not lost.any():
            return ~lost, None
        entries = np.flatnonzero(lost)
        entries = entries[np.argsort(offsets[entries], kind="stable")]
        keys = index.keys()
        return ~lost, Cut(self.path, self.size, [keys[int(e)] for e in entries])

    def scan_index(self) -> list[RecordIOError]:
        """Find the records by reading the file (``walk``), for a ``.rec`` without its ``.idx``:
        ``index`` becomes the one ``im2rec index --keys counter`` would write (keys 0, 1, ...
        in file order). Damaged bytes are skipped; their errors are returned."""
        offsets, problems = [], []
        for pos, _, _, error in self.walk():
            if error is None:
                offsets.append(pos)
            else:
                problems.append(error)
        self.index = RecordIndex(f"{self.path} (scanned)", np.arange(len(offsets), dtype=np.int64), np.asarray(offsets, dtype=np.int64))
        self._ends = None
        return problems

    def require_index(self) -> RecordIndex:
        """The parsed ``.idx``.

        Raises:
            ValueError: the reader was opened without one.
        """
        if self.index is None:
            raise ValueError(f"{self.path}: reading by key needs the .idx file")
        return self.index

    def _map(self) -> None:
        # The byte source: a read-only memory map locally (``_buffer``, which numpy and struct
        # read in place); for a URL, a RangedSource (``_remote``), which slices and
        # finds the same way with ranged reads.
        self._remote: RangedSource | None = None
        self._buffer: mmap.mmap | bytes | None = None
        self._source: ByteSource
        if is_url(self.path):
            self._source = self._remote = _urls(self.path).source(self.path, self.storage_options, **(self.source_options or {}))
            self.size = self._remote.size
            return
        with open(self.path, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            # mmap refuses empty files; an empty .rec is valid and holds no record.
            self._source = self._buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.size else b""

    @property
    def source(self) -> ByteSource:
        """What the ``.rec`` is read through: its read-only memory map, or for a URL the
        ranged reads of ``storage.RemoteSource`` (the same slicing and ``find``)."""
        return self._source

    @property
    def remote(self) -> bool:
        """Whether the ``.rec`` is read from a URL (every read a request) rather than mapped."""
        return self._remote is not None

    def words(self, first: int, count: int) -> np.ndarray:
        """``count`` little-endian uint32 words from byte ``4 * first``: a view of the memory
        map (no copy; drop it before ``close``), or read from the store for a URL."""
        if self._buffer is not None:
            return np.frombuffer(self._buffer, dtype="<u4", count=count, offset=first * 4)
        return np.frombuffer(self._source[first * 4 : (first + count) * 4], dtype="<u4")

    def prefetch(self, ranges: Iterable[tuple[int, int]]) -> None:
        """For a URL, fetch the byte ranges ``[start, end)`` at once and hold them, so that the
        reads inside them make no request (``storage.RemoteSource.prefetch``); a no-op for
        a local file, which is mapped."""
        if self._remote is not None:
            self._remote.prefetch(ranges)

    def buffer(self) -> memoryview:
        """The whole local ``.rec`` as a read-only memoryview, to copy records out of without a
        copy per record (release it before ``close``).

        Raises:
            TypeError: the ``.rec`` is a URL (read it with ``read_at`` or ``view_at``).
        """
        if self._buffer is None:
            raise TypeError(f"{self.path}: a URL has no memory map")
        return memoryview(self._buffer)

    def release(self, start: int, end: int, edges: bool = False) -> None:
        """Tell the system that bytes ``[start, end)`` of a local ``.rec`` will not be read again
        soon: their pages leave this process's memory (they stay in the page cache), so that a
        pass over a file larger than memory keeps a flat footprint. A no-op for a URL.

        ``edges``: also the pages the range shares with its neighbours (a reader that reads
        them after all faults them in again from the page cache), so that records read in
        any order leave no pages behind."""
        if isinstance(self._buffer, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            page = mmap.PAGESIZE
            if edges:
                lo, hi = start // page * page, min(-(-end // page) * page, -(-self.size // page) * page)
            else:
                lo, hi = -(-start // page) * page, min(end, self.size) // page * page
            if hi > lo:
                self._buffer.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def _head(self, pos: int) -> tuple[int, int]:
        """(magic, lrec) of the frame head at ``pos`` (which the caller keeps inside the file)."""
        if self._buffer is not None:
            return _FRAME_HEAD.unpack_from(self._buffer, pos)
        return _FRAME_HEAD.unpack(self._source[pos : pos + 8])

    def hint_record(self, pos: int) -> None:
        """From a store: the next read fetches exactly the record at ``pos`` (its extent from the
        ``.idx``) if it is not held, rather than a read-ahead block. A no-op locally."""
        if self._remote is not None:  # one request for exactly this record
            self._remote.hint(pos, self._record_end(pos))

    def close(self) -> None:
        """Unmap the file (idempotent)."""
        remote, buffer = self._remote, self._buffer
        self._source = self._buffer = b""
        self._remote = None
        self.size = 0
        if remote is not None:
            remote.close()
        elif isinstance(buffer, mmap.mmap):
            with contextlib.suppress(BufferError):  # a view of it is still alive (RecordDataset); unmapped when it goes
                buffer.close()

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in ("_source", "_buffer", "_remote"):
            del state[name]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._map()

    # -- reading one record ------------------------------------------------ #

    def _frame_head_at(self, pos: int, record: int) -> tuple[int, int]:
        """(cflag, length) of the frame at ``pos``, after checking it fits in the file."""
        size = self.size
        if pos + 8 > size:
            raise TruncatedRecordError(
                f"{self.path}: truncated record at byte {record}: the part header at byte {pos} "
                f"needs 8 bytes, the file ends after {size - pos}",
                pos,
            )
        magic, lrec = self._head(pos)
        if magic != MAGIC:
            raise BadMagicError(
                f"{self.path}: no record at byte {pos}: expected the magic 0xced7230a, found 0x{magic:08x}",
                pos,
            )
        length = length_of(lrec)
        if pos + 8 + ((length + 3) & ~3) > size:
            raise TruncatedRecordError(
                f"{self.path}: truncated record at byte {record}: the part at byte {pos} holds "
                f"{length} bytes but the file ends {size - pos - 8} bytes after its header",
                pos,
            )
        return cflag_of(lrec), length

    def read_at(self, pos: int) -> tuple[bytes, int]:
        """Read the record whose first frame head is at byte ``pos``.

        Returns:
            ``(payload, next_pos)``: the record's bytes and the offset just after it.

        Raises:
            TruncatedRecordError, BadMagicError, BadFlagError: the bytes at ``pos`` are not a
            whole record.
        """
        cflag, length = self._frame_head_at(pos, pos)
        start = pos + 8
        if cflag == 0:
            return self._source[start : start + length], start + ((length + 3) & ~3)
        if cflag != 1:
            raise BadFlagError(
                f"{self.path}: byte {pos} holds a part with cflag {cflag}, not the start of a record "
                f"(cflag 0 or 1)",
                pos,
            )
        chunks = [self._source[start : start + length]]
        p = start + length  # a non-final frame is a multiple of 4 long: no padding
        while True:
            cflag, length = self._frame_head_at(p, pos)
            if cflag not in (2, 3) or (cflag == 2 and length & 3):
                what = f"cflag {cflag}" if cflag not in (2, 3) else f"a length ({length}) that is not a multiple of 4"
                raise BadFlagError(
                    f"{self.path}: record at byte {pos}: the part at byte {p} has {what}, "
                    f"expected a continuation (cflag 2 or 3)",
                    p,
                )
            chunks.append(MAGIC_BYTES)
            chunks.append(self._source[p + 8 : p + 8 + length])
            p += 8 + ((length + 3) & ~3)
            if cflag == 3:
                return b"".join(chunks), p

    def read(self, key: Any) -> bytes:
        """Read the record of ``key`` (from the ``.idx``).

        Raises:
            KeyError: ``key`` is not in the index.
            IndexOffsetError: the key's offset is not a record head.
            RecordIOError: the record is damaged.
        """
        index = self.require_index()
        entry = index.entry(key)
        pos = int(index.offsets[entry])
        self.hint_record(pos)
        # Fast path: a whole record in one frame (cflag 0), as nearly every image is.
        magic, lrec = self._head(pos)  # validate() keeps pos + 8 in the file
        if magic == MAGIC and lrec <= LENGTH_MASK and pos + 8 + ((lrec + 3) & ~3) <= self.size:
            return self._source[pos + 8 : pos + 8 + lrec]
        try:
            return self.read_at(pos)[0]
        except (BadMagicError, BadFlagError) as e:
            if e.offset != pos:  # the head is fine, a later frame is damaged
                raise
            raise IndexOffsetError(
                f"{index.path}:{index.line_of(entry)}: key {key!r} points at byte {pos} of {self.path}, "
                f"which is not a record head ({e})",
                pos,
            ) from None

    def _record_end(self, pos: int) -> int:
        return int(self.record_ends(np.asarray([pos]))[0])

    def record_ends(self, offsets: np.ndarray) -> np.ndarray:
        """Where the records at ``offsets`` end at the latest: the next offset the ``.idx``
        knows, or the end of the file (remote reads fetch exactly up to there)."""
        if self._ends is None:
            known = np.unique(self.index.offsets) if self.index is not None else np.zeros(0, np.int64)
            self._ends = np.append(known, np.int64(self.size))
        return self._ends[np.minimum(np.searchsorted(self._ends, offsets, side="right"), self._ends.size - 1)]

    def __len__(self) -> int:
        if self.index is None:
            raise TypeError(f"{self.path}: the number of records is only known with the .idx")
        return len(self.index)

    def keys(self) -> list[Any]:
        """The ``.idx`` keys in line order."""
        if self.index is None:
            raise ValueError(f"{self.path}: keys need the .idx file")
        return self.index.keys()

    def scan(self, start: int = 0) -> Iterator[tuple[int, bytes]]:
        """Yield ``(offset, payload)`` for every record from byte ``start`` to the end, in file order.

        Raises:
            RecordIOError: at the first damaged record, naming its byte offset.
        """
        pos = start
        size = self.size
        while pos < size:
            payload, nxt = self.read_at(pos)
            yield pos, payload
            pos = nxt

    def __iter__(self) -> Iterator[bytes]:
        """Yield every record's payload in file order."""
        for _, payload in self.scan():
            yield payload

    def frames(self, pos: int) -> list[tuple[int, int, int]]:
        """``(offset, cflag, length)`` of every frame of the record at ``pos``, reading frame heads only.

        Raises:
            TruncatedRecordError, BadMagicError, BadFlagError: as ``read_at``.
        """
        cflag, length = self._frame_head_at(pos, pos)
        frames = [(pos, cflag, length)]
        if cflag == 0:
            return frames
        if cflag != 1:
            raise BadFlagError(
                f"{self.path}: byte {pos} holds a part with cflag {cflag}, not the start of a record (cflag 0 or 1)", pos
            )
        p = pos + 8 + length
        while True:
            cflag, length = self._frame_head_at(p, pos)
            if cflag not in (2, 3) or (cflag == 2 and length & 3):
                raise BadFlagError(
                    f"{self.path}: record at byte {pos}: the part at byte {p} has cflag {cflag} and length "
                    f"{length}, expected a continuation (cflag 2 or 3)",
                    p,
                )
            frames.append((p, cflag, length))
            p += 8 + ((length + 3) & ~3)
            if cflag == 3:
                return frames

    def extent(self, pos: int) -> tuple[int, int]:
        """``(payload length, next offset)`` of the record at ``pos``, reading frame heads only."""
        frames = self.frames(pos)
        last, _, length = frames[-1]
        return sum(n for _, _, n in frames) + 4 * (len(frames) - 1), last + 8 + ((length + 3) & ~3)

    def head_at(self, pos: int, n: int) -> bytes:
        """The first ``n`` bytes of the payload of the record at ``pos`` (fewer if it is shorter),
        without copying the rest when the record is in one frame."""
        cflag, length = self._frame_head_at(pos, pos)
        if cflag == 0:
            return self._source[pos + 8 : pos + 8 + min(n, length)]
        return self.read_at(pos)[0][:n]

    def view_at(self, pos: int) -> memoryview | bytes:
        """The payload of the record at ``pos`` without a copy when it is in one frame
        (a memoryview of the map: release it before closing the reader)."""
        if self._buffer is None:
            self.hint_record(pos)
            return self.read_at(pos)[0]
        cflag, length = self._frame_head_at(pos, pos)
        if cflag == 0:
            return memoryview(self._buffer)[pos + 8 : pos + 8 + length]
        return self.read_at(pos)[0]

    def next_head(self, pos: int) -> int:
        """The offset of the first record head (4-aligned magic, cflag 0 or 1) at or after
        ``pos``, or the file size if there is none: where to resume after damage."""
        mm, size = self._source, self.size
        pos = (pos + 3) & ~3
        while pos + 8 <= size:
            i = mm.find(MAGIC_BYTES, pos)
            if i < 0 or i + 8 > size:
                break
            if i & 3 == 0 and cflag_of(self._head(i)[1]) in (0, 1):
                return i
            pos = (i + 4) & ~3 if i & 3 == 0 else (i + 3) & ~3
        return size

    def walk(self, start: int = 0) -> Iterator[tuple[int, int, int, RecordIOError | None]]:
        """Visit every record from ``start`` in file order without copying payloads, surviving damage.

        Yields:
            ``(offset, length, next_offset, None)`` for each record, and
            ``(offset, 0, resume_offset, error)`` for damaged bytes: the walk goes on
            at the next record head, as dmlc's readers resynchronise.
        """
        pos, size = start, self.size
        while pos < size:
            try:
                length, nxt = self.extent(pos)
            except RecordIOError as e:
                nxt = self.next_head(pos + 4)
                yield pos, 0, nxt, e
            else:
                yield pos, length, nxt, None
            pos = nxt


#: The record layouts: ``plain`` (im2rec.py's: keys = list indices) and ``insightface`` (a header
#: record, the images, identity records; see ``insightface_header``).
LAYOUTS = ("plain", "insightface")


def insightface_header(reader: RecordReader) -> tuple[int, int] | None:
    """``(first identity key, end)`` if record 0 is an insightface header, else None.

    insightface's ``RecBuilder`` writes, as record 0, ``IRHeader(flag=2, label=[first, end])``
    (float32 labels) with ``id2`` 1 and no image: images are keys ``1..first-1`` and identity
    records ``first..end-1``. It needs the ``.idx`` (key 0 is looked up). A record 0 with an
    image after its labels is an image, not a header (a detection label ``[2, 5, ...]``
    would otherwise pass for one).
    """
    index = reader.index
    if index is None or 0 not in index:
        return None
    try:
        reader.hint_record(index.offset(0))  # from a store: fetch record 0 alone, not a read-ahead block
        head = reader.head_at(index.offset(0), IRHEADER_SIZE + 8)
    except RecordIOError:  # a damaged record 0 is no header; readers report it where they read it
        return None
    if len(head) < IRHEADER_SIZE + 8:
        return None
    flag = IRHEADER_STRUCT.unpack_from(head)[0]
    if flag < 2:
        return None
    if len(reader.head_at(index.offset(0), header_size(flag) + 1)) > header_size(flag):
        return None  # an image follows the labels
    first, end = struct.unpack_from("<ff", head, IRHEADER_SIZE)
    if not (1 <= first <= end) or first != int(first) or end != int(end):
        return None
    return int(first), int(end)


class Headers(NamedTuple):
    """The IRHeaders of many records, as arrays (one entry per record, in the order asked).

    Attributes:
        label: float64: the scalar label, or ``label[0]`` when ``flag`` > 0.
        id, id2: uint64.
        body: int64: where the bytes after the header and its labels start in the payload.
        length: int64: the payload's length.
        single: bool: the record is in one frame, so that its payload lies at ``offset + 8``.
    """

    label: np.ndarray
    id: np.ndarray
    id2: np.ndarray
    body: np.ndarray
    length: np.ndarray
    single: np.ndarray


def read_headers(reader: RecordReader, offsets: np.ndarray, damaged: list[tuple[int, RecordIOError]] | None = None) -> Headers:
    """The IRHeaders of the records at ``offsets``: all at once with numpy where a record is
    in one frame (what nearly every image record is), the others one by one.

    Args:
        damaged: where a damaged record is noted, as ``(position in offsets, error)``, instead
            of raised (its entries are then zero and its length -1).

    Raises:
        RecordIOError: a record is damaged; HeaderError: a payload is too short for an IRHeader.
    """
    n = len(offsets)
    out = Headers(np.zeros(n, np.float64), np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool))
    if not n:
        return out
    if reader.size < 8:
        raise TruncatedRecordError(f"{reader.path}: no record at byte 0", 0)
    words = reader.words(0, reader.size // 4)
    try:
        w = offsets // 4
        ok = w + 1 < len(words)
        w_ok = np.where(ok, w, 0)
        magic, lrec = words[w_ok], words[w_ok + 1]
        length = length_of(lrec).astype(np.int64)
        single = ok & (magic == MAGIC) & (cflag_of(lrec) == 0) & (length >= IRHEADER_SIZE)
        single &= offsets + 8 + length <= reader.size
        head = np.where(single, w, 0)[:, None] + np.arange(2, 8)[None, :]
        h = words[head]  # flag, label, id lo, id hi, id2 lo, id2 hi
        flag = h[:, 0].astype(np.int64)
        single &= length >= header_size(flag)
        label = h[:, 1].view(np.float32).astype(np.float64)
        has_labels = single & (flag > 0)
        if has_labels.any():  # label[0], after the header
            first = words[np.where(has_labels, w + 8, 0)].view(np.float32).astype(np.float64)
            label = np.where(has_labels, first, label)
        out.label[:] = label
        out.id[:] = h[:, 2].astype(np.uint64) | (h[:, 3].astype(np.uint64) << np.uint64(32))
        out.id2[:] = h[:, 4].astype(np.uint64) | (h[:, 5].astype(np.uint64) << np.uint64(32))
        out.body[:] = header_size(flag)
        out.length[:] = length
        out.single[:] = single
        del h, head, magic, lrec
    finally:
        del words
    for i in np.flatnonzero(~out.single).tolist():  # multi-frame or damaged: the careful way
        offset = int(offsets[i])
        try:
            payload = reader.read_at(offset)[0]
            if len(payload) < IRHEADER_SIZE:
                raise HeaderError(f"{reader.path}: the record at byte {offset} is {len(payload)} bytes, too short for an IRHeader", offset)
            try:
                header, _ = unpack(payload)
            except HeaderError as e:
                raise HeaderError(f"{reader.path}: the record at byte {offset}: {e}", offset) from None
        except RecordIOError as e:
            if damaged is None:
                raise
            damaged.append((i, e))
            out.length[i] = -1
            continue
        out.label[i] = float(header.label[0]) if header.flag else float(header.label)
        out.id[i], out.id2[i] = header.id, header.id2
        out.body[i] = header_size(header.flag)
        out.length[i] = len(payload)
    return out


# --------------------------------------------------------------------------- #
# The mxnet.recordio drop-in API
# --------------------------------------------------------------------------- #


class MXRecordIO:
    """Sequential reading or writing of a ``.rec`` file, like ``mx.recordio.MXRecordIO``.

    Code written for MXNet runs unchanged. Where MXNet's behaviour is a trap, this
    class does what a user expects:

    * after ``read()`` returns None at the end of the file, ``seek``/``read_idx``
      work again without ``reset()`` (MXNet keeps returning None);
    * pickling does not close the original object (MXNet closes it); an open
      writer cannot be pickled (MXNet's copy would truncate the file);
    * reading in a process forked after opening works (MXNet raises
      "Forbidden operation in multiple processes"): the file is memory-mapped and
      the read position belongs to this object;
    * ``tell()`` works for readers too.

    Args:
        uri: path of the ``.rec``.
        flag: ``'r'`` to read, ``'w'`` to write (truncating).

    Raises:
        ValueError: ``flag`` is not ``'r'`` or ``'w'``.
    """

    def __init__(self, uri: PathLike, flag: str, *, storage_options: dict | None = None):
        self.uri = os.fspath(uri)
        self.storage_options = storage_options  # for a URL (s3://...): fsspec's options
        if flag not in ("r", "w"):
            raise ValueError(f"Invalid flag {flag!r}: use 'r' to read or 'w' to write")
        self.flag = flag
        self.writable = flag == "w"
        self.is_open = False
        self._reader: RecordReader | None = None
        self._writer: RecordWriter | None = None
        self._pos = 0
        self.open()

    def open(self) -> None:
        """Open the file (a writer truncates it)."""
        if self.writable:
            self._writer = RecordWriter(self.uri)
        else:
            self._reader = RecordReader(self.uri, storage_options=self.storage_options)
            self._pos = 0
        self.pid = os.getpid()
        self.is_open = True

    def close(self) -> None:
        """Close the file (idempotent)."""
        if not self.is_open:
            return
        self.is_open = False
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def reset(self) -> None:
        """Close and reopen: a reader starts again at the first record; a writer truncates."""
        self.close()
        self.open()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self) -> MXRecordIO:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict:
        if self.is_open and self.writable:
            raise TypeError(f"cannot pickle {self.uri!r} open for writing: the copy would truncate it")
        state = {k: v for k, v in self.__dict__.items() if k not in ("_reader", "_writer")}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reader = self._writer = None
        if self.is_open:
            pos = self._pos
            self.open()
            self._pos = pos

    def _require(self, writing: bool) -> Any:
        if not self.is_open:
            raise ValueError(f"{self.uri}: the file is closed")
        if writing != self.writable:
            raise ValueError(f"{self.uri}: opened with flag {self.flag!r}, cannot {'write' if writing else 'read'}")
        return self._writer if writing else self._reader

    def write(self, buf: bytes) -> None:
        """Append one record (``buf`` must be bytes)."""
        self._require(True).write(buf)

    def read(self) -> bytes | None:
        """Return the next record, or None at the end of the file.

        Raises:
            RecordIOError: the record at the current position is damaged or truncated.
        """
        reader: RecordReader = self._require(False)
        if self._pos >= reader.size:
            return None
        payload, self._pos = reader.read_at(self._pos)
        return payload

    def tell(self) -> int:
        """The byte offset of the next record to be written or read."""
        if self.writable:
            return self._require(True).tell()
        self._require(False)
        return self._pos


class MXIndexedRecordIO(MXRecordIO):
    """Random access by key through a ``.idx`` file, like ``mx.recordio.MXIndexedRecordIO``.

    ``read_idx(key)`` reads one record by key without a per-read system call (the
    ``.rec`` is memory-mapped) and is safe after fork. The ``.idx`` is parsed with
    numpy (integer keys), so a 1,000,000-entry index opens in a fraction of a
    second. ``keys`` is the list of keys in ``.idx`` line order (duplicates kept)
    and ``idx`` the dict key -> offset (the last duplicate wins), as in MXNet; both
    are built on first use. The differences from MXRecordIO apply here too.

    Args:
        idx_path: path of the ``.idx`` (or a URL, for reading).
        uri: path of the ``.rec`` (or a URL such as ``s3://bucket/train.rec``, for reading:
            every record is one ranged request).
        flag: ``'r'`` or ``'w'``.
        key_type: the type keys are converted to (``int`` by default).
        storage_options: for URLs, fsspec's options (credentials, ``endpoint_url``...);
            the environment's settings are used otherwise.
    """

    def __init__(self, idx_path: PathLike, uri: PathLike, flag: str, key_type: Callable[[Any], Any] = int, *, storage_options: dict | None = None):
        self.idx_path = os.fspath(idx_path)
        self.key_type = key_type
        self._keys: list[Any] | None = None
        self._idx: dict | None = None
        super().__init__(uri, flag, storage_options=storage_options)

    def open(self) -> None:
        if self.writable:
            self._writer = RecordWriter(self.uri, self.idx_path)
            self._keys, self._idx = [], {}
        else:
            self._reader = RecordReader(self.uri, self.idx_path, key_type=self.key_type, storage_options=self.storage_options)
            self._keys = self._idx = None
            self._pos = 0
        self.pid = os.getpid()
        self.is_open = True

    @property
    def keys(self) -> list[Any]:
        """The keys in ``.idx`` line order (duplicates kept)."""
        if self._keys is None:
            self._keys = self._require(False).keys()
        return self._keys

    @keys.setter
    def keys(self, value: list[Any]) -> None:
        self._keys = value

    @property
    def idx(self) -> dict:
        """Key -> byte offset (the last of duplicate keys wins)."""
        if self._idx is None:
            index = self._require(False).index
            self._idx = dict(zip(index.keys(), index.offsets.tolist()))
        return self._idx

    @idx.setter
    def idx(self, value: dict) -> None:
        self._idx = value

    def seek(self, idx: Any) -> None:
        """Move the read position to the record of key ``idx``. Raises KeyError if absent."""
        reader: RecordReader = self._require(False)
        self._pos = reader.index.offset(idx)  # type: ignore[union-attr]

    def read_idx(self, idx: Any) -> bytes:
        """Return the record of key ``idx``.

        Raises:
            KeyError: the key is not in the ``.idx``.
            IndexOffsetError: its offset is not a record head.
            RecordIOError: the record is damaged.
        """
        reader = self._reader
        if reader is None or not self.is_open:
            reader = self._require(False)
        return reader.read(idx)

    def write_idx(self, idx: Any, buf: bytes) -> None:
        """Append a record and its ``.idx`` line under key ``key_type(idx)``."""
        writer: RecordWriter = self._require(True)
        key = self.key_type(idx)
        pos = writer.write_idx(key, buf)
        self._idx[key] = pos  # type: ignore[index]
        self._keys.append(key)  # type: ignore[union-attr]
