"""Make tests/data/damaged: a .rec with damaged JPEGs, and MXNet 1.9.1's batches of it.

    python tests/data/damaged/make.py --mxnet-python /path/to/mxvenv/bin/python

``damaged.rec``/``.idx``: the 12 generated JPEGs of ``tests/data/iterators/images.rec`` as
they are, except key 3 (256 zero bytes in the middle of its scan: "Corrupt JPEG data: 13
extraneous bytes before marker 0xd9") and key 8 (cut at two thirds, an end-of-image marker
put back: "Corrupt JPEG data: premature end of data segment"): libjpeg decodes both with
that warning, grey where the data was lost. ``golden.npz``
holds MXNet's ``mx.io.ImageRecordIter`` batches of it (``data_shape=(3, 32, 32)``,
``resize=40``, ``batch_size=4``: the centre crop, uint8 values as float32), what
``on_damaged="warn"`` must give value for value. ``tests/test_decode.py`` reads them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from im2rec import recordio  # noqa: E402

MXNET_SCRIPT = r"""
import numpy as np, mxnet as mx
it = mx.io.ImageRecordIter(path_imgrec="damaged.rec", path_imgidx="damaged.idx", data_shape=(3, 32, 32), resize=40, batch_size=4)
batches = list(it)
np.savez_compressed("golden.npz", data=np.concatenate([b.data[0].asnumpy() for b in batches]).astype(np.uint8),
                    label=np.concatenate([b.label[0].asnumpy() for b in batches]), pads=np.array([b.pad for b in batches]))
"""

DAMAGED = (3, 8)


def damage(key: int, jpeg: bytes) -> bytes:
    if key == 3:
        mid = len(jpeg) // 2
        return jpeg[:mid] + bytes(256) + jpeg[mid + 256 :]
    return jpeg[: len(jpeg) * 2 // 3] + b"\xff\xd9"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mxnet-python", required=True)
    args = parser.parse_args()
    src = recordio.RecordReader(HERE.parent / "iterators" / "images.rec", HERE.parent / "iterators" / "images.idx")
    with recordio.RecordWriter(HERE / "damaged.rec", HERE / "damaged.idx") as w:
        n = 0
        for key in src.keys():
            header, img = recordio.unpack(src.read(key))
            if img[:2] != b"\xff\xd8" or n == 12:
                continue
            w.write_idx(n, recordio.pack(header._replace(id=n), damage(n, bytes(img)) if n in DAMAGED else bytes(img)))
            n += 1
    subprocess.run([args.mxnet_python, "-c", MXNET_SCRIPT], cwd=HERE, check=True)


if __name__ == "__main__":
    main()
