"""``im2rec-py``: MXNet 1.9's ``tools/im2rec.py`` command line, unchanged, on im2rec's library.

    im2rec-py PREFIX ROOT --list [--recursive] [--exts .jpg .png] [--train-ratio R] ...
    im2rec-py PREFIX ROOT [--resize N] [--quality Q] [--num-thread N] ...

Switch a script by changing one word (``python im2rec.py`` -> ``im2rec-py``, or
``python -m im2rec.legacy``). The options, defaults, abbreviations and file names
are im2rec.py's (argparse, as there), and so are the outputs: the same ``.lst``
files, and ``.rec``/``.idx`` files byte for byte (images decoded at full size, as
``cv2.imread`` does, then its crop, resize and encoding; PNG at the level OpenCV
makes of its quality).

What differs is what used to go wrong: a bad image is skipped and listed in
``<stem>.failed.tsv`` (im2rec.py crashed with one worker, and skipped silently
with several); outputs appear whole or not at all; and where im2rec.py silently
did something harmful, the result is kept but said on stderr (a ``--test-ratio``
that ``--train-ratio 1.0`` ignores, an output replaced, a malformed list line
skipped, a path outside ROOT packed, an extension that can never match).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from . import listing, packing, storage
from .console import warnings_on_stderr
from .errors import Im2recError
from .fsutil import remove_quietly, temp_path
from .image import ImageOptions
from .lst import LineError, ListEntry, parse_fields, write_lst
from .outputs import Outputs

__all__ = ["lists_to_pack", "main", "make_list", "pack_lists", "parse_args"]

log = logging.getLogger("im2rec")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """im2rec.py's arguments, with its names, defaults and argparse behaviour."""
    parser = argparse.ArgumentParser(
        prog="im2rec-py",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Create an image list or make a record database by reading from an image list "
        "(MXNet 1.9's tools/im2rec.py command line, on im2rec).",
    )
    parser.add_argument("prefix", help="prefix of input/output lst and rec files.")
    parser.add_argument("root", help="path to folder containing images.")
    lists = parser.add_argument_group("Options for creating image lists")
    lists.add_argument("--list", action="store_true", help="create image list(s) by traversing root folder and output to <prefix>.lst; otherwise read <prefix>*.lst and create <stem>.rec for each")
    lists.add_argument("--exts", nargs="+", default=[".jpeg", ".jpg", ".png"], help="list of acceptable image extensions.")
    lists.add_argument("--chunks", type=int, default=1, help="number of chunks.")
    lists.add_argument("--train-ratio", type=float, default=1.0, help="Ratio of images to use for training.")
    lists.add_argument("--test-ratio", type=float, default=0, help="Ratio of images to use for testing.")
    lists.add_argument("--recursive", action="store_true", help="recursively walk through subdirs and assign an unique label to images in each folder; otherwise only include images in the root folder and give them label 0.")
    lists.add_argument("--no-shuffle", dest="shuffle", action="store_false", help="do not randomize the image order in <prefix>.lst")
    records = parser.add_argument_group("Options for creating database")
    records.add_argument("--pass-through", action="store_true", help="whether to skip transformation and save image as is")
    records.add_argument("--resize", type=int, default=0, help="resize the shorter edge of image to the newsize, original images will be packed by default.")
    records.add_argument("--center-crop", action="store_true", help="specify whether to crop the center image to make it rectangular.")
    records.add_argument("--quality", type=int, default=95, help="JPEG quality for encoding, 1-100; or PNG compression for encoding, 1-9")
    records.add_argument("--num-thread", type=int, default=1, help="number of processes to use for encoding (the output order is the list's either way).")
    records.add_argument("--color", type=int, default=1, choices=[-1, 0, 1], help="1: colour (alpha dropped), 0: grayscale, -1: unchanged (alpha kept).")
    records.add_argument("--encoding", type=str, default=".jpg", choices=[".jpg", ".png"], help="specify the encoding of the images.")
    records.add_argument("--pack-label", action="store_true", help="Whether to also pack multi dimensional label in the record file")
    args = parser.parse_args(argv)
    for name in ("prefix", "root"):
        if storage.is_url(getattr(args, name)):
            parser.error(
                f"{name} {getattr(args, name)!r} is a URL: im2rec-py, like im2rec.py, works on local files; "
                f"`im2rec list` and `im2rec pack` take URLs"
            )
    args.prefix = os.path.abspath(args.prefix)
    args.root = os.path.abspath(args.root)
    return args


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- --list


def make_list(args: argparse.Namespace) -> listing.ListResult:
    """``--list``: im2rec.py's lists (hidden files included, no class map file), written atomically."""
    for ext in args.exts:
        if ext != ext.lower() or not ext.startswith("."):
            _warn(f"--exts {ext} never matches: im2rec.py compares lower-case suffixes with their dot (e.g. .jpg)")
    if args.train_ratio == 1.0 and args.test_ratio:
        _warn(f"--test-ratio {args.test_ratio} is ignored because --train-ratio is 1.0: only {args.prefix}.lst is written")
    elif args.train_ratio + args.test_ratio > 1.0:
        _warn(
            f"--train-ratio {args.train_ratio} plus --test-ratio {args.test_ratio} is more than 1: "
            "the train list gets only what the test list leaves, and no val list is written"
        )
    options = listing.ListOptions(
        exts=tuple(args.exts),
        recursive=args.recursive,
        train_ratio=args.train_ratio,
        test_ratio=args.test_ratio,
        chunks=args.chunks,
        shuffle=args.shuffle,
        seed=100,  # im2rec.py's random.seed(100)
        legacy=True,
    )
    replaced = [p for p in listing.list_names(args.prefix, options) if os.path.exists(p)]
    result = listing.make_lists(args.root, args.prefix, options)
    for skipped in result.skipped:
        _warn(f"skipped {skipped.path!r}: {skipped.reason}")
    for path in replaced:
        _warn(f"replaced the existing {path}")
    if args.recursive:  # im2rec.py prints the folder -> label map
        for label, folder in result.classes:
            print(folder, label)
    return result


