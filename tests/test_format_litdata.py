"""formats.litdata: written with litdata's BinaryWriter, read by our own code; checked against litdata itself."""

import json
import multiprocessing
import os
import struct
import sys
from pathlib import Path

import conftest
import cv2
import numpy as np
import pytest
from conftest import put_folder, s3_endpoint

from im2rec.errors import Im2recError
from im2rec.formats import base
from im2rec.formats.base import DatasetMeta, Sample
from im2rec.formats.litdata import Reader, Writer

pytestmark = pytest.mark.xdist_group("torch")  # litdata imports torch


@pytest.fixture(scope="module")
def litdata():
    pytest.importorskip("torch")
    return pytest.importorskip("litdata")


def make_samples(n, size=300, seed=0):
    return conftest.make_samples(n, size, seed, empty_label=2)


def write(folder, samples, shard_size, meta=None):
    return conftest.write_samples(Writer, folder, samples, shard_size, meta)


same = conftest.same_sample


def test_round_trip_keeps_every_field_and_the_chunk_limit(litdata, tmp_path):
    samples = make_samples(40)
    shards, last = write(tmp_path, samples, 2000)
    assert last == [str(tmp_path / "im2rec.json"), str(tmp_path / "index.json")]
    assert shards == [str(tmp_path / f"chunk-0-{i}.bin") for i in range(len(shards))] and len(shards) > 5
    assert sorted(os.listdir(tmp_path)) == sorted([Path(p).name for p in shards] + ["im2rec.json", "index.json"])
    index = json.loads((tmp_path / "index.json").read_text())
    assert [c["filename"] for c in index["chunks"]] == [Path(p).name for p in shards]
    for chunk, path in zip(index["chunks"], shards):
        # the items fill at most shard_size bytes; the header (count and offsets) comes on top
        assert os.path.getsize(path) == chunk["chunk_bytes"] and chunk["chunk_bytes"] - 4 * (chunk["chunk_size"] + 2) <= 2000
    reader = Reader(str(tmp_path))
    assert reader.count() == 40
    assert reader.meta == DatasetMeta(source="train.rec", classes={0: "cat"}, samples=40, shards=[Path(p).name for p in shards], format="litdata")
    got = list(reader.samples())
    for a, b in zip(samples, got, strict=True):
        same(a, b)
        assert b.problem is None
    assert got[0].where == "chunk-0-0.bin:0"
    assert [s.key for s in reader.samples(33)] == [s.key for s in samples[33:]]
    assert reader.class_names() is None
    # the same samples give the same index, updated_at included
    write(tmp_path / "again", samples, 2000)
    assert (tmp_path / "again" / "index.json").read_bytes() == (tmp_path / "index.json").read_bytes()


def test_samples_from_start_skip_whole_chunks_unread(litdata, tmp_path, monkeypatch):
    write(tmp_path, make_samples(30), 1500)
    reader = Reader(str(tmp_path))
    sizes = [c["chunk_size"] for c in reader.chunks]
    read = []
    original = Reader.read
    monkeypatch.setattr(Reader, "read", lambda self, name: read.append(name) or original(self, name))
    got = list(reader.samples(sizes[0] + sizes[1]))
    assert got[0].where == "chunk-0-2.bin:0" and read[0] == "chunk-0-2.bin" and len(got) == 30 - sizes[0] - sizes[1]


def test_litdata_streaming_dataset_reads_our_output(litdata, tmp_path):
    samples = make_samples(25)
    write(tmp_path, samples, 2000)
    dataset = litdata.StreamingDataset(str(tmp_path))
    assert len(dataset) == 25
    for i, s in enumerate(samples):
        item = dataset[i]
        assert item["key"] == s.key and bytes(item["image"]) == s.image
        assert item["label"].dtype == np.float32 and item["label"].tolist() == list(s.label)
        assert json.loads(item["meta"]) == s.meta()


def test_strings_naming_files_and_pdf_like_payloads_keep_their_types(litdata, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("7").write_text("a file named like a key")
    (tmp_path / "out").mkdir()
    samples = [Sample(key="7", image=b"%PDF-1.4 not really", label=(1.0,)), Sample(key="8", image=b"\xff\xd8\xffxx", label=(2.0,))]
    write(tmp_path / "out", samples, 1 << 20)
    assert json.loads((tmp_path / "out" / "index.json").read_text())["config"]["data_format"] == ["str", "bytes", "no_header_numpy:9", "str"]
    for a, b in zip(samples, Reader(str(tmp_path / "out")).samples(), strict=True):
        same(a, b)


def test_without_litdata_export_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "litdata.streaming.writer", None)
    with pytest.raises(Im2recError) as e:
        Writer(str(tmp_path), "data", 1000, DatasetMeta(), lambda path: None)
    assert str(e.value) == "export --format litdata needs litdata: pip install 'im2rec[litdata]'"


