"""Scale out: parts, merge, size-limited shards, and Dask."""

import json
import struct
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import run

from im2rec import recordio
from im2rec.cli import main
from im2rec.dataset import RecordDataset
from im2rec.lst import ListEntry, read_lst, write_lst
from im2rec.packing.shards import part_path
from im2rec.text import parse_size


@pytest.fixture(scope="module")
def job(tmp_path_factory, data_dir):
    """A 70-entry list over the golden tree (each image five times, one missing file), and a local pack of it."""
    d = tmp_path_factory.mktemp("scale")
    entries = read_lst(data_dir / "im2rec" / "all.lst")
    big = [ListEntry(c * 100 + e.index, e.labels, e.path) for c in range(5) for e in entries]
    big[17] = ListEntry(big[17].index, big[17].labels, "cats/missing.jpg")
    write_lst(d / "big.lst", big)
    result = run("pack", d / "big.lst", data_dir / "tree", d / "whole.rec", "--resize", "40", "--workers", "2")
    assert result.exit_code == 0, result.output
    return d / "big.lst", data_dir / "tree", d


def same_as_whole(out, whole_dir):
    for ext in ("rec", "idx", "failed.tsv"):
        assert (out.parent / f"{out.stem}.{ext}").read_bytes() == (whole_dir / f"whole.{ext}").read_bytes(), ext


def test_parts_run_one_by_one_then_merged(job, tmp_path):
    lst, root, d = job
    for i in range(3):
        result = run("pack", lst, root, tmp_path / "out.rec", "--resize", "40", "--num-parts", "3", "--part-index", i, "--workers", "1")
        assert result.exit_code == 0, result.output
    sizes = [len((tmp_path / f"out-0000{i}-of-00003.idx").read_text().splitlines()) for i in range(3)]
    assert sizes == [22, 23, 24]  # entries [0, 23), [23, 46), [46, 70); one missing image in part 0
    parts = sorted(str(p) for p in tmp_path.glob("out-*-of-00003.rec"))[::-1]  # any order on the command line
    result = run("merge", tmp_path / "out.rec", *parts)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"merged 3 parts into {tmp_path / 'out.rec'}: 69 records, {(tmp_path / 'out.rec').stat().st_size / 1e6:,.1f} MB\n"
    same_as_whole(tmp_path / "out.rec", d)
    assert run("merge", tmp_path / "new" / "out.rec", *parts, "-q").exit_code == 0  # a new output folder
    same_as_whole(tmp_path / "new" / "out.rec", d)
    assert run("merge", tmp_path / "quoted" / "out.rec", str(tmp_path / "out-*-of-00003.rec"), "-q").exit_code == 0  # a glob the shell left alone
    same_as_whole(tmp_path / "quoted" / "out.rec", d)


def test_part_names_and_slices():
    assert part_path("data/train.rec", 1, 3) == "data/train-00001-of-00003.rec"


def test_merge_needs_every_part(job, tmp_path):
    lst, root, _ = job
    for i in (0, 2):
        run("pack", lst, root, tmp_path / "out.rec", "--pass-through", "--num-parts", "3", "--part-index", i)
    result = run("merge", tmp_path / "out.rec", tmp_path / "out-00000-of-00003.rec", tmp_path / "out-00002-of-00003.rec")
    assert result.exit_code == 1
    assert result.stderr == "Error: missing part(s) 1 of 3: merge needs every part (or name them all explicitly)\n"
    assert not (tmp_path / "out.rec").exists()


def test_merge_refuses_repeated_keys(job, tmp_path):
    lst, root, _ = job
    run("pack", lst, root, tmp_path / "a.rec", "--pass-through")
    run("pack", lst, root, tmp_path / "b.rec", "--pass-through")
    result = run("merge", tmp_path / "m.rec", tmp_path / "a.rec", tmp_path / "b.rec")
    assert result.exit_code == 1 and result.stderr == "Error: key 0 appears in more than one part: these are not parts of one list\n"


def test_part_options_are_checked():
    assert "--num-parts needs --part-index" in run("pack", __file__, ".", "--num-parts", "3").stderr
    assert "2 is not below --num-parts 2" in run("pack", __file__, ".", "--num-parts", "2", "--part-index", "2").stderr


def test_a_part_resumes_alone(job, tmp_path):
    lst, root, d = job
    args = ["--resize", "40", "--num-parts", "2"]
    assert run("pack", lst, root, tmp_path / "out.rec", *args, "--part-index", "0").exit_code == 0
    assert run("pack", lst, root, tmp_path / "out.rec", *args, "--part-index", "1").exit_code == 0
    again = run("pack", lst, root, tmp_path / "out.rec", *args, "--part-index", "1", "--resume")
    assert again.stdout.endswith("is already complete: nothing to resume\n")
    assert run("merge", tmp_path / "out.rec", *tmp_path.glob("out-*.rec")).exit_code == 0
    same_as_whole(tmp_path / "out.rec", d)


# --------------------------------------------------------------------------- shards