# --------------------------------------------------------------------------- packing


def lists_to_pack(prefix: str) -> tuple[str, list[str]]:
    """(working folder, the ``.lst`` files im2rec.py packs for ``prefix``): every file of the
    folder (PREFIX itself when it is one, else its folder) whose path starts with PREFIX and
    ends with ``.lst``; sorted, where im2rec.py took the folder's listing order."""
    working_dir = prefix if os.path.isdir(prefix) else os.path.dirname(prefix)
    found = []
    for name in os.listdir(working_dir):
        path = os.path.join(working_dir, name)
        if os.path.isfile(path) and path.startswith(prefix) and path.endswith(".lst"):
            found.append(path)
    return working_dir, sorted(found)


def _normalized_list(lst: str, out_dir: str) -> tuple[str | None, int]:
    """Read ``lst`` with im2rec.py's rules (fields split on TAB and stripped; a line with fewer
    than 3 fields, or a field that does not parse, is skipped with a message).

    Returns:
        (None, lines outside ROOT) when the file reads the same under im2rec's own strict
        rules, else (a normalised copy holding the lines im2rec.py keeps, lines outside ROOT).
    """
    entries: list[ListEntry] = []
    same = True
    outside = 0
    with open(lst, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            text = raw.decode("utf-8", "surrogateescape")
            fields = [x.strip() for x in text.strip().split("\t")]
            if len(fields) < 3:
                _warn(f"{lst}:{lineno}: skipped, as im2rec.py does: a line needs 'index<TAB>label...<TAB>path', this one has {len(fields)} field(s)")
                same = False
                continue
            try:
                entry = ListEntry(int(fields[0]), tuple(float(x) for x in fields[1:-1]), fields[-1])
                if entry.index < 0:
                    raise ValueError(f"index {entry.index} is negative")
            except ValueError as e:
                _warn(f"{lst}:{lineno}: skipped, as im2rec.py does: {e}")
                same = False
                continue
            if same:
                try:
                    same = parse_fields(text.rstrip("\n").rstrip("\r")) == entry
                except LineError:
                    same = False
            outside += packing.leaves_root(entry.path)
            entries.append(entry)
    if same:
        return None, outside
    copy = str(temp_path(os.path.join(out_dir, os.path.basename(lst) + ".normalized")))
    write_lst(copy, entries)
    return copy, outside


def _image_options(args: argparse.Namespace) -> ImageOptions:
    quality = args.quality
    if args.encoding == ".png":
        quality = min(max(quality, 0), 9)  # OpenCV clamps the PNG level; im2rec.py passes 95
    elif not 1 <= quality <= 100:
        _warn(f"--quality {quality} is outside 1-100; {min(max(quality, 1), 100)} is used")
        quality = min(max(quality, 1), 100)
    return ImageOptions(
        resize=args.resize,
        center_crop=args.center_crop,
        quality=quality,
        encoding=args.encoding,
        color=args.color,
        inter_method=1,  # cv2.resize's default, INTER_LINEAR
        pass_through=args.pass_through,
        reduced_decode=False,  # cv2.imread decodes at full size
    )


def pack_lists(args: argparse.Namespace) -> list[packing.PackSummary]:
    """Pack every ``PREFIX*.lst`` into ``<stem>.rec`` and ``<stem>.idx`` in the working folder.

    Raises:
        Im2recError: no list matches PREFIX, or a pack fails (a bad list, an unwritable output).
    """
    if args.num_thread < 1:
        _warn(f"--num-thread {args.num_thread}: one process is used")
    working_dir, lists = lists_to_pack(args.prefix)
    if not lists:
        raise Im2recError(f"no .lst file in {working_dir} starts with {args.prefix}; create one with --list")
    options = packing.PackOptions(
        image=_image_options(args),
        pack_label=args.pack_label,
        workers=max(1, args.num_thread),
        overwrite=True,  # im2rec.py replaces its outputs; said below
        allow_outside_root=True,  # im2rec.py joins any path to ROOT; said below
    )
    summaries = []
    for lst in lists:
        print("Creating .rec file from", lst, "in", working_dir)
        stem = os.path.join(working_dir, os.path.splitext(os.path.basename(lst))[0])
        out = Outputs.for_rec(stem + ".rec")
        for path in (out.rec, out.idx):
            if os.path.exists(path):
                _warn(f"replacing the existing {path}")
        normalized, outside = _normalized_list(lst, working_dir)
        if outside:
            _warn(f"{lst}: {outside} path(s) are absolute or climb out of ROOT with '..'; packed as im2rec.py does (im2rec pack refuses them)")
        try:
            summary = packing.pack(normalized or lst, args.root, out.rec, options)
        finally:
            if normalized:
                remove_quietly(normalized)
        if not summary.failed:
            remove_quietly(out.failed)  # im2rec.py writes no such file; keep it only when it says something
        print(packing.summary_line(summary, alpha_hint="`im2rec pack --alpha-background COLOR` composites them"))  # no such option here
        summaries.append(summary)
    return summaries


def main(argv: Sequence[str] | None = None) -> None:
    """The ``im2rec-py`` console script: exit 0 on success, 1 on an error, 2 for usage errors."""
    args = parse_args(argv)
    try:
        with warnings_on_stderr(log.name):  # for this run only: a caller's own logging set-up is left as it was
            if args.list:
                make_list(args)
            else:
                pack_lists(args)
    except Im2recError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("Error: interrupted; outputs are written whole or not at all", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
