"""im2rec: build and read MXNet RecordIO image datasets (.rec, .idx, .lst) without MXNet.

The reading and writing API is a drop-in for ``mxnet.recordio``::

    from im2rec import recordio
    rec = recordio.MXIndexedRecordIO("train.idx", "train.rec", "r")
    header, img = recordio.unpack(rec.read_idx(0))
"""

from . import recordio
from .errors import Im2recError, ImageError, StorageError
from .recordio import (
    IRHeader,
    MXIndexedRecordIO,
    MXRecordIO,
    RecordReader,
    RecordWriter,
    pack,
    pack_img,
    unpack,
    unpack_img,
)
from .sampler import RecordSampler

__version__ = "0.1.0"


class _Storage:
    """``recordio.URLS``: the format core reads URLs through ``storage``, imported at the first one
    (so that ``import im2rec`` loads no sockets, TLS or XML)."""

    def source(self, url: str, storage_options: dict | None, **options: object) -> recordio.RangedSource:
        from .storage import RemoteSource

        return RemoteSource(url, storage_options, **options)  # type: ignore[arg-type]

    def read(self, url: str, storage_options: dict | None) -> bytes:
        from .storage import read_bytes

        return read_bytes(url, storage_options)


recordio.URLS = _Storage()


def __getattr__(name: str):
    # RecordDataset imports OpenCV: load it on first use, so that `import im2rec`
    # and the format core stay free of cv2.
    if name == "RecordDataset":
        from .dataset import RecordDataset

        return RecordDataset
    if name in ("ImageRecordIter", "ImageDetRecordIter", "DataBatch", "DataDesc"):
        from .mx import iterators

        return getattr(iterators, name)
    if name == "RecordLoader":
        from .loader import RecordLoader

        return RecordLoader
    if name == "imdecode":
        from .mx.augment import imdecode

        return imdecode
    if name == "VerificationPairs":
        from .verification import VerificationPairs

        return VerificationPairs
    raise AttributeError(f"module 'im2rec' has no attribute {name!r}")

__all__ = [
    "DataBatch",
    "DataDesc",
    "IRHeader",
    "Im2recError",
    "ImageDetRecordIter",
    "ImageError",
    "ImageRecordIter",
    "MXIndexedRecordIO",
    "MXRecordIO",
    "RecordDataset",
    "RecordLoader",
    "RecordReader",
    "RecordSampler",
    "RecordWriter",
    "StorageError",
    "VerificationPairs",
    "__version__",
    "imdecode",
    "pack",
    "pack_img",
    "recordio",
    "unpack",
    "unpack_img",
]
