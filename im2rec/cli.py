"""The ``im2rec`` command line: a thin click layer over the library.

Each command parses its arguments, calls one library function and prints the
result (reports format themselves). Library errors (Im2recError) become
``Error: ...`` and exit status 1; options the library refuses (OptionError) and
click's own usage errors exit with 2. ``legacy`` does the same for ``im2rec-py``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import posixpath
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click

from . import __version__, exchange, faces, formats, image, inspection, listing, packing, recordio, storage, verification
from .console import warnings_on_stderr
from .errors import Im2recError, OptionError, OutputExistsError, StorageError, TooManyFailures
from .packing import shards
from .text import parse_size, plural


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
    """Build and read MXNet RecordIO image datasets (.rec, .idx, .lst) without MXNet.

    MXNet's `python im2rec.py PREFIX ROOT ...` command line works unchanged as
    `im2rec-py PREFIX ROOT ...`.
    """
    click.get_current_context().with_resource(warnings_on_stderr())


@contextlib.contextmanager
def _usage_errors() -> Iterator[None]:
    """Options the library refuses (OptionError) as click's usage errors: exit status 2,
    ``Invalid value for '--flag'`` when one flag is at fault."""
    try:
        yield
    except OptionError as e:
        if e.option:
            raise click.BadParameter(str(e), param_hint=f"'{e.option}'") from None
        raise click.UsageError(str(e)) from None


quiet_option = click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")


class _Parsed(click.ParamType):
    """An option value read by a library parser; the parser's ValueError becomes a usage error."""

    def __init__(self, name: str, parse):
        self.name, self._parse = name, parse

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return self._parse(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class _PathOrURL(click.ParamType):
    """A local file (or folder) that exists, or a URL (s3://, gs://, memory://, ...) read through its store."""

    def __init__(self, folder: bool | None = False):
        """``folder``: True for a folder, False for a file, None for either."""
        self.name = "PATH" if folder is None else "FOLDER" if folder else "FILE"
        self._path = click.Path(exists=True, file_okay=folder is not True, dir_okay=folder is not False)

    def convert(self, value, param, ctx):
        if storage.is_url(value) or any(c in value for c in "*?["):  # a glob of shards: the format's reader expands it
            return value
        return self._path.convert(value, param, ctx)


class _LocalOnly(click.ParamType):
    """A local file or folder that exists; a URL is refused, saying why."""

    def __init__(self, why: str, folder: bool = False):
        self.name = "FOLDER" if folder else "FILE"
        self._why = why
        self._path = click.Path(exists=True, file_okay=not folder, dir_okay=folder)

    def convert(self, value, param, ctx):
        if storage.is_url(value):
            self.fail(f"{value!r} is a URL: {self._why}", param, ctx)
        return self._path.convert(value, param, ctx)


class _Output(click.ParamType):
    """Where a command writes: a local path, or a URL that the command writes to the store
    (staged locally, then uploaded whole: see storage.StagedOutput). ``folder``: True for a
    folder, False for a file, None for a prefix (``list``'s ``images`` beside a folder ``images/``)."""

    name = "PATH"

    def __init__(self, folder: bool | None = False):
        self._path = click.Path() if folder is None else click.Path(file_okay=not folder, dir_okay=folder)
        self._folder = folder

    def convert(self, value, param, ctx):
        if self._folder is not True and str(value).endswith(("/", os.sep)):  # else `out/` would write out/.rec, out/.lst
            self.fail(f"{value!r} ends with '/', a folder: {'name the lists, such as ' + str(value) + 'train' if self._folder is None else 'name the file'}", param, ctx)
        if storage.is_url(value):
            return value
        return self._path.convert(value, param, ctx)


rec_argument = click.argument("rec", type=_PathOrURL())
storage_option = click.option(
    "--storage-option",
    "storage_options",
    multiple=True,
    type=_Parsed("KEY=VALUE", storage.parse_storage_option),
    help="For URLs: a storage option, s3fs's names (repeat), e.g. endpoint_url=http://127.0.0.1:9000, anon=true, config_kwargs.retries.total_max_attempts=2; credentials, proxies and AWS_CA_BUNDLE otherwise come from the environment.",
)


def _options(pairs) -> dict | None:
    options = storage.merge_options(pairs) or None
    try:
        storage.check_options(options)
    except OptionError as e:
        raise click.BadParameter(str(e), param_hint="'--storage-option'") from None
    return options


@main.command("list")
@click.argument("root", type=_PathOrURL(folder=True))
@click.argument("prefix", type=_Output(folder=None))
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
@storage_option
@translate_errors
def list_command(root, prefix, exts, recursive, train_ratio, test_ratio, chunks, shuffle, seed, stratify, quiet, storage_options):
    """Walk ROOT and write the .lst files of PREFIX.

    Each line is `index TAB label TAB path`, the path relative to ROOT. Each
    sub-folder holding images is a class; the label map is written to
    PREFIX.classes.tsv (`label TAB folder`). With the default seed the lists are
    byte for byte those of MXNet's `im2rec.py --list --recursive`. A PREFIX
    ending in .lst names the list itself (data/train.lst is data/train).

    \b
    Examples:
      im2rec list images/ data/train                  # data/train.lst
      im2rec list images/ data/ds --train-ratio 0.8 --test-ratio 0.1 --stratify
                                                      # data/ds_train.lst, _val.lst, _test.lst
      im2rec list images/ data/ds --chunks 4          # data/ds_0.lst ... data/ds_3.lst
      im2rec list images/ data/flat --no-recursive --exts .jpg --exts .webp
      im2rec list s3://bucket/images data/train       # an object store's prefix
      im2rec list images/ s3://bucket/lists/train     # lists written to the store

    Exit status: 0 on success, 1 when nothing can be listed (no image, unwritable
    output), 2 for usage errors.
    """
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
    with _usage_errors():
        options.validate()
    if prefix.lower().endswith(".lst"):  # `lists/train.lst` names the list to write: its prefix is lists/train
        prefix = prefix[:-4]
    with storage.StagedOutput(prefix, _options(storage_options), overwrite=True) as staged:
        result = listing.make_lists(root, staged.path, options, storage_options=_options(storage_options))
    for skipped in result.skipped:
        click.echo(f"skipped {skipped.path!r}: {skipped.reason}", err=True)
    others = listing.skipped_exts_line(result.other_exts, options.exts)
    if others:
        click.echo(others, err=True)
    if not quiet:
        for path, count in result.lists.items():
            click.echo(f"{staged.shown(path)}: {plural(count, 'image')}")
        click.echo(f"{staged.shown(result.classes_path or '')}: {plural(len(result.classes), 'class', 'classes')}")


def image_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The per-image options of ``pack`` (``image.ImageOptions``, with its defaults), as one
    decorator: the command gets them as ``image_options``, checked (OptionError: exit 2)."""

    @functools.wraps(command)
    def with_image_options(*args: Any, resize: int, center_crop: bool, quality: int | None, encoding: str, color: str, alpha_background: Any, pass_through: bool, inter_method: int, full_decode: bool, max_pixels: int, **kwargs: Any) -> Any:
        with _usage_errors():
            kwargs["image_options"] = image.ImageOptions(
                resize=resize,
                center_crop=center_crop,
                quality=quality,
                encoding=encoding,
                color=int(color),
                inter_method=inter_method,
                pass_through=pass_through,
                reduced_decode=not full_decode,
                max_pixels=max_pixels,
                alpha_background=alpha_background,
            )
        return command(*args, **kwargs)

    for option in reversed(_IMAGE_OPTIONS):
        with_image_options = option(with_image_options)
    return with_image_options


_IMAGE_OPTIONS = [
    click.option("--resize", type=click.IntRange(min=0), default=0, show_default=True, help="Resize so the shorter edge is N pixels (0: keep the size)."),
    click.option("--center-crop", is_flag=True, help="Crop the central square first."),
    click.option("--quality", type=int, default=None, help="JPEG quality 1-100 [default: 95], or PNG compression 0-9 [default: 9: im2rec.py passes its quality 95, which OpenCV takes as 9]."),
    click.option("--encoding", type=click.Choice(image.ENCODINGS), default=".jpg", show_default=True, help="Encoding of the stored images."),
    click.option("--color", type=click.Choice(["1", "0", "-1"]), default="1", show_default=True, help="1: colour, 0: gray (both drop alpha, as im2rec.py: images that had transparency are counted and named), -1: unchanged (alpha and 16 bits kept, no EXIF rotation)."),
    click.option("--alpha-background", type=_Parsed("COLOR", image.parse_color), default=None, help="Composite images that have transparency over COLOR (white, black, #RRGGBB or R,G,B) instead of dropping their alpha channel; opaque images are unchanged. With --color 1 or 0, not -1 or --pass-through."),
    click.option("--pass-through", is_flag=True, help="Store each file's bytes unchanged (no decode, resize or re-encode; cheap checks only)."),
    click.option("--inter-method", type=_Parsed("METHOD", image.parse_inter_method), default="linear", show_default=True, help="Resize interpolation: nearest, linear, cubic, area, lanczos, auto, random (or im2rec.cc's 0-4, 9, 10)."),
    click.option("--full-decode", is_flag=True, help="Always decode JPEGs at full size (by default a JPEG 3x larger than the target is decoded at 1/2, 1/4 or 1/8 scale: faster, less aliasing)."),
    click.option("--max-pixels", type=click.IntRange(min=1), default=image.DEFAULT_MAX_PIXELS, show_default=True, help="Skip images with more pixels than this, read from the header before decoding (decompression bombs)."),
]


# What pack and import share besides the image options: a run's outputs, its resume, its audit record.
overwrite_option = click.option("--overwrite", is_flag=True, help="Replace existing outputs (and the files of an interrupted run).")
resume_option = click.option("--resume", is_flag=True, help="Continue an interrupted run of the same command from its last complete record.")
stats_option = click.option("--stats", "stats_path", type=_Output(), default=None, help="Write a JSON audit record: version, options, counts, bytes, timings, sha256 of the outputs.")


class _Tqdm:
    """A tqdm bar on stderr (rate, ETA); silent when stderr is not a terminal. The progress of
    every long command: ``_Bar`` for pack and import, ``_ExportBar`` for export."""

    unit = "img"

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self.bar: Any = None

    def open(self, total: int | None, done: int = 0) -> None:
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit=self.unit, file=sys.stderr, dynamic_ncols=True, smoothing=0.1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class _Bar(_Tqdm, packing.Progress):
    """Images packed, with the failures so far."""

    def __init__(self, enabled: bool):
        super().__init__(enabled)
        self.failed = 0
        self.partial: str | None = None

    def start(self, total: int, done: int) -> None:
        self.open(total or None, done)  # 0: an import of unknown length

    def writing(self, partial: str) -> None:
        self.partial = partial

    def kept(self) -> str:
        """What a stopped run keeps, for the interrupt's line."""
        where = f" in {self.partial}" if self.partial else ""
        return f"the finished part is kept{where}: rerun with --resume to continue"

    def update(self, result: packing.Result) -> None:
        if self.bar is None:
            return
        if result.framed is None:
            self.failed += 1
            self.bar.set_postfix(failed=self.failed, refresh=False)
        self.bar.update()


class _ExportBar(_Tqdm, exchange.ExportProgress):
    """Records exported."""

    unit = "rec"

    def start(self, total: int) -> None:
        self.open(total)

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that clean-up runs as for Ctrl-C."""


def _raise_terminated(signum, frame):
    raise _Terminated()


@contextlib.contextmanager
def _exits_when_interrupted(bar: _Tqdm, kept: str | Callable[[], str]) -> Iterator[None]:
    """Ctrl-C or SIGTERM in the block: the bar closed, ``Error: interrupted; KEPT`` (or
    ``terminated``; ``kept()`` when it is a function) and exit status 130 (143); SIGTERM's
    handler restored after."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except KeyboardInterrupt as e:
        bar.close()
        what = "terminated" if isinstance(e, _Terminated) else "interrupted"
        click.echo(f"Error: {what}; {kept() if callable(kept) else kept}", err=True)
        sys.exit(143 if isinstance(e, _Terminated) else 130)
    finally:
        bar.close()
        signal.signal(signal.SIGTERM, previous)


@main.command("pack")
@click.argument("lst", metavar="LIST", type=_PathOrURL())
@click.argument("root", type=_PathOrURL(folder=True))
@click.argument("out", required=False, type=_Output())
@image_options
@click.option("--pack-label", is_flag=True, help="Store every label of a line that has several (flag = label count), as im2rec.py.")
@click.option("--label-width", type=click.IntRange(min=1), default=None, help="Require exactly N labels on every line and store them all (for ImageRecordIter(label_width=N) and DALI).")
@click.option("--layout", type=click.Choice(recordio.LAYOUTS), default="plain", show_default=True, help="plain: im2rec.py's (keys = list indices); insightface: face-recognition training sets as insightface's RecBuilder writes them (labels = integer identity ids; header and identity records, a property file).")
@click.option("--allow-outside-root", is_flag=True, help="Accept list paths that are absolute or climb out of ROOT with '..' (refused by default: a list from elsewhere could pull any readable file into the .rec).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes [default: every core].")
@click.option("--strict", is_flag=True, help="Exit with status 1 if any image failed (the outputs are still written).")
@click.option("--max-errors", type=click.IntRange(min=0), default=None, help="Stop with status 1 as soon as more than N images have failed.")
@overwrite_option
@resume_option
@stats_option
@click.option("--num-parts", type=click.IntRange(min=1), default=1, show_default=True, help="Split the list into N contiguous parts (with --part-index or --dask).")
@click.option("--part-index", type=click.IntRange(min=0), default=None, help="Pack only part I of --num-parts, to OUT-0000I-of-0000N.rec; join parts with `im2rec merge`.")
@click.option("--shard-size", type=_Parsed("SIZE", parse_size), default=None, help="Start a new shard OUT-00000.rec, OUT-00001.rec, ... before one would pass SIZE (e.g. 1GB, 500MB); writes OUT.shards.json.")
@click.option("--dask", "dask_address", metavar="ADDRESS", default=None, help="Run the parts as tasks on a Dask cluster (tcp://host:8786, or 'local'), then merge them. Needs im2rec[dask].")
@click.option("--no-merge", is_flag=True, help="With --dask: keep the parts, do not merge them.")
@quiet_option
@storage_option
@translate_errors
def pack_command(lst, root, out, image_options, pack_label, label_width, layout, allow_outside_root, workers, strict, max_errors, overwrite, resume, stats_path, num_parts, part_index, shard_size, dask_address, no_merge, quiet, storage_options):
    """Pack the images of LIST (paths relative to ROOT) into OUT.rec and OUT.idx.

    OUT defaults to LIST with .rec. Each record holds the list index as its id and
    .idx key, and records follow the list order: the output is the same for any
    --workers. A bad image is skipped and listed with its reason in
    OUT.failed.tsv (written only when something failed); the run goes on.
    Outputs appear only when complete; an
    interrupted run can be continued with --resume.

    --color 1 and 0 drop the alpha channel, as im2rec.py does: a picture kept in
    the alpha channel (over white or black colour channels) packs as a blank
    image. Images that had transparency are counted in the summary and named in a
    warning and in --stats; --alpha-background COLOR composites them instead.

    \b
    Examples:
      im2rec pack train.lst images/                       # train.rec, train.idx
      im2rec pack train.lst images/ out.rec --resize 256 --quality 90
      im2rec pack image.lst root out.rec --resize 256 --label-width 4
      im2rec pack train.lst images/ --pass-through         # store the files as they are
      im2rec pack val.lst images/ --resize 256 --center-crop --encoding .png
      im2rec pack icons.lst icons/ --alpha-background white       # transparent PNGs over white
      im2rec pack train.lst images/ --strict --stats pack.json   # for CI
      im2rec pack train.lst images/ --resize 256 --resume  # after a crash or kill
      im2rec pack train.lst images/ out.rec --num-parts 8 --part-index 3   # one of 8 array jobs
      im2rec pack train.lst images/ out.rec --dask tcp://scheduler:8786    # on a Dask cluster
      im2rec pack train.lst images/ out.rec --shard-size 1GB               # out-00000.rec, ...
      im2rec pack faces.lst faces/ out/train.rec --resize 112 --layout insightface
      im2rec pack train.lst s3://bucket/images s3://bucket/out/train.rec --resize 256

    \b
    Exit status:
      0  the run completed (failed images, if any, are in OUT.failed.tsv)
      1  an error: bad list, wrong ROOT, existing output, write error; every
         image failed; with --strict any failed image; more than --max-errors
      2  a usage error
      130/143  interrupted by Ctrl-C / SIGTERM (rerun with --resume)
    """
    if dask_address is not None and stats_path is not None:
        raise click.UsageError("--stats is written by single runs and parts, not yet by --dask")
    with _usage_errors():
        options = packing.PackOptions(
            image=image_options,
            pack_label=pack_label,
            label_width=label_width,
            workers=workers or packing.default_workers(),
            overwrite=overwrite,
            resume=resume,
            max_errors=max_errors,
            num_parts=num_parts,
            part_index=part_index,
            shard_size=shard_size,
            allow_outside_root=allow_outside_root,
            layout=layout,
            storage_options=_options(storage_options),
        )
    with _usage_errors():  # what pack and pack_dask refuse before any work
        if dask_address is not None:
            _pack_with_dask(lst, root, out, options, dask_address, num_parts if num_parts > 1 else None, not no_merge, strict, quiet)
            return
        stats = storage.StagedOutput(stats_path, options.storage_options, overwrite=True) if stats_path else None  # its bucket checked now
        try:
            _pack_and_report(lst, root, out, options, stats, strict, quiet)
        finally:
            if stats is not None:
                stats.close()


def _pack_and_report(lst, root, out, options, stats, strict, quiet):
    summary = _with_bar(lambda bar: packing.pack(lst, root, out, options, bar), options, stats, quiet)
    _conclude(summary, options, stats, strict, quiet)


def _with_bar(run, options, stats, quiet):
    """``run(bar)`` (a pack, or an import) with a progress bar, returning what it returns;
    Ctrl-C and SIGTERM keep the finished part for --resume; a run stopped by
    ``--max-errors`` still writes ``--stats``."""
    bar = _Bar(not quiet)
    with _exits_when_interrupted(bar, bar.kept):
        try:
            return run(bar)
        except TooManyFailures as e:
            if stats is not None and isinstance(e.summary, packing.PackSummary):
                packing.write_stats(stats.path, e.summary, options, sys.argv)
                stats.upload()
            raise


def _conclude(summary, options, stats, strict, quiet):
    """After a pack or an import: ``--stats``, the summary line, the exit status."""
    if stats is not None:
        packing.write_stats(stats.path, summary, options, sys.argv)
        stats.upload()
    if not quiet:
        click.echo(packing.summary_line(summary))
    if summary.failed and not summary.packed:
        raise click.ClickException(f"no image could be packed: all {summary.failed:,} failed; see {summary.outputs.failed}")
    if strict and summary.failed:
        raise click.ClickException(f"{summary.failed:,} image(s) failed (--strict); see {summary.outputs.failed}")


def _pack_with_dask(lst, root, out, options, address, num_parts, merge, strict, quiet):
    from .packing import distributed

    def on_part(i, summary, error):
        if error is not None:
            click.echo(f"part {i}: failed: {error}", err=True)
        elif not quiet:
            click.echo(f"part {i}: {packing.summary_line(summary)}", err=True)

    result = distributed.pack_dask(lst, root, out, options, address, num_parts, merge, on_part)
    if not quiet:
        click.echo(distributed.summary_line(result))
    if strict and result.failed:
        raise click.ClickException(f"{result.failed:,} image(s) failed (--strict)")


@main.command("merge")
@click.argument("out", type=_Output())
@click.argument("parts", nargs=-1, required=True, type=_PathOrURL())
@click.option("--layout", type=click.Choice(recordio.LAYOUTS), default=None, help="[default: the parts' own: insightface for the parts of a `pack --layout insightface` run (each has a .layout file beside it), whose merged images are laid out as one face set; else plain]")
@click.option("--overwrite", is_flag=True, help="Replace an existing OUT.")
@quiet_option
@storage_option
@translate_errors
def merge_command(out, parts, layout, overwrite, quiet, storage_options):
    """Concatenate PART.rec files into OUT.rec and rewrite the .idx offsets.

    Parts named OUT-0000I-of-0000N.rec (from `pack --num-parts N --part-index I`)
    are put in order and must all be there; the result is byte-identical to one
    pack of the whole list, in its layout. Their .failed.tsv files are joined too.

    \b
    Examples:
      im2rec merge out.rec out-*-of-00008.rec
      im2rec merge faces/train.rec faces/train-*-of-00004.rec      # parts of a --layout insightface pack
      im2rec merge s3://b/out/train.rec s3://b/out/train-0000{0,1,2,3}-of-00004.rec   # joined by S3 itself
    """
    with _usage_errors():
        result = shards.merge(out, parts, layout, overwrite=overwrite, storage_options=_options(storage_options))
    if not quiet:
        how = (" (joined by the store)" if result.server_side else " (streamed)") if storage.is_url(out) else ""
        if result.identities is not None:
            what = f"{result.records:,} images of {result.identities:,} identities (insightface layout)"
        else:
            what = f"{result.records:,} records"
        click.echo(f"merged {len(result.parts)} parts into {out}{how}: {what}, {result.bytes / 1e6:,.1f} MB")


@main.command("export")
@click.argument("rec", metavar="DATA.rec", type=_PathOrURL())
@click.argument("out", metavar="OUT", type=_Output(folder=True))
@click.option("--format", "fmt", type=click.Choice(formats.FORMATS), required=True, help="webdataset: tar shards; parquet: 🤗 datasets' Parquet; mds: MosaicML streaming; litdata: Lightning's litdata (needs im2rec[litdata]).")
@click.option("--shard-size", type=_Parsed("SIZE", parse_size), default=None, help="Start a new shard before one would pass SIZE (e.g. 1GB, 64MB) [default: 512MB for webdataset and parquet, 64MB for mds and litdata].")
@click.option("--classes", "classes_path", type=_PathOrURL(), default=None, help="A 'label TAB name' file (what `im2rec list` writes as PREFIX.classes.tsv) [default: PREFIX.classes.tsv beside DATA.rec, if there].")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it has files.")
@quiet_option
@storage_option
@translate_errors
def export_command(rec, out, fmt, shard_size, classes_path, overwrite, quiet, storage_options):
    """Write the records of DATA.rec as shards of another format in the folder OUT.

    DATA.rec needs its .idx; several .rec are one dataset when given as the
    OUT.shards.json manifest of a sharded pack, or as a glob ("train-*.rec"). Each record becomes one sample: its key, the image bytes as stored
    (never re-encoded), every label, and the header's id and id2; the class name
    too where PREFIX.classes.tsv gives one. An insightface set exports its images
    only, labelled with their identity; its property file goes into
    OUT/im2rec.json. `im2rec import` gives back the .rec and .idx byte for byte.

    \b
    Examples:
      im2rec export train.rec wds/ --format webdataset      # wds/train-000000.tar ...
      im2rec export train.rec pq/ --format parquet          # datasets.load_dataset("parquet", ...)
      im2rec export faces_emore/train.rec mds/ --format mds --shard-size 64MB
      im2rec export s3://b/train.rec s3://b/wds/ --format webdataset

    OUT appears whole (written as OUT.partial, then renamed); a URL OUT gets each
    shard as it is finished, im2rec.json and the format's index last. A damaged
    record is reported and left out (exit status 1 at the end), as extract does.
    """
    bar = _ExportBar(not quiet)
    with _exits_when_interrupted(bar, f"nothing was written to {out}"), _usage_errors():
        summary = exchange.export_rec(rec, out, fmt, shard_size, overwrite=overwrite, storage_options=_options(storage_options), progress=bar, classes=classes_path)
    for lost in summary.lost:
        click.echo(lost, err=True)
    _print_problems(rec, summary.problems)
    if not quiet:
        click.echo(summary.line())
    if summary.problems or summary.lost:
        sys.exit(1)


@main.command("import")
@click.argument("src", metavar="SRC", type=_PathOrURL(folder=None))
@click.argument("out", metavar="OUT.rec", type=_Output())
@click.option("--format", "fmt", type=click.Choice(formats.FORMATS), default=None, help="What SRC holds: webdataset tar shards, parquet files, an mds or a litdata folder [default: what SRC/im2rec.json says, for an export's folder; else webdataset for a .tar, parquet for a .parquet].")
@click.option("--label-field", default=None, help="The field (tar extension, column) that holds the label [default: json's 'label', else the first of cls, label, class, target, y, ...; see the README].")
@click.option("--layout", type=click.Choice(recordio.LAYOUTS), default=None, help="plain: keys as exported (or 0..N-1); insightface: RecBuilder's face-recognition layout [default: the source's, from its im2rec.json, else plain].")
@image_options
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes when image options re-encode [default: every core].")
@click.option("--strict", is_flag=True, help="Exit with status 1 if any sample failed (the outputs are still written).")
@click.option("--max-errors", type=click.IntRange(min=0), default=None, help="Stop with status 1 as soon as more than N samples have failed.")
@overwrite_option
@resume_option
@stats_option
@quiet_option
@storage_option
@translate_errors
def import_command(src, out, fmt, label_field, layout, image_options, workers, strict, max_errors, overwrite, resume, stats_path, quiet, storage_options):
    """Pack the samples of SRC (written by webdataset, 🤗 datasets, MosaicML
    streaming or litdata, or by `im2rec export`) into OUT.rec and OUT.idx.

    SRC is a folder (or URL prefix) of shards, one shard file, or a glob. Image
    bytes are stored as they are (pass-through: checked, not decoded) unless an
    image option (--resize, --quality, --encoding, ...) asks to re-encode them,
    which runs in pack's worker pool. Labels come from a sample's json/cls (tar),
    label column (parquet) or label field; string labels become ids in sorted
    name order, written to OUT.classes.tsv. Samples that cannot be packed are
    listed in OUT.failed.tsv and the run goes on; outputs appear only when
    complete, and --resume continues an interrupted run.

    \b
    Examples:
      im2rec import wds/ train.rec --format webdataset
      im2rec import "hf/data/train-*.parquet" train.rec --format parquet --resize 256
      im2rec import mds/ faces/train.rec --format mds --layout insightface
      im2rec import s3://b/wds/ s3://b/train.rec --format webdataset

    Exit status: 0 on success, 1 when nothing could be packed or with --strict
    when a sample failed, 2 for usage errors; 130/143 when interrupted.
    """
    if image_options == image.ImageOptions():
        image_options = image.ImageOptions(pass_through=True)
    if fmt is None and storage.is_url(src) and not any(c in src.split("://", 1)[1] for c in "*?["):  # a missing bucket or folder is said as such, not as a --format to give
        storage.check_bucket(src, _options(storage_options))
        if not storage.exists(src, _options(storage_options)):
            raise StorageError(f"{src}: no such object or folder")
    meta = exchange.source_meta(src, _options(storage_options))
    if fmt is None:
        fmt = meta.format if meta is not None and meta.format in formats.FORMATS else formats.format_of_name(src)
        if fmt is None:
            raise click.UsageError(f"give --format: {src} has no im2rec.json that says which format it holds, nor a name ending in {' or '.join(formats.EXTENSION_FORMATS)}")
    layout = layout or (meta.layout if meta is not None and meta.format == fmt else "plain")
    with _usage_errors():
        options = packing.PackOptions(
            image=image_options,
            workers=workers or packing.default_workers(),
            overwrite=overwrite,
            resume=resume,
            max_errors=max_errors,
            layout=layout,
            storage_options=_options(storage_options),
        )
        stats = storage.StagedOutput(stats_path, options.storage_options, overwrite=True) if stats_path else None
        summary, classes = _with_bar(lambda bar: exchange.import_samples(src, out, fmt, options, bar, label_field=label_field), options, stats, quiet)
        _conclude(summary, options, stats, strict, quiet)
    if classes and not quiet:
        click.echo(f"class names: {classes}")


@main.command("convert")
@click.argument("inp", metavar="IN.rec", type=_PathOrURL())
@click.argument("out", metavar="OUT.rec", type=_Output())
@click.option("--layout", type=click.Choice(recordio.LAYOUTS), required=True, help="plain: images only, keys 0..N-1 (for DALI); insightface: RecBuilder's layout (integer labels).")
@click.option("--shuffle", is_flag=True, help="plain: the images in a seeded random order, as insightface's shuffle_rec.py.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --shuffle (numpy's RandomState): --seed 0 gives shuffle_rec.py's order after np.random.seed(0).")
@click.option("--overwrite", is_flag=True, help="Replace existing outputs.")
@quiet_option
@storage_option
@translate_errors
def convert_command(inp, out, layout, shuffle, seed, overwrite, quiet, storage_options):
    """Rewrite the images of IN.rec in another layout, copying their bytes (never re-encoding).

    Reads any layout: an insightface header at key 0 is detected, and the header
    and identity records are dropped. --layout plain writes images only, keys
    0..N-1, scalar labels, each record's id and id2 kept: what DALI's
    fn.readers.mxnet and arcface_torch's DALI route need (insightface's
    scripts/shuffle_rec.py). --layout insightface writes what insightface's
    RecBuilder writes, from a plain, im2rec.py-style .rec with integer labels:
    images grouped by identity as keys 1..N, identity records, header record 0,
    and a property file next to OUT.rec.

    \b
    Examples:
      im2rec convert faces_emore/train.rec dali/train.rec --layout plain --shuffle
      im2rec convert imagenet_style.rec faces/train.rec --layout insightface
      im2rec convert s3://b/faces/train.rec s3://b/dali/train.rec --layout plain

    A URL input is downloaded (with its .idx and property) to $IM2REC_STAGING or
    the system's temporary folder, a URL output written there and uploaded whole:
    that folder needs room for them.
    """
    options = _options(storage_options)
    with storage.StagedOutput(out, options, overwrite=overwrite) as staged, _staged_input(inp, options) as source:
        result = faces.convert(source.path, staged.path, layout, shuffle=shuffle, seed=seed, overwrite=overwrite)
    _warn_sizes(result, staged)
    if not quiet:
        click.echo(staged.shown(faces.summary_line(result)))


@main.command("combine")
@click.argument("out", metavar="OUT.rec", type=_Output())
@click.argument("inputs", metavar="IN.rec...", nargs=-1, required=True, type=_PathOrURL())
@click.option("--labels", type=click.Choice(["offset", "keep"]), default="offset", show_default=True, help="offset: shift each input's labels past the previous inputs' classes, so identities never collide; keep: one label space shared by the inputs.")
@click.option("--layout", type=click.Choice(recordio.LAYOUTS), default=None, help="[default: insightface if every input is, else plain]")
@click.option("--overwrite", is_flag=True, help="Replace existing outputs.")
@quiet_option
@storage_option
@translate_errors
def combine_command(out, inputs, labels, layout, overwrite, quiet, storage_options):
    """One dataset from several different ones (unlike `merge`, which joins parts of one run).

    The images of every input, in the given order, with keys renumbered and
    payload bytes copied. insightface inputs lose their header and identity
    records; an insightface output gets new ones. OUT.sources.tsv maps every
    input's old labels to the new ones.

    \b
    Example:
      im2rec combine all/train.rec ms1m/train.rec glint/train.rec my_faces/train.rec
    """
    options = _options(storage_options)
    with contextlib.ExitStack() as stack:
        staged = stack.enter_context(storage.StagedOutput(out, options, overwrite=overwrite))
        sources = [stack.enter_context(_staged_input(path, options)) for path in inputs]
        result = faces.combine(staged.path, [s.path for s in sources], labels=labels, layout=layout, overwrite=overwrite, names=list(inputs))
    _warn_sizes(result, staged)
    if not quiet:
        click.echo(staged.shown(faces.summary_line(result)))
        click.echo(f"label map: {staged.shown(result.sources)} ({result.num_classes:,} classes)")


def _staged_input(path: str, storage_options) -> storage.StagedInput:
    """A .rec read as a local file: for a URL, a downloaded copy with its .idx and property."""
    return storage.StagedInput(path, (recordio.sibling(path, "idx"), recordio.sibling(path, "property")), storage_options)


def _warn_sizes(result, staged: storage.StagedOutput) -> None:
    if result.sizes_seen > 1:
        h, w = result.size
        click.echo(f"warning: the images have {result.sizes_seen} different sizes; {staged.shown(result.property)} says the most common, {h}x{w}", err=True)


def _print_problems(rec: str, problems, limit: int = 1000) -> None:
    for p in problems[:limit]:
        click.echo(f"{rec}: {p}", err=True)
    if len(problems) > limit:
        click.echo(f"{rec}: ... and {len(problems) - limit:,} more", err=True)


@main.command("inspect")
@rec_argument
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--sample", type=click.IntRange(min=0), default=200, show_default=True, help="Records sampled for image formats and sizes.")
@click.option("--grid", "grid_path", metavar="SHEET.jpg", type=_Output(), default=None, help="Also draw a contact sheet of sample records (.jpg or .png), each captioned with its key and label.")
@click.option("--samples", type=click.IntRange(min=1), default=64, show_default=True, help="Tiles on the --grid sheet.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the --grid sample: the same seed draws the same records.")
@click.option("--tile-size", type=click.IntRange(min=16), default=128, show_default=True, help="Side of each --grid tile, in pixels.")
@click.option("--classes", "classes_path", type=_PathOrURL(), default=None, help="label<TAB>folder file for the --grid captions [default: PREFIX.classes.tsv of `im2rec list`, found next to REC].")
@storage_option
@translate_errors
def inspect_command(rec, as_json, sample, grid_path, samples, seed, tile_size, classes_path, storage_options):
    """Summarise REC: records, labels, payload sizes, image formats and sizes.

    Uses the .idx beside REC when there is one, else scans the file. A damaged
    record is reported and skipped. insightface files (a header at key 0) are
    recognised and their images and identities counted.

    With --grid, also draws sample records on one image, each captioned with its
    key and label (the class folder's name when the PREFIX.classes.tsv written
    by `im2rec list` is next to REC), to see at once that images are upright,
    cropped and labelled as intended. A damaged or undecodable record gets a
    marked tile.

    \b
    Examples:
      im2rec inspect train.rec
      im2rec inspect train.rec --json | jq .labels.classes
      im2rec inspect train.rec --grid sheet.jpg --samples 100 --seed 1
    """
    options = _options(storage_options)
    staged = storage.StagedOutput(grid_path, options, overwrite=True) if grid_path is not None else None  # its bucket checked first
    try:
        report = inspection.inspect_rec(rec, sample=sample, storage_options=options)
    except BaseException:
        if staged is not None:
            staged.close()
        raise
    if staged is not None:
        from . import sheet

        with staged:
            drawn = sheet.contact_sheet(rec, staged.path, samples=samples, seed=seed, tile=tile_size, classes=classes_path, storage_options=options)
        report.grid = {
            "path": grid_path,
            "tiles": drawn.tiles,
            "columns": drawn.columns,
            "rows": drawn.rows,
            "classes": drawn.classes,
            "marked": [str(p) for p in drawn.marked],
        }
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=1))
        return
    for line, to_stderr in report.lines():
        click.echo(line, err=to_stderr)


