"""``mx.random.seed``: the generators MXNet's Python data code draws from, seeded together.

MXNet's Python augmenters and iterators draw from Python's ``random`` (crops, flips, jitter,
shuffles) and numpy's global generator (PCA lighting, ``NDArrayIter``'s shuffle);
``seed(s)`` seeds both. MXNet's own C++ generator, which its ``ImageRecordIter`` used, is not
reproduced: give ``seed``/``seed_aug`` to ``ImageRecordIter`` instead. ``mx.random``'s
samplers (``uniform``, ``normal``, ...) are out of scope: use numpy's.
"""

from __future__ import annotations

import random as _random
from typing import Any

import numpy as np

__all__ = ["seed"]


def seed(seed_state: int, ctx: Any = "all") -> None:
    """Seed Python's ``random`` and numpy's global generator with ``seed_state``."""
    if not isinstance(seed_state, (int, np.integer)):
        raise ValueError(f"mx.random.seed: seed_state must be an int, got {type(seed_state).__name__}")
    _random.seed(int(seed_state))
    np.random.seed(int(seed_state) % (1 << 32))


def __getattr__(name: str) -> Any:
    raise AttributeError(f"mx.random.{name} is not in im2rec.mx (only seed is): use numpy.random.{name} or torch's samplers instead")
