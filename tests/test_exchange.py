"""`im2rec export` and `im2rec import`: RecordIO to WebDataset, Parquet, MDS and litdata and back.

Round trips are byte-identical; every export is read by its format's own library
(webdataset, wids, pyarrow, 🤗 datasets, polars, duckdb; MDS and litdata in their own
test files), and what those libraries' writers wrote is imported.
"""

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from conftest import run, s3_endpoint

from im2rec import exchange, recordio
from im2rec.image import ImageOptions
from im2rec.packing import PackOptions, Progress

FORMATS = ["webdataset", "parquet", "mds", "litdata"]


def needs(fmt):
    """Skip where the format's writer cannot run here (its module or library is missing)."""
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    if fmt == "litdata":
        pytest.importorskip("litdata")
    if fmt in ("mds", "litdata"):
        pytest.importorskip(f"im2rec.formats.{fmt}")


def same_files(a: Path, b: Path) -> bool:
    return a.read_bytes() == b.read_bytes()


def round_trip(rec: Path, tmp: Path, fmt: str, *extra) -> Path:
    out = tmp / f"{fmt}-export"
    result = run("export", rec, out, "--format", fmt, *extra)
    assert result.exit_code == 0, result.output
    back = tmp / f"{fmt}-back" / rec.name
    result = run("import", out, back, "--format", fmt)
    assert result.exit_code == 0, result.output
    return back


# --------------------------------------------------------------------------- round trips


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("golden", ["im2rec_pack_resize64/all", "im2rec_pack_multilabel/ml", "insightface/train"])
def test_round_trip_of_golden_files_is_byte_identical(fmt, golden, data_dir, tmp_path):
    """MXNet's im2rec.py output, its multi-label output (flag > 0) and insightface's RecBuilder
    file: export then import gives back the .rec and .idx byte for byte."""
    needs(fmt)
    rec = data_dir / f"{golden}.rec"
    if not rec.exists():
        pytest.skip(f"{rec} is not among the golden files")
    back = round_trip(rec, tmp_path, fmt)
    assert same_files(rec, back) and same_files(rec.with_suffix(".idx"), back.with_suffix(".idx"))
    if golden.startswith("insightface"):
        assert same_files(rec.parent / "property", back.parent / "property")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_of_a_real_size_pack_with_default_options(fmt, real_size_folders, tmp_path):
    """ImageNet-like JPEGs (about 70 KB) packed with default options, their classes.tsv: exported
    with the default shard size, imported with default options: the same .rec, .idx and classes."""
    needs(fmt)
    folder = real_size_folders["imagenet"]
    assert run("list", folder, tmp_path / "data" / "train").exit_code == 0
    assert run("pack", tmp_path / "data" / "train.lst", folder).exit_code == 0
    rec = tmp_path / "data" / "train.rec"
    result = run("export", rec, tmp_path / "e", "--format", fmt)
    shards = json.loads((tmp_path / "e" / "im2rec.json").read_text())["shards"]
    assert result.exit_code == 0 and f"to {tmp_path / 'e'} as {fmt}: {len(shards)} shard" in result.output and shards, result.output
    assert all((tmp_path / "e" / s).exists() for s in shards)
    result = run("import", tmp_path / "e", tmp_path / "back" / "train.rec")  # the format from im2rec.json
    assert result.exit_code == 0, result.output
    back = tmp_path / "back" / "train.rec"
    assert same_files(rec, back) and same_files(rec.with_suffix(".idx"), back.with_suffix(".idx"))
    assert same_files(tmp_path / "data" / "train.classes.tsv", back.parent / "train.classes.tsv")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_of_an_insightface_pack_and_of_shards(fmt, data_dir, tmp_path):
    """A `pack --layout insightface` output (header, identity records, property), and a sharded
    pack given by its manifest (exported as one dataset, imported as one .rec)."""
    needs(fmt)
    face = data_dir / "insightface"
    assert run("pack", face / "train.lst", face, tmp_path / "if" / "train.rec", "--layout", "insightface", "--pass-through").exit_code == 0
    rec = tmp_path / "if" / "train.rec"
    result = run("export", rec, tmp_path / "e", "--format", fmt)
    assert result.exit_code == 0 and "insightface set: images only, 6 header and identity records left out" in result.output, result.output
    meta = json.loads((tmp_path / "e" / "im2rec.json").read_text())
    assert meta["layout"] == "insightface" and meta["property"] == (face / "property").read_text().strip() and meta["samples"] == 19
    assert run("import", tmp_path / "e", tmp_path / "back" / "train.rec", "--format", fmt).exit_code == 0  # the layout from im2rec.json
    for name in ("train.rec", "train.idx", "property"):
        assert same_files(tmp_path / "if" / name, tmp_path / "back" / name), name
    golden = data_dir / "im2rec_pack_pass"
    assert run("pack", golden / "all.lst", data_dir / "tree", tmp_path / "sh" / "all.rec", "--pass-through", "--shard-size", "20KB").exit_code == 0
    assert run("export", tmp_path / "sh" / "all.shards.json", tmp_path / "se", "--format", fmt).exit_code == 0
    assert run("import", tmp_path / "se", tmp_path / "one" / "all.rec", "--format", fmt).exit_code == 0
    reader = recordio.RecordReader(tmp_path / "one" / "all.rec", tmp_path / "one" / "all.idx")
    shards = json.loads((tmp_path / "sh" / "all.shards.json").read_text())["shards"]
    want = []
    for shard in shards:
        r = recordio.RecordReader(tmp_path / "sh" / shard["rec"], tmp_path / "sh" / shard["idx"])
        want += [(k, r.read(k)) for k in r.keys()]
    assert [(k, reader.read(k)) for k in reader.keys()] == want and len(want) == 14
    assert run("export", tmp_path / "sh" / "all-0000?.rec", tmp_path / "sg", "--format", fmt).exit_code == 0  # the shards by a glob
    assert run("import", tmp_path / "sg", tmp_path / "two" / "all.rec", "--format", fmt).exit_code == 0
    assert same_files(tmp_path / "one" / "all.rec", tmp_path / "two" / "all.rec")
    assert fmt in ("mds", "litdata") or json.loads((tmp_path / "sg" / "im2rec.json").read_text())["shards"][0].startswith("all-")  # named after the glob


