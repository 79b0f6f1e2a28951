"""`im2rec-py`: MXNet 1.9's tools/im2rec.py command line, giving its golden outputs byte for byte."""

import shutil
import subprocess
import sys

import pytest

from im2rec import recordio
from im2rec.legacy import main


@pytest.fixture
def work(tmp_path, data_dir):
    """A copy of the golden image tree, and an empty data/ folder beside it."""
    shutil.copytree(data_dir / "tree", tmp_path / "tree")
    (tmp_path / "data").mkdir()
    return tmp_path


def run(capsys, *argv):
    """main(argv) -> (exit status, stdout, stderr)."""
    try:
        main([str(a) for a in argv])
        status = 0
    except SystemExit as e:
        status = e.code
    out = capsys.readouterr()
    return status, out.out, out.err


def records(rec):
    with recordio.RecordReader(rec, str(rec)[:-4] + ".idx") as r:
        return {k: bytes(r.read(k)) for k in r.keys()}


def same_files(a, b):
    return a.read_bytes() == b.read_bytes()


# --------------------------------------------------------------------------- the documented flows


def test_faq_flow_lists_then_records(work, data_dir, manifest, capsys):
    """The FAQ: list with --recursive --train-ratio --test-ratio, then pack every PREFIX*.lst
    with --resize, --quality, --num-thread."""
    status, out, err = run(capsys, work / "data" / "split", work / "tree", "--list", "--recursive", "--train-ratio", "0.6", "--test-ratio", "0.2")
    assert status == 0 and err == ""
    assert out == manifest["im2rec_list"]["split"]["stdout"]  # the folder -> label map, as im2rec.py prints it
    for part in ("train", "val", "test"):
        assert same_files(work / "data" / f"split_{part}.lst", data_dir / "im2rec" / f"split_{part}.lst"), part
    assert sorted(p.name for p in (work / "data").iterdir()) == ["split_test.lst", "split_train.lst", "split_val.lst"]  # no class map

    status, out, err = run(capsys, work / "data" / "split", work / "tree", "--resize", "64", "--quality", "90", "--num-thread", "2")
    assert status == 0, err
    assert [line.split(" in ")[0] for line in out.splitlines() if line.startswith("Creating")] == [
        f"Creating .rec file from {work / 'data' / f'split_{part}.lst'}" for part in ("test", "train", "val")
    ]
    golden = records(data_dir / "im2rec_pack_resize64" / "all.rec")  # the same images and keys, packed by im2rec.py
    keys = []
    for part in ("train", "val", "test"):
        ours = records(work / "data" / f"split_{part}.rec")
        assert ours == {k: golden[k] for k in ours}, part
        keys += ours
    assert sorted(keys) == sorted(golden)
    assert not list((work / "data").glob("*.failed.tsv"))  # nothing failed: no report file


@pytest.mark.parametrize(
    "golden,options",
    [
        ("im2rec_pack_resize64", ["--resize", "64", "--quality", "90"]),
        ("im2rec_pack_crop_png", ["--resize", "48", "--center-crop", "--encoding", ".png"]),
        ("im2rec_pack_pass", ["--pass-through", "--num-thread", "3"]),
    ],
)
def test_records_are_im2rec_py_s_bytes(work, data_dir, manifest, capsys, golden, options):
    status, _, _ = run(capsys, work / "data" / "all", work / "tree", "--list", "--recursive")
    assert status == 0 and same_files(work / "data" / "all.lst", data_dir / "im2rec" / "all.lst")
    status, _, err = run(capsys, work / "data" / "all", work / "tree", *options)
    assert status == 0, err
    assert same_files(work / "data" / "all.rec", data_dir / golden / "all.rec")
    assert same_files(work / "data" / "all.idx", data_dir / golden / "all.idx")


def test_pack_label(work, data_dir, capsys):
    shutil.copy(data_dir / "im2rec_pack_multilabel" / "ml.lst", work / "data" / "ml.lst")
    status, _, err = run(capsys, work / "data" / "ml", work / "tree", "--pass-through", "--pack-label")
    assert status == 0, err
    assert same_files(work / "data" / "ml.rec", data_dir / "im2rec_pack_multilabel" / "ml.rec")
    assert same_files(work / "data" / "ml.idx", data_dir / "im2rec_pack_multilabel" / "ml.idx")


