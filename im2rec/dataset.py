"""Reading ``.rec`` files for training: a map-style dataset, PyTorch-compatible without torch.

``RecordDataset(path)`` gives ``len(ds)`` and ``ds[i] -> (image, label)``. It
decodes straight from the memory-mapped file (no copy of the encoded bytes),
holds no open file handle or position, and pickles as paths plus parsed indices,
so ``torch.utils.data.DataLoader`` workers work under fork and spawn alike.

From a store (``s3://...``), the DataLoader's batches are read by ``__getitems__``: all
the records of a batch are fetched at once, concurrently, one request per run of
neighbouring records, or per read block (about 4 MB of neighbouring records) when the
order is block-local (``RecordSampler``) or a local ``cache_dir`` keeps the blocks.

insightface face-recognition files (record 0 is a header with flag > 0 holding
``[first identity key, end)``; images are keys 1..label[0]-1, identity records
follow) are detected: the dataset then yields only the images, and
``identities`` gives each identity's ``[start, end)`` image-key range.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, Union

import numpy as np

from . import storage
from .errors import HeaderError, Im2recError, StorageError, TruncatedRecordError
from .image import Checked, Damaged, SkipRecord, imdecode_checked, next_good, opencv
from .recordio import IRHEADER_SIZE, IRHEADER_STRUCT, MAGIC_BYTES, IRHeader, RecordReader, header_size, idx_path_of, insightface_header, unpack
from .storage.cache import BlockCache

__all__ = ["MODES", "RecordDataset", "idx_path_of", "insightface_header"]

log = logging.getLogger(__name__)

#: How ``ds[i]`` returns the image.
MODES = ("rgb", "bgr", "gray", "unchanged", "raw")
_IMDECODE_FLAG = {"rgb": 1, "bgr": 1, "gray": 0, "unchanged": -1}  # cv2.IMREAD_COLOR, _GRAYSCALE, _UNCHANGED
_COLOR_BGR2RGB = 4  # cv2.COLOR_BGR2RGB

PathLike = Union[str, "os.PathLike[str]"]

#: Records are fetched from a store in read blocks of about this many bytes.
BLOCK_BYTES = 4 << 20
CACHE_LIMIT = 10 * 10**9


def _shard_paths(path_or_paths: PathLike | Sequence[PathLike]) -> list[str]:
    if isinstance(path_or_paths, (str, os.PathLike)):
        path = os.fspath(path_or_paths)
        if path.endswith(".json"):  # a shard manifest written by pack --shard-size
            from .outputs import read_manifest

            return read_manifest(path)
        return [path]
    return [os.fspath(p) for p in path_or_paths]


def _check_magic(path: str) -> None:
    """A local file with no record magic in its first 64 KB (a .lst or .idx given for the .rec)
    is said as such; a .rec whose first record is damaged has the next one's there."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head and MAGIC_BYTES not in head:
        hint = " (a .lst: pack it first, `im2rec pack`)" if path.endswith(".lst") else " (the .idx: give the .rec beside it)" if path.endswith(".idx") else ""
        raise Im2recError(f"{path}: not a RecordIO file: it starts with bytes {head[:4].hex(' ')}, and no record magic (ce d7 23 0a) is in its first {min(len(head), 1 << 16):,} bytes{hint}")


class Leader(Protocol):
    """What a ``RecordDataset`` asks of the sampler whose order it follows (``RecordSampler``)."""

    @property
    def window(self) -> int:
        """Read blocks each worker holds at once."""
        ...

    def upcoming(self) -> np.ndarray:
        """The indices the next iteration yields on this rank."""
        ...