@main.command("verify")
@rec_argument
@click.option("--decode", "decode_images", is_flag=True, help="Also decode every image.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the problems.")
@storage_option
@translate_errors
def verify_command(rec, decode_images, quiet, storage_options):
    """Check every record of REC and every line of its .idx.

    Framing (magic, continuation flags, lengths), a file size that is a multiple
    of 4, every .idx entry on a record head, no duplicate keys or offsets, no
    record missing from the .idx, and with --decode every image decodable. Each
    problem is printed on stderr with its byte offset and key.

    Records split inside their header (a header word or label equal to the
    RecordIO magic) are valid and MXNet reads them, but DALI cannot: each is
    printed as a warning, which does not change the exit status.

    \b
    Exit status: 0 if clean (warnings allowed), 1 if any problem was found.
    """
    report = inspection.verify_rec(rec, decode_images, storage_options=_options(storage_options))
    _print_problems(rec, report.problems)
    _print_problems(f"warning: {rec}", report.warnings)
    if not quiet:
        decoded = f", {report.decoded:,} images decoded" if decode_images else ""
        multi = f" ({report.multi_part:,} multi-part)" if report.multi_part else ""
        warned = f", {plural(len(report.warnings), 'warning')}" if report.warnings else ""
        click.echo(f"{rec}: {report.records:,} records{multi}{decoded}, {plural(len(report.problems), 'problem')}{warned}")
    if report.problems:
        sys.exit(1)


