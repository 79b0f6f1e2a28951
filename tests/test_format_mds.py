"""formats.mds: MDS written and read by our own code, checked against MosaicML streaming's own writer and reader."""

import json
import os
import shutil
import struct
import sys
from pathlib import Path

import conftest
import cv2
import numpy as np
import pytest
from conftest import put_folder, s3_endpoint

from im2rec.errors import Im2recError
from im2rec.formats import base, mds
from im2rec.formats.base import DatasetMeta, Sample
from im2rec.formats.mds import Reader, Writer, write_streaming_stand_ins


@pytest.fixture(scope="module")
def streaming(tmp_path_factory):
    """The real `streaming` package, imported with the stand-ins (skips when it is not installed);
    the stand-ins leave sys.path and sys.modules after the module's tests."""
    pytest.importorskip("torch")
    stubs = tmp_path_factory.mktemp("streaming-stubs")
    write_streaming_stand_ins(stubs)
    stubbed = []
    for name in ("torchvision", "transformers"):
        try:  # a real one that loads is fine too
            __import__(name)
        except Exception:
            sys.modules.pop(name, None)
            stubbed.append(name)
    if stubbed:
        sys.path.insert(0, str(stubs))
    try:
        yield pytest.importorskip("streaming")
    finally:
        if stubbed:
            sys.path.remove(str(stubs))
            for name in [m for m in sys.modules if m.split(".")[0] in stubbed]:
                del sys.modules[name]


def make_samples(n, size=300, seed=0):
    return conftest.make_samples(n, size, seed, empty_label=None)


def write(folder, samples, shard_size, meta=None):
    return conftest.write_samples(Writer, folder, samples, shard_size, meta)


same = conftest.same_sample


def test_round_trip_keeps_every_field_and_the_shard_limit(tmp_path):
    samples = make_samples(40)
    shards, last = write(tmp_path / "out", samples, 2000)
    folder = tmp_path / "out"
    assert last == [str(folder / "im2rec.json"), str(folder / "index.json")]
    assert shards == [str(folder / f"shard.{i:05d}.mds") for i in range(len(shards))] and len(shards) > 5
    assert all(os.path.getsize(p) <= 2000 for p in shards)
    # a shard is full: the next sample would not have fitted
    index = json.loads((folder / "index.json").read_text())
    assert [s["raw_data"]["bytes"] for s in index["shards"]] == [os.path.getsize(p) for p in shards]
    assert sum(s["samples"] for s in index["shards"]) == 40
    reader = Reader(str(folder))
    assert reader.count() == 40
    assert reader.meta == DatasetMeta(source="train.rec", classes={0: "cat"}, samples=40, shards=[Path(p).name for p in shards], format="mds")
    got = list(reader.samples())
    assert len(got) == 40
    for a, b in zip(samples, got):
        same(a, b)
        assert b.problem is None and b.ext == "bin"
    assert got[0].where == "shard.00000.mds:0" and got[-1].where == f"shard.{len(shards) - 1:05d}.mds:{index['shards'][-1]['samples'] - 1}"
    assert reader.class_names() is None


def test_samples_from_start_skip_whole_shards_unread(tmp_path, monkeypatch):
    samples = make_samples(30)
    write(tmp_path, samples, 1500)
    reader = Reader(str(tmp_path))
    counts = [s.samples for s in reader.shards]
    read = []
    original = Reader.read
    monkeypatch.setattr(Reader, "read", lambda self, name: read.append(name) or original(self, name))
    start = counts[0] + counts[1] + 1
    got = list(reader.samples(start))
    assert [s.key for s in got] == [s.key for s in samples[start:]]
    assert read[0] == "shard.00002.mds" and "shard.00000.mds" not in read and "shard.00001.mds" not in read
    assert list(reader.samples(30)) == []


def test_a_sample_larger_than_the_limit_gets_a_shard_of_its_own(tmp_path):
    samples = [Sample(key="a", image=b"x" * 10, label=(1.0,)), Sample(key="big", image=b"y" * 5000, label=(2.0,)), Sample(key="c", image=b"z", label=(3.0,))]
    shards, _ = write(tmp_path, samples, 1000)
    assert len(shards) == 3 and os.path.getsize(shards[1]) > 1000
    assert [s.key for s in Reader(str(tmp_path)).samples()] == ["a", "big", "c"]


