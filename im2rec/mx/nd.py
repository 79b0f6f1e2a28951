"""``mx.nd`` on numpy: ``NDArray`` is a numpy array with MXNet 1.9.1's methods and results.

What data pipelines do with MXNet's arrays works as under MXNet: ``mx.nd.array(x)`` is float32
unless ``dtype`` is given (or ``x`` is an NDArray); a number or an integer index gives shape
``(1,)``, never a 0-d array; a reduction without ``axis`` gives ``(1,)``; sums add in float32
as MXNet's Kahan loop does; an operation with a Python number keeps the array's dtype (the
number is cast to it first: ``uint8 * 2.7`` multiplies by 2, ``uint8 / 2`` divides and
truncates); comparisons give 0/1 in the array's dtype; ``astype(copy=False)``, in-place
arithmetic and slice assignment write into the array. Arrays live on the CPU: ``ctx`` and
``as_in_context`` accept any ``Context`` and keep the array where it is.

The numpy underneath is public: ``asnumpy()`` copies, ``np.asarray(a)`` does not, and
``torch.from_numpy(a)`` shares the memory. Autograd, sparse storage and the operators of
training (``nd.contrib``, ``nd.linalg``, ``nd.op``) are out of scope: their names raise
``AttributeError`` naming what to use instead.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import ndfile
from .context import Context, cpu

__all__ = [
    "NDArray",
    "abs",
    "arange",
    "array",
    "broadcast_to",
    "cast",
    "clip",
    "concat",
    "concatenate",
    "dot",
    "empty",
    "exp",
    "expand_dims",
    "flip",
    "full",
    "load",
    "log",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "ones",
    "ones_like",
    "prod",
    "reshape",
    "round",
    "save",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "sum",
    "tile",
    "transpose",
    "waitall",
    "where",
    "zeros",
    "zeros_like",
]

_DEFAULT = np.float32
_py_sum, _py_max, _py_min, _py_abs, _py_round = sum, max, min, abs, round  # the builtins, before this module's names

#: The ufuncs whose Python-number operand MXNet casts to the array's dtype (``_plus_scalar`` and kin).
_SCALAR_UFUNCS = {np.add, np.subtract, np.multiply, np.true_divide, np.floor_divide, np.power, np.maximum, np.minimum, np.mod}
_COMPARISONS = {np.equal, np.not_equal, np.greater, np.greater_equal, np.less, np.less_equal}


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Number) and not isinstance(x, np.ndarray)


def _scalar_as(value: Any, dtype: np.dtype) -> np.ndarray:
    """``DType(scalar)``, as C casts it: an integer dtype truncates and wraps."""
    if dtype.kind in "iu":
        return np.array(np.trunc(value) if isinstance(value, float) else value).astype(np.int64).astype(dtype)
    return np.array(value).astype(dtype)


class NDArray(np.ndarray):
    """``mx.nd.NDArray``: a numpy array with MXNet's methods (``asnumpy``, ``asscalar``,
    ``astype(copy=)``, ``copyto``, ``as_in_context``, ``context``, ``wait_to_read``, MXNet's
    ``reshape`` codes) and results (see the module's docstring)."""

    __array_priority__ = 1000.0

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method == "__call__" and len(inputs) == 2:
            arrays = [x for x in inputs if isinstance(x, np.ndarray)]
            if len(arrays) == 1 and isinstance(arrays[0], NDArray) and _is_number(inputs[0] if inputs[1] is arrays[0] else inputs[1]):
                dtype = arrays[0].dtype
                if ufunc in _SCALAR_UFUNCS or ufunc in _COMPARISONS:
                    inputs = tuple(_scalar_as(x, dtype) if _is_number(x) else x for x in inputs)
                    if ufunc is np.true_divide and dtype.kind in "iu":
                        return self._plain_call(_trunc_divide, inputs, kwargs)
        if ufunc is np.true_divide and method == "__call__" and all(getattr(x, "dtype", np.dtype(float)).kind in "iu" for x in inputs):
            return self._plain_call(_trunc_divide, inputs, kwargs)
        result = self._plain_call(getattr(ufunc, method), inputs, kwargs)
        if ufunc in _COMPARISONS and method == "__call__" and isinstance(result, np.ndarray):
            dtype = next(x.dtype for x in inputs if isinstance(x, NDArray))
            return result.astype(dtype).view(NDArray)
        return result

    @staticmethod
    def _plain_call(fn: Any, inputs: tuple, kwargs: dict) -> Any:
        plain = tuple(x.view(np.ndarray) if isinstance(x, NDArray) else x for x in inputs)
        out = kwargs.get("out")
        if out is not None:
            kwargs = {**kwargs, "out": tuple(o.view(np.ndarray) if isinstance(o, NDArray) else o for o in out)}
        result = fn(*plain, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _wrap(result)

    # ---- indexing: an integer index never gives a 0-d array

    def __getitem__(self, key: Any) -> Any:
        out = super().__getitem__(key)
        if isinstance(out, np.ndarray) and out.ndim > 0:
            return out
        # one element: a (1,) view of it, so that ``a[i][:] = v`` writes into ``a`` as MXNet's
        keys = key if isinstance(key, tuple) else (key,)
        if all(isinstance(k, (numbers.Integral, type(Ellipsis))) for k in keys):
            as_slices = tuple(k if k is Ellipsis else slice(int(k), int(k) + 1 or None) for k in keys)
            return super().__getitem__(as_slices).reshape(1)
        return np.asarray(out).reshape(1).view(NDArray)

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, np.ndarray) and value.shape == (1,):
            value = value.view(np.ndarray).reshape(())  # MXNet's one-element arrays fit any place
        super().__setitem__(key, value)

    # ---- MXNet's methods

    def asnumpy(self) -> np.ndarray:
        """A numpy copy of the values."""
        return np.array(self.view(np.ndarray), copy=True)

    def asscalar(self) -> Any:
        """The value of a one-element array (a numpy scalar of its dtype).

        Raises:
            ValueError: the array has more than one element.
        """
        if self.size != 1:
            raise ValueError("The current array is not a scalar")
        return self.view(np.ndarray).reshape(-1)[0]

    def astype(self, dtype: Any, copy: bool = True, **kwargs: Any) -> NDArray:  # type: ignore[override]
        """Cast; with ``copy=False`` an array already of ``dtype`` is returned itself, as MXNet's."""
        if not copy and np.dtype(dtype) == self.dtype:
            return self
        return super().astype(dtype, **kwargs).view(NDArray)

    def wait_to_read(self) -> None:
        """Nothing to wait for: numpy computes eagerly."""

    def wait_to_write(self) -> None:
        """Nothing to wait for: numpy computes eagerly."""

    @property
    def context(self) -> Context:
        """Where the array lives: the CPU."""
        return cpu(0)

    ctx = context

    @property
    def stype(self) -> str:
        return "default"

    def as_in_context(self, context: Context) -> NDArray:
        """The array itself (every array is on the CPU)."""
        return self

    def as_nd_ndarray(self) -> NDArray:
        return self

    def as_np_ndarray(self) -> np.ndarray:
        """The numpy array underneath (MXNet's ``mx.np`` array, here numpy's own)."""
        return self.view(np.ndarray)

    def copyto(self, other: Any) -> NDArray:
        """Copy into ``other`` (an NDArray of the same shape) and return it; to a ``Context``: a copy."""
        if isinstance(other, NDArray):
            if other.shape != self.shape:
                raise ValueError(f"copyto: the shapes differ: {self.shape} to {other.shape}")
            other[...] = self
            return other
        if isinstance(other, Context):
            return self.copy()
        raise TypeError(f"copyto does not support type {type(other).__name__}")

    def reshape(self, *shape: Any, reverse: bool = False, **kwargs: Any) -> NDArray:
        """MXNet's ``reshape``: ``0`` keeps a dimension, ``-1`` infers one, ``-2`` keeps the rest,
        ``-3`` merges two, ``-4 a b`` splits one (``shape=`` as a keyword too)."""
        if "shape" in kwargs:
            shape = (kwargs.pop("shape"),)
        if kwargs:
            raise TypeError(f"reshape got unexpected keyword arguments {sorted(kwargs)}")
        wanted = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        return np.ndarray.reshape(self, _infer_shape(self.shape, wanted, reverse)).view(NDArray)

    def transpose(self, *axes: Any, **kwargs: Any) -> NDArray:
        if "axes" in kwargs:
            axes = (kwargs.pop("axes"),)
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return np.ndarray.transpose(self, *axes) if axes else np.ndarray.transpose(self)

    def flip(self, axis: int) -> NDArray:
        return flip(self, axis)

    def expand_dims(self, axis: int) -> NDArray:
        return expand_dims(self, axis)

    def tile(self, reps: Sequence[int]) -> NDArray:
        return tile(self, reps)

    def broadcast_to(self, shape: Sequence[int]) -> NDArray:
        return broadcast_to(self, shape)

    def slice_axis(self, axis: int, begin: int, end: int | None) -> NDArray:
        index: list[Any] = [slice(None)] * self.ndim
        index[axis] = slice(begin, end)
        return self[tuple(index)]

    def sum(self, axis: Any = None, keepdims: bool = False, exclude: bool = False, **kwargs: Any) -> NDArray:  # type: ignore[override]
        return sum(self, axis=axis, keepdims=keepdims, exclude=exclude)

    def mean(self, axis: Any = None, keepdims: bool = False, exclude: bool = False, **kwargs: Any) -> NDArray:  # type: ignore[override]
        return mean(self, axis=axis, keepdims=keepdims, exclude=exclude)

    def max(self, axis: Any = None, keepdims: bool = False, exclude: bool = False, **kwargs: Any) -> NDArray:  # type: ignore[override]
        return max(self, axis=axis, keepdims=keepdims, exclude=exclude)

    def min(self, axis: Any = None, keepdims: bool = False, exclude: bool = False, **kwargs: Any) -> NDArray:  # type: ignore[override]
        return min(self, axis=axis, keepdims=keepdims, exclude=exclude)

    def clip(self, a_min: float, a_max: float, **kwargs: Any) -> NDArray:  # type: ignore[override]
        return clip(self, a_min, a_max)

    def tostype(self, stype: str) -> NDArray:
        if stype != "default":
            raise AttributeError(f"sparse storage ({stype!r}) is not in im2rec.mx: use scipy.sparse or torch.sparse")
        return self

    def attach_grad(self, *args: Any, **kwargs: Any) -> None:
        raise AttributeError("NDArray.attach_grad: autograd is not in im2rec.mx (its data pipeline only): train with PyTorch (torch.from_numpy(array))")

    @property
    def grad(self) -> None:
        raise AttributeError("NDArray.grad: autograd is not in im2rec.mx (its data pipeline only): train with PyTorch (torch.from_numpy(array))")

    def __repr__(self) -> str:
        shape = "x".join(str(d) for d in self.shape)
        return f"\n{np.array2string(self.view(np.ndarray))}\n<NDArray {shape} @cpu(0)>"

    __str__ = __repr__

    def __eq__(self, other: Any) -> Any:
        return False if other is None else np.equal(self, other)

    def __ne__(self, other: Any) -> Any:
        return True if other is None else np.not_equal(self, other)

    __hash__ = None

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError("The truth value of an NDArray with multiple elements is ambiguous.")
        return bool(self.view(np.ndarray).reshape(-1)[0])


def _trunc_divide(a: Any, b: Any, **kwargs: Any) -> Any:
    """C's integer division (towards zero), in the integer dtype; by zero gives 0 (no exception)."""
    a, b = np.asarray(a), np.asarray(b)
    dtype = np.result_type(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.trunc(np.true_divide(a, b))
    q = np.where(np.isfinite(q), q, 0)
    out = kwargs.get("out")
    if out is not None:
        np.copyto(out[0], q, casting="unsafe")
        return out[0]
    return q.astype(dtype)


def _wrap(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.reshape(1).view(NDArray) if x.ndim == 0 else x.view(NDArray)
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    if isinstance(x, np.generic):
        return np.asarray(x).reshape(1).view(NDArray)
    return x


def _infer_shape(src: tuple[int, ...], codes: tuple[int, ...], reverse: bool = False) -> tuple[int, ...]:
    """MXNet's ``Reshape`` shape codes on ``src``."""
    if reverse:
        return tuple(reversed(_infer_shape(tuple(reversed(src)), _reverse_codes(codes))))
    out: list[int] = []
    i = 0  # the source dimension
    k = 0
    infer = -1
    while k < len(codes):
        c = int(codes[k])
        if c == 0:
            out.append(src[i])
            i += 1
        elif c == -1:
            infer = len(out)
            out.append(-1)
            i += 1
        elif c == -2:
            out.extend(src[i:])
            i = len(src)
        elif c == -3:
            out.append(src[i] * src[i + 1])
            i += 2
        elif c == -4:
            a, b = int(codes[k + 1]), int(codes[k + 2])
            d = src[i]
            a = d // b if a == -1 else a
            b = d // a if b == -1 else b
            out.extend([a, b])
            i += 1
            k += 2
        else:
            out.append(c)
            i += 1
        k += 1
    if infer >= 0:
        known = int(np.prod([d for j, d in enumerate(out) if j != infer]))
        out[infer] = int(np.prod(src)) // known if known else 0
    if int(np.prod(out)) != int(np.prod(src)):
        raise ValueError(f"cannot reshape an array of shape {src} to {tuple(codes)}")
    return tuple(out)


def _reverse_codes(codes: tuple[int, ...]) -> tuple[int, ...]:
    if -4 in codes:
        raise ValueError("reshape: reverse=True with -4 is not supported")
    return tuple(reversed(codes))


def _nd(x: Any) -> NDArray:
    return x if isinstance(x, NDArray) else array(x)


# --------------------------------------------------------------------------- making arrays


def array(source_array: Any, ctx: Context | None = None, dtype: Any = None) -> NDArray:
    """``mx.nd.array``: a copy of ``source_array``, float32 unless ``dtype`` is given or the
    source is an NDArray (whose dtype is kept); a number gives a 0-d array, as MXNet's."""
    if dtype is None:
        dtype = source_array.dtype if isinstance(source_array, NDArray) else _DEFAULT
    return np.array(source_array, dtype=dtype).view(NDArray)


def empty(shape: Any, ctx: Context | None = None, dtype: Any = _DEFAULT) -> NDArray:
    return np.empty(_shape(shape), dtype=dtype or _DEFAULT).view(NDArray)


def zeros(shape: Any, ctx: Context | None = None, dtype: Any = _DEFAULT, **kwargs: Any) -> NDArray:
    return np.zeros(_shape(shape), dtype=dtype or _DEFAULT).view(NDArray)


def ones(shape: Any, ctx: Context | None = None, dtype: Any = _DEFAULT, **kwargs: Any) -> NDArray:
    return np.ones(_shape(shape), dtype=dtype or _DEFAULT).view(NDArray)


def full(shape: Any, val: float, ctx: Context | None = None, dtype: Any = _DEFAULT, out: NDArray | None = None) -> NDArray:
    if out is not None:
        out[...] = val
        return out
    return np.full(_shape(shape), val, dtype=dtype or _DEFAULT).view(NDArray)


def zeros_like(data: Any, **kwargs: Any) -> NDArray:
    return np.zeros_like(np.asarray(data)).view(NDArray)


def ones_like(data: Any, **kwargs: Any) -> NDArray:
    return np.ones_like(np.asarray(data)).view(NDArray)


def arange(start: float, stop: float | None = None, step: float = 1.0, repeat: int = 1, infer_range: bool = False, ctx: Context | None = None, dtype: Any = _DEFAULT) -> NDArray:
    values = np.arange(start, stop, step, dtype=np.float64) if stop is not None else np.arange(0, start, step, dtype=np.float64)
    return np.repeat(values, repeat).astype(dtype).view(NDArray)


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, numbers.Integral) else tuple(int(d) for d in shape)


# --------------------------------------------------------------------------- operators


def flip(data: Any, axis: Any) -> NDArray:
    """``mx.nd.flip``: a copy reversed along ``axis`` (an int or a tuple)."""
    return np.ascontiguousarray(np.flip(np.asarray(data), axis)).view(NDArray)


def transpose(data: Any, axes: Sequence[int] = ()) -> NDArray:
    """``mx.nd.transpose``: a copy (contiguous), ``axes`` as numpy's (empty: reversed)."""
    return np.ascontiguousarray(np.transpose(np.asarray(data), tuple(axes) or None)).view(NDArray)


def reshape(data: Any, shape: Sequence[int] = (), reverse: bool = False, **kwargs: Any) -> NDArray:
    return _nd(data).reshape(tuple(shape), reverse=reverse)


def expand_dims(data: Any, axis: int) -> NDArray:
    return np.expand_dims(np.asarray(data), axis).view(NDArray)


def squeeze(data: Any, axis: Any = None) -> NDArray:
    return _wrap(np.squeeze(np.asarray(data), axis))


def tile(data: Any, reps: Sequence[int]) -> NDArray:
    return np.tile(np.asarray(data), tuple(reps)).view(NDArray)


def broadcast_to(data: Any, shape: Sequence[int]) -> NDArray:
    src = np.asarray(data)
    wanted = tuple(s if w == 0 else w for s, w in zip(src.shape, shape))
    return np.ascontiguousarray(np.broadcast_to(src, wanted)).view(NDArray)


def concat(*data: Any, dim: int = 1, **kwargs: Any) -> NDArray:
    """``mx.nd.concat``: along ``dim`` (1 by default, as MXNet's)."""
    return np.concatenate([np.asarray(d) for d in data], axis=dim).view(NDArray)


def concatenate(arrays: Sequence[Any], axis: int = 0, always_copy: bool = True) -> NDArray:
    return np.concatenate([np.asarray(d) for d in arrays], axis=axis).view(NDArray)


def stack(*data: Any, axis: int = 0, **kwargs: Any) -> NDArray:
    return np.stack([np.asarray(d) for d in data], axis=axis).view(NDArray)


def clip(data: Any, a_min: float, a_max: float, **kwargs: Any) -> NDArray:
    src = np.asarray(data)
    return np.clip(src, _scalar_as(a_min, src.dtype), _scalar_as(a_max, src.dtype)).view(NDArray)


def cast(data: Any, dtype: Any) -> NDArray:
    return np.asarray(data).astype(dtype).view(NDArray)


def dot(lhs: Any, rhs: Any, transpose_a: bool = False, transpose_b: bool = False, **kwargs: Any) -> NDArray:
    """``mx.nd.dot``: ``lhs``'s last axis with ``rhs``'s first (an N-d array is taken as 2-d).

    Up to ``_DOT_LIMIT`` products a value, they are added one after the other in the arrays'
    dtype, as MXNet's BLAS does (no fused multiply-add); beyond, by numpy's BLAS."""
    a, b = np.asarray(lhs), np.asarray(rhs)
    if transpose_a:
        a = a.reshape(a.shape[0], -1).T if a.ndim > 2 else a.T
    if transpose_b:
        b = b.reshape(b.shape[0], -1).T if b.ndim > 2 else b.T
    if not a.ndim or not b.ndim:
        return _wrap(a * b)
    dtype = np.result_type(a, b)
    if a.shape[-1] != b.shape[0]:
        raise ValueError(f"dot: shapes {a.shape} and {b.shape} do not match (the last axis of lhs with the first of rhs)")
    if a.shape[-1] > _DOT_LIMIT or dtype.kind != "f":
        return _wrap(np.tensordot(a, b, axes=(a.ndim - 1, 0)).astype(dtype, copy=False))
    lhs2, rhs2 = a.reshape(-1, a.shape[-1]).astype(dtype, copy=False), b.reshape(b.shape[0], -1).astype(dtype, copy=False)
    acc = lhs2[:, 0:1] * rhs2[0]
    for k in range(1, lhs2.shape[1]):
        acc += lhs2[:, k : k + 1] * rhs2[k]
    return _wrap(acc.reshape(*a.shape[:-1], *b.shape[1:]))


#: Up to this many products a value, ``dot`` adds them in MXNet's order.
_DOT_LIMIT = 256


def where(condition: Any, x: Any, y: Any) -> NDArray:
    return np.where(np.asarray(condition) != 0, np.asarray(x), np.asarray(y)).view(NDArray)


def _unary(fn: Any) -> Any:
    def op(data: Any, **kwargs: Any) -> NDArray:
        return _wrap(fn(np.asarray(data)))

    op.__name__ = fn.__name__
    op.__doc__ = f"``mx.nd.{fn.__name__}``, elementwise."
    return op


abs = _unary(np.abs)
sqrt = _unary(np.sqrt)
square = _unary(np.square)
exp = _unary(np.exp)
log = _unary(np.log)
round = _unary(np.round)


def maximum(lhs: Any, rhs: Any) -> NDArray:
    return _wrap(np.maximum(lhs, rhs))


def minimum(lhs: Any, rhs: Any) -> NDArray:
    return _wrap(np.minimum(lhs, rhs))


# --------------------------------------------------------------------------- reductions


def _axes(ndim: int, axis: Any, exclude: bool) -> tuple[int, ...]:
    if axis is None or axis == ():
        chosen = tuple(range(ndim))
    else:
        chosen = tuple(int(a) % ndim for a in ((axis,) if isinstance(axis, numbers.Integral) else axis))
    return tuple(a for a in range(ndim) if a not in chosen) if exclude else chosen


#: Up to this many values an output, a reduction runs MXNet's float32 Kahan loop, vectorised
#: over the outputs (also for many outputs); above, see ``_kahan_row``.
_KAHAN_LIMIT = 64


def _kahan(flat: np.ndarray) -> np.ndarray:
    """MXNet's ``sum::Reduce`` with its residual, along the last axis of ``flat``, in its dtype."""
    kept = flat.shape[:-1]
    total = np.zeros(kept, dtype=flat.dtype)
    residual = np.zeros(kept, dtype=flat.dtype)
    for k in range(flat.shape[-1]):
        y = flat[..., k] - residual
        t = total + y
        residual = (t - total) - y
        total = t
    return total


def _kahan_loop(values: np.ndarray) -> Any:
    """``_kahan`` of one row, step by step in numpy's scalars of its dtype (about 0.3 us a value)."""
    return _kahan_state(values)[0]


def _kahan_scalar(values: np.ndarray) -> Any:
    """``_kahan`` of one float32 row, in Python floats where that is exact, else ``_kahan_loop``.

    For values of one sign within 2**20 of each other (pixels, their gray), each step's
    ``x - residual`` and ``total + y`` are exact in a double, so only their rounding to float32
    is done, as ``(a + M) - M`` with ``M`` of the binade of the result: 1.6x faster."""
    v = values.astype(np.float64)
    nonzero = np.abs(v[v != 0])
    if values.dtype != np.float32 or not nonzero.size or not ((v >= 0).all() or (v <= 0).all()) or nonzero.max() > nonzero.min() * 2.0**20:
        return _kahan_loop(values)
    f32 = np.float32
    binade = np.exp2(np.floor(np.log2(np.where(v != 0, np.abs(v), 1.0))))
    total = residual = 0.0
    low = high = magic = 0.0
    for x, x_low, x_magic in zip(v.tolist(), binade.tolist(), (binade * 1.5 * 2.0**29).tolist()):
        a = x - residual
        if x == 0.0:
            y = a  # minus the residual: a float32 already
        elif x_low <= _py_abs(a) < 2 * x_low:
            y = (a + x_magic) - x_magic
        else:
            y = float(f32(a))
        b = total + y
        if low <= _py_abs(b) < high:
            t = (b + magic) - magic
        else:
            t = float(f32(b))
            if t != 0.0:
                low = 2.0 ** math.floor(math.log2(_py_abs(t)))
                high, magic = 2 * low, 1.5 * low * 2.0**29
        residual = (t - total) - y
        total = t
    return values.dtype.type(total)


def _kahan_row(values: np.ndarray) -> Any:
    """MXNet's Kahan sum of one float32 row of many values, without its loop, mostly.

    Once the running total outweighs every value still to come (twice over), Kahan's residual
    holds exactly what the total's roundings lost, and the loop ends within a rounding of its
    own exact running sum, which drifts from the true sum only by its ``x - residual``
    roundings (a random walk of ``u * sqrt(sum(x**2))``). So: the loop runs to that point (the
    first few values, for pixels), the rest is added in float64 and rounded once; unless the
    result lies that close to a tie between two floats (a few sums in a hundred), when the
    loop runs through (``_kahan_scalar``)."""
    start = _dominated_from(values)
    if start is None or start > 4096:  # no such point early on: the loop
        return _kahan_scalar(values)
    total, residual = _kahan_state(values[:start])
    rest = values[start:]
    exact = float(total) - float(residual) + float(rest.sum(dtype=np.float64))
    rounded = values.dtype.type(exact)
    u = float(np.finfo(values.dtype).eps) / 2
    here = float(rounded)
    up, down = float(np.nextafter(rounded, values.dtype.type(np.inf))), float(np.nextafter(rounded, values.dtype.type(-np.inf)))
    to_tie = _py_min(_py_abs(exact - (here + up) / 2), _py_abs(exact - (here + down) / 2))
    slack = 12 * u * math.sqrt(float(np.dot(rest, rest))) + 1e-13 * float(np.abs(rest).sum(dtype=np.float64))
    if to_tie <= slack:
        return _kahan_scalar(values)
    return rounded


def _dominated_from(values: np.ndarray, head: int = 512) -> int | None:
    """The first index from which every value meets a running sum twice its size, or None."""
    lo, hi = float(values.min()), float(values.max())
    if lo >= 0 or hi <= 0:  # one sign: the running sum only grows, look at the head alone
        head_values = values[:head].astype(np.float64)
        prefix = np.abs(np.cumsum(head_values))
        biggest = _py_max(_py_abs(lo), _py_abs(hi))
        if values.size > head and prefix[-1] < 2 * biggest:
            return None
        failing = np.flatnonzero(prefix[:-1] < 2 * np.abs(head_values[1:]))
    else:
        wide = values.astype(np.float64)
        failing = np.flatnonzero(np.abs(np.cumsum(wide)[:-1]) < 2 * np.abs(wide[1:]))
    return int(failing[-1]) + 2 if failing.size else 1


def _kahan_state(values: np.ndarray) -> tuple[Any, Any]:
    """The loop's total and residual after ``values``."""
    kind = values.dtype.type
    total = residual = kind(0)
    for x in values.tolist():
        y = kind(x) - residual
        t = total + y
        residual = (t - total) - y
        total = t
    return total, residual


def _reduce_sum(src: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    if not axes:
        return src.copy()
    moved = np.moveaxis(src, axes, tuple(range(src.ndim - len(axes), src.ndim)))
    kept = moved.shape[: src.ndim - len(axes)]
    flat = moved.reshape(*kept, -1)
    if src.dtype.kind == "f" and src.dtype.itemsize <= 4:
        if flat.shape[-1] <= _KAHAN_LIMIT or flat.size // flat.shape[-1] >= 16:
            total = _kahan(flat)  # the loop, vectorised over the outputs
        else:  # a few outputs of many values each
            rows = flat.reshape(-1, flat.shape[-1])
            total = np.array([_kahan_row(r) for r in rows], dtype=flat.dtype).reshape(kept)
    elif src.dtype.kind == "f":
        total = flat.sum(axis=-1, dtype=src.dtype)
    else:
        total = flat.sum(axis=-1, dtype=np.int64).astype(src.dtype)
    if keepdims:
        total = np.expand_dims(total, axes)
    return total


def sum(data: Any, axis: Any = None, keepdims: bool = False, exclude: bool = False, **kwargs: Any) -> NDArray:
    """``mx.nd.sum``: in the array's dtype, MXNet's float32 Kahan sum; no axis gives shape ``(1,)``."""
    src = np.asarray(data)
    return _wrap(_reduce_sum(src, _axes(src.ndim, axis, exclude), keepdims))


def mean(data: Any, axis: Any = None, keepdims: bool = False, exclude: bool = False, **kwargs: Any) -> NDArray:
    src = np.asarray(data)
    axes = _axes(src.ndim, axis, exclude)
    count = int(np.prod([src.shape[a] for a in axes])) if axes else 1
    total = _reduce_sum(src, axes, keepdims)
    return _wrap((total / src.dtype.type(count)).astype(src.dtype) if src.dtype.kind == "f" else (total // count).astype(src.dtype))


def _extreme(fn: Any) -> Any:
    def op(data: Any, axis: Any = None, keepdims: bool = False, exclude: bool = False, **kwargs: Any) -> NDArray:
        src = np.asarray(data)
        return _wrap(fn(src, axis=_axes(src.ndim, axis, exclude), keepdims=keepdims))

    op.__name__ = fn.__name__
    return op


max = _extreme(np.max)
min = _extreme(np.min)
prod = _extreme(np.prod)


# --------------------------------------------------------------------------- the rest


def waitall() -> None:
    """Nothing to wait for: numpy computes eagerly."""


def save(fname: str, data: Any) -> None:
    """``mx.nd.save``: an NDArray, a list or a dict of them, in MXNet's file format."""
    if isinstance(data, np.ndarray):
        data = [data]
    ndfile.save(fname, {k: np.asarray(v) for k, v in data.items()} if isinstance(data, dict) else [np.asarray(v) for v in data])


def load(fname: str) -> Any:
    """``mx.nd.load``: a list or a dict of NDArrays, from MXNet's file format."""
    got = ndfile.load(fname)
    if isinstance(got, dict):
        return {k: np.asarray(v).view(NDArray) for k, v in got.items()}
    return [np.asarray(v).view(NDArray) for v in got]


_OUT_OF_SCOPE = {
    "contrib": "PyTorch's or torchvision's operators",
    "linalg": "numpy.linalg or torch.linalg",
    "sparse": "scipy.sparse or torch.sparse",
    "random": "numpy.random (mx.random.seed seeds it)",
    "op": "numpy or PyTorch",
    "Activation": "torch.nn.functional",
    "Convolution": "torch.nn.functional.conv2d",
    "FullyConnected": "torch.nn.functional.linear",
    "softmax": "torch.softmax",
    "BatchNorm": "torch.nn.functional.batch_norm",
}


def __getattr__(name: str) -> Any:
    what = _OUT_OF_SCOPE.get(name, "numpy or PyTorch")
    raise AttributeError(f"mx.nd.{name} is not in im2rec.mx, which covers MXNet's data pipeline (arrays, the functions pipelines call): use {what} instead")

