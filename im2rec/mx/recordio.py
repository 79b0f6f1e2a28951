"""``mx.recordio``: im2rec's drop-in for ``mxnet.recordio`` (``MXRecordIO``, ``MXIndexedRecordIO``,
``IRHeader``, ``pack``, ``unpack``, ``pack_img``, ``unpack_img``), the same objects as ``im2rec.recordio``."""

from ..recordio import IRHeader, MXIndexedRecordIO, MXRecordIO, pack, pack_img, unpack, unpack_img

__all__ = ["IRHeader", "MXIndexedRecordIO", "MXRecordIO", "pack", "pack_img", "unpack", "unpack_img"]