def test_shard_layout_is_the_documented_one(tmp_path):
    write(tmp_path, [Sample(key="k1", image=b"\xff\xd8\xffjpeg", label=(2.0,), id=1)], 1 << 20)
    data = (tmp_path / "shard.00000.mds").read_bytes()
    config = json.dumps(
        {
            "column_encodings": ["bytes", "str", "json", "json"],
            "column_names": ["image", "key", "label", "meta"],
            "column_sizes": [None] * 4,
            "compression": None,
            "format": "mds",
            "hashes": [],
            "size_limit": 1 << 20,
            "version": 2,
        },
        sort_keys=True,
    ).encode()
    columns = [b"\xff\xd8\xffjpeg", b"k1", b"[2.0]", b'{"id": 1, "id2": 0}']
    sample = struct.pack("<4I", *map(len, columns)) + b"".join(columns)
    head = 4 + 8 + len(config)
    assert data == struct.pack("<3I", 1, head, head + len(sample)) + config + sample


def test_zstd_shards_are_read_and_a_missing_module_is_one_clear_error(tmp_path, monkeypatch):
    zstd = pytest.importorskip("zstd")
    samples = make_samples(12)
    write(tmp_path, samples, 1500)
    index = json.loads((tmp_path / "index.json").read_text())
    for shard in index["shards"]:  # as MDSWriter(compression="zstd") leaves them
        raw = tmp_path / shard["raw_data"]["basename"]
        packed = zstd.compress(raw.read_bytes())
        (tmp_path / (raw.name + ".zstd")).write_bytes(packed)
        raw.unlink()
        shard.update(compression="zstd", zip_data={"basename": raw.name + ".zstd", "bytes": len(packed), "hashes": {}})
    (tmp_path / "index.json").write_text(json.dumps(index, sort_keys=True))
    for a, b in zip(samples, Reader(str(tmp_path)).samples()):
        same(a, b)
    monkeypatch.setattr(base, "optional", lambda name: None)
    with pytest.raises(Im2recError) as e:
        next(Reader(str(tmp_path)).samples())
    assert str(e.value) == f"{tmp_path / 'shard.00000.mds.zstd'}: compressed with zstd: reading it needs zstandard: pip install zstandard"
    index["shards"][0]["compression"] = "br"
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(Im2recError, match=r"shard.00000.mds.zstd: compressed with br: only zstd is supported$"):
        next(Reader(str(tmp_path)).samples())


def test_a_damaged_shard_names_the_file_and_the_byte_offset(tmp_path):
    write(tmp_path, make_samples(3), 1 << 20)
    path = tmp_path / "shard.00000.mds"
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    end = struct.unpack_from("<I", data, 16)[0]
    start = struct.unpack_from("<I", data, 12)[0]
    with pytest.raises(Im2recError) as e:
        list(Reader(str(tmp_path)).samples())
    assert str(e.value) == f"{path}: sample 2 at bytes {start}-{end} (offset table at byte 12) lies beyond the file's {len(data) - 10} bytes or overlaps the header"
    path.write_bytes(struct.pack("<I", 3) + b"\0" * 6)
    with pytest.raises(Im2recError, match=r"/shard.00000.mds: the offsets of 3 samples end at byte 20, beyond the file's 10 bytes$"):
        list(Reader(str(tmp_path)).samples())
    with pytest.raises(Im2recError, match=r"^.*/nothing/index\.json: no such file$"):
        Reader(str(tmp_path / "nothing"))


def test_real_size_images_through_the_writer_and_the_reader(tmp_path, real_size_folders):
    files = sorted(real_size_folders["imagenet"].rglob("*.jpg"))
    assert len(files) == 20
    samples = [Sample(key=str(i), image=f.read_bytes(), label=(float(i % 4),), id=i) for i, f in enumerate(files)]
    shards, _ = write(tmp_path, samples, 1 << 26)  # MDSWriter's default size_limit
    assert len(shards) == 1
    got = list(Reader(str(tmp_path)).samples())
    for a, b in zip(samples, got, strict=True):
        same(a, b)
        assert b.ext == "jpg"


