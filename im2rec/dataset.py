"""Reading ``.rec`` files for training: a map-style dataset, PyTorch-compatible without torch.

``RecordDataset(path)`` gives ``len(ds)`` and ``ds[i] -> (image, label)``. It
decodes straight from the memory-mapped file (no copy of the encoded bytes),
holds no open file handle or position, and pickles as paths plus parsed indices,
so ``torch.utils.data.DataLoader`` workers work under fork and spawn alike.

insightface face-recognition files (record 0 is a header with flag > 0 holding
``[first identity key, end)``; images are keys 1..label[0]-1, identity records
follow) are detected: the dataset then yields only the images, and
``identities`` gives each identity's ``[start, end)`` image-key range.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np

from . import storage
from .errors import Im2recError
from .image import opencv
from .recordio import IRHEADER_SIZE, IRHEADER_STRUCT, RecordReader, idx_path_of, insightface_header, unpack

__all__ = ["MODES", "RecordDataset", "idx_path_of", "insightface_header"]

#: How ``ds[i]`` returns the image.
MODES = ("rgb", "bgr", "gray", "unchanged", "raw")
_IMDECODE_FLAG = {"rgb": 1, "bgr": 1, "gray": 0, "unchanged": -1}  # cv2.IMREAD_COLOR, _GRAYSCALE, _UNCHANGED
_COLOR_BGR2RGB = 4  # cv2.COLOR_BGR2RGB

PathLike = Union[str, "os.PathLike[str]"]


def _shard_paths(path_or_paths: PathLike | Sequence[PathLike]) -> list[str]:
    if isinstance(path_or_paths, (str, os.PathLike)):
        path = os.fspath(path_or_paths)
        if path.endswith(".json"):  # a shard manifest written by pack --shard-size
            from .shards import read_manifest

            return read_manifest(path)
        return [path]
    return [os.fspath(p) for p in path_or_paths]


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
        storage_options: for URLs (``s3://bucket/train.rec``, any fsspec store; each
            record is one ranged request), fsspec's options; the environment's
            settings (``AWS_ENDPOINT_URL``, profiles) are used otherwise.

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
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not 0 <= part_index < num_parts:
            raise ValueError(f"part_index must be in [0, num_parts={num_parts}), got {part_index}")
        self.mode, self.transform, self.target_transform = mode, transform, target_transform
        self.paths = _shard_paths(path_or_paths)
        if not self.paths:
            raise Im2recError("RecordDataset needs at least one .rec file")
        self.readers: list[RecordReader] = []
        for path in self.paths:
            idx = idx_path_of(path)
            for p in (path, idx):
                if not storage.there(p, storage_options):
                    raise Im2recError(f"{storage.missing(p)} (a .rec needs its .idx beside it, same stem)")
            self.readers.append(RecordReader(path, idx, storage_options=storage_options))

        self.insightface: tuple[int, int] | None = None
        if insightface is not False and len(self.readers) == 1:
            self.insightface = insightface_header(self.readers[0])
        if insightface is True and self.insightface is None:
            raise Im2recError(f"{self.paths[0]}: no insightface header (a record 0 with flag > 0)")

        shards, offsets = [], []
        if self.insightface is not None:
            index = self.readers[0].require_index()
            first = self.insightface[0]
            keys = np.arange(1, first)
            offsets.append(np.fromiter((index.offset(int(k)) for k in keys), dtype=np.int64, count=keys.size))
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

    def __len__(self) -> int:
        return int(self._offsets.size)

    def header(self, i: int) -> tuple[Any, ...]:
        """The IRHeader of item ``i`` (label included), without decoding its image."""
        reader = self.readers[int(self._shards[i])]
        head = reader.head_at(int(self._offsets[i]), IRHEADER_SIZE)
        flag = IRHEADER_STRUCT.unpack_from(head)[0] if len(head) >= IRHEADER_SIZE else 0
        return unpack(reader.head_at(int(self._offsets[i]), IRHEADER_SIZE + 4 * flag))[0]

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for a dataset of {len(self)} records")
        reader = self.readers[int(self._shards[i])]
        offset = int(self._offsets[i])
        payload = reader.view_at(offset)  # no copy: a view of the map, dropped on return
        if len(payload) < IRHEADER_SIZE:
            raise Im2recError(f"{reader.path}: record at byte {offset} is too short for an IRHeader ({len(payload)} bytes)")
        flag, label, _, _ = IRHEADER_STRUCT.unpack_from(payload)
        start = IRHEADER_SIZE + 4 * flag
        if flag:
            if len(payload) < start:
                raise Im2recError(f"{reader.path}: record at byte {offset} is too short for its {flag} labels")
            label = np.frombuffer(payload, dtype=np.float32, count=flag, offset=IRHEADER_SIZE).copy()
        if self.mode == "raw":
            image: Any = bytes(payload[start:])
        else:
            image = None
            if len(payload) > start:
                image = opencv().imdecode(np.frombuffer(payload, dtype=np.uint8, offset=start), _IMDECODE_FLAG[self.mode])
            if image is None:
                raise Im2recError(f"{reader.path}: the image of the record at byte {offset} cannot be decoded")
            if self.mode == "rgb" and image.ndim == 3:
                opencv().cvtColor(image, _COLOR_BGR2RGB, dst=image)
            elif self.mode == "gray":
                image = image[:, :, None]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label

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
                header = unpack(reader.head_at(reader.require_index().offset(key), IRHEADER_SIZE + 8))[0]
                ranges[row] = np.asarray(header.label, dtype=np.float64)[:2]
            self._identities = ranges
        return self._identities

    def __repr__(self) -> str:
        kind = f", insightface {self.insightface}" if self.insightface else ""
        return f"RecordDataset({self.paths[0] if len(self.paths) == 1 else self.paths!r}, {len(self)} records, mode={self.mode!r}{kind})"