def test_export_is_byte_reproducible_and_tar_headers_fixed(data_dir, tmp_path):
    rec = data_dir / "im2rec_pack_pass" / "all.rec"
    for n in (1, 2):
        assert run("export", rec, tmp_path / f"w{n}", "--format", "webdataset", "--shard-size", "30KB").exit_code == 0
    names = sorted(p.name for p in (tmp_path / "w1").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "w2").iterdir()) and "all-000001.tar" in names
    for name in names:
        assert same_files(tmp_path / "w1" / name, tmp_path / "w2" / name), name
    with tarfile.open(tmp_path / "w1" / "all-000000.tar") as tar:
        members = tar.getmembers()
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {(0, 0, 0, "", "", 0o444)}
    first = recordio.RecordReader(rec, rec.with_suffix(".idx")).keys()[0]
    assert [m.name for m in members[:3]] == [f"{first}.cls", f"{first}.jpg", f"{first}.json"]
    for name in names:  # within the size, or a single sample bigger than it
        if name.endswith(".tar"):
            with tarfile.open(tmp_path / "w1" / name) as tar:
                assert os.path.getsize(tmp_path / "w1" / name) <= 30_000 or len({m.name.split(".")[0] for m in tar.getmembers()}) == 1, name


@pytest.mark.slow
def test_webdataset_and_wids_read_the_export(data_dir, tmp_path):
    wds = pytest.importorskip("webdataset")
    rec = data_dir / "im2rec_pack_multilabel" / "ml.rec"
    assert run("export", rec, tmp_path / "w", "--format", "webdataset").exit_code == 0
    reader = recordio.RecordReader(rec, rec.with_suffix(".idx"))
    samples = list(wds.WebDataset(str(tmp_path / "w" / "ml-000000.tar"), shardshuffle=False))
    assert [s["__key__"] for s in samples] == [str(k) for k in reader.keys()]
    for s, key in zip(samples, reader.keys()):
        header, image = recordio.unpack(reader.read(key))
        ext = "jpg" if image[:3] == b"\xff\xd8\xff" else "png"
        assert s[ext] == image
        doc = json.loads(s["json"])
        assert doc["label"] == [float(x) for x in header.label] and doc["id"] == header.id and doc["id2"] == header.id2
        assert "cls" not in s  # several labels: no single class


@pytest.mark.xdist_group("torch")  # wids imports torch
def test_wids_reads_the_export_by_its_shard_list(data_dir, tmp_path):
    wids = pytest.importorskip("wids")
    rec = data_dir / "im2rec_pack_multilabel" / "ml.rec"
    assert run("export", rec, tmp_path / "w", "--format", "webdataset").exit_code == 0
    reader = recordio.RecordReader(rec, rec.with_suffix(".idx"))
    ds = wids.ShardListDataset(str(tmp_path / "w" / "wids.json"), transformations=[], cache_dir=str(tmp_path / "cache"))
    assert len(ds) == len(reader.keys())
    for i in (0, 3, len(ds) - 1):
        key = reader.keys()[i]
        header, image = recordio.unpack(reader.read(key))
        sample = ds[i]
        assert sample["__key__"] == str(key) and sample[".jpg"].read() == image
        assert json.loads(sample[".json"].read())["label"] == [float(x) for x in header.label]


