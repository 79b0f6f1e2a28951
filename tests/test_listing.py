"""`im2rec list`: parity with im2rec.py --list, and what it does beyond it."""

import os
import shutil
from collections import Counter

import pytest
from conftest import run

from im2rec.errors import OptionError
from im2rec.listing import ListOptions, make_lists, scan_images
from im2rec.lst import read_lst

# (golden name, our CLI options, files im2rec.py wrote); args in manifest.json "im2rec_list"
GOLDEN = [
    ("all", [], ["all.lst"]),
    ("split", ["--train-ratio", "0.6", "--test-ratio", "0.2"], ["split_train.lst", "split_val.lst", "split_test.lst"]),
    ("chunks", ["--chunks", "2"], ["chunks_0.lst", "chunks_1.lst"]),
    ("noshuffle", ["--no-shuffle"], ["noshuffle.lst"]),
    ("flat", ["--no-recursive"], ["flat.lst"]),
]


@pytest.mark.parametrize("name,options,files", GOLDEN)
def test_golden_lists_byte_for_byte(data_dir, manifest, tmp_path, name, options, files):
    args = manifest["im2rec_list"][name]["args"]
    assert ("--recursive" in args) == ("--no-recursive" not in options)
    result = run("list", data_dir / "tree", tmp_path / name, *options)
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".lst")
    assert written == sorted(files)
    for f in files:
        assert (tmp_path / f).read_bytes() == (data_dir / "im2rec" / f).read_bytes(), f


def test_class_map_file_matches_im2rec_py_printout(data_dir, manifest, tmp_path):
    assert run("list", data_dir / "tree", tmp_path / "all").exit_code == 0
    printed = manifest["im2rec_list"]["all"]["stdout"].splitlines()
    ours = [line.split("\t") for line in (tmp_path / "all.classes.tsv").read_text().splitlines()]
    assert [f"{folder} {label}" for label, folder in ours] == printed


def test_summary_and_quiet(data_dir, tmp_path):
    result = run("list", data_dir / "tree", tmp_path / "ds", "--train-ratio", "0.5")
    assert result.output.splitlines() == [
        f"{tmp_path / 'ds'}_val.lst: 7 images",
        f"{tmp_path / 'ds'}_train.lst: 7 images",
        f"{tmp_path / 'ds'}.classes.tsv: 4 classes",
    ]
    assert run("list", data_dir / "tree", tmp_path / "q", "--quiet").output == ""


def make_tree(root, layout):
    for rel in layout:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    return root


def test_seed_changes_order_only(data_dir, tmp_path):
    run("list", data_dir / "tree", tmp_path / "a", "--seed", "1")
    a = read_lst(tmp_path / "a.lst")
    b = read_lst(data_dir / "im2rec" / "all.lst")
    assert a != b and sorted(a) == sorted(b)


def test_exts_case_insensitive_and_comma_separated(tmp_path):
    root = make_tree(tmp_path / "img", ["c/A.JPG", "c/b.Png", "c/c.webp", "c/d.gif", "c/e.txt"])
    run("list", root, tmp_path / "d", "--no-shuffle")
    assert [e.path for e in read_lst(tmp_path / "d.lst")] == ["c/A.JPG", "c/b.Png"]
    run("list", root, tmp_path / "e", "--no-shuffle", "--exts", "webp,.GIF", "--exts", "jpg")
    assert [e.path for e in read_lst(tmp_path / "e.lst")] == ["c/A.JPG", "c/c.webp", "c/d.gif"]


def test_labels_follow_sorted_walk_and_nested_folders(tmp_path):
    root = make_tree(tmp_path / "img", ["b/x.jpg", "a/z.jpg", "a/deep/y.jpg", "top.jpg", "empty/readme.txt"])
    run("list", root, tmp_path / "d", "--no-shuffle")
    assert [(e.labels[0], e.path) for e in read_lst(tmp_path / "d.lst")] == [
        (0.0, "top.jpg"),
        (1.0, "a/z.jpg"),
        (2.0, "a/deep/y.jpg"),
        (3.0, "b/x.jpg"),
    ]
    assert (tmp_path / "d.classes.tsv").read_text() == "0\t.\n1\ta\n2\ta/deep\n3\tb\n"


def test_hidden_files_and_folders_are_skipped(tmp_path):
    root = make_tree(tmp_path / "img", ["c/.hidden.jpg", ".git/x.jpg", "c/ok.jpg", "._c/y.jpg"])
    run("list", root, tmp_path / "d")
    assert [e.path for e in read_lst(tmp_path / "d.lst")] == ["c/ok.jpg"]


def test_unicode_and_spaces(tmp_path):
    root = make_tree(tmp_path / "img", ["chats noirs/été 1.jpg", "犬/写真.png"])
    run("list", root, tmp_path / "d", "--no-shuffle")
    assert (tmp_path / "d.lst").read_text(encoding="utf-8") == (
        "0\t0.000000\tchats noirs/été 1.jpg\n1\t1.000000\t犬/写真.png\n"
    )


