"""What the two command lines (``im2rec`` and ``im2rec-py``) share: the library's warnings
as ``warning: ...`` lines on stderr. The library only logs (``logging.getLogger(__name__)``);
a command line shows the records. Nothing but the two command lines imports this module."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["StderrHandler", "warnings_on_stderr"]


class StderrHandler(logging.Handler):
    """Log records as ``warning: ...`` lines on the current ``sys.stderr`` (looked up at each
    record, so that a test runner's captured stderr gets them)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"{record.levelname.lower()}: {record.getMessage()}", file=sys.stderr)


@contextmanager
def warnings_on_stderr(name: str = "im2rec") -> Iterator[None]:
    """Show the warnings of logger ``name`` on stderr (and only there) within the block; the
    logger's own set-up is restored after it, so that a caller's logging is left alone."""
    logger = logging.getLogger(name)
    if any(isinstance(h, StderrHandler) for h in logger.handlers):  # nested: already shown
        yield
        return
    handler, level, propagate = StderrHandler(), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