@pytest.mark.slow
def test_parquet_export_reads_as_plain_columns_and_as_a_hugging_face_dataset(tmp_path, data_dir):
    pq = pytest.importorskip("pyarrow.parquet")
    golden = data_dir / "im2rec_pack_pass"
    (golden / "all.classes.tsv").exists()
    work = tmp_path / "d"
    shutil.copytree(golden, work)
    names = ["cats", "dogs", "fish", "owls", "bees"]
    (work / "all.classes.tsv").write_text("".join(f"{i}\t{n}\n" for i, n in enumerate(names)))
    assert run("export", work / "all.rec", tmp_path / "p", "--format", "parquet").exit_code == 0
    table = pq.read_table(tmp_path / "p" / "all-000000.parquet")
    assert table.column_names == ["key", "image", "label", "cls", "meta"]
    assert str(table.schema.field("image").type) == "struct<bytes: binary, path: string>"
    assert str(table.schema.field("label").type) == "list<element: float>"
    reader = recordio.RecordReader(work / "all.rec", work / "all.idx")
    rows = table.to_pylist()
    assert [r["key"] for r in rows] == [str(k) for k in reader.keys()]
    for r, key in zip(rows, reader.keys()):
        header, image = recordio.unpack(reader.read(key))
        assert r["image"]["bytes"] == image and r["label"] == [header.label] and r["cls"] == int(header.label)
        assert json.loads(r["meta"]) == {"id": header.id, "id2": 0, "class": names[int(header.label)]}
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "p" / "*.parquet"), split="train", cache_dir=str(tmp_path / "hf"))
    assert ds.features["cls"].names == names
    first = ds[0]
    assert first["image"].size == (first["image"].width, first["image"].height) and first["image"].format in ("JPEG", "PNG")
    assert first["cls"] == rows[0]["cls"]
    polars = pytest.importorskip("polars")
    assert polars.read_parquet(tmp_path / "p" / "all-000000.parquet")["key"].to_list() == [r["key"] for r in rows]
    duckdb = pytest.importorskip("duckdb")
    assert duckdb.sql(f"select count(*), sum(cls) from '{tmp_path / 'p' / 'all-000000.parquet'}'").fetchall()[0] == (len(rows), sum(r["cls"] for r in rows))


# --------------------------------------------------------------------------- what other writers wrote


def _jpeg(seed: int, size=(48, 64)) -> bytes:
    import cv2

    rng = np.random.default_rng(seed)
    img = rng.integers(0, 255, (*size, 3), dtype=np.uint8)
    _, buf = cv2.imencode(".jpg", img)
    return buf.tobytes()


@pytest.mark.slow
def test_import_what_webdataset_s_writer_wrote_with_class_names(tmp_path):
    """webdataset's own ShardWriter, string class names in json: ids in sorted name order,
    OUT.classes.tsv; a sample without an image and a corrupt JPEG go to OUT.failed.tsv."""
    wds = pytest.importorskip("webdataset")
    images = {f"s{i:03d}": _jpeg(i) for i in range(12)}
    names = ["zebra", "ant", "moose"]
    os.makedirs(tmp_path / "w")
    with wds.ShardWriter(str(tmp_path / "w" / "part-%04d.tar"), maxcount=5) as sink:
        for i, (key, data) in enumerate(images.items()):
            sample = {"__key__": key, "json": {"label": names[i % 3]}}
            if i == 4:
                sample["txt"] = "no image"
            elif i == 7:
                sample["jpg"] = data[: len(data) // 3]  # cut short
            else:
                sample["jpg"] = data
            sink.write(sample)
    result = run("import", tmp_path / "w", tmp_path / "out" / "x.rec", "--format", "webdataset")
    assert result.exit_code == 0, result.output
    assert "packed 10 of 12 images" in result.output and "2 failed (1 corrupt, 1 missing)" in result.output, result.output
    assert (tmp_path / "out" / "x.classes.tsv").read_text() == "0\tant\n1\tmoose\n2\tzebra\n"
    failed = (tmp_path / "out" / "x.failed.tsv").read_text().splitlines()
    assert failed[1].startswith("4\tpart-0000.tar:s004\tmissing: no image field (fields: json, txt)")
    assert failed[2].startswith("7\tpart-0001.tar:s007\tcorrupt: ")
    reader = recordio.RecordReader(tmp_path / "out" / "x.rec", tmp_path / "out" / "x.idx")
    assert reader.keys() == [0, 1, 2, 3, 5, 6, 8, 9, 10, 11]
    for k in reader.keys():
        header, image = recordio.unpack(reader.read(k))
        assert image == images[f"s{k:03d}"] and header.label == {"zebra": 2, "ant": 0, "moose": 1}[names[k % 3]] and header.id == k


@pytest.mark.slow
def test_import_what_hugging_face_datasets_wrote(tmp_path):
    """A 🤗 dataset with an Image feature and a ClassLabel, saved with to_parquet: the ClassLabel
    ids are kept and its names written to OUT.classes.tsv; with string labels, sorted ids."""
    datasets = pytest.importorskip("datasets")
    images = [_jpeg(i) for i in range(6)]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["dog", "cat"])})
    ds = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in images], "label": [1, 0, 1, 1, 0, 0]}, features=features)
    ds.to_parquet(str(tmp_path / "hf.parquet"))
    result = run("import", tmp_path / "hf.parquet", tmp_path / "a.rec", "--format", "parquet")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "a.classes.tsv").read_text() == "0\tdog\n1\tcat\n"
    reader = recordio.RecordReader(tmp_path / "a.rec", tmp_path / "a.idx")
    got = [recordio.unpack(reader.read(k)) for k in reader.keys()]
    assert [h.label for h, _ in got] == [1, 0, 1, 1, 0, 0] and [img for _, img in got] == images
    strings = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in images], "label": ["b", "c", "a", "b", "c", "a"]}, features=datasets.Features({"image": datasets.Image(), "label": datasets.Value("string")}))
    strings.to_parquet(str(tmp_path / "s.parquet"))
    assert run("import", tmp_path / "s.parquet", tmp_path / "s.rec", "--format", "parquet").exit_code == 0
    assert (tmp_path / "s.classes.tsv").read_text() == "0\ta\n1\tb\n2\tc\n"
    reader = recordio.RecordReader(tmp_path / "s.rec", tmp_path / "s.idx")
    assert [recordio.unpack(reader.read(k))[0].label for k in reader.keys()] == [1, 2, 0, 1, 2, 0]


