"""The ``.lst`` text format: one image per line, ``index<TAB>label...<TAB>path``.

    0<TAB>3.000000<TAB>zebra/zebra_0.jpg<LF>
    1<TAB>1.000000<TAB>0.500000<TAB>0.250000<TAB>cats/a b.jpg<LF>

The index is a non-negative integer (im2rec stores it as the record id and the
``.idx`` key), then any number of float labels, then the image path relative to
the image root, with ``/`` separators. Files are UTF-8; CRLF line endings and
blank lines are tolerated on reading. Labels are written with ``%f`` as MXNet's
im2rec.py does, unless that would lose precision, in which case the shortest
exact representation is used, so that writing then reading gives back the same
values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import IO, NamedTuple, Union

from . import storage
from .errors import Im2recError, ListFormatError
from .recordio import SIBLINGS
from .text import plural

__all__ = ["ListEntry", "find_classes", "format_classes", "format_entry", "parse_line", "read_classes", "read_lst", "unstorable_reason", "write_lst"]

PathLike = Union[str, "os.PathLike[str]"]


class ListEntry(NamedTuple):
    """One line of a ``.lst`` file."""

    index: int  # type: ignore[assignment]  # the .lst word for it; tuple.index() is never called on an entry
    labels: tuple[float, ...]
    path: str


def format_label(x: float) -> str:
    """``%f`` like im2rec.py when that is exact, else the shortest exact form."""
    s = "%f" % x  # noqa: UP031 (im2rec.py's own formatting, kept to the letter)
    return s if float(s) == x else repr(float(x))


def unstorable_reason(path: str) -> str | None:
    """Why ``path`` cannot be written to a ``.lst`` line, or None if it can."""
    for ch, name in (("\t", "a TAB"), ("\n", "a newline"), ("\r", "a carriage return")):
        if ch in path:
            return f"{name} in the path cannot be stored in a .lst"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "the name is not valid UTF-8"
    return None


def format_entry(entry: ListEntry) -> str:
    """The ``.lst`` line of ``entry``, newline included."""
    labels = "".join(format_label(x) + "\t" for x in entry.labels)
    return f"{entry.index}\t{labels}{entry.path}\n"


def write_lst(out: PathLike | IO[str], entries: Iterable[ListEntry]) -> int:
    """Write entries to a ``.lst`` file (UTF-8, LF).

    Args:
        out: a path, or a text file object opened with ``newline='\\n'``.
        entries: the lines to write.

    Returns:
        The number of lines written.

    Raises:
        ValueError: a path holds a TAB, CR or newline, an index is negative, or labels are missing.
    """
    if not hasattr(out, "write"):
        with open(out, "w", encoding="utf-8", newline="\n") as f:
            return write_lst(f, entries)
    n = 0
    for e in entries:
        reason = unstorable_reason(e.path)
        if reason:
            raise ValueError(f"{e.path!r}: {reason}")
        if e.index < 0:
            raise ValueError(f"{e.path!r}: index {e.index} is negative")
        if not e.labels:
            raise ValueError(f"{e.path!r}: a .lst line needs at least one label")
        out.write(format_entry(e))
        n += 1
    return n


EXPECTED = "expected 'index<TAB>label...<TAB>path'"


def parse_line(line: str, where: str) -> ListEntry:
    """Parse one ``.lst`` line (without its line ending).

    Args:
        line: the text of the line.
        where: ``file:line``, used in error messages.

    Raises:
        ListFormatError: the line is malformed; the message starts with ``where``.
    """
    try:
        return parse_fields(line)
    except LineError as e:
        raise ListFormatError(f"{where}: {e}") from None


class LineError(ValueError):
    """What is wrong with a line, before its file and number are known."""


_new_entry = tuple.__new__  # ListEntry(...) runs Python code: 590 ns a line against 164 ns here


def parse_fields(line: str) -> ListEntry:
    """``parse_line`` without the file and line number: LineError says only what is wrong."""
    fields = line.split("\t")
    if len(fields) < 3:
        raise LineError(f"{EXPECTED}, got {plural(len(fields), 'field')}")
    raw_index, path = fields[0].strip(), fields[-1]
    if not (raw_index.isascii() and raw_index.isdigit()):
        raise LineError(f"index {fields[0]!r} is not a non-negative integer")
    index = int(raw_index)
    if index >= 1 << 64:
        raise LineError(f"index {index} does not fit in 64 bits")
    try:
        labels = tuple(map(float, fields[1:-1]))
    except ValueError:
        for i, raw in enumerate(fields[1:-1], 1):
            try:
                float(raw)
            except ValueError:
                raise LineError(f"label {i} ({raw!r}) is not a number") from None
        raise
    if not path.strip():
        raise LineError("the path (last field) is empty")
    return _new_entry(ListEntry, (index, labels, path))


def iter_lst(path: PathLike, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, ListEntry]]:
    """Yield ``(line_number, entry)`` for the non-blank lines of a ``.lst`` file.

    Args:
        path: the ``.lst`` file.
        start, stop: only the entries at these positions (counting non-blank lines
            from 0, ``stop`` excluded); the lines before ``start`` are counted but
            not parsed, so a part near the end of a long list starts quickly.

    Raises:
        ListFormatError: a line is malformed or the file is not UTF-8, naming ``file:line``.
        OSError: the file cannot be read.
    """
    name = os.fspath(path)
    seq = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if stop is not None and seq >= stop:
                return
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ListFormatError(f"{name}:{lineno}: not UTF-8 text (byte {e.start + 1} of the line)") from None
            if lineno == 1 and line.startswith("\ufeff"):
                line = line[1:]
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            seq += 1
            if seq <= start:
                continue
            try:
                entry = parse_fields(line)
            except LineError as e:
                raise ListFormatError(f"{name}:{lineno}: {e}") from None
            yield lineno, entry


def read_lst(path: PathLike) -> list[ListEntry]:
    """Read every entry of a ``.lst`` file.

    Raises:
        ListFormatError: a line is malformed, naming ``file:line`` and what was expected.
        OSError: the file cannot be read.
    """
    return [entry for _, entry in iter_lst(path)]


# --------------------------------------------------------------------------- PREFIX.classes.tsv
# ``im2rec list`` writes the class folders beside its lists, ``label TAB folder`` a line; the
# contact sheet, ``export`` and ``import`` read it.

#: What a derived file adds to its list's prefix: a split, a chunk, a part or a shard.
_DERIVED_SUFFIX = re.compile(r"(_(train|val|test)|_\d+|-\d{5}-of-\d{5}|-\d{5})$")


def format_classes(pairs: Iterable[tuple[int | float, str]]) -> str:
    """The text of a ``PREFIX.classes.tsv``: ``label TAB name`` lines, in the order given."""
    return "".join(f"{label}\t{name}\n" for label, name in pairs)


def find_classes(path: str, storage_options: dict | None = None) -> str | None:
    """The ``PREFIX.classes.tsv`` that ``im2rec list`` wrote for the list or ``.rec`` at ``path``
    (a path or a URL), if there is one."""
    stem = os.path.splitext(path)[0]
    while True:
        candidate = stem + SIBLINGS["classes"]
        if storage.there(candidate, storage_options):
            return candidate
        shorter = _DERIVED_SUFFIX.sub("", stem)
        if shorter == stem:
            return None
        stem = shorter


def read_classes(path: str, storage_options: dict | None = None) -> dict[float, str]:
    """``label -> folder`` from a ``label TAB folder`` file (a path or a URL).

    Raises:
        Im2recError: a line is not ``label TAB folder``, naming ``file:line``.
    """
    names: dict[float, str] = {}
    text = storage.read_any(path, storage_options).decode("utf-8")
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split("\t")
        try:
            names[float(fields[0])] = fields[1]
        except (ValueError, IndexError):
            raise Im2recError(f"{path}:{lineno}: expected 'label<TAB>folder', got {line.rstrip()!r}") from None
    return names