@main.command("extract")
@rec_argument
@click.argument("outdir", type=_Output(folder=True))
@click.option("--flat", is_flag=True, help="Write every image directly in OUTDIR (default: a folder per label).")
@click.option("--overwrite", is_flag=True, help="Replace files that exist.")
@quiet_option
@storage_option
@translate_errors
def extract_command(rec, outdir, flat, overwrite, quiet, storage_options):
    """Write every image of REC to OUTDIR with its original bytes, and OUTDIR/<stem>.lst.

    Images go to OUTDIR/<label>/<key>.<ext>. The list names them with their keys
    and labels, so that `im2rec pack OUTDIR/<stem>.lst OUTDIR NEW.rec
    --pass-through` rebuilds the same records. A damaged record is reported and
    skipped (exit status 1 at the end).
    """
    options = _options(storage_options)
    lst = storage.join(outdir, posixpath.splitext(posixpath.basename(rec))[0] + ".lst") if storage.is_url(outdir) else ""
    if lst and not overwrite and storage.exists(lst, options):  # before any work, as the local OUTDIR's is
        raise OutputExistsError(lst)
    with storage.StagedOutput(outdir, options, overwrite=overwrite, folder=True) as staged:
        result = inspection.extract_rec(rec, staged.path, flat=flat, overwrite=overwrite, storage_options=options)
    _print_problems(rec, result.problems)
    if result.id_mismatches:
        click.echo(f"warning: {result.id_mismatches:,} record(s) have a header id other than their key; a re-pack will use the key for both", err=True)
    if not quiet:
        click.echo(f"extracted {result.images:,} images to {outdir}; list {staged.shown(result.lst)}")
        click.echo(f"rebuild with: {staged.shown(result.pack_command)}")
    if result.problems:
        sys.exit(1)


