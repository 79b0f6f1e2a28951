"""The formats ``export`` writes and ``import`` reads, and their registry.

``base`` holds what every format shares: ``Sample``/``Batch``/``DatasetMeta``, the
``ShardWriter``/``SampleReader`` protocols and the rules for other writers' fields. Each
format is one module with a ``Writer`` and a ``Reader``: ``webdataset`` (tar shards),
``parquet`` (🤗 datasets' Parquet, through pyarrow), ``mds`` (MosaicML streaming), ``litdata``
(Lightning's litdata). A format module is imported only when it is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol, cast

from ..errors import OptionError
from .base import FORMATS, SampleReader, ShardWriter

__all__ = ["DEFAULT_SHARD_SIZE", "EXTENSION_FORMATS", "FORMATS", "Format", "format_of_name", "load"]

#: Shard sizes by format: MDS and litdata readers load a shard whole (their writers' 64 MB);
#: WebDataset and Parquet are streamed (🤗 datasets' Parquet files are about 500 MB).
DEFAULT_SHARD_SIZE = {"webdataset": 512 << 20, "parquet": 512 << 20, "mds": 64 << 20, "litdata": 64 << 20}

#: What a shard file's name says it holds (a folder says nothing: its im2rec.json does).
EXTENSION_FORMATS = {".tar": "webdataset", ".parquet": "parquet"}


class Format(Protocol):
    """A format's module: ``Writer(folder, name, shard_size, meta, on_shard)`` and
    ``Reader(src, storage_options, label_field=None)``."""

    Writer: Callable[..., ShardWriter]
    Reader: Callable[..., SampleReader]


def load(fmt: str) -> Format:
    """The module of format ``fmt``.

    Raises:
        OptionError: ``fmt`` is not one of ``FORMATS``.
    """
    if fmt not in FORMATS:
        raise OptionError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}", "--format")
    module: Any = importlib.import_module(f".{fmt}", __name__)
    return cast(Format, module)


def format_of_name(src: str) -> str | None:
    """The format a shard file's (or a glob's) extension names, or None."""
    name = src.rstrip("/").lower()
    return next((fmt for ext, fmt in EXTENSION_FORMATS.items() if name.endswith(ext)), None)
