"""The iterators' keyword arguments, each declared once: its kind, MXNet 1.9.1's default, its bounds.

The augmenters' arguments are the fields of their dataclasses (``augment.ImageAugmenter``,
``augment.DetAugmenter``): the kind comes from the field's type, the default from the
field, bounds and choices from ``bounds(...)`` in the field's metadata. The readers' own
arguments (paths, batches, parts, threads, means) are declared here. ``table(...)`` joins
them into an iterator's table; ``parse_arguments`` checks a call against it, with MXNet's
words for a bad value.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import OptionError
from ..image import DAMAGE_POLICIES

__all__ = ["DET_DTYPES", "RECORD_DTYPES", "Arg", "args_of", "bounds", "help_text", "parse_arguments", "table"]


@dataclasses.dataclass(frozen=True)
class Arg:
    """One keyword argument: its kind, MXNet's default, bounds (``lower``: at least, ``above``:
    more than) or the allowed values. ``inert``: MXNet's, but it changes nothing here (devices,
    logging, chunked shuffling)."""

    kind: str  # one of _PARSERS' keys
    default: Any = None
    lower: float | None = None
    above: float | None = None
    choices: tuple[str, ...] = ()
    required: bool = False
    inert: bool = False


def bounds(*, lower: float | None = None, above: float | None = None, choices: tuple[str, ...] = ()) -> dict[str, Any]:
    """A dataclass field's metadata: its bounds or allowed values, as ``Arg`` takes them."""
    return {"arg": {"lower": lower, "above": above, "choices": choices}}


#: A field's type (as written, ``from __future__ import annotations``) to an argument's kind.
_KIND_OF_TYPE = {"int": "int", "float": "float", "bool": "bool", "str": "str", "float | None": "optional-float", "int | None": "optional-int", "tuple[int, ...]": "ints", "tuple[float, ...]": "floats"}


def args_of(cls: type, skip: Iterable[str] = ("data_shape",)) -> dict[str, Arg]:
    """The arguments a dataclass declares: one per field (but ``skip``), in field order."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        extra = f.metadata.get("arg", {})
        kind = "choice" if extra.get("choices") else _KIND_OF_TYPE[str(f.type)]
        out[f.name] = Arg(kind, f.default, **extra)
    return out


#: The dtypes each iterator makes batches of: MXNet's three, and float16/float64 beside them
#: (computed in float32, then cast). MXNet's other dtype names are refused.
RECORD_DTYPES = ("float32", "float16", "float64", "uint8", "int8")
DET_DTYPES = ("float32", "float16", "float64")

#: What both readers take beside their augmenter's fields (MXNet's defaults).
READER_ARGS = {
    "path_imglist": Arg("str", ""),
    "label_width": Arg("int", 1, lower=1),
    "data_shape": Arg("shape", required=True),
    "preprocess_threads": Arg("int", 4, lower=1),
    "verbose": Arg("bool", True, inert=True),
    "num_parts": Arg("int", 1, lower=1),
    "part_index": Arg("int", 0, lower=0),
    "shuffle_chunk_size": Arg("int", 0, inert=True),
    "shuffle_chunk_seed": Arg("int", 0, inert=True),
    "shuffle": Arg("bool", False),
    "seed": Arg("int", 0),
    "batch_size": Arg("int", required=True, lower=1),
    "round_batch": Arg("bool", True),
    "prefetch_buffer": Arg("int", 4, lower=1),
    "ctx": Arg("choice", "gpu", choices=("cpu", "gpu"), inert=True),
    "mean_img": Arg("str", ""),
    "mean_r": Arg("float", 0.0),
    "mean_g": Arg("float", 0.0),
    "mean_b": Arg("float", 0.0),
    "mean_a": Arg("float", 0.0),
    "scale": Arg("float", 1.0),
    # mx.io.MXDataIter's own: the names of provide_data and provide_label
    "data_name": Arg("str", "data"),
    "label_name": Arg("str", "softmax_label"),
    # im2rec's: fsspec options for a URL (else the environment's credentials and endpoint)
    "storage_options": Arg("options", None),
    # im2rec's: the seed of the random augmentations (ImageRecordIter has it in MXNet too)
    "seed_aug": Arg("optional-int", None),
    # the .idx (ImageDetRecordIter: im2rec's; records are read through it)
    "path_imgidx": Arg("str", ""),
    # im2rec's: a record whose image is damaged: its pixels and a warning, left out, or an error
    "on_damaged": Arg("choice", "warn", choices=DAMAGE_POLICIES),
}


def table(*parts: Mapping[str, Arg], **changes: Arg) -> dict[str, Arg]:
    """One iterator's arguments: ``parts`` joined (a later one wins), then ``changes``."""
    out: dict[str, Arg] = {}
    for part in parts:
        out.update(part)
    out.update(changes)
    return out


_KIND_WORDS = {"int": "int", "float": "float", "bool": "boolean", "str": "string", "shape": "Shape(tuple)", "floats": "tuple of float", "ints": "tuple of int", "optional-int": "int or None", "optional-float": "float or None", "options": "dict"}


