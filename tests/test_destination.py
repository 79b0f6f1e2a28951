"""packing.destination: where a pack's records go, decided once (``plan``), for every kind of output."""

import os
from collections import Counter

import pytest
from conftest import s3_endpoint, seaweed

from im2rec import storage
from im2rec.errors import OutputExistsError, PackError
from im2rec.outputs import Outputs
from im2rec.packing import PackOptions, PackSummary, plan
from im2rec.packing.distributed import DaskSummary, summary_line


def test_a_local_output_is_written_where_the_user_gets_it(tmp_path):
    out = str(tmp_path / "train.rec")
    p = plan(out, PackOptions())
    assert p.loop == p.final == Outputs.for_rec(out)
    assert (p.earlier, p.lay_out_to, p.staged, p.stream_to) == ("nothing", None, None, None)


def test_a_part_is_written_under_its_part_name(tmp_path):
    p = plan(str(tmp_path / "train.rec"), PackOptions(num_parts=4, part_index=2))
    assert p.loop == p.final == Outputs.for_rec(str(tmp_path / "train-00002-of-00004.rec"))


def test_an_insightface_pack_writes_its_images_then_lays_them_out(tmp_path):
    out = str(tmp_path / "train.rec")
    p = plan(out, PackOptions(layout="insightface"))
    assert p.loop == Outputs.for_rec(str(tmp_path / "train.images.rec")) and p.final == Outputs.for_rec(out)
    assert p.lay_out_to == out and p.earlier == "nothing"


def test_what_an_earlier_run_left_is_read_once(tmp_path):
    out = tmp_path / "train.rec"
    for path in (out, tmp_path / "train.idx"):
        path.write_bytes(b"")
    assert plan(str(out), PackOptions(resume=True)).earlier == "finished"
    (tmp_path / "train.resume.json").write_text("{}")  # the state file: that run did not finish
    assert plan(str(out), PackOptions(resume=True)).earlier == "nothing"
    # insightface: its images written, not laid out yet
    images = [tmp_path / "f.images.rec", tmp_path / "f.images.idx"]
    for path in images:
        path.write_bytes(b"")
    assert plan(str(tmp_path / "f.rec"), PackOptions(layout="insightface", resume=True)).earlier == "records"


def test_refusals_come_before_any_work(tmp_path):
    out = tmp_path / "f.rec"
    out.write_bytes(b"")
    with pytest.raises(OutputExistsError, match=r"^.*/f\.rec exists: pass --overwrite to replace it$"):
        plan(str(out), PackOptions(layout="insightface"))
    with pytest.raises(PackError) as e:
        plan("s3://bucket/out/train.rec", PackOptions(shard_size=1 << 20))
    assert str(e.value) == "s3://bucket/out/train.rec: --shard-size writes local shards only (for now): pack them locally, then copy"


@pytest.mark.slow
@pytest.mark.s3
def test_a_url_output_is_staged_then_uploaded_and_streamed_on_s3(tmp_path, monkeypatch):
    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    with s3_endpoint():
        seaweed().make_bucket("plans")
        p = plan("s3://plans/out/train.rec", PackOptions())
        staging = storage.staging_dir("s3://plans/out/train.rec")
        assert p.loop == p.staged == Outputs.for_rec(os.path.join(staging, "train.rec"))
        assert p.final == Outputs.for_rec("s3://plans/out/train.rec") and p.stream_to == "s3://plans/out/train.rec"
        faces = plan("s3://plans/out/faces.rec", PackOptions(layout="insightface"))
        staging = storage.staging_dir("s3://plans/out/faces.rec")
        assert faces.loop == Outputs.for_rec(os.path.join(staging, "faces.images.rec"))
        assert faces.staged == Outputs.for_rec(os.path.join(staging, "faces.rec")) and faces.final == Outputs.for_rec("s3://plans/out/faces.rec")
        assert faces.lay_out_to == os.path.join(staging, "faces.rec") and faces.stream_to is None  # laid out at the end: uploaded then


def test_the_dask_summary_line_says_the_tasks_and_the_failures(tmp_path):
    part = PackSummary("l.lst", "root", Outputs.for_rec("p.rec"), images=10, packed=9, failures=Counter(missing=1), bytes=2_500_000)
    result = DaskSummary("out/train.rec", 2, parts={0: part, 1: part}, merged=True, seconds=1.25, workers=2)
    assert summary_line(result) == "packed 18 of 20 images into out/train.rec (5.0 MB) with 2 Dask tasks on 2 workers in 1.2 s; 2 failed (2 missing)"
    unmerged = DaskSummary("out/train.rec", 2, parts={0: part}, workers=1)
    assert summary_line(unmerged).startswith("packed 9 of 10 images into 2 parts next to out/train.rec (2.5 MB) with 2 Dask tasks on 1 workers")
