"""Against the real MXNet, when there is one: its readers take our files, its im2rec.py writes our bytes.

MXNet 1.9.1 needs numpy < 1.24, so it lives in a venv of its own; point
IM2REC_TEST_MXNET_PYTHON at that venv's python to run these tests:

    python3.11 -m venv /tmp/mxvenv
    /tmp/mxvenv/bin/pip install mxnet==1.9.1 'numpy<1.24' opencv-python-headless
    IM2REC_TEST_MXNET_PYTHON=/tmp/mxvenv/bin/python pytest tests/test_mxnet_interop.py

Without it they skip (CI has no MXNet); the golden files in tests/data pin the
same bytes there.
"""

import json
import os
import shutil
import subprocess
import textwrap

import pytest
from click.testing import CliRunner

from im2rec.cli import main

MXNET_PYTHON = os.environ.get("IM2REC_TEST_MXNET_PYTHON")
pytestmark = pytest.mark.skipif(not MXNET_PYTHON, reason="set IM2REC_TEST_MXNET_PYTHON to a Python with MXNet 1.9.1")


def mxnet(code: str, cwd) -> dict:
    """Run ``code`` under MXNet's Python; it prints one JSON object."""
    out = subprocess.run([MXNET_PYTHON, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def im2rec(*args) -> None:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output


@pytest.fixture
def tree(tmp_path, data_dir):
    root = tmp_path / "tree"
    shutil.copytree(data_dir / "tree", root)
    im2rec("list", root, tmp_path / "all", "--seed", "100")
    return root, tmp_path / "all.lst"


def test_mxnet_reads_our_records_and_multi_label_iterator(tree, tmp_path):
    root, lst = tree
    lines = [line.split("\t") for line in lst.read_text().splitlines()]
    (tmp_path / "multi.lst").write_text("".join(f"{i}\t{c}\t{float(c) + 1}\t{float(c) + 2}\t{float(c) + 3}\t{p}\n" for i, c, p in lines))
    im2rec("pack", lst, root, tmp_path / "plain.rec", "--resize", "64", "-q")
    im2rec("pack", tmp_path / "multi.lst", root, tmp_path / "multi.rec", "--resize", "64", "--label-width", "4", "-q")
    got = mxnet(
        """
        import json, mxnet as mx
        r = mx.recordio.MXIndexedRecordIO("plain.idx", "plain.rec", "r")
        shapes = {}
        for k in r.keys:
            h, img = mx.recordio.unpack_img(r.read_idx(k))
            shapes[str(h.id)] = [min(img.shape[:2]), float(h.label)]
        it = mx.io.ImageRecordIter(path_imgrec="multi.rec", path_imgidx="multi.idx", data_shape=(3, 48, 48),
                                   label_width=4, batch_size=2, round_batch=False)
        labels = [row for b in it for row in b.label[0].asnumpy()[: 2 - b.pad].tolist()]
        print(json.dumps({"shapes": shapes, "labels": labels}))
        """,
        tmp_path,
    )
    assert got["shapes"] == {i: [64, float(c)] for i, c, _ in lines}
    assert sorted(got["labels"]) == sorted([float(c), float(c) + 1, float(c) + 2, float(c) + 3] for _, c, _ in lines)


def test_mxnet_im2rec_py_writes_our_pass_through_bytes(tree, tmp_path):
    root, lst = tree
    tool = mxnet("import json, os, mxnet; print(json.dumps({'p': os.path.join(os.path.dirname(mxnet.__file__), 'tools', 'im2rec.py')}))", tmp_path)["p"]
    (tmp_path / "mx").mkdir()
    shutil.copy(lst, tmp_path / "mx" / "all.lst")
    subprocess.run([MXNET_PYTHON, tool, "all", str(root) + os.sep, "--pass-through", "--num-thread", "2"], cwd=tmp_path / "mx", check=True, capture_output=True)
    im2rec("pack", lst, root, tmp_path / "ours.rec", "--pass-through", "-q")
    assert (tmp_path / "ours.rec").read_bytes() == (tmp_path / "mx" / "all.rec").read_bytes()
    assert (tmp_path / "ours.idx").read_bytes() == (tmp_path / "mx" / "all.idx").read_bytes()


def test_mxnet_writes_what_we_read(tmp_path):
    got = mxnet(
        """
        import json, mxnet as mx, numpy as np
        w = mx.recordio.MXIndexedRecordIO("mx.idx", "mx.rec", "w")
        for k in range(5):
            w.write_idx(k * 3, mx.recordio.pack(mx.recordio.IRHeader(0, [k, k + 0.5], k, 7), bytes([k]) * (k * 1000 + 1)))
        w.close()
        print(json.dumps({"ok": True}))
        """,
        tmp_path,
    )
    assert got == {"ok": True}
    from im2rec import recordio

    with recordio.MXIndexedRecordIO(tmp_path / "mx.idx", tmp_path / "mx.rec", "r") as r:
        assert r.keys == [0, 3, 6, 9, 12]
        for k in range(5):
            header, body = recordio.unpack(r.read_idx(k * 3))
            assert (header.flag, list(header.label), header.id, header.id2) == (2, [k, k + 0.5], k, 7)
            assert body == bytes([k]) * (k * 1000 + 1)


def test_mxnet_image_record_iter_gives_our_batches_at_real_size(real_size_folders, tmp_path):
    """ImageRecordIter against the live MXNet on ImageNet-like images (tests/test_iterators.py
    holds MXNet's batches of many more configurations, made by tests/data/iterators/make.py)."""
    import numpy as np

    from im2rec import ImageRecordIter

    root = real_size_folders["imagenet"]
    im2rec("list", root, tmp_path / "train")
    im2rec("pack", tmp_path / "train.lst", root, tmp_path / "train.rec", "--pass-through", "-q")
    recipe = dict(path_imgrec="train.rec", path_imgidx="train.idx", data_shape=(3, 224, 224), resize=256, mirror=True, batch_size=6,
                  mean_r=123.68, mean_g=116.779, mean_b=103.939, std_r=58.395, std_g=57.12, std_b=57.375)
    configs = {"recipe": recipe, "cubic": dict(recipe, inter_method=2, resize=230), "rotate": dict(recipe, rotate=17, dtype="uint8"), "gray": dict(recipe, data_shape=(1, 224, 224))}
    code = f"""
        import json, numpy as np, mxnet as mx
        out = {{}}
        for name, c in {configs!r}.items():
            it = mx.io.ImageRecordIter(**c)
            out[name] = np.concatenate([b.data[0].asnumpy() for b in it])
        np.savez("mx.npz", **out)
        print(json.dumps({{"ok": True}}))
    """
    assert mxnet(code, tmp_path) == {"ok": True}
    theirs = np.load(tmp_path / "mx.npz")
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        for name, c in configs.items():
            with ImageRecordIter(**c) as it:
                ours = np.concatenate([b.data[0] for b in it])
            assert ours.shape == theirs[name].shape, name
            assert np.abs(ours.astype(np.float64) - theirs[name]).max() <= (0 if c.get("dtype") == "uint8" else 0.01), name
    finally:
        os.chdir(old)
