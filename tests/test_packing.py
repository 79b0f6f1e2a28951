"""`im2rec pack`: golden parity with im2rec.py, options, determinism, labels."""

import json
import shutil
import struct
import zlib

import cv2
import numpy as np
import pytest
from conftest import run

from im2rec import recordio
from im2rec.lst import ListEntry, read_lst, write_lst


def records(rec):
    """{key: (header, payload)} of a .rec/.idx pair."""
    with recordio.RecordReader(rec, str(rec)[:-4] + ".idx") as r:
        return {k: recordio.unpack(r.read(k)) for k in r.keys()}


@pytest.mark.parametrize("workers", [1, 3])
def test_pass_through_is_byte_identical_to_im2rec_py(data_dir, tmp_path, workers):
    golden = data_dir / "im2rec_pack_pass"
    result = run("pack", golden / "all.lst", data_dir / "tree", tmp_path / "all.rec", "--pass-through", "--workers", workers)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "all.rec").read_bytes() == (golden / "all.rec").read_bytes()
    assert (tmp_path / "all.idx").read_bytes() == (golden / "all.idx").read_bytes()
    assert not (tmp_path / "all.failed.tsv").exists()  # nothing failed: no failure list


def test_pack_label_is_byte_identical_to_im2rec_py(data_dir, tmp_path):
    golden = data_dir / "im2rec_pack_multilabel"
    result = run("pack", golden / "ml.lst", data_dir / "tree", tmp_path / "ml.rec", "--pass-through", "--pack-label")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ml.rec").read_bytes() == (golden / "ml.rec").read_bytes()
    assert (tmp_path / "ml.idx").read_bytes() == (golden / "ml.idx").read_bytes()


@pytest.mark.parametrize(
    "golden,options",
    [
        ("im2rec_pack_resize64", ["--resize", "64", "--quality", "90"]),
        ("im2rec_pack_crop_png", ["--resize", "48", "--center-crop", "--encoding", ".png"]),
    ],
)
def test_reencoded_pixels_match_mxnet(data_dir, tmp_path, golden, options):
    """Re-encoded records are im2rec.py's bytes on this OpenCV build (the golden files were written
    with OpenCV 4.10; libjpeg-turbo and libpng give the same bytes here): PNG by default at level 9."""
    g = data_dir / golden
    result = run("pack", g / "all.lst", data_dir / "tree", tmp_path / "all.rec", *options)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "all.rec").read_bytes() == (g / "all.rec").read_bytes()
    assert (tmp_path / "all.idx").read_bytes() == (g / "all.idx").read_bytes()
    theirs, ours = records(g / "all.rec"), records(tmp_path / "all.rec")
    assert list(ours) == list(theirs)
    for key, (header, payload) in theirs.items():
        assert ours[key][0] == header
        a = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_UNCHANGED)
        b = cv2.imdecode(np.frombuffer(ours[key][1], np.uint8), cv2.IMREAD_UNCHANGED)
        assert a.shape == b.shape, key
        assert np.abs(a.astype(int) - b).mean() <= 1.5, key


def test_output_is_the_same_for_any_worker_count(data_dir, tmp_path):
    lst = data_dir / "im2rec" / "all.lst"
    for w in (1, 2, 4):
        assert run("pack", lst, data_dir / "tree", tmp_path / f"w{w}.rec", "--resize", "40", "--workers", w).exit_code == 0
    assert (tmp_path / "w1.rec").read_bytes() == (tmp_path / "w2.rec").read_bytes() == (tmp_path / "w4.rec").read_bytes()
    assert (tmp_path / "w1.idx").read_bytes() == (tmp_path / "w4.idx").read_bytes()


def test_default_output_next_to_the_list_and_summary(data_dir, tmp_path):
    shutil.copy(data_dir / "im2rec" / "all.lst", tmp_path / "train.lst")
    result = run("pack", tmp_path / "train.lst", data_dir / "tree", "--pass-through")
    assert result.exit_code == 0
    assert (tmp_path / "train.rec").exists() and (tmp_path / "train.idx").exists()
    line = result.stdout.strip()
    assert line.startswith(f"packed 14 of 14 images into {tmp_path / 'train.rec'} (0.2 MB) in ")
    assert line.endswith("; 0 failed")
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    assert not list(tmp_path.glob("*.partial"))