@pytest.mark.slow
def test_reading_from_s3(tmp_path):
    pytest.importorskip("s3fs")
    samples = make_samples(25)
    write(tmp_path, samples, 2000)
    with s3_endpoint() as endpoint:
        put_folder(endpoint, tmp_path, "s3://fmt-mds/data")
        reader = Reader("s3://fmt-mds/data/", {"endpoint_url": endpoint})
        assert reader.count() == 25 and reader.meta is not None and reader.meta.samples == 25
        got = list(reader.samples(3))
        for a, b in zip(samples[3:], got, strict=True):
            same(a, b)


# --------------------------------------------------------------------------- against streaming itself


@pytest.mark.slow
@pytest.mark.xdist_group("torch")
def test_our_shards_are_mdswriters_bytes(streaming, tmp_path):
    samples = make_samples(30)
    write(tmp_path / "ours", samples, 2500)
    with streaming.MDSWriter(out=str(tmp_path / "theirs"), columns=mds.COLUMNS, size_limit=2500) as writer:
        for s in samples:
            writer.write({"image": s.image, "key": s.key, "label": list(s.label), "meta": s.meta()})
    theirs = sorted(os.listdir(tmp_path / "theirs"))
    assert theirs == sorted(f for f in os.listdir(tmp_path / "ours") if f != "im2rec.json")
    for name in theirs:
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "theirs" / name).read_bytes(), name


@pytest.mark.xdist_group("torch")
def test_streaming_dataset_reads_our_output(streaming, tmp_path):
    samples = make_samples(25)
    write(tmp_path, samples, 2000)
    dataset = streaming.StreamingDataset(local=str(tmp_path), shuffle=False, batch_size=1)
    assert len(dataset) == 25
    for s, item in zip(samples, dataset, strict=True):
        assert item["key"] == s.key and item["image"] == s.image
        assert item["label"] == list(s.label) and item["meta"] == s.meta()
        assert np.array_equal(np.float32(item["label"]), np.float32(s.label))
    del dataset


def jpeg(seed, shape=(24, 32, 3)):
    pixels = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    return cv2.imencode(".jpg", pixels)[1].tobytes()


