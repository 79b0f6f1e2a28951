"""Face-recognition datasets: insightface's layout written, converted, combined; .bin verification sets.

The reference files in tests/data/insightface/ were written by insightface's own code
(RecBuilder, shuffle_rec.py, its .bin writers) under MXNet 1.9.1; see their README.
"""

import ast
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from conftest import run

from im2rec import recordio
from im2rec.lst import ListEntry, read_lst, write_lst

GOLDEN_PERMUTATION = [11, 2, 9, 19, 15, 17, 7, 5, 3, 6, 14, 10, 8, 18, 12, 4, 1, 16, 13]  # README: np.random.seed(0)


@pytest.fixture(scope="module")
def face(data_dir):
    return data_dir / "insightface"


def same(a, b):
    return a.read_bytes() == b.read_bytes()


def insightface_view(rec):
    """What insightface's readers make of a file: MXFaceDataset's keys and labels (arcface_torch/dataset.py)
    and FaceImageIter's header0 and id2range (arcface_mxnet/image_iter.py), their logic transcribed."""
    r = recordio.MXIndexedRecordIO(str(rec)[:-4] + ".idx", str(rec), "r")
    header, _ = recordio.unpack(r.read_idx(0))
    assert header.flag > 0
    header0 = (int(header.label[0]), int(header.label[1]))
    keys = list(range(1, header0[0]))
    labels = []
    for key in keys:
        h, img = recordio.unpack(r.read_idx(key))
        label = h.label if not isinstance(h.label, np.ndarray) else h.label[0]
        labels.append(int(label))
        assert img[:3] == b"\xff\xd8\xff"
    id2range = {}
    for identity in range(*header0):
        h, _ = recordio.unpack(r.read_idx(identity))
        id2range[identity] = (int(h.label[0]), int(h.label[1]))
    r.close()
    return header0, keys, labels, id2range


# --------------------------------------------------------------------------- 1. pack --layout insightface


def test_pack_insightface_layout_gives_recbuilder_s_bytes(face, tmp_path):
    result = run("pack", face / "train.lst", face, tmp_path / "out" / "train.rec", "--layout", "insightface", "--pass-through")
    assert result.exit_code == 0, result.output
    assert ", insightface layout with 5 identities (" in result.stdout
    for name in ("train.rec", "train.idx", "property"):
        assert same(tmp_path / "out" / name, face / name), name
    assert sorted(os.listdir(tmp_path / "out")) == ["property", "train.idx", "train.rec"]  # nothing failed: no failure list
    header0, keys, labels, id2range = insightface_view(tmp_path / "out" / "train.rec")
    assert header0 == (20, 25) and keys == list(range(1, 20))
    assert labels == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4]
    assert id2range == {20: (1, 5), 21: (5, 8), 22: (8, 13), 23: (13, 16), 24: (16, 20)}
    from im2rec import RecordDataset

    ds = RecordDataset(tmp_path / "out" / "train.rec")
    assert len(ds) == 19 and ds.insightface == (20, 25) and [int(ds[i][1]) for i in range(19)] == labels


def test_pack_insightface_groups_identities_and_leaves_failures_out(face, tmp_path):
    """A shuffled list is grouped by identity (list order kept within each); a failed image is left out of its range."""
    entries = read_lst(face / "train.lst")
    shuffled = [entries[i] for i in [18, 5, 0, 12, 3, 7, 1, 16, 9, 2, 14, 4, 11, 6, 17, 8, 13, 10, 15]]
    shuffled[4] = ListEntry(shuffled[4].index, shuffled[4].labels, "images/0/missing.jpg")  # identity 0
    write_lst(tmp_path / "s.lst", shuffled)
    result = run("pack", tmp_path / "s.lst", face, tmp_path / "f" / "train.rec", "--layout", "insightface", "--pass-through", "--workers", "2")
    assert result.exit_code == 0, result.output
    assert "packed 18 of 19 images" in result.stdout and "1 failed (1 missing)" in result.stdout
    header0, _keys, labels, id2range = insightface_view(tmp_path / "f" / "train.rec")
    assert header0 == (19, 24) and labels == sorted(labels) and labels.count(0) == 3
    assert id2range == {19: (1, 4), 20: (4, 7), 21: (7, 12), 22: (12, 15), 23: (15, 19)}
    failed = (tmp_path / "f" / "train.failed.tsv").read_text().splitlines()
    assert len(failed) == 2 and "images/0/missing.jpg" in failed[1]
    expected = [(face / e.path).read_bytes() for label in range(5) for e in shuffled if e.labels[0] == label and "missing" not in e.path]
    with recordio.RecordReader(tmp_path / "f" / "train.rec", tmp_path / "f" / "train.idx") as r:
        assert [bytes(recordio.unpack(r.read(k))[1]) for k in range(1, 19)] == expected  # list order within each identity
    result = run("pack", tmp_path / "s.lst", face, tmp_path / "r" / "train.rec", "--layout", "insightface", "--resize", "56", "-q")
    assert result.exit_code == 0 and (tmp_path / "r" / "property").read_text() == "5,56,56\n"  # the output images' size