def test_existing_output_needs_overwrite(data_dir, tmp_path):
    lst = data_dir / "im2rec" / "all.lst"
    assert run("pack", lst, data_dir / "tree", tmp_path / "o.rec", "--pass-through").exit_code == 0
    before = (tmp_path / "o.rec").read_bytes()
    result = run("pack", lst, data_dir / "tree", tmp_path / "o.rec", "--resize", "32")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {tmp_path / 'o.rec'} exists: pass --overwrite to replace it\n"
    assert (tmp_path / "o.rec").read_bytes() == before
    assert run("pack", lst, data_dir / "tree", tmp_path / "o.rec", "--resize", "32", "--overwrite").exit_code == 0
    assert (tmp_path / "o.rec").read_bytes() != before


# --------------------------------------------------------------------------- labels


def multi_label_list(data_dir, tmp_path, widths):
    entries = read_lst(data_dir / "im2rec" / "all.lst")
    out = [ListEntry(e.index, tuple(float(e.index + j) for j in range(w)), e.path) for e, w in zip(entries, widths)]
    write_lst(tmp_path / "m.lst", out)
    return tmp_path / "m.lst", out


def test_label_width_packs_n_float_labels(data_dir, tmp_path):
    lst, entries = multi_label_list(data_dir, tmp_path, [4] * 14)
    result = run("pack", lst, data_dir / "tree", tmp_path / "out.rec", "--resize", "32", "--label-width", "4")
    assert result.exit_code == 0, result.output
    recs = records(tmp_path / "out.rec")
    for e in entries:
        header, payload = recs[e.index]
        assert header.flag == 4 and header.id == e.index and header.id2 == 0
        assert header.label.tolist() == list(e.labels)
        assert cv2.imdecode(np.frombuffer(payload, np.uint8), 1).shape[0] >= 32


def test_label_width_one_is_a_scalar_label(data_dir, tmp_path):
    result = run("pack", data_dir / "im2rec" / "all.lst", data_dir / "tree", tmp_path / "o.rec", "--pass-through", "--label-width", "1")
    assert result.exit_code == 0
    assert (tmp_path / "o.rec").read_bytes() == (data_dir / "im2rec_pack_pass" / "all.rec").read_bytes()


def test_label_width_mismatch_names_the_line(data_dir, tmp_path):
    lst, _ = multi_label_list(data_dir, tmp_path, [4] * 5 + [3] + [4] * 8)
    result = run("pack", lst, data_dir / "tree", tmp_path / "out.rec", "--label-width", "4")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {lst}:6: expected 4 labels (--label-width 4), got 3\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.lst"]


def test_extra_labels_are_dropped_with_one_warning(data_dir, tmp_path):
    lst, entries = multi_label_list(data_dir, tmp_path, [1, 3, 1, 2] + [1] * 10)
    result = run("pack", lst, data_dir / "tree", tmp_path / "out.rec", "--pass-through")
    assert result.exit_code == 0
    assert result.stderr == (
        f"warning: {lst}: 2 line(s) have more than one label; only the first is packed "
        "(use --pack-label or --label-width N to keep them all)\n"
    )
    recs = records(tmp_path / "out.rec")
    assert all(recs[e.index][0].flag == 0 and recs[e.index][0].label == e.labels[0] for e in entries)
    run("pack", lst, data_dir / "tree", tmp_path / "pl.rec", "--pass-through", "--pack-label")
    flags = {k: h.flag for k, (h, _) in records(tmp_path / "pl.rec").items()}
    assert flags == {e.index: (len(e.labels) if len(e.labels) > 1 else 0) for e in entries}


# --------------------------------------------------------------------------- image options


