"""How messages and reports say a count (``plural(3, "class", "classes")`` is ``3 classes``), and
how a size is read from the words a user types (``parse_size("64MB")``)."""

from __future__ import annotations

import re

__all__ = ["parse_size", "plural"]


def plural(n: int, one: str, many: str = "") -> str:
    """``n`` with thousands separators and the noun that goes with it (``many`` defaults to ``one + "s"``)."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_size(text: str) -> int:
    """``"1GB"`` -> 10**9, ``"500MB"``, ``"64MiB"`` -> 2**26, ``"12345"`` -> 12345 bytes.

    Raises:
        ValueError: not a size.
    """
    m = _SIZE_RE.match(text)
    unit = (m.group(2) or "").lower() if m else ""
    if not m or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size: use bytes or a unit such as 500MB, 1GB, 64MiB")
    size = int(float(m.group(1)) * _UNITS[unit])
    if size < 1:
        raise ValueError(f"{text!r} is not a positive size")
    return size
