"""MXNet's NDArray file format (``mx.nd.save`` / ``mx.nd.load``), for dense arrays.

What ``ImageRecordIter(mean_img=...)`` reads and writes. The byte layout, all little-endian
(``src/ndarray/ndarray.cc``, ``NDArray::Save``)::

    u64 0x112 (kMXAPINDArrayListMagic)   u64 0 (reserved)
    u64 n, then n arrays:
        u32 0xF993FAC9 (V2; V3 0xF993FACA under numpy shape semantics, V1 0xF993FAC8)
        i32 storage type (0: dense)
        i32 ndim, i64 x ndim                 the shape (a legacy file: ndim, then u32 x ndim, no magic)
        i32 device type, i32 device id       the context (1, 0: the CPU)
        i32 type flag                        0 float32, 1 float64, 2 float16, 3 uint8, 4 int32, 5 int8, 6 int64
        the values, C order
    u64 k, then k names: u64 length, bytes (k is 0 or n)
"""

from __future__ import annotations

import os
import struct

import numpy as np

from .errors import NDArrayFileError
from .fsutil import atomic_open

__all__ = ["LIST_MAGIC", "load", "save"]

LIST_MAGIC = 0x112
_V1, _V2, _V3 = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
#: mshadow's type flags.
TYPES = {0: np.float32, 1: np.float64, 2: np.float16, 3: np.uint8, 4: np.int32, 5: np.int8, 6: np.int64, 7: np.bool_, 8: np.int16, 9: np.uint16, 10: np.uint32, 11: np.uint64}
_FLAGS = {np.dtype(t): f for f, t in TYPES.items()}
_CPU = 1


class _Reader:
    def __init__(self, data: bytes, path: str):
        self.data, self.path, self.pos = data, path, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise NDArrayFileError(f"{self.path}: the file ends at byte {len(self.data)}, inside {what} (at byte {self.pos})")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))


def _read_array(r: _Reader, n: int) -> np.ndarray:
    at = r.pos
    (magic,) = r.unpack("<I", f"array {n}")
    if magic in (_V2, _V3):
        (stype,) = r.unpack("<i", f"array {n}'s storage type")
        if stype != 0:
            raise NDArrayFileError(f"{r.path}: array {n} (byte {at}) is sparse (storage type {stype}): only dense arrays are read")
    if magic in (_V1, _V2, _V3):
        (ndim,) = r.unpack("<i", f"array {n}'s shape")
        if not 0 <= ndim <= 32:
            raise NDArrayFileError(f"{r.path}: array {n} (byte {at}) claims {ndim} dimensions")
        shape = r.unpack(f"<{ndim}q", f"array {n}'s shape")
    else:  # a legacy array: the magic is its ndim, the dims are u32
        ndim = magic
        if not 0 < ndim <= 32:
            raise NDArrayFileError(f"{r.path}: byte {at} is not an NDArray (magic 0x{magic:08X})")
        shape = r.unpack(f"<{ndim}I", f"array {n}'s shape")
    if ndim == 0:
        return np.zeros(0, np.float32)
    r.unpack("<ii", f"array {n}'s context")
    (flag,) = r.unpack("<i", f"array {n}'s type")
    if flag not in TYPES:
        raise NDArrayFileError(f"{r.path}: array {n} (byte {at}) has the unknown type flag {flag}")
    dtype = np.dtype(TYPES[flag])
    if any(d < 0 for d in shape):
        raise NDArrayFileError(f"{r.path}: array {n} (byte {at}) has the shape {shape}")
    count = int(np.prod(shape, dtype=np.int64))
    body = r.take(count * dtype.itemsize, f"array {n}'s {count:,} values")
    return np.frombuffer(body, dtype=dtype).reshape(shape).copy()


def load(path: str | os.PathLike[str]) -> dict[str, np.ndarray] | list[np.ndarray]:
    """The arrays of an ``mx.nd.save`` file: a dict when they are named, else a list.

    Raises:
        NDArrayFileError: the file is not an NDArray file, is cut short or holds sparse arrays.
        OSError: it cannot be read.
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        r = _Reader(f.read(), name)
    header, _ = r.unpack("<QQ", "the header")
    if header != LIST_MAGIC:
        raise NDArrayFileError(f"{name}: not an MXNet NDArray file (it starts with 0x{header:X}, not 0x112)")
    (n,) = r.unpack("<Q", "the array count")
    if n > len(r.data) // 12:
        raise NDArrayFileError(f"{name}: claims {n:,} arrays in {len(r.data):,} bytes")
    arrays = [_read_array(r, i) for i in range(n)]
    (k,) = r.unpack("<Q", "the name count")
    if k not in (0, n):
        raise NDArrayFileError(f"{name}: {k} names for {n} arrays")
    names = []
    for i in range(k):
        (length,) = r.unpack("<Q", f"name {i}")
        names.append(r.take(length, f"name {i}").decode("utf-8", "replace"))
    return dict(zip(names, arrays)) if names else arrays


def save(path: str | os.PathLike[str], arrays: dict[str, np.ndarray] | list[np.ndarray]) -> None:
    """Write ``arrays`` as ``mx.nd.save(path, arrays)`` does (V2 arrays on the CPU), atomically;
    a list is saved without names, as MXNet saves one."""
    values = list(arrays.values()) if isinstance(arrays, dict) else list(arrays)
    names = list(arrays) if isinstance(arrays, dict) else []
    parts = [struct.pack("<QQQ", LIST_MAGIC, 0, len(values))]
    for array in values:
        a = np.ascontiguousarray(array)
        if a.dtype not in _FLAGS:
            raise ValueError(f"MXNet has no type for {a.dtype}")
        parts.append(struct.pack(f"<Iii{a.ndim}qiii", _V2, 0, a.ndim, *a.shape, _CPU, 0, _FLAGS[a.dtype]))
        parts.append(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    parts.append(struct.pack("<Q", len(names)))
    for key in names:
        raw = key.encode("utf-8")
        parts.append(struct.pack("<Q", len(raw)) + raw)
    with atomic_open(os.fspath(path), "wb") as f:
        f.write(b"".join(parts))