def decoded(rec):
    return {k: cv2.imdecode(np.frombuffer(p, np.uint8), cv2.IMREAD_UNCHANGED) for k, (_, p) in records(rec).items()}


def test_center_crop_resize_color_and_png(data_dir, tmp_path):
    lst = data_dir / "im2rec" / "all.lst"
    run("pack", lst, data_dir / "tree", tmp_path / "c.rec", "--resize", "30", "--center-crop", "--encoding", ".png", "--color", "0")
    for img in decoded(tmp_path / "c.rec").values():
        assert img.shape == (30, 30)
    run("pack", lst, data_dir / "tree", tmp_path / "r.rec", "--resize", "30")
    shapes = {k: im.shape for k, im in decoded(tmp_path / "r.rec").items()}
    assert shapes[12] == (30, 45, 3)  # zebra_2.jpg, 150x100 -> 45x30 (long * N // short)
    assert shapes[4] == (35, 30, 3)  # cats_2.jpg, 128x150 -> 30x35


def test_color_unchanged_keeps_alpha(tmp_path):
    (tmp_path / "img").mkdir()
    rgba = np.zeros((20, 30, 4), np.uint8)
    rgba[..., 3] = np.arange(30, dtype=np.uint8) * 8
    cv2.imwrite(str(tmp_path / "img" / "a.png"), rgba)
    write_lst(tmp_path / "a.lst", [ListEntry(0, (0.0,), "a.png")])
    assert run("pack", tmp_path / "a.lst", tmp_path / "img", tmp_path / "a.rec", "--color", "-1", "--encoding", ".png").exit_code == 0
    assert np.array_equal(decoded(tmp_path / "a.rec")[0], rgba)


@pytest.mark.slow
def test_inter_methods(data_dir, tmp_path):
    lst = data_dir / "im2rec" / "all.lst"
    out = {}
    for method in ("linear", "1", "area", "random", "auto"):
        assert run("pack", lst, data_dir / "tree", tmp_path / f"{method}.rec", "--resize", "50", "--inter-method", method).exit_code == 0
        out[method] = (tmp_path / f"{method}.rec").read_bytes()
    assert out["linear"] == out["1"] and out["linear"] != out["area"]
    run("pack", lst, data_dir / "tree", tmp_path / "random2.rec", "--resize", "50", "--inter-method", "random", "--workers", "3")
    assert (tmp_path / "random2.rec").read_bytes() == out["random"]  # reproducible, unlike im2rec.cc


@pytest.mark.parametrize(
    "options,message",
    [
        (["--quality", "0"], "JPEG quality must be between 1 and 100, got 0"),
        (["--encoding", ".png", "--quality", "10"], "PNG compression must be between 0 and 9, got 10"),
        (["--inter-method", "bicubic"], "unknown interpolation 'bicubic'"),
        (["--encoding", ".webp"], "'.webp' is not one of '.jpg', '.png'"),
        (["--workers", "0"], "0 is not in the range x>=1"),
    ],
)
def test_bad_options_are_usage_errors(data_dir, tmp_path, options, message):
    result = run("pack", data_dir / "im2rec" / "all.lst", data_dir / "tree", tmp_path / "o.rec", *options)
    assert result.exit_code == 2
    assert message in result.stderr
    assert not list(tmp_path.iterdir())


def test_help_shows_examples():
    result = run("pack", "--help")
    assert "im2rec pack image.lst root out.rec --resize 256 --label-width 4" in result.output
    assert "Exit status" in result.output


def test_output_folders_are_created(data_dir, tmp_path):
    golden = data_dir / "im2rec_pack_pass"
    out = tmp_path / "new" / "deeper" / "all.rec"
    result = run("pack", golden / "all.lst", data_dir / "tree", out, "--pass-through", "--stats", tmp_path / "stats" / "s.json")
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == (golden / "all.rec").read_bytes()
    assert (tmp_path / "stats" / "s.json").exists()


