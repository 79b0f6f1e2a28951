"""The ``im2rec`` command line: a thin click layer over the library.

Each command parses its options, calls one library function and prints the
result. Library errors (Im2recError) become ``Error: ...`` and exit status 1,
here and nowhere else; usage errors exit with 2, as click does.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

from . import __version__
from .errors import Im2recError


def translate_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn library errors into click errors: one line on stderr, exit status 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Im2recError as e:
            raise click.ClickException(str(e)) from None

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="im2rec")
def main() -> None:
    """Build and read MXNet RecordIO image datasets (.rec, .idx, .lst) without MXNet."""