@pytest.mark.parametrize("name,options", [("flat", []), ("noshuffle", ["--recursive", "--no-shuffle"]), ("chunks", ["--recursive", "--chunks", "2"])])
def test_other_golden_lists(work, data_dir, capsys, name, options):
    status, _, _ = run(capsys, work / "data" / name, work / "tree", "--list", *options)
    assert status == 0
    for f in sorted((data_dir / "im2rec").glob(f"{name}*.lst")):
        assert same_files(work / "data" / f.name, f), f.name


# --------------------------------------------------------------------------- argparse, as im2rec.py


def test_abbreviated_options_and_space_separated_exts(work, data_dir, capsys):
    status, _, _ = run(capsys, work / "data" / "all", work / "tree", "--li", "--rec", "--exts", ".jpeg", ".jpg", ".png")
    assert status == 0 and same_files(work / "data" / "all.lst", data_dir / "im2rec" / "all.lst")
    status, _, err = run(capsys, work / "data" / "all", work / "tree", "--res", "64", "--qual", "90", "--num", "2")
    assert status == 0, err
    assert same_files(work / "data" / "all.rec", data_dir / "im2rec_pack_resize64" / "all.rec")
    status, _, _ = run(capsys, work / "data" / "png", work / "tree", "--list", "--recursive", "--exts", ".png")
    lines = (work / "data" / "png.lst").read_text().splitlines()
    assert lines and all(line.endswith(".png") for line in lines)


def test_usage_errors_exit_2(work, capsys):
    status, _, err = run(capsys, work / "data" / "x", work / "tree", "--color", "3")
    assert status == 2 and "argument --color: invalid choice: 3" in err
    status, _, err = run(capsys, work / "data" / "x")
    assert status == 2 and "the following arguments are required: root" in err
    status, _, err = run(capsys, work / "data" / "x", work / "tree", "--t", "0.5")  # --train-ratio or --test-ratio
    assert status == 2 and "ambiguous option: --t could match --train-ratio, --test-ratio" in err


def test_hidden_files_are_listed_as_im2rec_py_does(work, capsys):
    (work / "tree" / "cats" / ".hidden.jpg").write_bytes((work / "tree" / "cats" / "cats_0.jpg").read_bytes())
    status, _, _ = run(capsys, work / "data" / "h", work / "tree", "--list", "--recursive", "--no-shuffle")
    assert status == 0
    assert "cats/.hidden.jpg" in (work / "data" / "h.lst").read_text()


def test_a_folder_as_prefix_packs_every_list_in_it(work, data_dir, capsys):
    for name in ("a.lst", "b.lst"):
        shutil.copy(data_dir / "im2rec" / "all.lst", work / "data" / name)
    (work / "data" / "notes.txt").write_text("not a list")
    status, out, err = run(capsys, work / "data", work / "tree", "--pass-through")
    assert status == 0, err
    assert out.count("Creating .rec file from") == 2
    for stem in ("a", "b"):
        assert same_files(work / "data" / f"{stem}.rec", data_dir / "im2rec_pack_pass" / "all.rec")


# --------------------------------------------------------------------------- where im2rec.py went wrong


def test_a_bad_image_is_reported_not_a_crash(work, data_dir, capsys):
    """With one worker im2rec.py crashed on the first unreadable image; here it is skipped and listed."""
    (work / "tree" / "cats" / "cats_1.jpg").write_bytes(b"not a jpeg")
    shutil.copy(data_dir / "im2rec" / "all.lst", work / "data" / "all.lst")
    status, out, err = run(capsys, work / "data" / "all", work / "tree", "--resize", "64", "--quality", "90")
    assert status == 0, err
    assert f"packed 13 of 14 images into {work / 'data' / 'all.rec'} (" in out
    assert out.endswith(f"; 1 failed (1 not-an-image), listed in {work / 'data' / 'all.failed.tsv'}\n")
    failed = (work / "data" / "all.failed.tsv").read_text().splitlines()
    assert len(failed) == 2 and failed[1].split("\t")[1] == "cats/cats_1.jpg"
    golden = records(data_dir / "im2rec_pack_resize64" / "all.rec")
    ours = records(work / "data" / "all.rec")
    assert len(ours) == 13 and all(golden[k] == v for k, v in ours.items())