# --------------------------------------------------------------------------- options, failures, resume


@pytest.mark.slow
def test_import_re_encodes_through_pack_s_pool_with_image_options(real_size_folders, tmp_path):
    folder = real_size_folders["imagenet"]
    assert run("list", folder, tmp_path / "t").exit_code == 0
    assert run("pack", tmp_path / "t.lst", folder).exit_code == 0
    assert run("export", tmp_path / "t.rec", tmp_path / "w", "--format", "webdataset").exit_code == 0
    result = run("import", tmp_path / "w", tmp_path / "small.rec", "--format", "webdataset", "--resize", "64", "--workers", "2")
    assert result.exit_code == 0 and "packed 20 of 20 images" in result.output, result.output
    reader = recordio.RecordReader(tmp_path / "small.rec", tmp_path / "small.idx")
    original = recordio.RecordReader(tmp_path / "t.rec", tmp_path / "t.idx")
    assert reader.keys() == original.keys()
    for k in reader.keys():
        header, image = recordio.unpack_img(reader.read(k))
        assert min(image.shape[:2]) == 64 and header.label == recordio.unpack(original.read(k))[0].label


class _Stop(Progress):
    def __init__(self, after):
        self.after, self.seen = after, 0

    def update(self, result):
        self.seen += 1
        if self.seen == self.after:
            raise KeyboardInterrupt


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_interrupted_import_resumes_to_the_same_bytes(fmt, data_dir, tmp_path):
    needs(fmt)
    rec = data_dir / "insightface" / "plain.rec"
    exchange.export_rec(str(rec), str(tmp_path / "e"), fmt)
    out = tmp_path / "out" / "plain.rec"
    opts = PackOptions(image=ImageOptions(pass_through=True))
    with pytest.raises(KeyboardInterrupt):
        exchange.import_samples(str(tmp_path / "e"), str(out), fmt, opts, _Stop(7))
    assert not out.exists() and (tmp_path / "out" / "plain.rec.partial").exists()
    result = run("import", tmp_path / "e", out, "--format", fmt)
    assert result.exit_code == 1 and "pass --resume" in result.output, result.output
    result = run("import", tmp_path / "e", out, "--format", fmt, "--resume")
    assert result.exit_code == 0 and "(resumed after 7)" in result.output, result.output
    assert same_files(rec, out) and same_files(rec.with_suffix(".idx"), out.with_suffix(".idx"))


def test_an_import_stopped_by_a_damaged_shard_keeps_what_came_before(data_dir, tmp_path):
    """The second of two MDS shards cut short: the error names it and what is kept; once the
    shard is whole again, --resume finishes with the bytes of an uninterrupted run."""
    rec = data_dir / "insightface" / "plain.rec"
    exchange.export_rec(str(rec), str(tmp_path / "e"), "mds", shard_size=1500)
    shard = tmp_path / "e" / "shard.00001.mds"
    whole = shard.read_bytes()
    first = json.loads((tmp_path / "e" / "index.json").read_text())["shards"][0]["samples"]
    shard.write_bytes(whole[: len(whole) - 10])
    out = tmp_path / "out.rec"
    result = run("import", tmp_path / "e", out)
    assert result.exit_code == 1 and not out.exists(), result.output
    assert result.output.startswith(f"Error: {shard}: sample ") and result.output.endswith(
        f"; what was packed before it is kept in {out}.partial ({first} packed): rerun with --resume once this is fixed (or --overwrite to start again)\n"
    ), result.output
    shard.write_bytes(whole)
    result = run("import", tmp_path / "e", out, "--resume")
    assert result.exit_code == 0 and f"(resumed after {first})" in result.output, result.output
    assert same_files(rec, out) and same_files(rec.with_suffix(".idx"), out.with_suffix(".idx"))