def test_no_folder_is_created_when_the_list_is_refused(tmp_path, data_dir):
    (tmp_path / "bad.lst").write_text("0\t1.0\n")
    result = run("pack", tmp_path / "bad.lst", data_dir / "tree", tmp_path / "new" / "out.rec")
    assert result.exit_code == 1 and not (tmp_path / "new").exists()


# --------------------------------------------------------------------------- transparency


def transparent_folder(tmp_path, big=False):
    """2 images with transparency (a picture kept in alpha over white, a shape over black) and 2 without."""
    root = tmp_path / "img"
    root.mkdir()
    h, w = (1080, 1920) if big else (60, 80)
    y, x = np.mgrid[0:h, 0:w]
    picture = ((np.sin(x / 9.0) * np.cos(y / 7.0) + 1) * 127.5).astype(np.uint8)
    white = np.full_like(picture, 255)
    cv2.imwrite(str(root / "abstract.png"), np.dstack([white, white, white, picture]))
    cv2.imwrite(str(root / "silhouette.png"), np.dstack([picture * 0, picture // 2, picture * 0, picture]))
    cv2.imwrite(str(root / "opaque_rgba.png"), np.dstack([picture, 255 - picture, picture // 3, white]))
    cv2.imwrite(str(root / "photo.jpg"), np.dstack([picture, picture, 255 - picture]))
    names = ["abstract.png", "opaque_rgba.png", "photo.jpg", "silhouette.png"]
    write_lst(tmp_path / "t.lst", [ListEntry(i, (0.0,), n) for i, n in enumerate(names)])
    return tmp_path / "t.lst", root, picture


def im2rec_py_payload(path, encoding=".jpg"):
    """What MXNet's im2rec.py stores: cv2.imread(IMREAD_COLOR), then cv2.imencode at quality 95 (PNG: level 9)."""
    params = [cv2.IMWRITE_JPEG_QUALITY, 95] if encoding == ".jpg" else [cv2.IMWRITE_PNG_COMPRESSION, 9]
    return cv2.imencode(encoding, cv2.imread(str(path), cv2.IMREAD_COLOR), params)[1].tobytes()


def test_transparency_is_counted_and_named_and_the_bytes_stay_im2rec_py_s(tmp_path):
    lst, root, _ = transparent_folder(tmp_path)
    result = run("pack", lst, root, tmp_path / "t.rec", "--workers", "2", "--stats", tmp_path / "s.json")
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip().endswith("; 0 failed; 2 images had transparency; alpha was dropped (pass --alpha-background COLOR to composite them)")
    assert result.stderr == (
        f"warning: {tmp_path / 't.rec'}: 2 images had transparency and were packed with the alpha channel dropped, as im2rec.py does "
        "(a picture kept in alpha packs as a blank image): abstract.png, silhouette.png; "
        "`im2rec pack --alpha-background COLOR` composites them over a colour instead\n"
    )
    recs = records(tmp_path / "t.rec")
    for e in read_lst(lst):
        assert recs[e.index][1] == im2rec_py_payload(root / e.path), e.path
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["transparency"] == {
        "images": 2,
        "alpha": "dropped",
        "counted_from": 0,
        "examples": [{"index": 0, "path": "abstract.png"}, {"index": 3, "path": "silhouette.png"}],
        "examples_limit": 100,
    }
    assert stats["options"]["image"]["alpha_background"] is None


def test_opaque_images_are_not_counted(tmp_path, data_dir):
    lst, root, _ = transparent_folder(tmp_path)
    write_lst(lst, [e for e in read_lst(lst) if e.path in ("opaque_rgba.png", "photo.jpg")])
    result = run("pack", lst, root, tmp_path / "t.rec", "--stats", tmp_path / "s.json")
    assert result.exit_code == 0 and result.stdout.rstrip().endswith("; 0 failed") and result.stderr == ""
    assert json.loads((tmp_path / "s.json").read_text())["transparency"]["images"] == 0
    # the golden tree has no transparency: no clause, no warning
    result = run("pack", data_dir / "im2rec" / "all.lst", data_dir / "tree", tmp_path / "g.rec")
    assert result.exit_code == 0 and "transparency" not in result.output


def test_alpha_background_black_shows_the_picture_kept_in_alpha(tmp_path):
    lst, root, picture = transparent_folder(tmp_path)
    result = run("pack", lst, root, tmp_path / "b.rec", "--alpha-background", "black", "--encoding", ".png", "--stats", tmp_path / "s.json")
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip().endswith("; 0 failed; 2 images had transparency, composited over #000000")
    assert result.stderr == ""
    out = decoded(tmp_path / "b.rec")
    assert out[0].shape == (60, 80, 3)
    for channel in range(3):
        assert np.array_equal(out[0][..., channel], picture)  # white * a + black * (1 - a) = the alpha channel
    assert np.array_equal(out[3][..., 1], (picture // 2 * (picture / 255)).round().astype(np.uint8))
    assert not out[3][..., 0].any() and not out[3][..., 2].any()
    for key, name in ((1, "opaque_rgba.png"), (2, "photo.jpg")):  # no transparency: im2rec.py's bytes
        assert records(tmp_path / "b.rec")[key][1] == im2rec_py_payload(root / name, ".png")
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["transparency"]["alpha"] == "composited over #000000" and stats["transparency"]["images"] == 2
    assert stats["options"]["image"]["alpha_background"] == [0, 0, 0]


@pytest.mark.parametrize("value,bgr", [("white", (255, 255, 255)), ("#FF8000", (0, 128, 255)), ("0,128,255", (255, 128, 0))])
def test_alpha_background_colours(tmp_path, value, bgr):
    lst, root, _ = transparent_folder(tmp_path)
    assert run("pack", lst, root, tmp_path / "c.rec", "--alpha-background", value, "--encoding", ".png").exit_code == 0
    silhouette = cv2.imread(str(root / "silhouette.png"), cv2.IMREAD_UNCHANGED)
    clear = silhouette[..., 3] == 0  # fully transparent pixels show the background
    assert clear.any() and (decoded(tmp_path / "c.rec")[3][clear] == bgr).all()
    gray = run("pack", lst, root, tmp_path / "g.rec", "--alpha-background", value, "--encoding", ".png", "--color", "0")
    assert gray.exit_code == 0 and decoded(tmp_path / "g.rec")[3].ndim == 2


@pytest.mark.parametrize(
    "options,message",
    [
        (["--alpha-background", "pink"], "Error: Invalid value for '--alpha-background': 'pink' is not a colour: use white, black, #RRGGBB or R,G,B (each 0-255)\n"),
        (["--alpha-background", "#12345"], "Error: Invalid value for '--alpha-background': '#12345' is not a colour: use white, black, #RRGGBB or R,G,B (each 0-255)\n"),
        (["--alpha-background", "0,0,256"], "Error: Invalid value for '--alpha-background': '0,0,256' is not a colour: use white, black, #RRGGBB or R,G,B (each 0-255)\n"),
        (["--alpha-background", "white", "--color", "-1"], "Error: --alpha-background cannot be combined with --color -1, which keeps the alpha channel: use --color 1 or 0\n"),
        (
            ["--alpha-background", "white", "--pass-through"],
            "Error: --alpha-background composites decoded images: it cannot be combined with --pass-through, which stores the files unchanged\n",
        ),
    ],
)
def test_bad_alpha_background_is_a_usage_error(tmp_path, options, message):
    lst, root, _ = transparent_folder(tmp_path)
    result = run("pack", lst, root, tmp_path / "o.rec", *options)
    assert result.exit_code == 2
    assert result.stderr.endswith(message)
    assert not (tmp_path / "o.rec").exists() and not list(tmp_path.glob("o.*"))


def test_palette_png_with_trns(tmp_path):
    """A palette PNG whose transparency is a tRNS chunk (cv2.imwrite cannot write one: made with zlib and struct)."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    (tmp_path / "img").mkdir()
    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 8, 8, 3, 0, 0, 0))  # 16x8, 8 bits, colour type 3: palette
    palette = chunk(b"PLTE", bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255])) + chunk(b"tRNS", bytes([0, 128]))
    pixels = chunk(b"IDAT", zlib.compress((b"\0" + bytes([0, 1, 2, 3] * 4)) * 8))  # red (a=0), green (a=128), blue, white
    (tmp_path / "img" / "pal.png").write_bytes(b"\x89PNG\r\n\x1a\n" + header + palette + pixels + chunk(b"IEND", b""))
    write_lst(tmp_path / "p.lst", [ListEntry(0, (0.0,), "pal.png")])
    result = run("pack", tmp_path / "p.lst", tmp_path / "img", tmp_path / "p.rec", "--encoding", ".png")
    assert result.exit_code == 0 and "1 image had transparency; alpha was dropped" in result.stdout
    assert records(tmp_path / "p.rec")[0][1] == im2rec_py_payload(tmp_path / "img" / "pal.png", ".png")
    assert run("pack", tmp_path / "p.lst", tmp_path / "img", tmp_path / "w.rec", "--encoding", ".png", "--alpha-background", "white").exit_code == 0
    assert decoded(tmp_path / "w.rec")[0][0, :4].tolist() == [[255, 255, 255], [127, 255, 127], [255, 0, 0], [255, 255, 255]]


@pytest.mark.slow
def test_full_hd_rgba_through_the_cli(tmp_path):
    lst, root, _ = transparent_folder(tmp_path, big=True)
    result = run("pack", lst, root, tmp_path / "hd.rec", "--workers", "2")
    assert result.exit_code == 0, result.output
    assert "; 2 images had transparency; alpha was dropped" in result.stdout
    recs = records(tmp_path / "hd.rec")
    assert recs[0][1] == im2rec_py_payload(root / "abstract.png")  # byte for byte what im2rec.py stores: a blank image
    assert cv2.imdecode(np.frombuffer(recs[0][1], np.uint8), cv2.IMREAD_COLOR).min() >= 250


def test_a_clean_pack_leaves_no_failure_list_and_removes_an_old_one(data_dir, tmp_path):
    """OUT.failed.tsv only when something failed: a run with --overwrite and no failure removes
    the list an earlier run left, a resume keeps the failures its first run listed."""
    lst, tree = data_dir / "im2rec" / "all.lst", data_dir / "tree"
    broken = tmp_path / "broken.lst"
    broken.write_text(lst.read_text() + "99\t0.000000\tnot/there.jpg\n")
    assert run("pack", broken, tree, tmp_path / "o.rec", "-q").exit_code == 0
    assert (tmp_path / "o.failed.tsv").read_text().splitlines()[1].startswith("99\tnot/there.jpg\tmissing: ")
    assert run("pack", lst, tree, tmp_path / "o.rec", "-q", "--overwrite").exit_code == 0
    assert not (tmp_path / "o.failed.tsv").exists()
    result = run("pack", lst, tree, tmp_path / "o.rec", "--resume")
    assert result.exit_code == 0 and "already complete" in result.stdout  # complete without a failure list


def test_a_result_does_not_carry_its_fetched_bytes_back(data_dir):
    """A task fetched from a store goes to a worker with its bytes; its Result comes back
    without them (they would cross the pipe twice), and with the same record."""
    from im2rec.packing.options import PackOptions
    from im2rec.packing.pipeline import Task, encode_record

    jpeg = next((data_dir / "tree").rglob("*.jpg"))
    opts = PackOptions().image
    fetched = encode_record(Task(7, 1.0, "a.jpg", "s3://b/a.jpg", data=jpeg.read_bytes()), opts)
    read = encode_record(Task(7, 1.0, "a.jpg", str(jpeg)), opts)
    assert fetched.task.data is None and fetched.framed == read.framed and fetched.framed is not None
    failed = encode_record(Task(8, 1.0, "b.jpg", "s3://b/b.jpg", data=b"x", failed=("missing", "no such object")), opts)
    assert failed.task.data is None and (failed.kind, failed.reason) == ("missing", "no such object")
