"""The synthetic corpus generator that benchmarks and examples build their image folders with."""

import subprocess
import sys

import cv2
import numpy as np
import pytest

from im2rec.testing.synthetic import SIZES, CorpusSpec, make_corpus, make_image


@pytest.mark.slow
def test_same_spec_same_pixels_and_classes_differ():
    spec = CorpusSpec(size="imagenet", seed=3)
    a, b = make_image(spec, 1, 7), make_image(spec, 1, 7)
    assert a.dtype == np.uint8 and a.ndim == 3 and np.array_equal(a, b)
    assert not np.array_equal(a, make_image(CorpusSpec(size="imagenet", seed=4), 1, 7))
    lo, hi = SIZES["imagenet"]
    for cls in range(3):
        for i in range(4):
            h, w = make_image(spec, cls, i).shape[:2]
            assert lo <= min(h, w) <= hi and 1.2 <= max(h, w) / min(h, w) <= 1.5
    # a class has its own palette: mean colours of two classes are further apart than within one
    means = {c: [make_image(spec, c, i).reshape(-1, 3).mean(axis=0) for i in range(4)] for c in (0, 1)}
    within = np.mean([np.linalg.norm(means[0][i] - means[0][j]) for i in range(4) for j in range(i + 1, 4)])
    between = np.mean([np.linalg.norm(x - y) for x in means[0] for y in means[1]])
    assert between > within


@pytest.mark.slow
def test_corpus_folder_is_deterministic_and_photo_sized(tmp_path):
    spec = CorpusSpec(classes=2, per_class=4, seed=1)  # 8 images: the fewest that make_corpus hands to a process pool
    cv2.setNumThreads(2)  # this process has used OpenCV's thread pool: its workers must not be forked from it
    cv2.resize(np.zeros((2000, 2000, 3), np.uint8), (999, 999), interpolation=cv2.INTER_AREA)
    assert make_corpus(str(tmp_path / "a"), spec, workers=2)[0] == 8
    assert make_corpus(str(tmp_path / "b"), spec, workers=1)[0] == 8
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.jpg"))
    assert [str(f) for f in files[:2]] == ["class_0000/img_0000_00000.jpg", "class_0000/img_0000_00001.jpg"] and len(files) == 8
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    sizes = [(tmp_path / "a" / f).stat().st_size for f in files]
    assert 20_000 < np.mean(sizes) < 200_000  # ImageNet's train JPEGs average about 110 KB
    assert make_corpus(str(tmp_path / "a"), spec) == (0, 0)  # existing images are kept
    bigger = CorpusSpec(classes=2, per_class=6, seed=1)
    assert make_corpus(str(tmp_path / "a"), bigger)[0] == 4  # extending adds, never changes


@pytest.mark.parametrize("size", ["large"])
def test_large_photos(size, real_size_folders):
    """The generator's own large JPEGs: those of the session's corpus (conftest.REAL_SIZE), not one more."""
    from im2rec.image import image_info

    files = sorted(real_size_folders[size].rglob("*.jpg"))
    assert len(files) >= 4
    for f in files:
        data = f.read_bytes()
        kind, w, h = image_info(data)
        assert kind == "JPEG" and min(w, h) >= SIZES[size][0]
        assert len(data) > 500_000  # a phone photo's size, not a flat pattern's