@pytest.mark.xdist_group("torch")
def test_mdswriters_jpeg_and_int_columns_are_read(streaming, tmp_path):
    from PIL import Image

    files = []
    for i in range(3):
        files.append(tmp_path / f"{i}.jpg")
        files[-1].write_bytes(jpeg(i))
    with streaming.MDSWriter(out=str(tmp_path / "mds"), columns={"x": "jpeg", "y": "int"}, size_limit=1000) as writer:
        for i in range(6):
            # bytes are stored as given; a JPEG opened from a file as the file's bytes
            writer.write({"x": jpeg(10 + i) if i % 2 else Image.open(files[i // 2]), "y": i * 3})
    reader = Reader(str(tmp_path / "mds"))
    assert reader.count() == 6 and reader.meta is None and reader.class_names() is None
    got = list(reader.samples())
    assert [s.key for s in got] == [str(i) for i in range(6)]
    assert [s.label for s in got] == [(float(i * 3),) for i in range(6)]
    assert [s.image for s in got] == [jpeg(10 + i) if i % 2 else files[i // 2].read_bytes() for i in range(6)]
    assert {s.ext for s in got} == {"jpg"} and all(s.problem is None and s.class_name is None for s in got)
    assert [s.key for s in reader.samples(4)] == ["4", "5"]


@pytest.mark.xdist_group("torch")
def test_mdswriters_pil_images_and_string_labels_are_read(streaming, tmp_path):
    from PIL import Image

    rng = np.random.default_rng(1)
    images = [
        Image.fromarray(rng.integers(0, 256, (9, 7, 3), dtype=np.uint8), "RGB"),
        Image.fromarray(rng.integers(0, 256, (5, 6, 4), dtype=np.uint8), "RGBA"),
        Image.fromarray(rng.integers(0, 256, (4, 3), dtype=np.uint8), "L"),
        Image.fromarray(rng.integers(0, 2, (5, 11), dtype=np.uint8) * 255, "L").convert("1"),
        Image.fromarray(rng.integers(0, 256, (3, 3), dtype=np.uint8), "L").convert("P"),
    ]
    names = ["zebra", "ant", "zebra", "cat", "ant"]
    with streaming.MDSWriter(out=str(tmp_path), columns={"image": "pil", "label": "str", "key": "str"}) as writer:
        for i, (image, name) in enumerate(zip(images, names)):
            writer.write({"image": image, "label": name, "key": f"k{i}"})
    reader = Reader(str(tmp_path))
    assert reader.class_names() == ["ant", "cat", "zebra"]
    got = list(reader.samples())
    assert [(s.key, s.label, s.class_name) for s in got] == [(f"k{i}", (), n) for i, n in enumerate(names)]
    for s, image in zip(got[:4], images):
        assert s.problem is None and s.ext == "png"
        decoded = cv2.imdecode(np.frombuffer(s.image, np.uint8), cv2.IMREAD_UNCHANGED)
        expected = np.asarray(image.convert("L") if image.mode == "1" else image)
        if expected.ndim == 3:
            decoded = cv2.cvtColor(decoded, cv2.COLOR_BGRA2RGBA if expected.shape[2] == 4 else cv2.COLOR_BGR2RGB)
        assert np.array_equal(decoded, expected), image.mode
    assert got[4].problem == ("unreadable", "image column 'image': PIL mode 'P' has no lossless PNG equivalent (L, LA, RGB, RGBA, 1, I;16 do)")


@pytest.mark.xdist_group("torch")
def test_missing_images_and_unreadable_labels_are_problems_not_errors(streaming, tmp_path):
    with streaming.MDSWriter(out=str(tmp_path / "a"), columns={"caption": "str", "label": "int"}) as writer:
        writer.write({"caption": "no image here", "label": 1})
    [sample] = Reader(str(tmp_path / "a")).samples()
    assert sample.problem == ("missing", "no image column") and sample.where == "shard.00000.mds:0"
    with streaming.MDSWriter(out=str(tmp_path / "b"), columns={"img": "bytes", "target": "json", "__key__": "str"}) as writer:
        writer.write({"img": b"\x89PNG\r\n\x1a\nrest", "target": [1, 2.5], "__key__": "first"})
        writer.write({"img": b"data", "target": {"a": 1}, "__key__": "second"})
    first, second = Reader(str(tmp_path / "b")).samples()
    assert (first.key, first.label, first.ext, first.problem) == ("first", (1.0, 2.5), "png", None)
    assert second.key == "second" and second.problem == ("bad-label", "label column 'target': a label must be a number, a list of numbers or a class name, got dict {'a': 1}")


@pytest.mark.xdist_group("torch")
def test_mdswriters_zstd_and_ndarray_columns_are_read(streaming, tmp_path):
    pytest.importorskip("zstd")
    rng = np.random.default_rng(2)
    labels = [rng.random(3).astype(np.float32) for _ in range(5)]
    with streaming.MDSWriter(out=str(tmp_path), columns={"png": "png", "label": "ndarray", "score": "float32"}, compression="zstd", size_limit=800) as writer:
        for i, label in enumerate(labels):
            writer.write({"png": cv2.imencode(".png", np.full((4, 4), i, np.uint8))[1].tobytes(), "label": label, "score": 0.5})
    assert any(p.endswith(".mds.zstd") for p in os.listdir(tmp_path))
    got = list(Reader(str(tmp_path)).samples())
    assert [s.label for s in got] == [tuple(float(x) for x in label) for label in labels]
    assert [cv2.imdecode(np.frombuffer(s.image, np.uint8), cv2.IMREAD_UNCHANGED)[0, 0] for s in got] == list(range(5))
    shutil.rmtree(tmp_path)