def test_errors_name_the_file_and_offset(data_dir, tmp_path):
    rec = data_dir / "im2rec_pack_pass" / "all.rec"
    assert run("export", rec, tmp_path / "w", "--format", "webdataset").exit_code == 0
    result = run("export", rec, tmp_path / "w", "--format", "webdataset")
    assert result.exit_code == 1 and result.output == f"Error: {tmp_path / 'w'} exists: pass --overwrite to replace it\n"
    assert run("export", rec, tmp_path / "w", "--format", "webdataset", "--overwrite").exit_code == 0
    tar = tmp_path / "w" / "all-000000.tar"
    data = tar.read_bytes()
    tar.write_bytes(data[:5000])
    result = run("import", tmp_path / "w", tmp_path / "x.rec", "--format", "webdataset")
    assert result.exit_code == 1 and "all-000000.tar: byte 1024: the member's" in result.output and "(truncated)" in result.output, result.output
    assert not (tmp_path / "x.rec").exists()
    tar.write_bytes(data[:1024] + b"\x01" * 512 + data[1536:])  # a header damaged: what it held is lost, the rest is read
    result = run("import", tmp_path / "w", tmp_path / "x.rec", "--format", "webdataset")
    assert result.exit_code == 0 and "packed 11 of 14 images" in result.output and "3 failed (1 corrupt, 2 missing)" in result.output, result.output
    failed = (tmp_path / "x.failed.tsv").read_text().splitlines()
    damaged = [line for line in failed if "\tall-000000.tar:byte 1024\tcorrupt: byte 1024: " in line]
    assert len(damaged) == 1 and damaged[0].endswith("bytes that are no tar member (a damaged header: a bad checksum); what they held is lost")
    (tmp_path / "x.rec").unlink()
    (tmp_path / "x.idx").unlink()
    (tmp_path / "noidx.rec").write_bytes(rec.read_bytes())
    result = run("export", tmp_path / "noidx.rec", tmp_path / "n", "--format", "webdataset")
    assert result.exit_code == 1 and result.output == f"Error: {tmp_path / 'noidx.idx'}: no such file: export reads the records in .idx order (rebuild it with `im2rec index {tmp_path / 'noidx.rec'}`)\n"
    result = run("export", rec, tmp_path / "n", "--format", "tfrecord")
    assert result.exit_code == 2 and "'tfrecord' is not one of" in result.output
    result = run("import", tmp_path / "nothing-here", tmp_path / "n.rec", "--format", "webdataset")
    assert result.exit_code == 2


def test_a_missing_library_says_which_pip_install(monkeypatch, data_dir, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
    result = run("export", data_dir / "im2rec_pack_pass" / "all.rec", tmp_path / "p", "--format", "parquet")
    assert result.exit_code == 1 and "Error: the parquet format needs pyarrow: pip install 'im2rec[parquet]'" in result.output
    assert not (tmp_path / "p").exists() and not (tmp_path / "p.partial").exists()


# --------------------------------------------------------------------------- object storage


@pytest.fixture(scope="module")
def s3():
    """The loopback S3 for this module (im2rec keeps one filesystem object per process, bound to its endpoint)."""
    s3fs = pytest.importorskip("s3fs")
    with s3_endpoint() as endpoint:
        yield s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, endpoint_url=endpoint)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["webdataset", "parquet"])
def test_export_and_import_through_s3(fmt, s3, data_dir, tmp_path, monkeypatch):
    """Both ways with URLs: shards uploaded as they are finished, nothing left locally (no `s3:`
    folder, an empty staging folder), the round trip byte-identical."""
    needs(fmt)
    fs = s3
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    monkeypatch.chdir(tmp_path)
    golden = data_dir / "im2rec_pack_pass"
    b = f"exchange-{fmt}"
    fs.mkdir(b)
    fs.put(str(golden / "all.rec"), f"{b}/all.rec")
    fs.put(str(golden / "all.idx"), f"{b}/all.idx")
    result = run("export", f"s3://{b}/all.rec", f"s3://{b}/x/", "--format", fmt, "--shard-size", "40KB")
    assert result.exit_code == 0 and f"to s3://{b}/x as" in result.output, result.output
    names = sorted(p.rsplit("/", 1)[1] for p in fs.find(f"{b}/x"))
    assert "im2rec.json" in names and len([n for n in names if n.startswith("all-")]) >= 2
    result = run("import", f"s3://{b}/x", f"s3://{b}/back/all.rec", "--format", fmt)
    assert result.exit_code == 0, result.output
    assert fs.cat(f"{b}/back/all.rec") == (golden / "all.rec").read_bytes() and fs.cat(f"{b}/back/all.idx") == (golden / "all.idx").read_bytes()
    result = run("export", f"s3://{b}/all.rec", f"s3://{b}/x", "--format", fmt)
    first = {"webdataset": "all-000000.tar", "parquet": "all-000000.parquet"}[fmt]
    assert result.exit_code == 1 and result.output == f"Error: s3://{b}/x/{first} exists: pass --overwrite to replace it\n"
    assert run("export", f"s3://{b}/all.rec", f"s3://{b}/x", "--format", fmt, "--overwrite").exit_code == 0
    assert len([p for p in fs.find(f"{b}/x") if "/all-" in p]) == 1  # the old shards replaced, not left beside
    assert not os.path.exists("s3:") and not [p for p in (tmp_path / "staging").rglob("*") if p.is_file()]


