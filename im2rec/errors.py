"""Every failure a user can see, as one exception class each, all under Im2recError.

Each class is declared here, whichever module raises it (``StorageError`` for the
object stores, ``OutputExistsError`` for every command's outputs).

Messages name the file and the byte offset (for ``.rec``) or the line (for
``.idx`` and ``.lst``), so that a user can find the bad spot without a debugger.
The CLI turns any Im2recError into ``Error: <message>`` and exit status 1.
"""

from __future__ import annotations

__all__ = [
    "BadFlagError",
    "BadMagicError",
    "HeaderError",
    "Im2recError",
    "ImageError",
    "IndexFormatError",
    "IndexOffsetError",
    "LabelError",
    "ListFormatError",
    "ListingError",
    "NDArrayFileError",
    "ObjectMissing",
    "OptionError",
    "OutputExistsError",
    "PackError",
    "RecordIOError",
    "RecordTooLargeError",
    "StorageError",
    "TooManyFailures",
    "TruncatedRecordError",
    "WorkerError",
]


class Im2recError(Exception):
    """Base class of every error im2rec raises on bad input or a failed operation."""


class OptionError(ValueError):
    """Options out of range or that cannot go together, said in the command line's words.

    ``option`` names the flag at fault (``"--quality"``), or is None for a combination;
    the CLI makes it a usage error (exit status 2).
    """

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


class RecordIOError(Im2recError):
    """A ``.rec`` or ``.idx`` file is not valid RecordIO.

    ``offset`` is the byte offset of the bad part in the ``.rec``, when there is one.
    """

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message)
        self.offset = offset


class TruncatedRecordError(RecordIOError):
    """A record header or payload runs past the end of the ``.rec`` file."""


class BadMagicError(RecordIOError):
    """A record does not start with the magic word 0xCED7230A."""


class BadFlagError(RecordIOError):
    """A record's parts carry an impossible continuation flag (cflag) sequence."""


class RecordTooLargeError(RecordIOError):
    """A payload is 2**29 bytes or more, which RecordIO cannot frame."""


class IndexFormatError(RecordIOError):
    """A ``.idx`` line is not ``key<TAB>offset``."""


class IndexOffsetError(RecordIOError):
    """A ``.idx`` offset lies beyond the ``.rec`` file or not on a record head."""


class HeaderError(RecordIOError):
    """A record is too short for the IRHeader (and labels) it claims to hold."""


class ListFormatError(Im2recError):
    """A ``.lst`` line is not ``index<TAB>label...<TAB>path``."""


class ListingError(Im2recError):
    """``im2rec list`` cannot make lists from a folder (missing, empty, bad ratios)."""


class ImageError(Im2recError):
    """One image cannot be packed. ``kind`` is a short category for summaries
    (``missing``, ``unreadable``, ``empty``, ``not-an-image``, ``corrupt``,
    ``too-large``, ``encode-failed``); the message is the one-line reason. ``damaged``: the
    decoder made pixels all the same, partly made up (a JPEG decoded with libjpeg's warning)."""

    def __init__(self, kind: str, message: str, damaged: bool = False):
        super().__init__(message)
        self.kind = kind
        self.damaged = damaged

    @property
    def said(self) -> str:
        """What a report calls it: an image decoded with the decoder's warning, or none."""
        return "image damaged (decoded with the decoder's warning)" if self.damaged else "image not decodable"


class StorageError(Im2recError):
    """A URL that cannot be read or written: a missing object or bucket, denied access, a
    store that did not answer, a missing driver.

    ``url`` is the URL at fault; a failed ranged read sets ``span``, the ``(start, end)`` bytes
    it asked for; ``transient`` says the store failed in a way that may mend (no answer, 5xx,
    throttling), after ``attempts`` tries.
    """

    url: str | None = None
    span: tuple[int, int] | None = None
    transient: bool = False
    attempts: int = 1


class ObjectMissing(StorageError):
    """The object, or its bucket, is not there."""


class PackError(Im2recError):
    """``im2rec pack`` cannot run or must stop (bad options, outputs, write errors, too many failures)."""


class OutputExistsError(PackError, StorageError):
    """An output is there already and ``overwrite`` was not given: the message is the same for
    every command. It is also a PackError and a StorageError, what ``pack`` and the URL outputs
    raised for it before it had a class of its own, so that callers catching those still do."""

    def __init__(self, path: str):
        super().__init__(f"{path} exists: pass --overwrite to replace it")
        self.path = path


class TooManyFailures(PackError):
    """More images failed than ``--max-errors`` allows; ``summary`` tells what was done."""

    def __init__(self, message: str, summary: object = None):
        super().__init__(message)
        self.summary = summary


class WorkerError(Im2recError):
    """Worker processes cannot run at all (they die before doing any work)."""


class BinFormatError(Im2recError):
    """A ``.bin`` verification set is malformed, or is a pickle that would run code when loaded."""


class LabelError(Im2recError):
    """A record's labels do not fit what a training iterator was told: ``label_width``, a
    ``path_imglist`` with no line for the record, or a malformed detection label."""


class NDArrayFileError(Im2recError):
    """A file is not in MXNet's NDArray format (``mx.nd.save``), or holds what is not read (sparse arrays)."""