def test_pack_insightface_needs_integer_identities(face, tmp_path):
    (tmp_path / "bad.lst").write_text("1\t0.000000\timages/0/0.jpg\n2\t1.500000\timages/0/1.jpg\n")
    result = run("pack", tmp_path / "bad.lst", face, tmp_path / "o.rec", "--layout", "insightface")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {tmp_path / 'bad.lst'}:2: label 1.500000 is not an identity id: the insightface layout needs integer labels from 0 to 16777215\n"
    )
    assert not list(tmp_path.glob("o*"))


def test_pack_insightface_resume_and_existing_outputs(face, tmp_path):
    args = ["pack", face / "train.lst", face, tmp_path / "train.rec", "--layout", "insightface", "--pass-through"]
    assert run(*args).exit_code == 0
    result = run(*args)
    assert (result.exit_code, result.stderr) == (1, f"Error: {tmp_path / 'train.rec'} exists: pass --overwrite to replace it\n")
    result = run(*args, "--resume")
    assert result.exit_code == 0 and "already complete" in result.stdout
    (tmp_path / "train.images.rec.partial").write_bytes(b"")  # an interrupted run's images, before any record
    shutil.copy(face / "train.lst", tmp_path / "copy.lst")
    assert run(*args, "--overwrite").exit_code == 0
    assert same(tmp_path / "train.rec", face / "train.rec")


def test_pack_insightface_in_parts_then_merge(face, tmp_path):
    for i in range(3):
        result = run("pack", face / "train.lst", face, tmp_path / "train.rec", "--layout", "insightface", "--pass-through", "--num-parts", 3, "--part-index", i)
        assert result.exit_code == 0, result.output
    parts = sorted(tmp_path.glob("train-*-of-00003.rec"))
    assert [(tmp_path / f"train-0000{i}-of-00003.layout").read_text() for i in range(3)] == ["insightface\n"] * 3
    result = run("merge", tmp_path / "train.rec", *parts)  # the layout travels with the parts: no --layout needed
    assert result.exit_code == 0, result.output
    assert result.stdout == f"merged 3 parts into {tmp_path / 'train.rec'}: 19 images of 5 identities (insightface layout), 0.1 MB\n"
    for name in ("train.rec", "train.idx", "property"):
        assert same(tmp_path / name, face / name), name
    result = run("merge", tmp_path / "again" / "train.rec", *parts, "--layout", "insightface")
    assert result.exit_code == 0 and same(tmp_path / "again" / "train.rec", face / "train.rec")
    result = run("merge", tmp_path / "plain.rec", *parts, "--layout", "plain")  # asked for: the images in list order
    assert result.exit_code == 0 and result.stdout.startswith(f"merged 3 parts into {tmp_path / 'plain.rec'}: 19 records")
    (tmp_path / "train-00001-of-00003.layout").unlink()
    result = run("merge", tmp_path / "mixed.rec", *parts)
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: the parts were packed for different layouts (insightface: {parts[0]}, plain: {parts[1]}): merge the parts of one run\n"
    )
    assert not (tmp_path / "mixed.rec").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("dask")  # under pytest-xdist: one process, so one session cluster
def test_pack_insightface_with_dask_defaults(face, tmp_path, dask_cluster):
    entries = read_lst(face / "train.lst")
    big = [ListEntry(r * 100 + e.index, (e.labels[0] + 5 * r,), e.path) for r in range(12) for e in entries]  # 228 lines: 2 parts
    write_lst(tmp_path / "big.lst", big)
    assert run("pack", tmp_path / "big.lst", face, tmp_path / "local" / "train.rec", "--layout", "insightface", "--pass-through", "-q").exit_code == 0
    proc = subprocess.run(
        [sys.executable, "-m", "im2rec", "pack", tmp_path / "big.lst", face, tmp_path / "dk" / "train.rec", "--layout", "insightface", "--pass-through", "--dask", dask_cluster],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "insightface layout with 60 identities" in proc.stdout
    for name in ("train.rec", "train.idx", "property"):
        assert same(tmp_path / "dk" / name, tmp_path / "local" / name), name
    assert sorted(os.listdir(tmp_path / "dk")) == ["property", "train.idx", "train.rec"]


# --------------------------------------------------------------------------- 2. convert


def test_convert_to_plain_is_shuffle_rec_py_s_output(face, tmp_path):
    result = run("convert", face / "train.rec", tmp_path / "plain.rec", "--layout", "plain", "--shuffle", "--seed", "0")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"wrote 19 images to {tmp_path / 'plain.rec'} (plain layout); ")
    assert same(tmp_path / "plain.rec", face / "plain.rec") and same(tmp_path / "plain.idx", face / "plain.idx")
    assert not (tmp_path / "property").exists()