def pil_item(i):
    from PIL import Image

    pixels = np.random.default_rng(i).integers(0, 256, (6 + i, 5, 3), dtype=np.uint8)
    return {"image": Image.fromarray(pixels), "class": i % 3}


def bytes_item(i):
    return {"image": b"\xff\xd8\xff" + bytes([i]) * (40 + i), "label": i * 2}


def optimize(litdata, **kwargs):
    """litdata.optimize, which sets the process's multiprocessing start method to spawn (force=True):
    put back afterwards, or the DataLoader tests run later in this process cannot pickle their collate_fn."""
    import multiprocessing

    before = multiprocessing.get_start_method(allow_none=True)
    try:
        litdata.optimize(**kwargs)
    finally:
        multiprocessing.set_start_method(before, force=True)


@pytest.mark.slow
def test_litdata_optimize_output_is_read(litdata, tmp_path):
    start_method = multiprocessing.get_start_method(allow_none=True)
    optimize(litdata, fn=pil_item, inputs=list(range(5)), output_dir=str(tmp_path / "pil"), chunk_bytes="1MB", num_workers=1)
    optimize(litdata, fn=bytes_item, inputs=list(range(5)), output_dir=str(tmp_path / "bytes"), chunk_bytes="1MB", num_workers=1)
    assert multiprocessing.get_start_method(allow_none=True) == start_method  # what litdata changed is put back
    reader = Reader(str(tmp_path / "pil"))
    assert reader.count() == 5 and reader.meta is None and reader.class_names() is None
    for i, s in enumerate(reader.samples()):
        assert (s.key, s.label, s.ext, s.problem) == (str(i), (float(i % 3),), "png", None)
        decoded = cv2.cvtColor(cv2.imdecode(np.frombuffer(s.image, np.uint8), cv2.IMREAD_UNCHANGED), cv2.COLOR_BGR2RGB)
        assert np.array_equal(decoded, np.asarray(pil_item(i)["image"]))
    # plain bytes and ints: litdata keeps them as an Arrow footer when pyarrow is there, as items when not
    got = list(Reader(str(tmp_path / "bytes")).samples())
    assert [(s.image, s.label, s.ext) for s in got] == [(bytes_item(i)["image"], (float(i * 2),), "jpg") for i in range(5)]


@pytest.mark.slow
@pytest.mark.parametrize("level", ["batch", "chunk", "sample"])
def test_zstd_chunks_numpy_tensors_and_string_labels_are_read(litdata, tmp_path, level):
    pytest.importorskip("zstd")
    import torch
    from litdata.streaming.writer import BinaryWriter

    writer = BinaryWriter(str(tmp_path), chunk_bytes=600, compression="zstd", compression_level=level)
    names = ["dog", "cat", "dog", "emu", "cat", "dog"]
    for i, name in enumerate(names):
        image = np.full((3, 4, 3), i, np.uint8)
        writer.add_item(i, {"img": image if i % 2 else torch.from_numpy(image), "target": name, "__key__": f"s{i}", "extra": torch.ones(2, 2)})
    writer.done()
    writer.merge(1)
    index = json.loads((tmp_path / "index.json").read_text())
    assert len(index["chunks"]) > 1 and index["config"]["compression"] == "zstd"
    reader = Reader(str(tmp_path))
    assert reader.class_names() == ["cat", "dog", "emu"]
    got = list(reader.samples(1))
    assert [(s.key, s.label, s.class_name, s.ext) for s in got] == [(f"s{i}", (), names[i], "png") for i in range(1, 6)]
    for i, s in enumerate(got, 1):  # ndarray and tensor pixels, taken as RGB, stored as PNG
        assert np.array_equal(cv2.imdecode(np.frombuffer(s.image, np.uint8), cv2.IMREAD_UNCHANGED), np.full((3, 4, 3), i, np.uint8))