def test_library_round_trip_of_samples_keeps_every_header_field(tmp_path):
    """Records whose headers are not what pack writes (flag 1 for one label, id != key, id2 set,
    a NaN label, a non-image payload): exported and imported by the library, identical."""
    rec = tmp_path / "odd.rec"
    jpeg = _jpeg(1)
    with recordio.RecordWriter(rec, tmp_path / "odd.idx") as w:
        w.write_idx(5, recordio.pack(recordio.IRHeader(0, 3.0, 99, 7), jpeg))
        w.write_idx(6, recordio.pack(recordio.IRHeader(0, np.array([2.0], np.float32), 6, 0), jpeg))
        w.write_idx(7, recordio.pack(recordio.IRHeader(0, np.array([1.5, -2.0, 1e-7], np.float32), 7, 1 << 40), jpeg))
        w.write_idx(9, recordio.pack(recordio.IRHeader(0, float("nan"), 9, 0), jpeg))
    for fmt in ("webdataset", "parquet"):
        exchange.export_rec(str(rec), str(tmp_path / fmt), fmt)
        exchange.import_samples(str(tmp_path / fmt), str(tmp_path / f"{fmt}.rec"), fmt, PackOptions(image=ImageOptions(pass_through=True)))
        assert same_files(rec, tmp_path / f"{fmt}.rec") and same_files(rec.with_suffix(".idx"), tmp_path / f"{fmt}.idx"), fmt


def test_streamed_tar_reader_handles_long_names_and_pax(tmp_path):
    """Tars written by Python's tarfile (GNU long names, pax headers) are read like webdataset reads them."""
    from im2rec.formats.webdataset import members

    buf = io.BytesIO()
    long = "d/" + "x" * 120
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in ((long + ".jpg", b"\xff\xd8\xffabc"), (long + ".cls", b"3"), ("d/short.cls", b"1")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    got = [(n, bytes(d)) for n, d, _ in members(io.BytesIO(buf.getvalue()), "t.tar")]
    assert got == [(long + ".jpg", b"\xff\xd8\xffabc"), (long + ".cls", b"3"), ("d/short.cls", b"1")]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("é" * 80 + ".cls")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"4"))
    assert [(n, bytes(d)) for n, d, _ in members(io.BytesIO(buf.getvalue()), "t.tar")] == [("é" * 80 + ".cls", b"4")]


def test_export_batches_hold_a_bounded_number_of_bytes(real_size_folders, tmp_path, monkeypatch):
    """Records are handed to the writers in batches of at most CHUNK_BYTES (one record more when it
    is larger), whatever their size: memory does not grow with the images."""
    folder = real_size_folders["imagenet"]
    assert run("list", folder, tmp_path / "t").exit_code == 0
    assert run("pack", tmp_path / "t.lst", folder).exit_code == 0
    monkeypatch.setattr(exchange, "CHUNK_BYTES", 300_000)
    reader = recordio.RecordReader(tmp_path / "t.rec", tmp_path / "t.idx")
    batches = list(exchange._batches(reader, {}, None, []))
    sizes = [sum(len(x) + 100 for x in b.images) for b in batches]
    assert len(batches) > 3 and max(sizes) <= 300_000 + max(len(x) + 100 for b in batches for x in b.images)
    assert sum(len(b) for b in batches) == 20


def test_import_re_encoding_a_face_set_computes_its_property(data_dir, tmp_path):
    face = data_dir / "insightface"
    assert run("export", face / "train.rec", tmp_path / "e", "--format", "webdataset").exit_code == 0
    result = run("import", tmp_path / "e", tmp_path / "small" / "train.rec", "--resize", "56")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "small" / "property").read_text() == "5,56,56\n"  # the re-encoded images' size, not the source's 112


def test_format_from_im2rec_json_and_wrong_formats_say_so(data_dir, tmp_path):
    rec = data_dir / "im2rec_pack_pass" / "all.rec"
    assert run("export", rec, tmp_path / "w", "--format", "webdataset").exit_code == 0
    result = run("import", tmp_path / "w", tmp_path / "x.rec", "--format", "mds")
    assert result.exit_code == 1 and result.output == f"Error: {tmp_path / 'w' / 'index.json'}: no such file; its im2rec.json says it holds webdataset: pass --format webdataset\n", result.output
    (tmp_path / "bare").mkdir()
    shutil.copy(tmp_path / "w" / "all-000000.tar", tmp_path / "bare")
    result = run("import", tmp_path / "bare", tmp_path / "y.rec")
    assert result.exit_code == 2 and "give --format: " in result.output and "has no im2rec.json that says which format it holds, nor a name ending in .tar or .parquet" in result.output, result.output
    # a shard file or a glob of them says its format by its name: the import --format would give
    assert run("import", tmp_path / "bare", tmp_path / "given.rec", "--format", "webdataset").exit_code == 0
    result = run("import", tmp_path / "bare" / "all-000000.tar", tmp_path / "z.rec")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "z.rec").read_bytes() == (tmp_path / "given.rec").read_bytes()
    result = run("import", str(tmp_path / "bare" / "*.tar"), tmp_path / "g.rec")
    assert result.exit_code == 0 and (tmp_path / "g.rec").read_bytes() == (tmp_path / "given.rec").read_bytes(), result.output