def _bad(name: str, value: Any, kind: str) -> OptionError:
    return OptionError(f"Invalid Parameter format for {name} expect {_KIND_WORDS.get(kind, kind)} but value='{value}'", name)


def _number_list(value: Any, cast: Callable[[Any], Any]) -> tuple:
    if isinstance(value, str):
        text = value.strip().strip("()[]")
        items: Any = [t for t in (p.strip() for p in text.split(",")) if t]
    elif isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
    else:
        items = [value]
    return tuple(cast(v) for v in items)


def _as_int(v: Any) -> int:
    if isinstance(v, (bool, int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    if isinstance(v, str):
        return int(v.strip())
    raise ValueError(v)


def _as_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError(v)
    return float(v)


def _as_bool(v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0"):
        return v.strip().lower() in ("true", "1")
    raise ValueError(v)


def _as_str(v: Any) -> str:
    if not isinstance(v, (str, os.PathLike)):
        raise ValueError(v)
    return os.fspath(v)


def _as_options(v: Any) -> dict:
    if not isinstance(v, Mapping):
        raise ValueError(v)
    return dict(v)


#: Each kind's parser of a Python value (or the string MXNet's Python would pass on).
_PARSERS: dict[str, Callable[[Any], Any]] = {
    "int": _as_int,
    "optional-int": _as_int,
    "float": _as_float,
    "optional-float": _as_float,
    "bool": _as_bool,
    "str": _as_str,
    "options": _as_options,
    "shape": lambda v: _number_list(v, _as_int),
    "ints": lambda v: _number_list(v, _as_int),
    "floats": lambda v: _number_list(v, float),
}


def _parse(name: str, spec: Arg, value: Any) -> Any:
    """``value`` as ``spec`` says, within its bounds."""
    kind = spec.kind
    if value is None and (kind.startswith("optional") or (kind in ("options", "choice") and spec.default is None)):
        return None
    if kind == "choice":
        text = np.dtype(value).name if name == "dtype" and not isinstance(value, str) else str(value)
        if text not in spec.choices:
            raise OptionError(f"Invalid Input: '{value}' for Parameter {name}, valid values are: {{{', '.join(spec.choices)}}}", name)
        return text
    try:
        out = _PARSERS[kind](value)
    except (TypeError, ValueError):
        raise _bad(name, value, kind) from None
    if spec.lower is not None and out < spec.lower:
        raise OptionError(f"value {out} for Parameter {name} should be greater equal to {spec.lower:g}", name)
    if spec.above is not None and out <= spec.above:
        raise OptionError(f"value {out:g} for Parameter {name} must be above {spec.above:g}", name)
    return out


def parse_arguments(what: str, spec: Mapping[str, Arg], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Every argument of ``spec``: given (parsed) or MXNet's default.

    Raises:
        OptionError: an unknown name (with the closest known one), a required argument
            missing, or a value of the wrong kind or out of range, naming the argument.
    """
    for name in kwargs:
        if name not in spec:
            close = difflib.get_close_matches(name, list(spec), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise OptionError(f"{what}: cannot find argument '{name}'{hint}", name)
    args = {}
    for name, arg in spec.items():
        if name in kwargs:
            args[name] = _parse(name, arg, kwargs[name])
        elif arg.required:
            kind = "Shape(tuple)" if arg.kind == "shape" else "int (non-negative)"
            raise OptionError(f"Required parameter {name} of {kind} is not presented", name)
        else:
            args[name] = arg.default
    shape = args["data_shape"]
    if len(shape) != 3:
        raise OptionError(f"value {shape} for Parameter data_shape has wrong dimensions, expected dimension=3", "data_shape")
    if any(d <= 0 for d in shape):
        raise OptionError(f"value {shape} for Parameter data_shape has a dimension that is not positive", "data_shape")
    if shape[0] not in (1, 3, 4):
        raise OptionError(f"Invalid output shape {shape} for Parameter data_shape: its channels (the first number) must be 1, 3 or 4", "data_shape")
    if args["part_index"] >= args["num_parts"]:
        raise OptionError(f"Invalid Parameter part_index={args['part_index']}: it must be less than num_parts={args['num_parts']}", "part_index")
    if not args["path_imgrec"]:
        raise OptionError(f"{what}: must specify path_imgrec", "path_imgrec")
    if args["resize"] != -1 and args["resize"] <= 0:
        raise OptionError(f"value {args['resize']} for Parameter resize must be -1 (no resize) or a size in pixels", "resize")
    return args


def help_text(spec: Mapping[str, Arg]) -> str:
    """The arguments and their defaults, one line each, for an iterator's docstring."""
    lines = []
    for name, arg in spec.items():
        default = "required" if arg.required else repr(arg.default)
        lines.append(f"    {name} ({_KIND_WORDS.get(arg.kind, arg.kind)}): {default}{' (accepted, changes nothing here)' if arg.inert else ''}")
    return "\n".join(lines)
