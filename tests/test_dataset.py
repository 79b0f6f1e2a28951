"""RecordDataset: decoding, labels, parts, shards, insightface, and PyTorch DataLoader workers."""

import pickle

import cv2
import numpy as np
import pytest
from click.testing import CliRunner

from im2rec import recordio
from im2rec.cli import main
from im2rec.dataset import RecordDataset
from im2rec.errors import Im2recError
from im2rec.lst import read_lst


@pytest.fixture(scope="module")
def packed(tmp_path_factory, data_dir):
    """The golden tree packed at 32x32 (centre crop), and its list."""
    d = tmp_path_factory.mktemp("ds")
    lst = data_dir / "im2rec" / "all.lst"
    result = CliRunner().invoke(main, ["pack", str(lst), str(data_dir / "tree"), str(d / "all.rec"), "--resize", "32", "--center-crop", "--encoding", ".png"])
    assert result.exit_code == 0, result.output
    return d / "all.rec", read_lst(lst)


@pytest.mark.slow
def test_items_in_record_order_with_labels(packed, data_dir):
    rec, entries = packed
    ds = RecordDataset(rec)
    assert len(ds) == 14
    for i, e in enumerate(entries):
        img, label = ds[i]
        assert img.shape == (32, 32, 3) and img.dtype == np.uint8
        assert label == e.labels[0] and isinstance(label, float)
    # RGB: the same pixels as OpenCV's BGR, channels reversed
    bgr = RecordDataset(rec, mode="bgr")[3][0]
    assert np.array_equal(ds[3][0], bgr[:, :, ::-1])
    assert ds[-1][1] == entries[-1].labels[0]
    with pytest.raises(IndexError):
        ds[14]


def test_modes(packed):
    rec, _ = packed
    assert RecordDataset(rec, mode="gray")[0][0].shape == (32, 32, 1)
    raw, _ = RecordDataset(rec, mode="raw")[0]
    assert raw.startswith(b"\x89PNG")
    assert RecordDataset(rec, mode="unchanged")[0][0].shape[:2] == (32, 32)
    with pytest.raises(ValueError, match=r"^mode must be one of rgb, bgr, gray, unchanged, raw, got 'hsv'$"):
        RecordDataset(rec, mode="hsv")


def test_multi_label_records(data_dir, tmp_path):
    golden = data_dir / "im2rec_pack_multilabel"
    ds = RecordDataset(golden / "ml.rec")
    entries = read_lst(golden / "ml.lst")
    img, label = ds[0]
    assert label.dtype == np.float32 and label.tolist() == list(entries[0].labels)
    assert img.ndim == 3


@pytest.mark.slow
def test_transforms(packed):
    rec, _ = packed
    ds = RecordDataset(rec, transform=lambda im: im.mean(), target_transform=int)
    value, label = ds[0]
    assert isinstance(value, float) and isinstance(label, int)