def test_a_parquet_file_says_its_format_by_its_name(data_dir, tmp_path):
    pytest.importorskip("pyarrow")
    rec = data_dir / "im2rec_pack_pass" / "all.rec"
    assert run("export", rec, tmp_path / "p", "--format", "parquet").exit_code == 0
    (tmp_path / "bare").mkdir()
    shard = next((tmp_path / "p").glob("*.parquet"))
    shutil.copy(shard, tmp_path / "bare" / shard.name)
    assert run("import", tmp_path / "bare", tmp_path / "given.rec", "--format", "parquet").exit_code == 0
    result = run("import", tmp_path / "bare" / shard.name, tmp_path / "x.rec")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "x.rec").read_bytes() == (tmp_path / "given.rec").read_bytes()


def test_label_field_and_export_classes(data_dir, tmp_path):
    """--label-field names the field of other writers' data that holds the label (a caption-style
    set with class names in .txt); export --classes takes the class names from a file."""
    pytest.importorskip("webdataset")
    import webdataset as wds

    os.makedirs(tmp_path / "w")
    with wds.TarWriter(str(tmp_path / "w" / "a.tar")) as sink:
        for i in range(4):
            sink.write({"__key__": f"k{i}", "jpg": _jpeg(i), "txt": ["dog", "cat"][i % 2]})
    result = run("import", tmp_path / "w", tmp_path / "x.rec", "--format", "webdataset")
    assert result.exit_code == 1 and "no label (no json 'label', no cls, cls2, class, label, index field; --label-field names another)" in (tmp_path / "x.failed.tsv").read_text()
    result = run("import", tmp_path / "w", tmp_path / "y.rec", "--format", "webdataset", "--label-field", "txt")
    assert result.exit_code == 0 and "packed 4 of 4" in result.output, result.output
    assert (tmp_path / "y.classes.tsv").read_text() == "0\tcat\n1\tdog\n"
    result = run("import", tmp_path / "w", tmp_path / "z.rec", "--format", "webdataset", "--label-field", "nope")
    assert "no label (no 'nope' field" in (tmp_path / "z.failed.tsv").read_text()
    rec = data_dir / "im2rec_pack_pass" / "all.rec"
    (tmp_path / "names.tsv").write_text("0\tzero\n1\tone\n2\ttwo\n3\tthree\n")
    assert run("export", rec, tmp_path / "e", "--format", "webdataset", "--classes", tmp_path / "names.tsv").exit_code == 0
    assert json.loads((tmp_path / "e" / "im2rec.json").read_text())["classes"] == {"0": "zero", "1": "one", "2": "two", "3": "three"}