def test_unstorable_names_are_reported_and_skipped(tmp_path):
    root = make_tree(tmp_path / "img", ["c/tab\there.jpg", "c/new\nline.jpg", "c/ok.jpg"])
    result = run("list", root, tmp_path / "d")
    assert result.exit_code == 0
    assert [e.path for e in read_lst(tmp_path / "d.lst")] == ["c/ok.jpg"]
    assert "a TAB in the path cannot be stored in a .lst" in result.stderr
    assert "a newline in the path cannot be stored in a .lst" in result.stderr


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinked_folders_followed_without_looping(tmp_path):
    root = make_tree(tmp_path / "img", ["a/1.jpg"])
    make_tree(tmp_path / "elsewhere", ["2.jpg"])
    os.symlink(tmp_path / "elsewhere", root / "b")
    os.symlink(root, root / "a" / "loop")  # a loop back to the root
    result = run("list", root, tmp_path / "d", "--no-shuffle")
    assert result.exit_code == 0, result.output
    assert [e.path for e in read_lst(tmp_path / "d.lst")] == ["a/1.jpg", "b/2.jpg"]
    assert "symlink loop" in result.stderr


def test_stratify_keeps_every_class_in_every_split(tmp_path):
    layout = [f"big/{i}.jpg" for i in range(50)] + [f"small{c}/{i}.jpg" for c in range(3) for i in range(3)]
    root = make_tree(tmp_path / "img", layout)
    plain = make_lists(str(root), str(tmp_path / "p"), ListOptions(train_ratio=0.8, test_ratio=0.1))
    strat = make_lists(str(root), str(tmp_path / "s"), ListOptions(train_ratio=0.8, test_ratio=0.1, stratify=True))
    assert sum(plain.lists.values()) == sum(strat.lists.values()) == 59
    for part in ("train", "val", "test"):
        labels = Counter(e.labels[0] for e in read_lst(tmp_path / f"s_{part}.lst"))
        assert set(labels) == {0.0, 1.0, 2.0, 3.0}, part
    big = Counter(e.labels[0] for part in ("train", "val", "test") for e in read_lst(tmp_path / f"s_{part}.lst") if e.labels[0] == 0)
    assert big[0.0] == 50
    assert Counter(e.labels[0] for e in read_lst(tmp_path / "s_test.lst"))[0.0] == 5
    everything = sorted(e for part in ("train", "val", "test") for e in read_lst(tmp_path / f"s_{part}.lst"))
    assert everything == sorted(read_lst(tmp_path / "p_train.lst") + read_lst(tmp_path / "p_val.lst") + read_lst(tmp_path / "p_test.lst"))


def test_stratify_is_deterministic(tmp_path):
    root = make_tree(tmp_path / "img", [f"c{c}/{i}.jpg" for c in range(4) for i in range(7)])
    for name in ("a", "b"):
        make_lists(str(root), str(tmp_path / name), ListOptions(train_ratio=0.5, test_ratio=0.25, stratify=True, chunks=2))
    for suffix in ("_0_train.lst", "_0_val.lst", "_1_test.lst"):
        assert (tmp_path / ("a" + suffix)).read_bytes() == (tmp_path / ("b" + suffix)).read_bytes()


# --------------------------------------------------------------------------- bad input


def no_output(tmp_path):
    return not any(p.name.startswith("d") for p in tmp_path.iterdir())


def test_missing_root(tmp_path):
    result = run("list", tmp_path / "nope", tmp_path / "d")
    assert result.exit_code == 2
    assert "Directory" in result.stderr and "does not exist" in result.stderr
    assert no_output(tmp_path)


def test_root_is_a_file(tmp_path):
    (tmp_path / "f.jpg").write_bytes(b"x")
    result = run("list", tmp_path / "f.jpg", tmp_path / "d")
    assert result.exit_code == 2 and result.stderr.splitlines()[-1] == f"Error: Invalid value for 'ROOT': Directory '{tmp_path / 'f.jpg'}' is a file."


@pytest.mark.parametrize(
    "options,message",
    [
        (["--train-ratio", "1.5"], "Invalid value for '--train-ratio': 1.5 is not in the range 0<=x<=1."),
        (["--test-ratio", "-0.1"], "Invalid value for '--test-ratio': -0.1 is not in the range 0<=x<=1."),
        (["--train-ratio", "0.8", "--test-ratio", "0.3"], "Invalid value for '--test-ratio': --train-ratio 0.8 plus --test-ratio 0.3 is more than 1"),
        (["--chunks", "0"], "Invalid value for '--chunks': 0 is not in the range x>=1."),
    ],
)
def test_bad_ratios_are_usage_errors(data_dir, tmp_path, options, message):
    result = run("list", data_dir / "tree", tmp_path / "d", *options)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == f"Error: {message}"
    assert no_output(tmp_path)