@main.command("index")
@click.argument("recs", metavar="REC...", nargs=-1, required=True, type=_PathOrURL())
@click.option("--idx", "idx_path", type=_Output(), default=None, help="Where to write [default: REC with .idx].")
@click.option("--combined", "combined_path", metavar="OUT.idx", type=_Output(), default=None, help="Write one .idx for all the RECs read as one, in the given order: what DALI's fn.readers.mxnet needs for several .rec files (its offsets count across them).")
@click.option("--keys", type=click.Choice(["id", "counter"]), default="id", show_default=True, help="id: each record's header id (im2rec.py's keys); counter: 0, 1, 2, ... (DALI's rec2idx).")
@click.option("--overwrite", is_flag=True, help="Replace an existing .idx.")
@quiet_option
@storage_option
@translate_errors
def index_command(recs, idx_path, combined_path, keys, overwrite, quiet, storage_options):
    """Rebuild the .idx of REC by a sequential scan, or write the combined .idx of several.

    A damaged record is reported and skipped (exit status 1 at the end); the
    records after it are indexed.

    With --combined, each REC's entries come from its own .idx (or a scan when it
    has none), their offsets shifted by the sizes of the RECs before it. DALI
    takes one index_path for all its path files; given a single shard's .idx it
    silently reads that shard alone.

    \b
    Examples:
      im2rec index train.rec --overwrite                 # rebuild train.idx
      im2rec index train.rec --keys counter --idx dali.idx
      im2rec index --combined out.combined.idx out-00000.rec out-00001.rec out-00002.rec
    """
    if combined_path is not None:
        if idx_path is not None:
            raise click.UsageError("--idx and --combined both name the output: give one")
        result = inspection.combined_index(list(recs), combined_path, keys=keys, overwrite=overwrite)
        for problem in result.problems:
            click.echo(str(problem), err=True)
        if not quiet:
            click.echo(f"{result.idx}: {plural(result.entries, 'entry', 'entries')} for {plural(len(recs), 'file')}")
        if result.problems:
            sys.exit(1)
        return
    if len(recs) > 1:
        raise click.UsageError(f"{len(recs)} files given: index one REC at a time, or all of them as one with --combined OUT.idx")
    rec = recs[0]
    result = inspection.rebuild_index(rec, idx_path, keys=keys, overwrite=overwrite, storage_options=_options(storage_options))
    for warning in result.warnings:
        click.echo(f"warning: {rec}: {warning}", err=True)
    _print_problems(rec, result.problems)
    if not quiet:
        click.echo(f"{result.idx}: {plural(result.entries, 'entry', 'entries')}")
    if result.problems:
        sys.exit(1)