def test_parse_size():
    assert parse_size("1GB") == 10**9 and parse_size("500MB") == 500 * 10**6
    assert parse_size("64MiB") == 64 * 2**20 and parse_size("12345") == 12345 and parse_size("1.5 kb") == 1500
    with pytest.raises(ValueError, match=r"^'big' is not a size: use bytes or a unit such as 500MB, 1GB, 64MiB$"):
        parse_size("big")


def test_shard_size_splits_and_reads_back_as_one(job, tmp_path):
    lst, root, d = job
    result = run("pack", lst, root, tmp_path / "s.rec", "--resize", "40", "--shard-size", "40KB", "--workers", "2")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "s.shards.json").read_text())
    assert len(manifest["shards"]) > 3 and manifest["records"] == 69
    for shard in manifest["shards"]:
        assert (tmp_path / shard["rec"]).stat().st_size == shard["bytes"] <= 40_000
    assert f"into {len(manifest['shards'])} shards listed in {tmp_path / 's.shards.json'}" in result.stdout
    sharded, whole = RecordDataset(tmp_path / "s.shards.json", mode="raw"), RecordDataset(d / "whole.rec", mode="raw")
    assert len(sharded) == len(whole) == 69
    assert [sharded[i] for i in range(69)] == [whole[i] for i in range(69)]
    # The shards, concatenated, are the single-file output.
    blob = b"".join((tmp_path / s["rec"]).read_bytes() for s in manifest["shards"])
    assert blob == (d / "whole.rec").read_bytes()
    assert (tmp_path / "s.failed.tsv").read_bytes() == (d / "whole.failed.tsv").read_bytes()


def test_shards_into_a_folder_that_does_not_exist_yet(job, tmp_path):
    """The README's form (a new output folder), with default options but the size."""
    lst, root, d = job
    result = run("pack", lst, root, tmp_path / "new" / "s.rec", "--resize", "40", "--shard-size", "40KB")
    assert result.exit_code == 0, result.output
    shards = json.loads((tmp_path / "new" / "s.shards.json").read_text())["shards"]
    assert b"".join((tmp_path / "new" / s["rec"]).read_bytes() for s in shards) == (d / "whole.rec").read_bytes()


def test_shard_outputs_are_not_overwritten(job, tmp_path):
    lst, root, _ = job
    assert run("pack", lst, root, tmp_path / "s.rec", "--pass-through", "--shard-size", "1MB").exit_code == 0
    result = run("pack", lst, root, tmp_path / "s.rec", "--pass-through", "--shard-size", "1MB")
    assert result.exit_code == 1 and result.stderr == f"Error: {tmp_path / 's.shards.json'} exists: pass --overwrite to replace it\n"
    (tmp_path / "t-00000.rec.partial").write_bytes(b"")  # what a killed --shard-size run leaves
    result = run("pack", lst, root, tmp_path / "t.rec", "--pass-through", "--shard-size", "1MB")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {tmp_path / 't-00000.rec.partial'} is left from an interrupted --shard-size run, which cannot be resumed: pass --overwrite to start again\n"
    assert run("pack", lst, root, tmp_path / "s.rec", "--pass-through", "--shard-size", "100KB", "--overwrite").exit_code == 0
    assert len(json.loads((tmp_path / "s.shards.json").read_text())["shards"]) > 1


def test_a_record_larger_than_the_shard_size_gets_its_own_shard(job, tmp_path):
    lst, root, _ = job
    assert run("pack", lst, root, tmp_path / "t.rec", "--pass-through", "--shard-size", "100").exit_code == 0
    manifest = json.loads((tmp_path / "t.shards.json").read_text())
    assert len(manifest["shards"]) == 69 and {s["records"] for s in manifest["shards"]} == {1}


# --------------------------------------------------------------------------- Dask


