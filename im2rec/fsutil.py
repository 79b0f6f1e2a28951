"""Output files that appear whole or not at all."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO, Any, Iterator, Union

PathLike = Union[str, "os.PathLike[str]"]


def temp_path(path: PathLike) -> Path:
    """The temporary name of ``path`` while it is being written: same folder, hidden, per process."""
    p = Path(path)
    return p.with_name(f".{p.name}.tmp-{os.getpid()}")


def commit(tmp: PathLike, final: PathLike) -> None:
    """fsync ``tmp`` and rename it to ``final`` (atomic on POSIX, same folder)."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)


def remove_quietly(path: PathLike) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open ``path`` for writing under a temporary name; rename it into place on success.

    On any exception the temporary file is removed and ``path`` is left as it was.
    """
    tmp = temp_path(path)
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
        commit(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