@main.group("bin")
def bin_group() -> None:
    """insightface's .bin verification sets (lfw.bin, cfp_fp.bin, agedb_30.bin).

    A .bin is a pickle; these commands never unpickle one with pickle.load: a
    restricted reader accepts only images and bools and refuses a .bin that
    would run code.
    """


@bin_group.command("extract")
@click.argument("bin_path", metavar="FILE.bin", type=_PathOrURL())
@click.argument("outdir", type=_Output(folder=True))
@click.option("--overwrite", is_flag=True, help="Replace files that exist.")
@quiet_option
@storage_option
@translate_errors
def bin_extract_command(bin_path, outdir, overwrite, quiet, storage_options):
    """Write the images of FILE.bin with their original bytes, and OUTDIR/pairs.tsv.

    Images are OUTDIR/00000.jpg, 00001.jpg, ... (pair i is images 2i and 2i+1);
    pairs.tsv has one `left TAB right TAB issame` line per pair (issame 1 or 0),
    which `im2rec bin build` reads back.

    \b
    Example:
      im2rec bin extract faces_emore/lfw.bin lfw/
    """
    options = _options(storage_options)
    with storage.StagedOutput(outdir, options, overwrite=overwrite, folder=True) as staged, storage.StagedInput(bin_path, (), options) as source:
        result = verification.extract_bin(source.path, staged.path, overwrite=overwrite)
    if not quiet:
        click.echo(f"extracted {result.images:,} images of {result.pairs:,} pairs ({result.same:,} same) to {outdir}; list {staged.shown(result.path)}")


