"""Make tests/data/mx/golden.npz: what MXNet 1.9.1 gives for the recipes and calls of ``drive.py``.

    python tests/data/mx/make.py --mxnet-python /path/to/mxvenv/bin/python

``recipes/`` holds the recipes as published (MXNet 1.9.1's ``example/image-classification/
common/data.py`` and ``example/ssd/dataset/iterator.py`` with ``example/ssd/tools/``, at tag
1.9.1 of apache/mxnet; insightface's ``recognition/arcface_mxnet/image_iter.py`` at commit
ce3600a74209808017deaf73c036759b96a44ccb of deepinsight/insightface). ``drive.prepare``
lays out the inputs with im2rec (this Python); MXNet's Python then runs ``drive.py`` on them
with the recipes unchanged but for insightface's unused ``import sklearn``, and keeps
``drive.run``'s arrays (``drive.fingerprint``: small ones whole, large ones as sha256 and sum).
``tests/test_mx.py`` runs the same code with the recipes ported to ``im2rec.mx``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import drive  # noqa: E402 (beside this script)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mxnet-python", required=True, help="a Python with mxnet==1.9.1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = drive.prepare(Path(tmp) / "work")
        subprocess.run([args.mxnet_python, str(HERE / "drive.py"), str(work), str(HERE / "golden.npz")], check=True)
    print(f"wrote {HERE / 'golden.npz'} ({(HERE / 'golden.npz').stat().st_size} bytes)")


if __name__ == "__main__":
    main()