def test_folder_without_images(tmp_path):
    root = make_tree(tmp_path / "img", ["a/readme.txt"])
    result = run("list", root, tmp_path / "d")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {root}: no image with extension .jpeg .jpg .png in it or its sub-folders (skipped 1 file: 1 .txt)\n"
    assert not list(tmp_path.glob("d*"))
    root = make_tree(tmp_path / "webp", ["a/1.webp"])
    result = run("list", root, tmp_path / "d")
    assert result.stderr == (
        f"Error: {root}: no image with extension .jpeg .jpg .png in it or its sub-folders "
        "(skipped 1 file: 1 .webp; add .webp to --exts (--exts .jpeg,.jpg,.png,.webp) to list WebP too)\n"
    )


def test_library_validates_ratios():
    with pytest.raises(OptionError, match=r"^--train-ratio 0\.9 plus --test-ratio 0\.2 is more than 1$"):
        make_lists(".", "x", ListOptions(train_ratio=0.9, test_ratio=0.2))


def test_unwritable_output_leaves_nothing(data_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "d_val.lst").mkdir()  # a folder where a list should go: the rename fails
    result = run("list", data_dir / "tree", out / "d", "--train-ratio", "0.5")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: cannot write")
    assert sorted(p.name for p in out.iterdir()) == ["d_val.lst"]


def test_missing_output_folders_are_created(data_dir, tmp_path, monkeypatch):
    """The README's `im2rec list images/ data/train`, with no data/ yet."""
    monkeypatch.chdir(tmp_path)
    result = run("list", data_dir / "tree", "data/train")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "train.lst").read_bytes() == (data_dir / "im2rec" / "all.lst").read_bytes()
    assert (tmp_path / "data" / "train.classes.tsv").exists()
    assert run("list", data_dir / "tree", tmp_path / "a" / "b" / "c" / "d", "-q").exit_code == 0
    assert (tmp_path / "a" / "b" / "c" / "d.lst").exists()


def test_files_left_out_by_extension_are_counted(tmp_path):
    """A class folder of WebP files must not vanish without a word."""
    layout = [f"jpg/{i}.jpg" for i in range(2)] + [f"webp/{i}.webp" for i in range(16)] + [f"svg/{i}.svg" for i in range(9)]
    root = make_tree(tmp_path / "img", layout + ["notes.txt", "jpg/.hidden.webp"])
    result = run("list", root, tmp_path / "d")
    assert result.exit_code == 0
    assert result.stderr == "skipped 26 files: 16 .webp, 9 .svg, 1 .txt; add .webp to --exts (--exts .jpeg,.jpg,.png,.webp) to list WebP too\n"
    result = run("list", root, tmp_path / "e", "--exts", ".jpeg,.jpg,.png,.webp", "-q")
    assert result.exit_code == 0 and result.stderr == "skipped 10 files: 9 .svg, 1 .txt\n"
    assert len(read_lst(tmp_path / "e.lst")) == 18
    result = run("list", root, tmp_path / "f", "--exts", ".svg,.webp,.jpg,.txt", "-q")
    assert result.exit_code == 0 and result.stderr == ""


def test_skipped_extensions_several_formats_and_none(tmp_path):
    root = make_tree(tmp_path / "img", ["a/1.JPG", "a/2.TIF", "a/3.tiff", "a/4.bmp", "a/README", "a/5.gif"])
    result = run("list", root, tmp_path / "d", "-q")
    assert result.stderr == (
        "skipped 5 files: 1 (no extension), 1 .bmp, 1 .gif, 1 .tif, 1 .tiff; "
        "add .bmp .gif .tif .tiff to --exts (--exts .jpeg,.jpg,.png,.bmp,.gif,.tif,.tiff) to list BMP, GIF and TIFF too\n"
    )


def test_scan_is_sorted_like_os_walk(data_dir):
    scan = scan_images(str(data_dir / "tree"), (".jpg", ".png"), True)
    expected = []
    for path, dirs, files in os.walk(data_dir / "tree"):
        dirs.sort()
        for f in sorted(files):
            expected.append(os.path.relpath(os.path.join(path, f), data_dir / "tree"))
    assert [e.path for e in scan.entries] == expected


@pytest.mark.slow
def test_python_m_im2rec(data_dir, tmp_path):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "im2rec", "list", str(data_dir / "tree"), str(tmp_path / "m"), "-q"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "m.lst").read_bytes() == (data_dir / "im2rec" / "all.lst").read_bytes()
    shutil.rmtree(tmp_path)


def test_the_prefix_may_name_the_folder_it_lists(data_dir, tmp_path, monkeypatch):
    """`im2rec list images images` writes images.lst beside the folder images/ (PREFIX is a prefix, not a file)."""
    shutil.copytree(data_dir / "tree", tmp_path / "images")
    monkeypatch.chdir(tmp_path)
    result = run("list", "images", "images")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("images.lst: 14 images\n")
    assert len(read_lst(tmp_path / "images.lst")) == 14


def test_a_prefix_ending_in_lst_names_the_list(data_dir, tmp_path):
    """`im2rec list ROOT lists/train.lst` writes lists/train.lst, not lists/train.lst.lst."""
    result = run("list", data_dir / "tree", tmp_path / "lists" / "train.lst")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "lists").iterdir()) == ["train.classes.tsv", "train.lst"]
    assert result.output.startswith(f"{tmp_path / 'lists' / 'train.lst'}: 14 images\n")