@pytest.mark.parametrize("num_parts", [1, 2, 3, 4, 5])
def test_parts_follow_dalis_rule(packed, num_parts):
    rec, _entries = packed
    whole = [RecordDataset(rec, mode="raw")[i][0] for i in range(14)]
    parts = [RecordDataset(rec, mode="raw", num_parts=num_parts, part_index=k) for k in range(num_parts)]
    sizes = [len(p) for p in parts]
    assert sizes == [14 * (k + 1) // num_parts - 14 * k // num_parts for k in range(num_parts)]
    assert [p[i][0] for p in parts for i in range(len(p))] == whole


def test_shards_read_as_one(packed, tmp_path):
    rec, _ = packed
    whole = RecordDataset(rec, mode="raw")
    # split the records into two shard files
    for n, keys in enumerate((range(0, 6), range(6, 14))):
        with recordio.MXIndexedRecordIO(tmp_path / f"s{n}.idx", tmp_path / f"s{n}.rec", "w") as w:
            src = recordio.MXIndexedRecordIO(str(rec)[:-4] + ".idx", rec, "r")
            order = src.keys
            for k in [order[i] for i in keys]:
                w.write_idx(k, src.read_idx(k))
    ds = RecordDataset([tmp_path / "s0.rec", tmp_path / "s1.rec"], mode="raw")
    assert len(ds) == 14
    assert [ds[i] for i in range(14)] == [whole[i] for i in range(14)]


def test_missing_idx(tmp_path, packed):
    rec, _ = packed
    (tmp_path / "x.rec").write_bytes(rec.read_bytes())
    rec_path, idx_path = tmp_path / "x.rec", tmp_path / "x.idx"
    with pytest.raises(Im2recError) as e:
        RecordDataset(rec_path)
    assert str(e.value) == f"{idx_path}: no such file: reading {rec_path} needs its .idx (`im2rec index {rec_path}` writes one)"


def test_missing_rec_is_named_not_its_idx(tmp_path):
    with pytest.raises(Im2recError) as e:
        RecordDataset(tmp_path / "nothere.rec")
    assert str(e.value) == f"{tmp_path / 'nothere.rec'}: no such file"


def test_index_elsewhere(tmp_path, packed):
    rec, _ = packed
    (tmp_path / "x.rec").write_bytes(rec.read_bytes())
    (tmp_path / "other.idx").write_bytes(rec.with_suffix(".idx").read_bytes())
    ds = RecordDataset(tmp_path / "x.rec", index=tmp_path / "other.idx", mode="raw")
    assert [ds[i] for i in range(len(ds))] == [RecordDataset(rec, mode="raw")[i] for i in range(len(ds))]
    header, image = ds.record(0)
    assert bytes(image) == ds[0][0] and header.label == ds[0][1]


def test_pickles_without_the_map(packed):
    rec, _ = packed
    ds = RecordDataset(rec)
    copy = pickle.loads(pickle.dumps(ds))
    assert np.array_equal(copy[5][0], ds[5][0])


def make_insightface(path, classes=3, per_class=4):
    """A file in insightface's RecBuilder layout: images 1..N, identities N+1..N+K, header 0 last."""
    rng = np.random.default_rng(0)
    with recordio.MXIndexedRecordIO(str(path)[:-4] + ".idx", path, "w") as w:
        key, ranges = 1, []
        for c in range(classes):
            start = key
            for _ in range(per_class):
                img = rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)
                w.write_idx(key, recordio.pack_img(recordio.IRHeader(0, float(c), key, 0), img, quality=95))
                key += 1
            ranges.append((start, key))
        first = key
        for start, end in ranges:
            w.write_idx(key, recordio.pack(recordio.IRHeader(0, [start, end], key, 0), b""))
            key += 1
        w.write_idx(0, recordio.pack(recordio.IRHeader(0, [first, key], 0, 1), b""))
    return classes * per_class, ranges


def test_insightface_layout(tmp_path):
    n, ranges = make_insightface(tmp_path / "train.rec")
    ds = RecordDataset(tmp_path / "train.rec")
    assert ds.insightface == (n + 1, n + 1 + len(ranges))
    assert len(ds) == n
    assert [ds[i][1] for i in range(n)] == [float(i // 4) for i in range(n)]
    assert ds[0][0].shape == (16, 16, 3)
    assert ds.identities.tolist() == [list(r) for r in ranges]
    plain = RecordDataset(tmp_path / "train.rec", insightface=False, mode="raw")
    assert len(plain) == n + len(ranges) + 1


def test_insightface_required(packed):
    rec, _ = packed
    with pytest.raises(Im2recError, match=r"^.*/all\.rec: no insightface header \(a record 0 with flag > 0\)$"):
        RecordDataset(rec, insightface=True)


@pytest.mark.slow
@pytest.mark.xdist_group("torch")  # under pytest-xdist: one process imports torch for all DataLoader tests
@pytest.mark.parametrize("context,workers", [("fork", 2), ("spawn", 1)])  # a spawned worker imports torch anew: one shows it
def test_pytorch_dataloader_workers(packed, context, workers):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'im2rec[torch]')")
    rec, entries = packed
    ds = RecordDataset(rec)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers, multiprocessing_context=context, shuffle=False)
    images, labels = [], []
    for x, y in loader:
        assert x.shape[1:] == (32, 32, 3) and x.dtype == torch.uint8
        images.append(x.numpy())
        labels += y.tolist()
    assert labels == [e.labels[0] for e in entries]
    assert np.array_equal(np.concatenate(images), np.stack([ds[i][0] for i in range(len(ds))]))