@bin_group.command("build")
@click.argument("pairs", metavar="PAIRS.tsv", type=_PathOrURL())
@click.argument("root", type=_LocalOnly(folder=True, why="bin build reads the images of a local folder: copy them first (e.g. aws s3 sync)"))
@click.argument("out", metavar="OUT.bin", type=_Output())
@click.option("--resize", type=_Parsed("WxH", verification.parse_size), default=None, help="Decode, resize to WIDTHxHEIGHT (e.g. 112x112) and re-encode every image as JPEG (default: the files' bytes).")
@click.option("--overwrite", is_flag=True, help="Replace an existing OUT.bin.")
@quiet_option
@storage_option
@translate_errors
def bin_build_command(pairs, root, out, resize, overwrite, quiet, storage_options):
    """Write OUT.bin from PAIRS.tsv (`left TAB right TAB issame`, paths relative to ROOT).

    The result is what insightface's load_bin reads unchanged: a pickle of
    (images, issame) with the images as bytes (protocol 4).

    \b
    Example:
      im2rec bin build my_pairs.tsv crops/ my_eval.bin --resize 112x112
    """
    options = _options(storage_options)
    with storage.StagedOutput(out, options, overwrite=overwrite) as staged, storage.StagedInput(pairs, (), options) as source:
        result = verification.build_bin(source.path, root, staged.path, resize=resize, overwrite=overwrite)
    if not quiet:
        click.echo(f"wrote {out}: {result.pairs:,} pairs ({result.same:,} same), {result.images:,} images")
