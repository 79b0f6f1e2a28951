"""``im2rec list``: walk an image folder, give each class folder a label, shuffle, split, write ``.lst`` files.

With the defaults (seed 100, no ``stratify``) the lists are byte for byte what
MXNet's ``tools/im2rec.py --list`` writes for the same options: same file names,
order, indices and ``%f`` labels. Beyond it: a chosen seed, per-class
(stratified) splits, a ``PREFIX.classes.tsv`` class map, symlinked folders
followed without looping, hidden files skipped, and paths that a ``.lst`` cannot
hold reported instead of written.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import storage
from .errors import ListingError, OptionError
from .fsutil import commit, make_parents, remove_quietly, temp_path
from .lst import ListEntry, format_classes, unstorable_reason, write_lst
from .text import plural

__all__ = ["ListOptions", "ListResult", "Scan", "Skipped", "list_names", "make_lists", "normalize_exts", "scan_images", "skipped_exts_line"]

DEFAULT_EXTS = (".jpeg", ".jpg", ".png")  # im2rec.py's

#: Extensions of other formats that ``im2rec pack`` decodes (OpenCV), named in the hint
#: printed when a folder holds files of them that the chosen ``exts`` leave out.
DECODABLE_EXTS = {
    ".webp": "WebP", ".bmp": "BMP", ".dib": "BMP", ".tif": "TIFF", ".tiff": "TIFF",
    ".gif": "GIF", ".avif": "AVIF", ".jp2": "JPEG 2000", ".jpe": "JPEG", ".jfif": "JPEG",
    ".pbm": "PNM", ".pgm": "PNM", ".ppm": "PNM", ".pnm": "PNM", ".hdr": "HDR",
}  # fmt: skip


def normalize_exts(exts: Sequence[str]) -> tuple[str, ...]:
    """Lower-case extensions with a leading dot; accepts ``"jpg,png"`` style items too."""
    out: list[str] = []
    for item in exts:
        for ext in item.replace(",", " ").split():
            ext = ext.lower()
            out.append(ext if ext.startswith(".") else "." + ext)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class ListOptions:
    """Options of ``im2rec list``, with the CLI's defaults (those of im2rec.py, recursive aside)."""

    exts: tuple[str, ...] = DEFAULT_EXTS
    recursive: bool = True
    train_ratio: float = 1.0
    test_ratio: float = 0.0
    chunks: int = 1
    shuffle: bool = True
    seed: int = 100
    stratify: bool = False
    #: im2rec.py's own rules, for ``im2rec-py``: hidden files and folders listed, ``exts``
    #: matched as given (lower-case, with their dot), no class map file, and ratios that sum
    #: above 1 accepted (the train list then gets what the test list leaves).
    legacy: bool = False

    def validate(self) -> None:
        """Raise ListingError for ratios outside [0, 1] or chunks < 1, OptionError for ratios summing above 1."""
        for name in ("train_ratio", "test_ratio"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ListingError(f"--{name.replace('_', '-')} must be between 0 and 1, got {value}")
        if self.train_ratio + self.test_ratio > 1.0 + 1e-9 and not self.legacy:
            raise OptionError(f"--train-ratio {self.train_ratio} plus --test-ratio {self.test_ratio} is more than 1", "--test-ratio")
        if self.chunks < 1:
            raise ListingError(f"--chunks must be at least 1, got {self.chunks}")
        if not self.exts:
            raise ListingError("--exts names no extension")


@dataclass(frozen=True)
class Skipped:
    """A file or folder that was not listed, and why."""

    path: str
    reason: str


@dataclass
class ListResult:
    """What ``make_lists`` wrote."""

    lists: dict[str, int] = field(default_factory=dict)  # path -> number of lines
    classes: list[tuple[int, str]] = field(default_factory=list)  # (label, folder relative to root)
    classes_path: str | None = None
    skipped: list[Skipped] = field(default_factory=list)
    images: int = 0
    other_exts: Counter = field(default_factory=Counter)  # extension -> files not listed for it


@dataclass
class Scan:
    """The images found under a root, in im2rec.py's order, with their labels."""

    entries: list[ListEntry]
    classes: list[tuple[int, str]]  # (label, folder relative to the root, "." for the root)
    skipped: list[Skipped]
    other_exts: Counter = field(default_factory=Counter)  # extension ("" for none) -> files not listed


def skipped_exts_line(other_exts: Counter, exts: Sequence[str], shown: int = 8) -> str | None:
    """``skipped 25 files: 16 .webp, 9 .svg; add .webp to --exts (...) to list WebP too``, or None.

    Names the ``--exts`` value that adds the formats ``im2rec pack`` can decode, since
    ``--exts`` replaces the default list rather than extending it.
    """
    if not other_exts:
        return None
    ranked = sorted(other_exts.items(), key=lambda kv: (-kv[1], kv[0]))
    counts = ", ".join(f"{n:,} {ext or '(no extension)'}" for ext, n in ranked[:shown])
    if len(ranked) > shown:
        counts += f", {len(ranked) - shown} more extensions"
    total = sum(other_exts.values())
    line = f"skipped {plural(total, 'file')}: {counts}"
    images = [ext for ext, _ in ranked if ext in DECODABLE_EXTS]
    if images:
        names = list(dict.fromkeys(DECODABLE_EXTS[e] for e in images))
        formats = " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))
        line += f"; add {' '.join(images)} to --exts (--exts {','.join(tuple(exts) + tuple(images))}) to list {formats} too"
    return line


def _sorted_entries(path: str, skipped: list[Skipped]) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as e:
        skipped.append(Skipped(path, f"cannot read the folder: {e.strerror}"))
        return []


def scan_images(root: str, exts: Sequence[str], recursive: bool, hidden: bool = False) -> Scan:
    """Find the images under ``root`` in im2rec.py's order and give each folder its label.

    Folders and files are visited in sorted name order, depth first, the root's own
    files first; a folder gets the next label when its first image is found.
    Symlinked folders are followed, except one leading back to a folder being
    walked (a loop). Hidden names (a leading dot) are skipped silently unless
    ``hidden`` (im2rec.py lists them); paths that a ``.lst`` cannot hold are
    reported in ``skipped``.
    """
    exts = tuple(exts)
    entries: list[ListEntry] = []
    labels: dict[str, tuple[float]] = {}  # folder -> its label, one shared tuple per class
    skipped: list[Skipped] = []
    other_exts: Counter = Counter()
    root = os.path.abspath(root)

    def visit(path: str, rel: str, ancestors: tuple[tuple[int, int], ...]) -> None:
        subdirs = []
        for e in _sorted_entries(path, skipped):
            name = e.name
            if name.startswith(".") and not hidden:
                continue
            try:
                is_file = e.is_file()
                is_dir = not is_file and recursive and e.is_dir()
            except OSError:
                continue
            child = f"{rel}/{name}" if rel else name
            if is_file:
                ext = os.path.splitext(name)[1].lower()
                if ext not in exts:
                    other_exts[ext] += 1
                    continue
                reason = unstorable_reason(child)
                if reason:
                    skipped.append(Skipped(os.path.join(path, name), reason))
                    continue
                label = labels.get(rel)
                if label is None:
                    label = labels[rel] = (float(len(labels)),)
                entries.append(ListEntry(len(entries), label, child))
            elif is_dir:
                subdirs.append((e, child))
        for e, child in subdirs:
            try:
                st = e.stat()
            except OSError as err:
                skipped.append(Skipped(e.path, f"cannot read the folder: {err.strerror}"))
                continue
            ident = (st.st_dev, st.st_ino)
            if ident in ancestors:
                skipped.append(Skipped(e.path, "symlink loop: leads back to a folder already being listed"))
                continue
            visit(e.path, child, ancestors + (ident,))

    st = os.stat(root)
    visit(root, "", ((st.st_dev, st.st_ino),))
    classes = [(int(label[0]), folder or ".") for folder, label in labels.items()]
    return Scan(entries, classes, skipped, other_exts)


def scan_paths(paths: Sequence[str], exts: Sequence[str], recursive: bool, hidden: bool = False) -> Scan:
    """``scan_images`` for a listing of relative ``/``-separated file paths (an object store's
    prefix): the same order (a folder's files, sorted, before its sub-folders) and labels."""
    exts = tuple(exts)
    entries: list[ListEntry] = []
    labels: dict[str, tuple[float]] = {}
    skipped: list[Skipped] = []
    other_exts: Counter = Counter()

    def walk_key(rel: str) -> tuple[tuple[int, str], ...]:
        parts = rel.split("/")
        return tuple((1, p) for p in parts[:-1]) + ((0, parts[-1]),)

    for rel in sorted(paths, key=walk_key):
        parts = rel.split("/")
        if not hidden and any(p.startswith(".") for p in parts):
            continue
        if not recursive and len(parts) > 1:
            continue
        ext = os.path.splitext(parts[-1])[1].lower()
        if ext not in exts:
            other_exts[ext] += 1
            continue
        reason = unstorable_reason(rel)
        if reason:
            skipped.append(Skipped(rel, reason))
            continue
        folder = "/".join(parts[:-1])
        label = labels.get(folder)
        if label is None:
            label = labels[folder] = (float(len(labels)),)
        entries.append(ListEntry(len(entries), label, rel))
    classes = [(int(label[0]), folder or ".") for folder, label in labels.items()]
    return Scan(entries, classes, skipped, other_exts)


def _split_counts(n: int, train: float, test: float) -> tuple[int, int]:
    """(test, train) counts for one class of n items: largest remainders, and every
    split with a non-zero ratio gets at least one item when n allows it."""
    ratios = [test, train, max(0.0, 1.0 - train - test)]
    ideal = [n * r for r in ratios]
    counts = [math.floor(x + 1e-9) for x in ideal]
    order = sorted(range(3), key=lambda i: (counts[i] - ideal[i], -ratios[i]))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    wanted = [i for i in range(3) if ratios[i] > 0]
    if n >= len(wanted):
        for i in wanted:
            if counts[i] == 0:
                donor = max(range(3), key=lambda j: counts[j])
                counts[donor] -= 1
                counts[i] += 1
    return counts[0], counts[1]


def _split(chunk: list[ListEntry], chunk_size: int, opts: ListOptions, rng: random.Random) -> dict[str, list[ListEntry]]:
    """Split one chunk into test/train/val lists (im2rec.py's rule, or per class)."""
    if not opts.stratify:
        # im2rec.py sizes the parts from chunk_size, not len(chunk): kept for identical lists.
        sep = int(chunk_size * opts.train_ratio)
        sep_test = int(chunk_size * opts.test_ratio)
        return {"test": chunk[:sep_test], "train": chunk[sep_test : sep_test + sep], "val": chunk[sep_test + sep :]}
    by_class: dict[float, list[ListEntry]] = {}
    for e in chunk:
        by_class.setdefault(e.labels[0], []).append(e)
    parts: dict[str, list[ListEntry]] = {"test": [], "train": [], "val": []}
    for label in sorted(by_class):
        items = by_class[label]
        n_test, n_train = _split_counts(len(items), opts.train_ratio, opts.test_ratio)
        parts["test"] += items[:n_test]
        parts["train"] += items[n_test : n_test + n_train]
        parts["val"] += items[n_test + n_train :]
    for items in parts.values():  # mix the classes again
        if opts.shuffle:
            rng.shuffle(items)
        else:
            items.sort(key=lambda e: e.index)
    return parts


def _planned_lists(prefix: str, entries: list[ListEntry], opts: ListOptions) -> list[tuple[str, list[ListEntry]]]:
    rng = random.Random(opts.seed)
    if opts.shuffle:
        rng.shuffle(entries)
    n = len(entries)
    chunk_size = (n + opts.chunks - 1) // opts.chunks
    out: list[tuple[str, list[ListEntry]]] = []
    for i in range(opts.chunks):
        chunk = entries[i * chunk_size : (i + 1) * chunk_size]
        stem = prefix + (f"_{i}" if opts.chunks > 1 else "")
        if opts.train_ratio == 1.0:
            out.append((stem + ".lst", chunk))
            continue
        parts = _split(chunk, chunk_size, opts, rng)
        # im2rec.py's order of writing: test, val, train.
        if opts.test_ratio:
            out.append((stem + "_test.lst", parts["test"]))
        if opts.train_ratio + opts.test_ratio < 1.0:
            out.append((stem + "_val.lst", parts["val"]))
        out.append((stem + "_train.lst", parts["train"]))
    return out


def list_names(prefix: str, options: ListOptions) -> list[str]:
    """The ``.lst`` files ``make_lists`` writes for ``prefix`` and ``options``, in writing order."""
    return [path for path, _ in _planned_lists(prefix, [], options)]


def make_lists(root: str, prefix: str, options: ListOptions = ListOptions(), storage_options: dict | None = None) -> ListResult:
    """Walk ``root`` and write the ``.lst`` files of ``prefix`` and ``PREFIX.classes.tsv``.

    Args:
        root: the image folder (one sub-folder per class when ``recursive``), or a URL
            prefix in an object store (``s3://bucket/images``, read with ``storage_options``).
        prefix: output path prefix; ``PREFIX.lst``, ``PREFIX_train.lst``, ``PREFIX_0.lst`` ...
        options: see ListOptions.

    Returns:
        A ListResult with the lists written, the class map and the skipped paths.

    Raises:
        ListingError: root is missing or not a folder, holds no image, or the options are
            invalid. No file is written then; files appear whole or not at all.
    """
    options.validate()
    exts = tuple(options.exts) if options.legacy else normalize_exts(options.exts)
    if storage.is_url(root):  # an object store's prefix: the same lists as for a local copy of it
        scan = scan_paths(storage.list_files(root, options.recursive, storage_options), exts, options.recursive, hidden=options.legacy)
    else:
        if not os.path.exists(root):
            raise ListingError(f"{root}: no such folder")
        if not os.path.isdir(root):
            raise ListingError(f"{root}: not a folder")
        scan = scan_images(root, exts, options.recursive, hidden=options.legacy)
    if not scan.entries:
        where = "in it or its sub-folders" if options.recursive else "directly in it (try --recursive)"
        others = skipped_exts_line(scan.other_exts, exts)
        raise ListingError(f"{root}: no image with extension {' '.join(exts)} {where}" + (f" ({others})" if others else ""))
    entries = scan.entries
    planned = _planned_lists(prefix, entries, options)
    classes_path = None if options.legacy else prefix + ".classes.tsv"
    result = ListResult(classes=scan.classes, classes_path=classes_path, skipped=scan.skipped, images=len(entries), other_exts=scan.other_exts)

    tmps: list[tuple[Path, str]] = []
    try:  # write everything under temporary names, then rename: all lists or none
        make_parents(prefix)
        for path, items in planned:
            tmp = temp_path(path)
            tmps.append((tmp, path))
            result.lists[path] = write_lst(tmp, items)
        if classes_path is not None:
            tmp = temp_path(classes_path)
            tmps.append((tmp, classes_path))
            with open(tmp, "w", encoding="utf-8", newline="\n") as f:
                f.write(format_classes(scan.classes))
        for tmp, path in tmps:
            commit(tmp, path)
    except OSError as e:
        raise ListingError(f"cannot write {e.filename or prefix}: {e.strerror}") from None
    finally:
        for tmp, _ in tmps:
            with contextlib.suppress(OSError):
                remove_quietly(tmp)
    return result