class RecordDataset:
    """A map-style dataset over one ``.rec`` (with its ``.idx``) or several read as one.

    Args:
        path_or_paths: a ``.rec``, a list of ``.rec`` shards, or a shard manifest
            (``.json``) written by ``im2rec pack --shard-size``. Each ``.rec`` needs
            its ``.idx`` beside it (same stem).
        mode: how images are returned: ``"rgb"`` (default) or ``"bgr"`` HWC uint8,
            ``"gray"`` HW1 uint8, ``"unchanged"`` as stored (BGR or BGRA, 8 or 16 bits,
            no EXIF rotation), or ``"raw"``: the encoded bytes, undecoded.
        transform: called on each image (e.g. a torchvision transform pipeline).
        target_transform: called on each label.
        num_parts, part_index: keep only part ``part_index`` of ``num_parts``, for one
            rank of a distributed job. Records are taken in file order (offsets
            sorted, shards in the given order) and part k gets entries
            ``[floor(N*k/num_parts), floor(N*(k+1)/num_parts))``: the rule of NVIDIA
            DALI's ``fn.readers.mxnet(shard_id=k, num_shards=num_parts)`` (spec 4.2),
            so parts differ in size by at most one and none is empty while
            N >= num_parts. MXNet's ImageRecordIter with ``path_imgidx`` instead gives
            ``ceil(N/num_parts)`` entries to each part but the last (spec 1.6).
        insightface: ``"auto"`` detects an insightface header at key 0 (single file
            only); ``True`` requires one; ``False`` reads every record as an image.
        storage_options: for URLs (``s3://bucket/train.rec``, any fsspec store),
            fsspec's options; the environment's settings (``AWS_ENDPOINT_URL``,
            profiles) are used otherwise.
        cache_dir: for URLs, a local folder that keeps every fetched block (created if
            missing), shared safely by the DataLoader workers and the ranks of one
            machine: an epoch whose blocks are all cached makes no request.
        cache_limit: the most the cache folder holds, in bytes or as text (``"20GB"``);
            the least recently used blocks are evicted [default: 10GB].
        read_blocks: for URLs, fetch whole read blocks (``block_bytes`` of neighbouring
            records, one request) instead of each record's bytes. ``"auto"``: when a
            ``cache_dir`` is set or a block-local ``RecordSampler`` orders the reads.
        block_bytes: the size of a read block (records are grouped by the
            ``block_bytes``-aligned stretch of the file they start in).
        retries: for URLs, how often a transient failure (timeout, 5xx, throttling, a
            dropped connection) is retried, with backoff, before the read fails; None: as
            ``config_kwargs.retries`` in ``storage_options`` asks, else ``storage.RETRIES`` (4).
        index: the ``.idx`` of a single ``.rec`` that does not have it beside it.
        scan: a local ``.rec`` without an ``.idx`` is read through to find its records (keys
            0, 1, ... in file order; damaged bytes skipped, and logged) instead of refused.
        on_missing: a ``.rec`` cut short (a partial download: its ``.idx`` names records past
            its end): ``"raise"`` (the error says how many records are lost and how to mend
            the ``.idx``), or ``"skip"``: the records that are there are read and the loss is
            logged as a warning; ``cuts`` lists it.
        on_damaged: a record whose image is damaged (libjpeg decodes it with a warning, grey
            where the data was lost; a PNG chunk fails its CRC): ``"warn"`` (the default:
            MXNet's pixels, one warning per record naming the ``.rec``, the key, the byte
            offset and the decoder's words; ``damaged`` counts them), ``"skip"`` (the next
            good record is returned in its place, so that an epoch keeps its length, and
            the skip is logged) or ``"raise"`` (an ``ImageError`` naming the same). An image
            that cannot be decoded at all raises, unless ``"skip"``.

    Items are ``(image, label)``: the label is a float (scalar records) or a float32
    array (records with flag > 0), as ``mx.recordio.unpack`` gives.

    Raises:
        Im2recError: a file is missing, malformed, or ``insightface=True`` finds no header.
    """

    def __init__(
        self,
        path_or_paths: PathLike | Sequence[PathLike],
        *,
        mode: str = "rgb",
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        num_parts: int = 1,
        part_index: int = 0,
        insightface: bool | str = "auto",
        storage_options: dict | None = None,
        cache_dir: PathLike | None = None,
        cache_limit: int | str | None = None,
        read_blocks: bool | str = "auto",
        block_bytes: int = BLOCK_BYTES,
        retries: int | None = None,
        index: PathLike | None = None,
        scan: bool = False,
        on_missing: str = "raise",
        on_damaged: str = "warn",
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not 0 <= part_index < num_parts:
            raise ValueError(f"part_index must be in [0, num_parts={num_parts}), got {part_index}")
        self.mode, self.transform, self.target_transform = mode, transform, target_transform
        self.paths = _shard_paths(path_or_paths)
        if not self.paths:
            raise Im2recError("RecordDataset needs at least one .rec file")
        self._damaged = Damaged(on_damaged)
        self.cache: BlockCache | None = None
        if cache_dir is not None:
            from .text import parse_size

            limit = CACHE_LIMIT if cache_limit is None else parse_size(cache_limit) if isinstance(cache_limit, str) else cache_limit
            if not isinstance(limit, int) or limit < block_bytes:
                raise ValueError(f"cache_limit must hold at least one read block ({block_bytes:,} bytes), got {cache_limit!r}")
            self.cache = BlockCache(os.fspath(cache_dir), limit)
        if read_blocks not in (True, False, "auto"):
            raise ValueError(f"read_blocks must be True, False or 'auto', got {read_blocks!r}")
        self.read_blocks = read_blocks
        self.block_bytes = int(block_bytes)
        source_options = {"cache": self.cache, "retries": retries}
        if on_missing not in ("raise", "skip"):
            raise ValueError(f"on_missing must be 'raise' or 'skip', got {on_missing!r}")
        if index is not None and len(self.paths) != 1:
            raise ValueError(f"index names the .idx of one .rec, not of {len(self.paths)}")
        self.readers: list[RecordReader] = []
        for path in self.paths:
            idx = os.fspath(index) if index is not None else idx_path_of(path)
            if not storage.there(path, storage_options):
                raise Im2recError(storage.missing(path, storage_options))
            if os.path.isdir(path):
                raise Im2recError(f"{path}: is a folder: give a .rec file, a list of them, or a shard manifest")
            if not storage.is_url(path):
                _check_magic(path)
            if not storage.there(idx, storage_options):
                if scan and not storage.is_url(path):
                    reader = RecordReader(path, None)
                    problems = reader.scan_index()
                    log.info("%s: no .idx: %d records found by reading the file", path, len(reader.require_index()))
                    for problem in problems:
                        log.warning("%s", problem)
                    self.readers.append(reader)
                    continue
                raise Im2recError(f"{storage.missing(idx, storage_options)}: reading {path} needs its .idx (`im2rec index {path}` writes one)")
            try:
                reader = RecordReader(path, idx, storage_options=storage_options, source_options=source_options, on_cut=on_missing)
            except TruncatedRecordError as e:
                raise TruncatedRecordError(f"{e}; or pass on_missing='skip' to read the records that are there", e.offset) from None
            if reader.cut is not None:
                log.warning("%s", reader.cut.message())
            self.readers.append(reader)
        self.cuts = [r.cut for r in self.readers if r.cut is not None]
        self.remote = any(r.remote for r in self.readers)

        self.insightface: tuple[int, int] | None = None
        if insightface is not False and len(self.readers) == 1:
            self.insightface = insightface_header(self.readers[0])
        if insightface is True and self.insightface is None:
            raise Im2recError(f"{self.paths[0]}: no insightface header (a record 0 with flag > 0)")

        shards, offsets = [], []
        if self.insightface is not None:
            table = self.readers[0].require_index()
            first = self.insightface[0]
            keys = np.arange(1, first)
            offsets.append(np.fromiter((table.offset(int(k)) for k in keys), dtype=np.int64, count=keys.size))
            shards.append(np.zeros(keys.size, dtype=np.int32))
        else:
            for n, reader in enumerate(self.readers):
                offs = np.sort(reader.require_index().offsets, kind="stable")
                offsets.append(offs)
                shards.append(np.full(offs.size, n, dtype=np.int32))
        self._offsets = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)
        self._shards = np.concatenate(shards) if shards else np.zeros(0, np.int32)
        total = self._offsets.size
        lo, hi = total * part_index // num_parts, total * (part_index + 1) // num_parts
        self._offsets, self._shards = self._offsets[lo:hi], self._shards[lo:hi]
        self._identities: np.ndarray | None = None
        self._blocks: np.ndarray | None = None
        self.sampler: Leader | None = None  # a RecordSampler whose order the reads follow (see follow)
        self._ahead: _ReadAhead | None = None

    @property
    def blocks(self) -> np.ndarray:
        """Read blocks: the first item of each, and ``len(self)`` at the end. A block is a run of
        items whose records start in the same ``block_bytes``-aligned stretch of one file."""
        if self._blocks is None:
            stretch = self._offsets // self.block_bytes
            new = np.ones(len(self), dtype=bool)
            new[1:] = (self._shards[1:] != self._shards[:-1]) | (stretch[1:] != stretch[:-1]) | (self._offsets[1:] < self._offsets[:-1])
            self._blocks = np.append(np.flatnonzero(new), np.int64(len(self))).astype(np.int64)
        return self._blocks

    def follow(self, sampler: Leader) -> None:
        """Read in the order of ``sampler`` (a block-local ``RecordSampler`` calls this): from a
        store, fetch whole read blocks, and in each DataLoader worker (or this process) the
        blocks of its next batch while the current one is decoded."""
        self.sampler = sampler
        self._hold_window()

    def _hold_window(self) -> None:
        """Room in memory for the sampler's window of blocks being read and the next batch's
        blocks fetched ahead, if that is more than ``storage.HOLD``."""
        window = self.sampler.window if self.sampler is not None else 0
        if self.remote and window:
            storage.hold_at_least(2 * window * self.block_bytes + self.block_bytes)

    def _whole_blocks(self) -> bool:
        return self.read_blocks is True or (self.read_blocks == "auto" and (self.cache is not None or self.sampler is not None))

    def _read_ahead(self, items: np.ndarray) -> None:
        """Start fetching, in a background thread, the blocks of this process's next batch in
        the sampler's order (a DataLoader worker gets every ``num_workers``-th batch). Where
        ``items`` is not found in that order (another sampler, another epoch), nothing."""
        ahead = self._ahead
        if self.sampler is None:
            return
        if ahead is None or ahead.pid != os.getpid():
            ahead = self._ahead = _ReadAhead(self.sampler.upcoming())
        at = ahead.locate(items)
        if at is None:
            return
        batch = items.size
        following = ahead.plan[at + ahead.workers * batch : at + (ahead.workers + 1) * batch]
        ahead.next = at + ahead.workers * batch
        if following.size:
            ahead.start(lambda: self._prefetch(following, wait=False))

    def _prefetch(self, items: Sequence[int] | np.ndarray, wait: bool = True) -> None:
        """Fetch the records of ``items`` from the store, all at once: their read blocks, or
        each record's bytes (neighbours in one request). ``wait``: let a read-ahead in flight
        finish first (it is fetching what is needed now)."""
        if wait and self._ahead is not None:
            self._ahead.wait()
        n = len(self)
        items_a = np.asarray([i + n if i < 0 else i for i in items], dtype=np.int64)
        if items_a.size == 0 or items_a.min() < 0 or items_a.max() >= n:
            return  # __getitem__ raises the IndexError
        whole = self._whole_blocks()
        if whole:
            blocks = np.unique(np.searchsorted(self.blocks, items_a, side="right") - 1)
            firsts, lasts = self.blocks[blocks], self.blocks[blocks + 1] - 1
        else:
            firsts = lasts = np.unique(items_a)
        shards = self._shards[firsts]
        wanted: dict[int, list[tuple[int, int]]] = {}
        for shard in np.unique(shards):
            reader = self.readers[int(shard)]
            mine = shards == shard
            starts = self._offsets[firsts[mine]]
            ends = reader.record_ends(self._offsets[lasts[mine]])
            runs: list[tuple[int, int]] = []
            for a, b in zip(starts.tolist(), ends.tolist()):
                if runs and runs[-1][1] == a and not whole:  # neighbouring records: one request
                    runs[-1] = (runs[-1][0], b)
                else:  # a block is one request (the cache's unit), fetched with the others at once
                    runs.append((a, b))
            wanted[int(shard)] = runs
        try:
            if len(wanted) == 1:
                shard, runs = next(iter(wanted.items()))
                self.readers[shard].prefetch(runs)
            else:
                with ThreadPoolExecutor(len(wanted)) as pool:
                    list(pool.map(lambda kv: self.readers[kv[0]].prefetch(kv[1]), wanted.items()))
        except StorageError as e:
            raise self._unreadable(e, items_a) from None

    def _unreadable(self, e: StorageError, items: np.ndarray) -> Im2recError:
        """``e`` (a range that could not be read) as an error naming the first record it held."""
        span, url = e.span, e.url
        for i in items.tolist():
            path, offset, key = self.locate(i)
            if span is not None and path == url and span[0] <= offset < span[1]:
                return StorageError(f"{path}: record {key} (byte {offset}) cannot be read: {e}")
        return e

    def locate(self, i: int) -> tuple[str, int, Any]:
        """Where item ``i`` is stored: ``(.rec path or URL, byte offset, .idx key)``."""
        reader = self.readers[int(self._shards[i])]
        offset = int(self._offsets[i])
        index = reader.require_index()
        return reader.path, offset, index.keys()[int(np.flatnonzero(index.offsets == offset)[0])]

    def prefetch(self, items: Sequence[int] | np.ndarray) -> None:
        """From a store, fetch the records of ``items`` at once (as ``__getitems__`` does before
        decoding a batch), so that ``record`` and ``ds[i]`` then read them from memory. Locally,
        nothing: the file is mapped."""
        if self.remote:
            self._prefetch([self._index(int(i)) for i in items])

    def release(self) -> None:
        """Drop every mapped page of the ``.rec`` files from this process's memory (they stay in
        the page cache; a record read again is faulted in again): what a reader that has
        decoded a batch calls, so that an epoch in any order keeps a flat footprint (dropping
        only the records read would leave the pages the kernel maps around each fault).
        Nothing for a store."""
        for reader in self.readers:
            if not reader.remote:
                reader.release(0, reader.size, edges=True)

    def record(self, i: int) -> tuple[IRHeader, memoryview | bytes]:
        """Item ``i`` undecoded: its IRHeader (labels included) and its image bytes (locally a
        view of the memory map, no copy).

        Raises:
            HeaderError: the record is too short for its IRHeader and labels.
        """
        i = self._index(i)
        reader = self.readers[int(self._shards[i])]
        offset = int(self._offsets[i])
        if reader.remote and self._whole_blocks():
            self._prefetch([i], wait=False)
        try:
            payload = reader.view_at(offset)
        except StorageError as e:
            raise self._unreadable(e, np.asarray([i])) from None
        header, start = self._header_of(payload, reader.path, offset)
        return header, memoryview(payload)[start:]

    @staticmethod
    def _header_of(payload: Any, path: str, offset: int) -> tuple[IRHeader, int]:
        """The IRHeader at the start of ``payload`` (a record's bytes) and where its image starts."""
        if len(payload) < IRHEADER_SIZE:
            raise HeaderError(f"{path}: record at byte {offset} is too short for an IRHeader ({len(payload)} bytes)", offset)
        flag, label, id1, id2 = IRHEADER_STRUCT.unpack_from(payload)
        start = header_size(flag)
        if flag:
            if len(payload) < start:
                raise HeaderError(f"{path}: record at byte {offset} is too short for its {flag} labels", offset)
            label = np.frombuffer(payload, dtype=np.float32, count=flag, offset=IRHEADER_SIZE).copy()
        return IRHeader(flag, label, id1, id2), start

    @property
    def positions(self) -> np.ndarray:
        """Where each item's record starts with the ``.rec`` files laid end to end, in item
        order (int64): what a byte-range split of the files, as MXNet's, is decided by."""
        starts = np.cumsum([0] + [r.size for r in self.readers[:-1]], dtype=np.int64)
        return starts[self._shards] + self._offsets

    @property
    def total_bytes(self) -> int:
        """The sizes of the ``.rec`` files, added."""
        return int(sum(r.size for r in self.readers))

    def __getitems__(self, items: Sequence[int]) -> list[tuple[Any, Any]]:
        """``[self[i] for i in items]``, the DataLoader's batched read: from a store, every
        record of the batch is fetched at once (see ``_prefetch``) before any is decoded, and
        under a ``RecordSampler`` the next batch's blocks are fetched meanwhile."""
        if not self.remote:
            return [self[i] for i in items]
        items = [self._index(i) for i in items]
        self._prefetch(items)
        if self.sampler is not None and self._whole_blocks():
            self._read_ahead(np.asarray(items, dtype=np.int64))
        return [self._item(i) for i in items]  # held now: no per-item block lookup

    def read_stats(self) -> dict[str, int]:
        """This process's reads from the store: ``requests`` (retries included), ``retried``,
        ``fetched`` bytes, ``cache_hits`` (blocks read from ``cache_dir``), ``cached``
        (blocks stored there) and ``read_ahead`` (next batches fetched ahead)."""
        stats = {"requests": 0, "retried": 0, "fetched": 0, "cache_hits": 0, "cached": 0, "read_ahead": 0}
        if self._ahead is not None and self._ahead.pid == os.getpid():
            stats["read_ahead"] = self._ahead.started
        for reader in self.readers:
            if reader.remote:
                for k in ("requests", "retried", "fetched"):
                    stats[k] += getattr(reader.source, k)
        if self.cache is not None:
            stats["cache_hits"], stats["cached"] = self.cache.hits, self.cache.stored
        return stats

    def __len__(self) -> int:
        return int(self._offsets.size)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ahead"] = None  # a thread: each process starts its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._hold_window()  # a spawned worker's memory budget, as its parent's

    def header(self, i: int) -> IRHeader:
        """The IRHeader of item ``i`` (label included), without decoding its image (from a
        store reading whole blocks, its block: through the cache, when there is one)."""
        reader = self.readers[int(self._shards[i])]
        if reader.remote and self._whole_blocks():
            self._prefetch([i], wait=False)
        head = reader.head_at(int(self._offsets[i]), IRHEADER_SIZE)
        flag = IRHEADER_STRUCT.unpack_from(head)[0] if len(head) >= IRHEADER_SIZE else 0
        return unpack(reader.head_at(int(self._offsets[i]), header_size(flag)))[0]

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        i = self._index(i)
        if self.remote and self._whole_blocks():
            self._prefetch([i], wait=False)  # its block, not a read-ahead's fetch (so not waiting for one)
        return self._item(i)

    def _index(self, i: int) -> int:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for a dataset of {len(self)} records")
        return i

    def _item(self, i: int, skipping: bool = False) -> tuple[Any, Any]:
        """Item ``i`` (a valid index) from what is mapped or already held."""
        reader = self.readers[int(self._shards[i])]
        offset = int(self._offsets[i])
        try:
            payload = reader.view_at(offset)  # no copy: a view of the map, dropped on return
        except StorageError as e:
            raise self._unreadable(e, np.asarray([i])) from None
        header, start = self._header_of(payload, reader.path, offset)
        label = header.label
        if self.mode == "raw":
            image: Any = bytes(payload[start:])
        else:
            where = lambda: f"{reader.path}: record {self.locate(i)[2]} (byte {offset})"  # noqa: E731 (said only of a damaged one)
            checked = imdecode_checked(memoryview(payload)[start:], _IMDECODE_FLAG[self.mode]) if len(payload) > start else Checked(None)
            try:
                image = self._damaged.image(where, checked, len(payload) - start)
            except SkipRecord:
                if skipping:
                    raise
                return next_good(i + 1, len(self), self.sample, self._name())  # the next good record in its place
            if self.mode == "rgb" and image.ndim == 3:
                opencv().cvtColor(image, _COLOR_BGR2RGB, dst=image)
            elif self.mode == "gray":
                image = image[:, :, None]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label

    def sample(self, i: int) -> tuple[Any, Any]:
        """``self[i]``, except that a record left out (``on_damaged="skip"``) raises
        ``SkipRecord`` instead of giving the next good one: for readers that fill batches
        (``RecordLoader``) and take the next record themselves."""
        return self._item(self._index(i), skipping=True)

    def _name(self) -> str:
        return self.paths[0] if len(self.paths) == 1 else f"{self.paths[0]} and {len(self.paths) - 1} more shards"

    @property
    def damaged(self) -> int:
        """How many records whose image is damaged (or cannot be decoded) this reader has met."""
        return len(self._damaged)

    @property
    def identities(self) -> np.ndarray | None:
        """insightface files: an ``(identities, 2)`` int64 array of ``[start, end)`` image-key ranges."""
        if self.insightface is None:
            return None
        if self._identities is None:
            reader = self.readers[0]
            first, end = self.insightface
            ranges = np.zeros((end - first, 2), dtype=np.int64)
            for row, key in enumerate(range(first, end)):
                header = unpack(reader.head_at(reader.require_index().offset(key), header_size(2)))[0]  # an identity record: two labels, its range
                ranges[row] = np.asarray(header.label, dtype=np.float64)[:2]
            self._identities = ranges
        return self._identities

    def __repr__(self) -> str:
        kind = f", insightface {self.insightface}" if self.insightface else ""
        return f"RecordDataset({self.paths[0] if len(self.paths) == 1 else self.paths!r}, {len(self)} records, mode={self.mode!r}{kind})"