def test_hugging_face_datasets_of_image_files_are_imported_from_their_paths(tmp_path, monkeypatch):
    """datasets.Dataset.from_dict with image paths stores the paths, not the bytes: import reads the files."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.chdir(tmp_path)
    os.makedirs("imgs")
    for i in range(3):
        Path(f"imgs/{i}.jpg").write_bytes(_jpeg(i))
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    ds = datasets.Dataset.from_dict({"image": [f"imgs/{i}.jpg" for i in range(3)], "label": [0, 1, 0]}, features=features)
    ds.to_parquet("paths.parquet")
    result = run("import", "paths.parquet", "p.rec", "--format", "parquet")
    assert result.exit_code == 0 and "packed 3 of 3" in result.output, result.output
    reader = recordio.RecordReader("p.rec", "p.idx")
    assert [recordio.unpack(reader.read(k))[1] for k in reader.keys()] == [_jpeg(i) for i in range(3)]
    shutil.rmtree("imgs")
    result = run("import", "paths.parquet", "q.rec", "--format", "parquet")
    assert result.exit_code == 1 and "its path 'imgs/0.jpg' cannot be read here (save the dataset with its images embedded" in Path("q.failed.tsv").read_text()


def test_an_interrupted_export_leaves_nothing(data_dir, tmp_path, monkeypatch):
    rec = data_dir / "im2rec_pack_pass" / "all.rec"

    class Stop(exchange.ExportProgress):
        def update(self, n):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        exchange.export_rec(str(rec), str(tmp_path / "w"), "webdataset", progress=Stop())
    assert not (tmp_path / "w").exists() and not (tmp_path / "w.partial").exists()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(exchange, "export_rec", interrupted)
    result = run("export", rec, tmp_path / "w", "--format", "webdataset")
    assert result.exit_code == 130 and f"Error: interrupted; nothing was written to {tmp_path / 'w'}" in result.output


def test_export_leaves_out_a_damaged_record_and_says_so(data_dir, tmp_path):
    """As extract: the records around a damaged one are exported, the damage reported, exit 1."""
    golden = data_dir / "im2rec_pack_pass"
    data = bytearray((golden / "all.rec").read_bytes())
    index = recordio.read_index(golden / "all.idx")
    key = index.keys()[3]
    offset = index.offset(key)
    data[offset : offset + 4] = b"\0\0\0\0"  # its magic word
    (tmp_path / "d.rec").write_bytes(bytes(data))
    shutil.copy(golden / "all.idx", tmp_path / "d.idx")
    result = run("export", tmp_path / "d.rec", tmp_path / "w", "--format", "webdataset")
    assert result.exit_code == 1
    assert result.stderr == f"{tmp_path / 'd.rec'}: byte {offset}, key {key}: no record at byte {offset}: expected the magic 0xced7230a, found 0x00000000\n"
    assert "exported 13 records" in result.stdout and "; 1 damaged record left out" in result.stdout
    assert run("import", tmp_path / "w", tmp_path / "back.rec").exit_code == 0
    back = recordio.RecordReader(tmp_path / "back.rec", tmp_path / "back.idx")
    assert back.keys() == [k for k in index.keys() if k != key]


@pytest.mark.parametrize("how", ["cut at a member", "zeroed header", "empty", "missing"])
def test_a_webdataset_shard_cut_zeroed_empty_or_missing_is_never_silent(data_dir, tmp_path, how):
    """What the trial found: samples lost from a shard, with exit 0 and "0 failed"."""
    rec = data_dir / "im2rec_pack_pass" / "all.rec"
    assert run("export", rec, tmp_path / "w", "--format", "webdataset", "--shard-size", "60KB").exit_code == 0
    shards = sorted((tmp_path / "w").glob("*.tar"))
    assert len(shards) > 2
    shard = shards[1]
    data = shard.read_bytes()
    import tarfile

    with tarfile.open(shard) as t:
        offsets = [m.offset for m in t.getmembers()]
    if how == "cut at a member":
        shard.write_bytes(data[: offsets[len(offsets) // 2]])  # a download stopped on a 512-byte boundary
    elif how == "zeroed header":
        at = offsets[len(offsets) // 2]
        shard.write_bytes(data[:at] + bytes(512) + data[at + 512 :])
    elif how == "empty":
        shard.write_bytes(b"")
    else:
        shard.unlink()
    result = run("import", tmp_path / "w", tmp_path / "x.rec")
    if how == "zeroed header":  # the damage is listed, the rest of the shard read
        assert result.exit_code == 0 and "corrupt" in result.output, result.output
        assert "a lone zero block where a header should be" in (tmp_path / "x.failed.tsv").read_text()
    else:
        assert result.exit_code == 1, result.output
        expected = {
            "cut at a member": "without tar's end-of-archive blocks: it was cut short (a partial download?), and its members after that are lost",
            "empty": "the tar file is empty (0 bytes)",
            "missing": f"{shard}: no such file: {tmp_path / 'w' / 'im2rec.json'} lists it (a shard lost in the copy?)",
        }[how]
        assert expected in result.stderr, result.stderr


@pytest.mark.slow
def test_a_parquet_shard_its_im2rec_json_lists_but_that_is_missing(data_dir, tmp_path):
    pytest.importorskip("pyarrow")
    rec = data_dir / "im2rec_pack_pass" / "all.rec"
    assert run("export", rec, tmp_path / "p", "--format", "parquet", "--shard-size", "60KB").exit_code == 0
    shards = sorted((tmp_path / "p").glob("*.parquet"))
    assert len(shards) > 1
    shards[-1].unlink()
    result = run("import", tmp_path / "p", tmp_path / "x.rec")
    assert result.exit_code == 1 and result.stderr == f"Error: {shards[-1]}: no such file: {tmp_path / 'p' / 'im2rec.json'} lists it (a shard lost in the copy?)\n"


def test_parquet_shards_are_of_the_size_asked(real_size_folders, tmp_path):
    """The trial saw [228, 1, 229, 2, ...] rows per file: a one-row file after each full one."""
    pq = pytest.importorskip("pyarrow.parquet")
    folder = real_size_folders["imagenet"]
    assert run("list", folder, tmp_path / "t").exit_code == 0
    assert run("pack", tmp_path / "t.lst", folder, "-q").exit_code == 0
    assert run("export", tmp_path / "t.rec", tmp_path / "p", "--format", "parquet", "--shard-size", "300KB").exit_code == 0
    rows = [pq.ParquetFile(p).metadata.num_rows for p in sorted((tmp_path / "p").glob("*.parquet"))]
    assert sum(rows) == 20 and len(rows) > 2 and min(rows[:-1]) >= 2, rows
    sizes = [p.stat().st_size for p in sorted((tmp_path / "p").glob("*.parquet"))]
    assert max(sizes[:-1]) < 300_000 * 1.3 and min(sizes[:-1]) > 300_000 * 0.5, sizes
