"""``mx.io``'s protocol: ``DataDesc``, ``DataBatch`` and ``DataIter``, MXNet 1.9.1's base classes.

Every MXNet recipe subclasses ``DataIter`` and returns ``DataBatch``es; these are MXNet's
semantics (``next`` from ``iter_next`` and the getters, ``__iter__`` returning the iterator
itself, ``reset`` doing nothing until overridden), written anew. The arrays a batch holds
are whatever its iterator gives: NDArrays from ``im2rec.mx.io``, numpy from ``im2rec``.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

__all__ = ["DataBatch", "DataDesc", "DataIter"]


class DataDesc(namedtuple("DataDesc", ["name", "shape"])):
    """``mx.io.DataDesc``: a ``(name, shape)`` tuple, as MXNet's (so it equals ``("data", shape)``),
    with ``dtype`` and ``layout`` attributes."""

    dtype: Any  # attributes beside the tuple, as MXNet's
    layout: str

    def __new__(cls, name: str, shape: tuple[int, ...], dtype: Any = np.float32, layout: str = "NCHW") -> DataDesc:
        desc = super().__new__(cls, name, tuple(shape))
        desc.dtype, desc.layout = dtype, layout
        return desc

    def __repr__(self) -> str:
        return f"DataDesc[{self.name},{self.shape},{np.dtype(self.dtype)},{self.layout}]"

    @staticmethod
    def get_batch_axis(layout: str | None) -> int:
        """Where ``N`` is in ``layout`` (0 without one)."""
        return 0 if layout is None else layout.find("N")

    @staticmethod
    def get_list(shapes: list[tuple[str, tuple[int, ...]]], types: list[tuple[str, Any]] | None) -> list[DataDesc]:
        """``(name, shape)`` pairs (and ``(name, dtype)`` pairs) as DataDescs."""
        if types is None:
            return [DataDesc(name, shape) for name, shape in shapes]
        dtypes = dict(types)
        return [DataDesc(name, shape, dtypes[name]) for name, shape in shapes]


class DataBatch:
    """``mx.io.DataBatch(data, label=None, pad=None, index=None, bucket_key=None,
    provide_data=None, provide_label=None)``: ``data`` and ``label`` are lists of arrays,
    ``pad`` how many of the last rows are not this epoch's, ``index`` the records' ids."""

    def __init__(self, data: Any, label: Any = None, pad: int | None = None, index: Any = None, bucket_key: Any = None, provide_data: list | None = None, provide_label: list | None = None):
        if data is not None and not isinstance(data, (list, tuple)):
            raise TypeError(f"DataBatch: data must be a list of arrays, got {type(data).__name__}")
        if label is not None and not isinstance(label, (list, tuple)):
            raise TypeError(f"DataBatch: label must be a list of arrays, got {type(label).__name__}")
        self.data, self.label, self.pad, self.index = data, label, pad, index
        self.bucket_key = bucket_key
        self.provide_data, self.provide_label = provide_data, provide_label

    def __str__(self) -> str:
        data = [d.shape for d in self.data or ()]
        label = [d.shape for d in self.label] if self.label else None
        return f"{type(self).__name__}: data shapes: {data} label shapes: {label}"

    def __repr__(self) -> str:
        return f"{self} pad: {self.pad}"


class DataIter:
    """``mx.io.DataIter``: the base of every iterator. A subclass defines ``next`` (or
    ``iter_next`` with ``getdata``, ``getlabel``, ``getpad``, ``getindex``) and ``reset``; a
    ``for`` loop runs one epoch, ``reset()`` starts the next."""

    def __init__(self, batch_size: int = 0):
        self.batch_size = batch_size

    def __iter__(self) -> Any:
        return self

    def reset(self) -> None:
        """Back to the start of the data (the default does nothing)."""

    def next(self) -> DataBatch:
        """The next batch, from ``iter_next`` and the getters.

        Raises:
            StopIteration: at the end of the data.
        """
        if self.iter_next():
            return DataBatch(data=self.getdata(), label=self.getlabel(), pad=self.getpad(), index=self.getindex())
        raise StopIteration

    def __next__(self) -> DataBatch:
        return self.next()

    def iter_next(self) -> bool | None:
        """Move to the next batch; False (or None, as MXNet's base) at the end."""
        return None

    def getdata(self) -> Any:
        return None

    def getlabel(self) -> Any:
        return None

    def getindex(self) -> Any:
        return None

    def getpad(self) -> Any:
        return None