def test_image_decodes_like_cv2(packed):
    rec, _ = packed
    r = recordio.MXIndexedRecordIO(str(rec)[:-4] + ".idx", rec, "r")
    _, img = recordio.unpack_img(r.read_idx(r.keys[2]), cv2.IMREAD_COLOR)
    assert np.array_equal(RecordDataset(rec, mode="bgr")[2][0], img)


def test_a_damaged_jpeg_is_read_with_a_warning_naming_it(real_size_folders, tmp_path, caplog):
    """libjpeg decodes it partly grey and prints to stderr: the dataset says which record it is."""
    import logging

    from im2rec import recordio

    jpeg = sorted(real_size_folders["imagenet"].rglob("*.jpg"))[0].read_bytes()
    zeros = bytearray(jpeg)
    zeros[len(zeros) // 2 : len(zeros) // 2 + 2000] = b"\0" * 2000
    with recordio.RecordWriter(tmp_path / "d.rec", tmp_path / "d.idx") as w:
        w.write_idx(0, recordio.pack(recordio.IRHeader(0, 1.0, 0, 0), jpeg))
        w.write_idx(7, recordio.pack(recordio.IRHeader(0, 1.0, 7, 0), bytes(zeros)))
        w.write_idx(9, recordio.pack(recordio.IRHeader(0, 1.0, 9, 0), b"\x89PNG\r\n\x1a\n" + b"\0" * 40))
    offset = recordio.read_index(tmp_path / "d.idx").offset(7)
    ds = RecordDataset(tmp_path / "d.rec")
    with caplog.at_level(logging.WARNING, logger="im2rec.dataset"):
        assert ds[0][0].shape[2] == 3 and not caplog.records
        assert ds[1][0].shape == ds[0][0].shape  # read, all the same
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'd.rec'}: record 7 (byte {offset}): Corrupt JPEG data: premature end of data segment: the image is damaged (`im2rec verify {tmp_path / 'd.rec'} --decode` lists every such record)"
    ]
    with pytest.raises(Im2recError) as e:
        ds[2]
    assert str(e.value) == f"{tmp_path / 'd.rec'}: record 9 (byte 179280): the image cannot be decoded (48 bytes: PNG: no chunk at byte 8: its type would be b'\\x00\\x00\\x00\\x00')"
    assert ds.damaged == 2 and len(caplog.records) == 1
    ds[1]
    assert len(caplog.records) == 1  # one warning per record

    # "skip": the next good record in its place (an epoch keeps its length); "raise": an error
    skipping = RecordDataset(tmp_path / "d.rec", on_damaged="skip")
    assert [np.array_equal(skipping[i][0], ds[0][0]) for i in range(3)] == [True, True, True]
    assert skipping.damaged == 2
    raising = RecordDataset(tmp_path / "d.rec", on_damaged="raise")
    with pytest.raises(Im2recError) as e:
        raising[1]
    assert str(e.value) == f"{tmp_path / 'd.rec'}: record 7 (byte {offset}): Corrupt JPEG data: premature end of data segment: the image is damaged (on_damaged='raise')"
    with pytest.raises(ValueError, match=r"^on_damaged must be one of 'warn', 'skip', 'raise', got 'ignore'$"):
        RecordDataset(tmp_path / "d.rec", on_damaged="ignore")