def test_harmful_silences_are_said(work, data_dir, capsys):
    status, _, err = run(capsys, work / "data" / "r", work / "tree", "--list", "--recursive", "--test-ratio", "0.2")
    assert status == 0
    assert f"warning: --test-ratio 0.2 is ignored because --train-ratio is 1.0: only {work / 'data' / 'r'}.lst is written\n" in err
    status, _, err = run(capsys, work / "data" / "r", work / "tree", "--list", "--recursive")
    assert f"warning: replaced the existing {work / 'data' / 'r.lst'}\n" in err
    status, _, err = run(capsys, work / "data" / "e", work / "tree", "--list", "--recursive", "--exts", ".JPG", ".png")
    assert "warning: --exts .JPG never matches: im2rec.py compares lower-case suffixes with their dot (e.g. .jpg)\n" in err
    status, _, _ = run(capsys, work / "data" / "r", work / "tree", "--pass-through")
    status, _, err = run(capsys, work / "data" / "r", work / "tree", "--pass-through")
    assert f"warning: replacing the existing {work / 'data' / 'r.rec'}\n" in err


def test_malformed_lines_are_skipped_and_named(work, data_dir, capsys):
    good = (data_dir / "im2rec" / "all.lst").read_text().splitlines()
    lines = good[:3] + ["bad line without tabs", "x\t1.0\tcats/cats_0.jpg", f" {good[3].replace(chr(9), ' ' + chr(9) + ' ')} "] + good[4:]
    (work / "data" / "m.lst").write_text("\n".join(lines) + "\n")
    status, _, err = run(capsys, work / "data" / "m", work / "tree", "--pass-through")
    assert status == 0, err
    lst = work / "data" / "m.lst"
    assert f"warning: {lst}:4: skipped, as im2rec.py does: a line needs 'index<TAB>label...<TAB>path', this one has 1 field(s)\n" in err
    assert f"warning: {lst}:5: skipped, as im2rec.py does: invalid literal for int() with base 10: 'x'\n" in err
    assert records(work / "data" / "m.rec") == records(data_dir / "im2rec_pack_pass" / "all.rec")  # the spaced line kept
    assert not list((work / "data").glob(".*"))  # the normalised copy is gone


def test_paths_outside_root_are_packed_with_a_warning(work, data_dir, capsys):
    outside = work / "outside.jpg"
    outside.write_bytes((work / "tree" / "cats" / "cats_0.jpg").read_bytes())
    (work / "data" / "o.lst").write_text(f"0\t1.000000\t{outside}\n1\t1.000000\t../outside.jpg\n2\t1.000000\tcats/cats_0.jpg\n")
    status, _, err = run(capsys, work / "data" / "o", work / "tree", "--pass-through")
    assert status == 0, err
    assert f"warning: {work / 'data' / 'o.lst'}: 2 path(s) are absolute or climb out of ROOT with '..'; packed as im2rec.py does" in err
    assert len(records(work / "data" / "o.rec")) == 3


def test_no_list_is_an_error(work, capsys):
    status, _, err = run(capsys, work / "data" / "none", work / "tree")
    assert status == 1
    assert err == f"Error: no .lst file in {work / 'data'} starts with {work / 'data' / 'none'}; create one with --list\n"


@pytest.mark.slow
def test_console_script_and_module(work, data_dir):
    for cmd in (["im2rec-py"], [sys.executable, "-m", "im2rec.legacy"]):
        if cmd[0] == "im2rec-py" and shutil.which("im2rec-py") is None:
            continue
        proc = subprocess.run([*cmd, str(work / "data" / "all"), str(work / "tree"), "--list", "--recursive"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert same_files(work / "data" / "all.lst", data_dir / "im2rec" / "all.lst")