def test_zstd_missing_and_damaged_chunks_are_one_clear_error(litdata, tmp_path, monkeypatch):
    pytest.importorskip("zstd")
    from litdata.streaming.writer import BinaryWriter

    writer = BinaryWriter(str(tmp_path / "z"), chunk_bytes=1 << 20, compression="zstd", compression_level="chunk")
    writer.add_item(0, {"image": b"abc", "label": np.ones(2, np.float32)})  # an array: not an Arrow row
    writer.done()
    writer.merge(1)
    monkeypatch.setattr(base, "optional", lambda name: None)
    with pytest.raises(Im2recError) as e:
        list(Reader(str(tmp_path / "z")).samples())
    assert str(e.value) == f"{tmp_path / 'z' / 'chunk-0-0.zstd.bin'}: compressed with zstd: reading it needs zstandard: pip install zstandard"
    monkeypatch.undo()

    write(tmp_path / "d", make_samples(3), 1 << 20)
    path = tmp_path / "d" / "chunk-0-0.bin"
    data = path.read_bytes()
    path.write_bytes(data[:-5])
    start, end = struct.unpack_from("<2I", data, 12)
    with pytest.raises(Im2recError) as e:
        list(Reader(str(tmp_path / "d")).samples())
    assert str(e.value) == f"{path}: item 2 at bytes {start}-{end} (offset table at byte 12) lies beyond the {len(data) - 5} bytes of its data or overlaps the header"
    path.write_bytes(data[:-5] + b"\0" * 5)
    (tmp_path / "d" / "index.json").write_text((tmp_path / "d" / "index.json").read_text().replace('"chunk_size": 3', '"chunk_size": 4'))
    with pytest.raises(Im2recError, match=r"/d/chunk-0-0.bin: holds 3 items, index.json says 4$"):
        list(Reader(str(tmp_path / "d")).samples())


def test_missing_images_and_unreadable_labels_are_problems_not_errors(litdata, tmp_path):
    from litdata.streaming.writer import BinaryWriter

    writer = BinaryWriter(str(tmp_path), chunk_bytes=1 << 20)
    writer.add_item(0, {"caption": "no image", "label": 3.5, "meta": '{"id": 9}'})
    writer.done()
    writer.merge(1)
    [s] = Reader(str(tmp_path)).samples()
    assert (s.problem, s.label, s.id, s.where) == (("missing", "no image column"), (3.5,), 9, "chunk-0-0.bin:0")


def test_real_size_images_through_the_writer_and_the_reader(litdata, tmp_path, real_size_folders):
    files = sorted(real_size_folders["imagenet"].rglob("*.jpg"))
    assert len(files) == 20
    samples = [Sample(key=str(i), image=f.read_bytes(), label=(float(i % 4),), id=i) for i, f in enumerate(files)]
    shards, _ = write(tmp_path, samples, 1 << 26)  # litdata.optimize's chunk_bytes for images is of this order
    assert len(shards) == 1
    for a, b in zip(samples, Reader(str(tmp_path)).samples(), strict=True):
        same(a, b)
        assert b.ext == "jpg"


@pytest.mark.slow
def test_reading_from_s3(litdata, tmp_path):
    pytest.importorskip("s3fs")
    samples = make_samples(25)
    write(tmp_path, samples, 2000)
    with s3_endpoint() as endpoint:
        put_folder(endpoint, tmp_path, "s3://fmt-litdata/data")
        reader = Reader("s3://fmt-litdata/data", {"endpoint_url": endpoint})
        assert reader.count() == 25 and reader.meta is not None and reader.meta.format == "litdata"
        for a, b in zip(samples[4:], reader.samples(4), strict=True):
            same(a, b)


def test_a_label_column_no_serializer_of_ours_reads_is_refused_at_open(litdata, tmp_path):
    """Found by the damage harness: index.json's 'no_header_numpy:9' with one byte flipped made every
    sample fail alike (14 bad labels); the index now says it, once, before any sample is read."""
    write(tmp_path / "d", make_samples(6), 2000)
    index = tmp_path / "d" / "index.json"
    config = json.loads(index.read_text())
    label = config["config"]["data_format"].index("no_header_numpy:9")  # the label column's float32 arrays
    for damaged, said in (("no_header_nulpy:9", "not one im2rec reads"), ("pickle", "pickled: im2rec does not unpickle, which runs code")):
        config["config"]["data_format"][label] = damaged
        index.write_text(json.dumps(config))
        with pytest.raises(Im2recError) as e:
            Reader(str(tmp_path / "d"))
        assert str(e.value) == f"{index}: the label column 'label' has litdata serializer {damaged!r}, {said}"