def test_convert_to_plain_in_order(face, tmp_path):
    assert run("convert", face / "train.rec", tmp_path / "p.rec", "--layout", "plain", "-q").exit_code == 0
    theirs = {}
    with recordio.RecordReader(face / "plain.rec", face / "plain.idx") as r:
        for j, key in enumerate(r.keys()):
            theirs[GOLDEN_PERMUTATION[j]] = bytes(r.read(key))
    with recordio.RecordReader(tmp_path / "p.rec", tmp_path / "p.idx") as r:
        assert r.keys() == list(range(19))
        for key in r.keys():  # key i holds train.rec's image key i + 1: plain.rec's record j with permutation[j] == i + 1
            assert bytes(r.read(key)) == theirs[key + 1]


def test_convert_plain_back_to_insightface(face, tmp_path):
    assert run("convert", face / "train.rec", tmp_path / "p.rec", "--layout", "plain", "-q").exit_code == 0
    assert run("convert", tmp_path / "p.rec", tmp_path / "f" / "train.rec", "--layout", "insightface", "-q").exit_code == 0
    for name in ("train.rec", "train.idx", "property"):
        assert same(tmp_path / "f" / name, face / name), name


def test_convert_copies_multi_label_and_multi_part_records(tmp_path):
    """face2rec2-style records ([label, 1.0], flag 2) become scalar labels; an image holding the magic keeps its bytes."""
    magic_image = b"\xff\xd8\xff\xe0" + struct.pack("<I", recordio.MAGIC) * 3 + b"rest"
    with recordio.MXIndexedRecordIO(str(tmp_path / "m.idx"), str(tmp_path / "m.rec"), "w") as w:
        w.write_idx(0, recordio.pack(recordio.IRHeader(0, [3.0, 1.0], 10, 0), b"\xff\xd8\xffplain"))
        w.write_idx(1, recordio.pack(recordio.IRHeader(0, 1.0, 11, 0), magic_image))
        w.write_idx(2, recordio.pack(recordio.IRHeader(0, [1.0, 1.0], 12, 0), magic_image))
    assert run("convert", tmp_path / "m.rec", tmp_path / "f" / "t.rec", "--layout", "insightface", "-q").exit_code == 0
    with recordio.RecordReader(tmp_path / "f" / "t.rec", tmp_path / "f" / "t.idx") as r:
        got = {k: recordio.unpack(r.read(k)) for k in r.keys()}
    assert [(h, bytes(img)) for h, img in (got[1], got[2], got[3])] == [
        (recordio.IRHeader(0, 1.0, 1, 0), magic_image),
        (recordio.IRHeader(0, 1.0, 2, 0), magic_image),
        (recordio.IRHeader(0, 3.0, 3, 0), b"\xff\xd8\xffplain"),
    ]
    assert list(got[4][0].label) == [1.0, 3.0] and list(got[5][0].label) == [3.0, 4.0] and list(got[0][0].label) == [4.0, 6.0]
    assert (tmp_path / "f" / "property").read_text() == "4,0,0\n"  # no readable image size


def test_convert_errors(face, tmp_path):
    result = run("convert", face / "train.rec", face / "train.rec", "--layout", "plain")
    assert result.exit_code == 1 and result.stderr == f"Error: {face / 'train.rec'}: the output cannot be the input\n"
    result = run("convert", face / "train.rec", tmp_path / "x.rec", "--layout", "insightface", "--shuffle")
    assert (result.exit_code, result.stderr) == (1, "Error: --shuffle applies to the plain layout: the insightface layout groups images by identity\n")
    with recordio.MXIndexedRecordIO(str(tmp_path / "h.idx"), str(tmp_path / "h.rec"), "w") as w:
        w.write_idx(7, recordio.pack(recordio.IRHeader(0, 0.5, 7, 0), b"x"))
    result = run("convert", tmp_path / "h.rec", tmp_path / "f.rec", "--layout", "insightface")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {tmp_path / 'h.rec'}: key 7 (byte 0) has label 0.5: the insightface layout needs integer identity ids from 0 to 16777215\n"
    assert not (tmp_path / "f.rec").exists() and not (tmp_path / "f.rec.partial").exists()


