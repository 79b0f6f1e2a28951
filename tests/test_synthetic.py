"""The synthetic corpus generator that benchmarks and examples build their image folders with."""

import subprocess
import sys

import cv2
import numpy as np
import pytest

from im2rec.synthetic import SIZES, CorpusSpec, make_corpus, make_image


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


def test_corpus_folder_is_deterministic_and_photo_sized(tmp_path):
    spec = CorpusSpec(classes=2, per_class=6, seed=1)
    cv2.setNumThreads(2)  # this process has used OpenCV's thread pool: its workers must not be forked from it
    cv2.resize(np.zeros((2000, 2000, 3), np.uint8), (999, 999), interpolation=cv2.INTER_AREA)
    assert make_corpus(str(tmp_path / "a"), spec, workers=2)[0] == 12
    assert make_corpus(str(tmp_path / "b"), spec, workers=1)[0] == 12
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.jpg"))
    assert [str(f) for f in files[:2]] == ["class_0000/img_0000_00000.jpg", "class_0000/img_0000_00001.jpg"] and len(files) == 12
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    sizes = [(tmp_path / "a" / f).stat().st_size for f in files]
    assert 20_000 < np.mean(sizes) < 200_000  # ImageNet's train JPEGs average about 110 KB
    assert make_corpus(str(tmp_path / "a"), spec) == (0, 0)  # existing images are kept
    bigger = CorpusSpec(classes=2, per_class=8, seed=1)
    assert make_corpus(str(tmp_path / "a"), bigger)[0] == 4  # extending adds, never changes


@pytest.mark.parametrize("size", ["large"])
def test_large_photos(size):
    img = make_image(CorpusSpec(size=size), 0, 0)
    assert min(img.shape[:2]) >= SIZES[size][0]
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert len(buf) > 500_000  # a phone photo's size, not a flat pattern's


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