@pytest.mark.slow
@pytest.mark.xdist_group("dask")  # under pytest-xdist: one process, so one session cluster
def test_dask_local_cluster_merges_to_identical_output(job, tmp_path, dask_cluster):
    lst, root, d = job
    proc = subprocess.run(
        [sys.executable, "-m", "im2rec", "pack", lst, root, tmp_path / "dk.rec", "--resize", "40", "--dask", dask_cluster, "--num-parts", "4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "with 4 Dask tasks on 2 workers" in proc.stdout and "1 failed (1 missing)" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dk.failed.tsv", "dk.idx", "dk.rec"]  # parts merged, then removed
    same_as_whole(tmp_path / "dk.rec", d)


@pytest.mark.slow
@pytest.mark.xdist_group("dask")
def test_dask_failed_part_is_named_with_its_rerun_command(job, tmp_path, dask_cluster):
    lst, root, _ = job
    (tmp_path / "dk-00001-of-00002.rec").write_bytes(b"in the way")  # part 1 cannot be written
    proc = subprocess.run(
        [sys.executable, "-m", "im2rec", "pack", lst, root, tmp_path / "dk.rec", "--pass-through", "--dask", dask_cluster, "--num-parts", "2", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "Error: 1 of 2 parts failed; the others are kept" in proc.stderr
    assert f"part 1: {tmp_path / 'dk-00001-of-00002.rec'} exists: pass --overwrite to replace it; rerun it alone with: im2rec pack" in proc.stderr
    assert "--num-parts 2 --part-index 1" in proc.stderr
    assert (tmp_path / "dk-00000-of-00002.rec").exists() and not (tmp_path / "dk.rec").exists()


@pytest.mark.slow
def test_dask_default_parts_into_a_new_folder(job, tmp_path):
    """The README's form: no --num-parts (4 parts per worker, one per 100 images), an output folder that does not exist yet."""
    pytest.importorskip("distributed")
    lst, root, _d = job
    entries = read_lst(lst)
    big = [ListEntry(r * 10_000 + e.index, e.labels, e.path) for r in range(5) for e in entries]  # 350 lines: 3 parts
    write_lst(tmp_path / "big.lst", big)
    assert run("pack", tmp_path / "big.lst", root, tmp_path / "local.rec", "--pass-through", "-q").exit_code == 0
    out = tmp_path / "new" / "folder" / "dk.rec"
    proc = subprocess.run(
        [sys.executable, "-m", "im2rec", "pack", tmp_path / "big.lst", root, out, "--pass-through", "--dask", "local", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "with 3 Dask tasks on 2 workers" in proc.stdout
    assert sorted(p.name for p in out.parent.iterdir()) == ["dk.failed.tsv", "dk.idx", "dk.rec"]
    for ext in ("rec", "idx", "failed.tsv"):
        assert (out.parent / f"dk.{ext}").read_bytes() == (tmp_path / f"local.{ext}").read_bytes(), ext


def dali_samples(recs, idx):
    """What DALI's fn.readers.mxnet reads: offsets sorted, global over the files concatenated in order
    (RecordIOLoader::ReadIndexFile), each sample the first record of its byte range."""
    blob = b"".join(r.read_bytes() for r in recs)
    offsets = sorted(int(line.split()[1]) for line in idx.read_text().splitlines())
    ends = offsets[1:] + [len(blob)]
    out = []
    for start, end in zip(offsets, ends):
        magic, lrec = struct.unpack_from("<II", blob, start)
        assert magic == 0xCED7230A and lrec >> 29 == 0, start  # one whole record at each offset
        out.append(blob[start + 8 : start + 8 + (lrec & ((1 << 29) - 1))])
        assert end - start >= 8 + (lrec & ((1 << 29) - 1))
    return out


def test_combined_index_for_dali_over_shards(job, tmp_path):
    lst, root, _ = job
    assert run("pack", lst, root, tmp_path / "s.rec", "--pass-through", "--shard-size", "150KB", "-q").exit_code == 0
    shards = sorted(tmp_path.glob("s-*.rec"))
    assert len(shards) >= 3
    result = run("index", "--combined", tmp_path / "dali" / "s.idx", *shards)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{tmp_path / 'dali' / 's.idx'}: 69 entries for {len(shards)} files\n"
    expected = []
    for shard in shards:
        with recordio.RecordReader(shard, shard.with_suffix(".idx")) as r:
            expected += [bytes(r.read(k)) for k in r.keys()]
    assert dali_samples(shards, tmp_path / "dali" / "s.idx") == expected
    keys = [int(line.split("\t")[0]) for line in (tmp_path / "dali" / "s.idx").read_text().splitlines()]
    assert keys == [int(line.split("\t")[0]) for s in shards for line in s.with_suffix(".idx").read_text().splitlines()]
    # the first shard's own .idx is what DALI would silently read alone
    assert len(dali_samples(shards[:1], shards[0].with_suffix(".idx"))) < 69

    # a shard without its .idx is scanned; counter keys number across the files
    shards[1].with_suffix(".idx").unlink()
    result = run("index", "--combined", tmp_path / "c.idx", *shards, "--keys", "counter", "-q")
    assert result.exit_code == 0, result.output
    assert dali_samples(shards, tmp_path / "c.idx") == expected
    assert [int(line.split("\t")[0]) for line in (tmp_path / "c.idx").read_text().splitlines()] == list(range(69))
    result = run("index", "--combined", tmp_path / "c.idx", *shards)
    assert result.exit_code == 1 and result.stderr == f"Error: {tmp_path / 'c.idx'} exists: pass --overwrite to replace it\n"


def test_index_of_several_files_needs_combined(job, tmp_path):
    result = run("index", tmp_path / "whole.rec", tmp_path / "whole.rec")
    assert result.exit_code == 2  # the path check fires first: tmp_path has no whole.rec
    _, _, d = job
    result = run("index", d / "whole.rec", d / "whole.rec")
    assert result.exit_code == 2 and result.stderr.splitlines()[-1] == "Error: 2 files given: index one REC at a time, or all of them as one with --combined OUT.idx"


def test_a_part_index_without_num_parts_says_what_is_missing(data_dir, tmp_path):
    result = CliRunner().invoke(main, ["pack", str(data_dir / "im2rec" / "all.lst"), str(data_dir / "tree"), str(tmp_path / "o.rec"), "--part-index", "1"])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == "Error: Invalid value for '--part-index': 1 is not below --num-parts 1 (give the number of parts with --num-parts N)"
