"""How messages and reports say a count: ``plural(3, "class", "classes")`` is ``3 classes``."""

from __future__ import annotations

__all__ = ["plural"]


def plural(n: int, one: str, many: str = "") -> str:
    """``n`` with thousands separators and the noun that goes with it (``many`` defaults to ``one + "s"``)."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"