# --------------------------------------------------------------------------- 3. combine


def test_combine_offsets_labels_and_maps_them(face, tmp_path):
    result = run("combine", tmp_path / "all" / "train.rec", face / "train.rec", face / "plain.rec")
    assert result.exit_code == 0, result.output
    assert "(plain layout)" in result.stdout  # plain.rec is plain: the default follows
    assert result.stdout.endswith(f"label map: {tmp_path / 'all' / 'train.sources.tsv'} (10 classes)\n")
    lines = (tmp_path / "all" / "train.sources.tsv").read_text().splitlines()
    assert lines[0] == "source\told_label\tnew_label"
    assert lines[1:] == [f"{face / 'train.rec'}\t{i}\t{i}" for i in range(5)] + [f"{face / 'plain.rec'}\t{i}\t{i + 5}" for i in range(5)]
    with recordio.RecordReader(tmp_path / "all" / "train.rec", tmp_path / "all" / "train.idx") as r:
        assert r.keys() == list(range(38))
        records = [recordio.unpack(r.read(k)) for k in r.keys()]
    with recordio.RecordReader(face / "plain.rec", face / "plain.idx") as p:
        second = [recordio.unpack(p.read(k)) for k in p.keys()]
    assert [float(h.label) for h, _ in records[19:]] == [float(h.label) + 5 for h, _ in second]
    assert [bytes(img) for _, img in records[19:]] == [bytes(img) for _, img in second]  # payloads byte for byte


def test_combine_two_face_sets_into_insightface(face, tmp_path):
    result = run("combine", tmp_path / "c" / "train.rec", face / "train.rec", face / "train.rec")
    assert result.exit_code == 0, result.output
    assert "(insightface layout, 10 identities" in result.stdout
    header0, _keys, labels, id2range = insightface_view(tmp_path / "c" / "train.rec")
    assert header0 == (39, 49) and labels == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4] + [5, 5, 5, 5, 6, 6, 6, 7, 7, 7, 7, 7, 8, 8, 8, 9, 9, 9, 9]
    assert (tmp_path / "c" / "property").read_text() == "10,112,112\n"
    result = run("combine", tmp_path / "k" / "train.rec", face / "train.rec", face / "train.rec", "--labels", "keep", "-q")
    header0, _keys, labels, id2range = insightface_view(tmp_path / "k" / "train.rec")
    assert header0 == (39, 44) and id2range[39] == (1, 9)  # identity 0's 4 images from each input, together


# --------------------------------------------------------------------------- 4. .bin verification sets


@pytest.mark.parametrize("name", ["py2.bin", "py3.bin", "ndarray.bin"])
def test_bin_extract_gives_the_original_files(face, tmp_path, name):
    result = run("bin", "extract", face / name, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"extracted 8 images of 4 pairs (2 same) to {tmp_path / 'out'}; list {tmp_path / 'out' / 'pairs.tsv'}\n"
    assert sorted(os.listdir(tmp_path / "out")) == sorted(os.listdir(face / "pairs"))
    for f in os.listdir(face / "pairs"):
        assert same(tmp_path / "out" / f, face / "pairs" / f), f


def test_bin_build_is_read_by_load_bin(face, tmp_path):
    result = run("bin", "build", face / "pairs" / "pairs.tsv", face / "pairs", tmp_path / "lfw.bin")
    assert result.exit_code == 0, result.output
    assert same(tmp_path / "lfw.bin", face / "py3.bin")  # what insightface's own writer gave
    # insightface's load_bin, run as it is (plain pickle.load) on the file we wrote
    code = "import pickle,sys; b,s=pickle.load(open(sys.argv[1],'rb')); print(len(b), s, [len(x) for x in b][:2])"
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "lfw.bin")], capture_output=True, text=True, check=True).stdout
    assert out == "8 [True, False, True, False] [2624, 3031]\n"
    result = run("bin", "build", face / "pairs" / "pairs.tsv", face / "pairs", tmp_path / "small.bin", "--resize", "56x48")
    assert result.exit_code == 0, result.output
    from im2rec import VerificationPairs

    pairs = VerificationPairs(str(tmp_path / "small.bin"))
    assert len(pairs) == 4 and pairs[0][0].shape == (48, 56, 3) and [pairs[i][2] for i in range(4)] == [True, False, True, False]