class _ReadAhead:
    """A process's place in its sampler's order, and the one background fetch it runs."""

    def __init__(self, plan: np.ndarray):
        self.pid = os.getpid()
        self.plan = plan
        self.next: int | None = None  # where this process's next batch should start
        self.workers = 1
        try:
            import torch.utils.data

            info = torch.utils.data.get_worker_info()
            if info is not None:
                self.workers = info.num_workers
        except ImportError:
            pass
        self._thread: threading.Thread | None = None
        self.started = 0

    def locate(self, items: np.ndarray) -> int | None:
        """Where ``items`` starts in the plan (checked whole), or None."""
        size = items.size
        if size == 0:
            return None
        guesses = [self.next] if self.next is not None else []
        for at in guesses + np.flatnonzero(self.plan == items[0])[:4].tolist():
            if at is not None and np.array_equal(self.plan[at : at + size], items):
                return int(at)
        return None

    def start(self, fetch: Callable[[], None]) -> None:
        """Run ``fetch`` in a thread of its own: a daemon, so that a worker that is told to stop
        (or dies with an error) exits without waiting for a fetch in flight."""
        self.wait()

        def run() -> None:
            with contextlib.suppress(Exception):  # its failure is the next read's to report
                fetch()

        self._thread = threading.Thread(target=run, name="im2rec-read-ahead", daemon=True)
        self._thread.start()
        self.started += 1

    def wait(self) -> None:
        """Until the fetch in flight is done."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
