"""``mx.Context``, ``mx.cpu``, ``mx.gpu``: accepted everywhere MXNet takes them, all meaning the CPU.

An MXNet pipeline names devices (``ctx=mx.gpu(0)``, ``mx.Context('cpu_pinned', 0)``); here
every array is a numpy array in host memory, so a context is kept as given (it prints and
compares as MXNet's) and moves nothing. Hand the batches to PyTorch to use a GPU.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["Context", "cpu", "cpu_pinned", "current_context", "gpu", "num_gpus"]

_DEVICE_TYPES = {1: "cpu", 2: "gpu", 3: "cpu_pinned", 5: "cpu_shared"}
_local = threading.local()


class Context:
    """``mx.Context(device_type, device_id=0)``: ``'cpu'``, ``'gpu'``, ``'cpu_pinned'`` or
    ``'cpu_shared'`` (or another Context); a ``with`` block makes it the default, as MXNet's."""

    device_typeid: int
    device_id: int

    def __init__(self, device_type: Any, device_id: int = 0):
        if isinstance(device_type, Context):
            self.device_typeid, self.device_id = device_type.device_typeid, device_type.device_id
            return
        names = {v: k for k, v in _DEVICE_TYPES.items()}
        if device_type not in names:
            raise ValueError(f"Context: unknown device type {device_type!r}: one of {', '.join(repr(n) for n in names)}")
        self.device_typeid, self.device_id = names[device_type], int(device_id)
        self._previous: list[Context] = []

    @property
    def device_type(self) -> str:
        return _DEVICE_TYPES[self.device_typeid]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Context) and (self.device_typeid, self.device_id) == (other.device_typeid, other.device_id)

    def __hash__(self) -> int:
        return hash((self.device_typeid, self.device_id))

    def __repr__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    __str__ = __repr__

    def __enter__(self) -> Context:
        self.__dict__.setdefault("_previous", []).append(current_context())
        _local.value = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _local.value = self._previous.pop()

    def empty_cache(self) -> None:
        """Nothing to free: no device memory is used."""


def cpu(device_id: int = 0) -> Context:
    return Context("cpu", device_id)


def gpu(device_id: int = 0) -> Context:
    """A GPU context, accepted; the arrays stay in host memory (hand them to PyTorch for a GPU)."""
    return Context("gpu", device_id)


def cpu_pinned(device_id: int = 0) -> Context:
    return Context("cpu_pinned", device_id)


def current_context() -> Context:
    return getattr(_local, "value", None) or Context("cpu", 0)


def num_gpus() -> int:
    """0: im2rec.mx computes on the CPU."""
    return 0