def test_verification_pairs_reads_all_three_kinds(face):
    import cv2

    from im2rec import VerificationPairs

    expected = cv2.cvtColor(cv2.imread(str(face / "pairs" / "00002.jpg")), cv2.COLOR_BGR2RGB)
    for name in ("py2.bin", "py3.bin", "ndarray.bin"):
        pairs = VerificationPairs(str(face / name))
        a, b, issame = pairs[1]
        assert len(pairs) == 4 and issame is False and np.array_equal(a, expected) and b.shape == (112, 112, 3)
    assert VerificationPairs(str(face / "py3.bin"), mode="bgr")[1][0][..., ::-1].tolist() == expected.tolist()


def test_a_malicious_bin_is_refused_and_nothing_runs(face, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the payload writes evil-bin-ran-*.txt into the current folder
    for argv in (["bin", "extract", face / "evil.bin", tmp_path / "out"], ["bin", "extract", face / "evil.bin", tmp_path / "out2", "-q"]):
        result = run(*argv)
        assert result.exit_code == 1
        assert result.stderr == (
            f"Error: {face / 'evil.bin'}: refused: the pickle asks for __builtin__.open, which a verification set never needs; "
            "loading it with pickle.load would run it (nothing was run)\n"
        )
    from im2rec import Im2recError, VerificationPairs

    with pytest.raises(Im2recError, match=r"^.*/tests/data/insightface/evil\.bin: refused: the pickle asks for __builtin__\.open, which a verification set never needs; loading it with pickle\.load would run it \(nothing was run\)$"):
        VerificationPairs(str(face / "evil.bin"))
    assert sorted(os.listdir(tmp_path)) == []  # no evil-bin-ran-*.txt, no output folder


def test_bin_errors_name_the_file_and_line(face, tmp_path):
    (tmp_path / "p.tsv").write_text("00000.jpg\t00001.jpg\t1\n00002.jpg\t00003.jpg\tmaybe\n")
    result = run("bin", "build", tmp_path / "p.tsv", face / "pairs", tmp_path / "o.bin")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {tmp_path / 'p.tsv'}:2: expected 'left<TAB>right<TAB>issame' with issame 1/0 or true/false, got '00002.jpg\\t00003.jpg\\tmaybe'\n"
    (tmp_path / "q.tsv").write_text("00000.jpg\tnope.jpg\t1\n")
    result = run("bin", "build", tmp_path / "q.tsv", face / "pairs", tmp_path / "o.bin")
    assert result.exit_code == 1 and result.stderr == f"Error: {tmp_path / 'q.tsv'}:1: cannot read {face / 'pairs' / 'nope.jpg'}: No such file or directory\n"
    (tmp_path / "junk.bin").write_bytes(b"not a pickle at all")
    result = run("bin", "extract", tmp_path / "junk.bin", tmp_path / "o")
    assert result.exit_code == 1 and result.stderr.startswith(f"Error: {tmp_path / 'junk.bin'}: not a readable verification set pickle: ")
    assert not (tmp_path / "o.bin").exists()


# --------------------------------------------------------------------------- examples/insightface.py

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "insightface.py")


@pytest.mark.slow
@pytest.mark.parametrize("identities", [1, 2, 3, 6])
def test_insightface_example_runs_on_a_generated_set_of_any_size(tmp_path, identities):
    from im2rec.testing.synthetic import FaceSpec, make_faces

    make_faces(str(tmp_path), FaceSpec(identities=identities, per_identity=2, pairs=2))
    proc = subprocess.run([sys.executable, EXAMPLE, str(tmp_path / "faces_emore" / "train.rec")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == [
        f"{2 * identities} images, {identities} identities",
        "first image: (112, 112, 3), identity 0",
        "images per identity: min 2, median 2, max 2",
    ]
    batch = [ast.literal_eval(line) for line in lines[3:]]  # [(image key, identity), (image key, identity)] per identity
    assert len(batch) == min(4, identities)
    for (k1, label1), (k2, label2) in batch:
        assert label1 == label2 and {k1, k2} <= {2 * label1 + 1, 2 * label1 + 2}  # both images of that identity
    assert len({pair[0][1] for pair in batch}) == len(batch)  # each identity once


@pytest.mark.slow
def test_insightface_example_refuses_a_plain_rec(tmp_path):
    with recordio.RecordWriter(tmp_path / "plain.rec", tmp_path / "plain.idx") as w:
        w.write_idx(0, recordio.pack(recordio.IRHeader(0, 1.0, 0, 0), b"\xff\xd8\xff"))
    proc = subprocess.run([sys.executable, EXAMPLE, str(tmp_path / "plain.rec")], capture_output=True, text=True)
    assert proc.returncode == 1 and "no insightface header at key 0" in proc.stderr