@pytest.mark.slow
def test_command_line_then_list_and_pack(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "im2rec.synthetic", str(tmp_path / "img"), "--classes", "3", "--per-class", "4", "--size", "small"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("wrote 12 of 12 images (") and proc.stderr.endswith(f" in 3 classes to {tmp_path / 'img'}\n")
    from click.testing import CliRunner

    from im2rec.cli import main

    runner = CliRunner()
    assert runner.invoke(main, ["list", str(tmp_path / "img"), str(tmp_path / "d"), "-q"]).exit_code == 0
    result = runner.invoke(main, ["pack", str(tmp_path / "d.lst"), str(tmp_path / "img"), "--resize", "32", "-q"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "d.idx").read_text().count("\n") == 12


# --------------------------------------------------------------------------- --faces


def files_of(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_faces_same_arguments_same_bytes_and_layout(tmp_path):
    from im2rec.testing.synthetic import BINS, FaceSpec, make_faces

    spec = FaceSpec(identities=3, per_identity=4, seed=1, pairs=6)
    result = make_faces(str(tmp_path / "a"), spec)
    make_faces(str(tmp_path / "b"), spec)
    a, b = files_of(tmp_path / "a"), files_of(tmp_path / "b")
    assert a == b  # every byte: images, pairs.tsv, train.rec/.idx/property, the .bin sets
    expected_faces = {f"faces/person_{p:04d}/face_{p:04d}_{i:05d}.jpg" for p in range(3) for i in range(4)}
    train = {f"faces_emore/{name}" for name in ("train.rec", "train.idx", "property", *(f"{b}.bin" for b in BINS))}
    assert set(a) == expected_faces | train | {"pairs.tsv"}  # no temporary folder left behind
    assert result.faces == 12 and result.train.images == 12 and result.train.identities == 3
    assert a["faces_emore/property"].strip() == b"3,112,112"
    for rel in expected_faces:
        img = cv2.imdecode(np.frombuffer(a[rel], np.uint8), cv2.IMREAD_UNCHANGED)
        assert img.shape == (112, 112, 3) and a[rel][:3] == b"\xff\xd8\xff"
    lines = [line.split("\t") for line in a["pairs.tsv"].decode().splitlines()]
    assert len(lines) == 6 and all(f"faces/{left}" in expected_faces and f"faces/{right}" in expected_faces for left, right, _ in lines)
    for left, right, same in lines:  # alternately two pictures of one person and of two people
        assert (left.split("/")[0] == right.split("/")[0]) == (same == "1") and left != right
    assert [s for _, _, s in lines] == ["1", "0"] * 3

    other = make_faces(str(tmp_path / "c"), FaceSpec(identities=3, per_identity=4, seed=2, pairs=6))
    assert other.faces == 12 and files_of(tmp_path / "c")["faces/person_0000/face_0000_00000.jpg"] != a["faces/person_0000/face_0000_00000.jpg"]


def test_a_face_keeps_its_identity():
    from im2rec.testing.synthetic import FaceSpec, make_face

    spec = FaceSpec(seed=3)
    assert np.array_equal(make_face(spec, 2, 5), make_face(spec, 2, 5))
    assert not np.array_equal(make_face(spec, 2, 5), make_face(spec, 2, 5, cohort=1))  # another cohort: other people

    def skin(p, i):  # the middle of the face: cheeks and nose, mostly skin
        return make_face(spec, p, i)[50:80, 36:76].reshape(-1, 3).astype(np.float64).mean(axis=0)

    means = {p: [skin(p, i) for i in range(5)] for p in range(4)}
    within = np.mean([np.linalg.norm(m[i] - m[j]) for m in means.values() for i in range(5) for j in range(i + 1, 5)])
    between = np.mean([np.linalg.norm(x - y) for p in range(4) for q in range(p + 1, 4) for x in means[p] for y in means[q]])
    assert between > 1.5 * within


@pytest.mark.slow
def test_faces_list_and_pack_insightface_then_read(tmp_path):
    from click.testing import CliRunner

    from im2rec import RecordDataset
    from im2rec.cli import main
    from im2rec.testing.synthetic import FaceSpec, make_faces

    make_faces(str(tmp_path), FaceSpec(identities=5, per_identity=3, pairs=4))
    runner = CliRunner()
    result = runner.invoke(main, ["list", str(tmp_path / "faces"), str(tmp_path / "data" / "faces")])
    assert result.exit_code == 0, result.output
    assert "15 images" in result.output and "5 classes" in result.output
    out = tmp_path / "out" / "train.rec"
    result = runner.invoke(main, ["pack", str(tmp_path / "data" / "faces.lst"), str(tmp_path / "faces"), str(out), "--resize", "112", "--layout", "insightface", "-q"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "property").read_text().strip() == "5,112,112"
    for rec in (out, tmp_path / "faces_emore" / "train.rec"):
        ds = RecordDataset(str(rec))
        first, end = ds.insightface
        assert end - first == 5 and len(ds) == 15
        assert (ds.identities[:, 1] - ds.identities[:, 0]).tolist() == [3] * 5
        labels = [int(ds[i][1]) for i in range(len(ds))]
        assert labels == [p for p in range(5) for _ in range(3)]
        assert ds[0][0].shape == (112, 112, 3)


@pytest.mark.slow
def test_faces_bin_sets_extract_and_build(tmp_path):
    from click.testing import CliRunner

    from im2rec.cli import main
    from im2rec.testing.synthetic import BINS, FaceSpec, make_faces
    from im2rec.verification import VerificationPairs, load_bin

    make_faces(str(tmp_path), FaceSpec(identities=2, per_identity=2, pairs=8))
    runner = CliRunner()
    for name in BINS:
        images, issame = load_bin(str(tmp_path / "faces_emore" / f"{name}.bin"))
        assert len(images) == 16 and issame == [True, False] * 4
        assert all(images[2 * i] != images[2 * i + 1] for i in range(8))  # a same pair is two different pictures
    lfw = load_bin(str(tmp_path / "faces_emore" / "lfw.bin"))[0]
    assert lfw != load_bin(str(tmp_path / "faces_emore" / "cfp_fp.bin"))[0]  # each set its own people
    result = runner.invoke(main, ["bin", "extract", str(tmp_path / "faces_emore" / "lfw.bin"), str(tmp_path / "lfw")])
    assert result.exit_code == 0, result.output
    assert "extracted 16 images of 8 pairs (4 same)" in result.output
    assert [(tmp_path / "lfw" / f"{i:05d}.jpg").read_bytes() for i in range(16)] == lfw
    assert (tmp_path / "lfw" / "pairs.tsv").read_text().splitlines()[:2] == ["00000.jpg\t00001.jpg\t1", "00002.jpg\t00003.jpg\t0"]
    a, b, same = VerificationPairs(str(tmp_path / "faces_emore" / "lfw.bin"))[0]
    assert a.shape == b.shape == (112, 112, 3) and same is True

    result = runner.invoke(main, ["bin", "build", str(tmp_path / "pairs.tsv"), str(tmp_path / "faces"), str(tmp_path / "my.bin"), "--resize", "112x112"])
    assert result.exit_code == 0, result.output
    assert "8 pairs (4 same), 16 images" in result.output
    assert load_bin(str(tmp_path / "my.bin"))[1] == [True, False] * 4


@pytest.mark.parametrize("identities, per_identity", [(1, 1), (1, 3), (4, 1)])
def test_faces_of_any_size(tmp_path, identities, per_identity):
    from im2rec import RecordDataset
    from im2rec.testing.synthetic import FaceSpec, make_faces
    from im2rec.verification import load_bin

    make_faces(str(tmp_path), FaceSpec(identities=identities, per_identity=per_identity, pairs=4))
    ds = RecordDataset(str(tmp_path / "faces_emore" / "train.rec"))
    assert len(ds) == identities * per_identity and ds.identities.shape == (identities, 2)
    lines = [line.split("\t") for line in (tmp_path / "pairs.tsv").read_text().splitlines()]
    assert len(lines) == 4 and all((tmp_path / "faces" / x).is_file() and (tmp_path / "faces" / y).is_file() for x, y, _ in lines)
    # one identity: every pair is of one person; one picture each: every pair is of two
    assert {s for _, _, s in lines} == ({"1"} if identities == 1 else {"0"} if per_identity == 1 else {"0", "1"})
    assert load_bin(str(tmp_path / "faces_emore" / "lfw.bin"))[1] == [True, False] * 2


@pytest.mark.slow
def test_faces_command_line(tmp_path, capsys):
    from im2rec.testing.synthetic import main as synthetic_main

    proc = subprocess.run(
        [sys.executable, "-m", "im2rec.synthetic", str(tmp_path / "set"), "--faces", "--identities", "2", "--per-identity", "3"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(f"wrote 6 faces of 2 identities to {tmp_path / 'set' / 'faces'} ")
    assert "6 faces of 2 other identities to " in proc.stderr and "lfw.bin" in proc.stderr
    assert len(list((tmp_path / "set" / "faces").rglob("*.jpg"))) == 6
    assert (tmp_path / "set" / "faces_emore" / "agedb_30.bin").is_file()

    for argv, message in [
        (["--faces", "--classes", "3"], "--classes: not with --faces"),
        (["--faces", "--size", "small", "--workers", "2"], "--size, --workers: not with --faces"),
        (["--identities", "3"], "--identities and --per-identity go with --faces"),
        (["--faces", "--per-identity", "0"], "argument --per-identity: must be 1 or more, got 0"),
    ]:
        with pytest.raises(SystemExit) as exc:
            synthetic_main([str(tmp_path / "bad"), *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()  # refused before anything was written


@pytest.mark.slow
def test_readme_face_section_runs_as_written(tmp_path, monkeypatch):
    """Every command of the README's "Face recognition datasets", in order, in an empty folder."""
    import re
    import shlex
    from pathlib import Path

    from click.testing import CliRunner

    from im2rec.cli import main as im2rec_main
    from im2rec.testing.synthetic import main as synthetic_main

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Face recognition datasets", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(bash|python)\n(.*?)```", section, re.S)
    commands = [shlex.split(line, comments=True) for kind, text in blocks if kind == "bash" for line in text.splitlines()]
    commands = [c for c in commands if c]
    assert commands[0][:3] == ["python", "-m", "im2rec.synthetic"] and len(commands) >= 8
    monkeypatch.chdir(tmp_path)
    for command in commands:
        if command[:3] == ["python", "-m", "im2rec.synthetic"]:
            synthetic_main(command[3:])
        else:
            assert command[0] == "im2rec", command
            result = CliRunner().invoke(im2rec_main, command[1:])
            assert result.exit_code == 0, (command, result.output)
    for kind, text in blocks:
        if kind == "python":
            exec(compile(text, "README.md", "exec"), {})
    assert (tmp_path / "all" / "property").read_text().strip() == "40,112,112"  # the faces_emore stand-in + your own


@pytest.mark.parametrize("given,said", [("0", "must be 1 or more, got 0"), ("x", "not a whole number: 'x'")])
def test_counts_below_one_are_refused(tmp_path, capsys, given, said):
    """A new user's `--classes 0` wrote '0 of 0 images' and exited 0."""
    from im2rec.testing.synthetic import main as synthetic_main

    with pytest.raises(SystemExit) as e:
        synthetic_main([str(tmp_path / "x"), "--classes", given])
    assert e.value.code == 2 and capsys.readouterr().err.endswith(f"python -m im2rec.synthetic: error: argument --classes: {said}\n")
    assert not (tmp_path / "x").exists()
