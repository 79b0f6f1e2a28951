"""The ``im2rec`` command line: a thin click layer over the library.

Each command parses its options, calls one library function and prints the
result. Library errors (Im2recError) become ``Error: ...`` and exit status 1,
here and nowhere else; usage errors exit with 2, as click does.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

from . import __version__, listing
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


def plural(n: int, one: str, many: str = "") -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


quiet_option = click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")


@main.command("list")
@click.argument("root", type=click.Path(exists=True, file_okay=False, dir_okay=True))
@click.argument("prefix", type=click.Path(dir_okay=False))
@click.option(
    "--exts",
    multiple=True,
    default=listing.DEFAULT_EXTS,
    show_default=True,
    help="Image extensions to list, matched case-insensitively (repeat, or separate with commas).",
)
@click.option(
    "--recursive/--no-recursive",
    default=True,
    show_default=True,
    help="Walk sub-folders, one label per folder (sorted walk order, the root's own images first).",
)
@click.option("--train-ratio", type=click.FloatRange(0, 1), default=1.0, show_default=True, help="Share of images in PREFIX_train.lst.")
@click.option("--test-ratio", type=click.FloatRange(0, 1), default=0.0, show_default=True, help="Share of images in PREFIX_test.lst; the rest goes to PREFIX_val.lst.")
@click.option("--chunks", type=click.IntRange(min=1), default=1, show_default=True, help="Split the list into N chunks, PREFIX_0.lst ... PREFIX_<N-1>.lst.")
@click.option("--shuffle/--no-shuffle", default=True, show_default=True, help="Shuffle the images (the index is given before shuffling).")
@click.option("--seed", type=int, default=100, show_default=True, help="Seed of the shuffle; 100 gives im2rec.py's lists.")
@click.option("--stratify", is_flag=True, help="Split every class in the train/val/test ratios, so small classes reach val and test.")
@quiet_option
@translate_errors
def list_command(root, prefix, exts, recursive, train_ratio, test_ratio, chunks, shuffle, seed, stratify, quiet):
    """Walk ROOT and write the .lst files of PREFIX.

    Each line is `index TAB label TAB path`, the path relative to ROOT. Each
    sub-folder holding images is a class; the label map is written to
    PREFIX.classes.tsv (`label TAB folder`). With the default seed the lists are
    byte for byte those of MXNet's `im2rec.py --list --recursive`.

    \b
    Examples:
      im2rec list images/ data/train                  # data/train.lst
      im2rec list images/ data/ds --train-ratio 0.8 --test-ratio 0.1 --stratify
                                                      # data/ds_train.lst, _val.lst, _test.lst
      im2rec list images/ data/ds --chunks 4          # data/ds_0.lst ... data/ds_3.lst
      im2rec list images/ data/flat --no-recursive --exts .jpg --exts .webp

    Exit status: 0 on success, 1 when nothing can be listed (no image, unwritable
    output), 2 for usage errors.
    """
    if train_ratio + test_ratio > 1.0 + 1e-9:
        raise click.BadParameter(f"--train-ratio {train_ratio} plus --test-ratio {test_ratio} is more than 1", param_hint="'--test-ratio'")
    options = listing.ListOptions(
        exts=listing.normalize_exts(exts),
        recursive=recursive,
        train_ratio=train_ratio,
        test_ratio=test_ratio,
        chunks=chunks,
        shuffle=shuffle,
        seed=seed,
        stratify=stratify,
    )
    result = listing.make_lists(root, prefix, options)
    for skipped in result.skipped:
        click.echo(f"skipped {skipped.path!r}: {skipped.reason}", err=True)
    if not quiet:
        for path, count in result.lists.items():
            click.echo(f"{path}: {plural(count, 'image')}")
        click.echo(f"{result.classes_path}: {plural(len(result.classes), 'class', 'classes')}")
