"""`pack` loses nothing: bad images, bad lists, interrupts, full disks, resume, audit trail."""

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import cv2
import numpy as np
import pytest
from conftest import deadline, run

from im2rec import recordio
from im2rec.lst import ListEntry, write_lst


def cli(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "im2rec", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def file_or_none(path):
    """A file's bytes, or None where there is none (a failure list where nothing failed)."""
    return path.read_bytes() if path.exists() else None


def jpeg_bytes(h=60, w=80, seed=0):
    rng = np.random.default_rng(seed)
    img = cv2.GaussianBlur(rng.integers(0, 255, (h, w, 3), dtype=np.uint8), (5, 5), 0)
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()


def png_bytes(img):
    return cv2.imencode(".png", img)[1].tobytes()


@pytest.fixture
def mixed(tmp_path, data_dir):
    """A folder of good, odd-but-valid and broken images, and a list naming them all."""
    root = tmp_path / "img"
    root.mkdir()
    good = jpeg_bytes()
    odd = data_dir / "odd"
    files = {
        "good.jpg": good,
        "gray.png": png_bytes(np.full((9, 7), 100, np.uint8)),
        "rgba.png": (odd / "rgba.png").read_bytes(),
        "sixteen.png": (odd / "gray16.png").read_bytes(),
        "cmyk.jpg": (odd / "cmyk.jpg").read_bytes(),
        "progressive.jpg": (odd / "progressive.jpg").read_bytes(),
        "exif.jpg": (odd / "exif_rotated.jpg").read_bytes(),
        "tiny.png": (odd / "tiny.png").read_bytes(),
        "été à la plage.jpg": good,
        "UPPER.JPG": good,
        "really_a_png.jpg": png_bytes(np.full((5, 5, 3), 7, np.uint8)),
        "empty.jpg": b"",
        "truncated.jpg": good[: len(good) // 2],
        "truncated.png": png_bytes(np.full((40, 40, 3), 9, np.uint8))[:60],
        "page.jpg": b"<!DOCTYPE html><html><body>Not Found</body></html>",
        "noise.png": bytes(np.random.default_rng(1).integers(0, 256, 3000, dtype=np.uint8)),
    }
    bomb = bytearray(png_bytes(np.zeros((2, 2), np.uint8)))
    bomb[16:24] = (50000).to_bytes(4, "big") * 2
    files["bomb.png"] = bytes(bomb)
    corrupt = bytearray(good)
    corrupt[200:-2] = b"\xff" * (len(corrupt) - 202)
    files["corrupt.jpg"] = bytes(corrupt)
    for name, data in files.items():
        (root / name).write_bytes(data)
    (root / "folder.jpg").mkdir()
    names = list(files) + ["missing.jpg", "folder.jpg"]
    entries = [ListEntry(i, (float(i % 3),), name) for i, name in enumerate(names)]
    write_lst(tmp_path / "mixed.lst", entries)
    return tmp_path / "mixed.lst", root, {e.path: e.index for e in entries}


BAD = {
    "empty.jpg": "empty: the file is empty (0 bytes)",
    "truncated.jpg": "corrupt: truncated JPEG: no end-of-image marker after byte",
    "truncated.png": "corrupt: truncated PNG: no IEND chunk (60 bytes)",
    "page.jpg": "not-an-image: it starts with '<!DOCTYPE ht' (text)",
    "noise.png": "not-an-image: it starts with bytes",
    "bomb.png": "too-large: PNG of 50000x50000 = 2,500,000,000 pixels is above --max-pixels 89,478,485 (a decompression bomb?)",
    "corrupt.jpg": "corrupt: ",
    "missing.jpg": "missing: no such file",
    "folder.jpg": "unreadable: a folder, not a file",
}


def test_bad_images_are_skipped_listed_and_counted(mixed, tmp_path):
    lst, root, index = mixed
    result = run("pack", lst, root, tmp_path / "out.rec", "--resize", "16", "--workers", "2")
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "out.failed.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "index\tpath\treason"
    failed = {line.split("\t")[1]: line.split("\t")[2] for line in lines[1:]}
    assert set(failed) == set(BAD)
    for name, reason in BAD.items():
        assert failed[name].startswith(reason), (name, failed[name])
        assert str(index[name]) == next(line.split("\t")[0] for line in lines[1:] if line.split("\t")[1] == name)
    assert [int(line.split("\t")[0]) for line in lines[1:]] == sorted(index[n] for n in BAD)  # list order
    with recordio.RecordReader(tmp_path / "out.rec", tmp_path / "out.idx") as r:
        good = {k for k in r.keys()}
        assert good == {i for n, i in index.items() if n not in BAD}
        for key in good:
            header, img = recordio.unpack_img(r.read(key))
            assert header.id == key and img is not None and min(img.shape[:2]) == 16
    summary = result.stdout
    assert "packed 11 of 20 images" in summary
    assert "9 failed (2 corrupt, 1 corrupt" not in summary
    assert "9 failed (3 corrupt, 1 empty, 1 missing, 2 not-an-image, 1 too-large, 1 unreadable)" in summary


def test_pass_through_checks_without_decoding(mixed, tmp_path):
    lst, root, _ = mixed
    result = run("pack", lst, root, tmp_path / "p.rec", "--pass-through")
    assert result.exit_code == 0
    failed = {line.split("\t")[1] for line in (tmp_path / "p.failed.tsv").read_text(encoding="utf-8").splitlines()[1:]}
    # no decode: a JPEG with garbage entropy data passes (a PNG cut short has no IEND: caught)
    assert failed == set(BAD) - {"corrupt.jpg"}


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs Linux /proc")
def test_a_file_that_cannot_be_read(tmp_path):
    root = tmp_path / "img"
    root.mkdir()
    (root / "ok.jpg").write_bytes(jpeg_bytes())
    os.symlink("/proc/self/mem", root / "eio.jpg")  # reading it fails with EIO, even as root
    write_lst(tmp_path / "l.lst", [ListEntry(0, (0.0,), "ok.jpg"), ListEntry(1, (0.0,), "eio.jpg")])
    assert run("pack", tmp_path / "l.lst", root, tmp_path / "o.rec").exit_code == 0
    assert (tmp_path / "o.failed.tsv").read_text().splitlines()[1] == "1\teio.jpg\tunreadable: cannot read it: Input/output error"


def test_strict_fails_the_run_but_keeps_the_outputs(mixed, tmp_path):
    lst, root, _ = mixed
    result = run("pack", lst, root, tmp_path / "s.rec", "--strict")
    assert result.exit_code == 1
    assert result.stderr.endswith(f"Error: 9 image(s) failed (--strict); see {tmp_path / 's.failed.tsv'}\n")
    assert (tmp_path / "s.rec").exists() and (tmp_path / "s.idx").exists()


def test_wrong_root_is_an_error_before_anything_is_written(mixed, tmp_path):
    lst, _, _ = mixed
    (tmp_path / "elsewhere").mkdir()
    result = run("pack", lst, tmp_path / "elsewhere", tmp_path / "w.rec")
    assert result.exit_code == 1
    first = tmp_path / "elsewhere" / "good.jpg"
    assert result.stderr == (
        f"Error: {tmp_path / 'elsewhere'}: none of the first 20 images of {lst} is there (the first would be {first}); "
        f"is ROOT the folder the list's paths are relative to?\n"
    )
    assert not list(tmp_path.glob("w.*"))


def test_a_short_list_with_every_image_missing_names_them_all(tmp_path):
    (tmp_path / "img").mkdir()
    write_lst(tmp_path / "l.lst", [ListEntry(i, (0.0,), f"x{i}.jpg") for i in range(3)])
    result = run("pack", tmp_path / "l.lst", tmp_path / "img", tmp_path / "o.rec")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {tmp_path / 'img'}: none of the 3 images of {tmp_path / 'l.lst'} is there (the first would be {tmp_path / 'img' / 'x0.jpg'}); "
        "is ROOT the folder the list's paths are relative to?\n"
    )
    assert not list(tmp_path.glob("o.*"))


def test_nothing_packed_is_a_failed_run(tmp_path):
    root = tmp_path / "img"
    root.mkdir()
    (root / "a.jpg").write_bytes(b"not a jpeg")
    (root / "b.jpg").write_bytes(b"")
    write_lst(tmp_path / "l.lst", [ListEntry(0, (0.0,), "a.jpg"), ListEntry(1, (0.0,), "b.jpg")])
    result = run("pack", tmp_path / "l.lst", root, tmp_path / "o.rec", "-q")
    assert result.exit_code == 1
    assert result.stderr == f"Error: no image could be packed: all 2 failed; see {tmp_path / 'o.failed.tsv'}\n"
    assert len((tmp_path / "o.failed.tsv").read_text().splitlines()) == 3  # header + 2
    assert sorted(p.name for p in tmp_path.glob("o.*")) == ["o.failed.tsv"]  # no empty .rec and .idx


def test_an_import_in_which_every_sample_fails_leaves_only_its_failure_list(tmp_path):
    import io
    import tarfile

    with tarfile.open(tmp_path / "bad.tar", "w") as tar:
        for i in range(3):
            for ext, data in (("jpg", b"not an image at all"), ("cls", b"1")):
                info = tarfile.TarInfo(f"k{i}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    result = run("import", tmp_path / "bad.tar", tmp_path / "out.rec", "-q")
    assert result.exit_code == 1
    assert result.stderr == f"Error: no image could be packed: all 3 failed; see {tmp_path / 'out.failed.tsv'}\n"
    assert sorted(p.name for p in tmp_path.glob("out.*")) == ["out.failed.tsv"]


def test_max_errors_stops_early(mixed, tmp_path):
    lst, root, _ = mixed
    result = run("pack", lst, root, tmp_path / "m.rec", "--max-errors", "2", "--workers", "1", "--stats", tmp_path / "m.json")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: stopped after 3 failed images (more than --max-errors 2); the last: truncated.png: corrupt:")
    assert not (tmp_path / "m.rec").exists()
    stats = json.loads((tmp_path / "m.json").read_text())
    assert stats["complete"] is False and stats["counts"]["failed"] == 3


# --------------------------------------------------------------------------- bad lists


@pytest.mark.parametrize(
    "text,message",
    [
        ("0\t1\ta.jpg\n1\tb.jpg\n", "l.lst:2: expected 'index<TAB>label...<TAB>path', got 2 fields"),
        ("0\t1\ta.jpg\nx\t1\tb.jpg\n", "l.lst:2: index 'x' is not a non-negative integer"),
        ("0\t1\ta.jpg\n1\tcat\tb.jpg\n", "l.lst:2: label 1 ('cat') is not a number"),
        ("0\t1\ta.jpg\n1\t1\tb.jpg\n\n0\t1\tc.jpg\n", "l.lst:4: index 0 was already used on line 1 (indices become .idx keys and must be unique)"),
        ("\n", "l.lst: the list has no entries"),
    ],
)
def test_bad_list_stops_before_any_image(tmp_path, text, message):
    (tmp_path / "img").mkdir()
    (tmp_path / "l.lst").write_text(text)
    result = run("pack", tmp_path / "l.lst", tmp_path / "img", tmp_path / "o.rec")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {tmp_path / message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img", "l.lst"]


def test_paths_leaving_root_are_refused_before_anything_is_read(tmp_path, data_dir):
    """A list from elsewhere must not pull files from outside ROOT into the .rec."""
    root = tmp_path / "img"
    for sub in ("sub", "x"):
        (root / sub).mkdir(parents=True)
    (root / "a.jpg").write_bytes(jpeg_bytes())
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(jpeg_bytes(seed=1))
    (tmp_path / "l.lst").write_text(f"0\t0\ta.jpg\n1\t0\tsub/../a.jpg\n2\t0\t../secret.jpg\n3\t0\t{secret}\n4\t0\tx/../../secret.jpg\n")
    result = run("pack", tmp_path / "l.lst", root, tmp_path / "out" / "o.rec", "--pass-through")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {tmp_path / 'l.lst'}:3: the path '../secret.jpg' is outside ROOT (it climbs out with ..) (and 2 more lines, e.g. line 4); "
        "list paths must be relative to ROOT and stay under it. Fix the list, or pass --allow-outside-root if it was written with such paths on purpose\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img", "l.lst", "secret.jpg"]
    (tmp_path / "abs.lst").write_text(f"7\t0\t{secret}\n")
    result = run("pack", tmp_path / "abs.lst", root, tmp_path / "o.rec")
    assert result.exit_code == 1 and result.stderr == (
        f"Error: {tmp_path / 'abs.lst'}:1: the path '{secret}' is absolute; list paths must be relative to ROOT and stay under it. "
        "Fix the list, or pass --allow-outside-root if it was written with such paths on purpose\n"
    )
    result = run("pack", tmp_path / "l.lst", root, tmp_path / "o.rec", "--pass-through", "--allow-outside-root", "-q")
    assert result.exit_code == 0, result.output
    with recordio.RecordReader(tmp_path / "o.rec", tmp_path / "o.idx") as r:
        assert [recordio.unpack(r.read(k))[1] == secret.read_bytes() for k in r.keys()] == [False, False, True, True, True]


# --------------------------------------------------------------------------- interrupts, kills, full disks


SLOW_JOB = 200  # entries; one is missing: 199 records


@pytest.fixture
def slow_job(tmp_path):
    """A list of 200 entries of an 800x800 detailed JPEG: about a second of work on two workers,
    10 MB of 224-px records (about 52 KB each). The .rec is written through a 1 MiB buffer,
    so it first grows on disk after about 20 records: a tenth of the run, long before its end."""
    root = tmp_path / "img"
    root.mkdir()
    rng = np.random.default_rng(0)
    big = cv2.resize(rng.integers(0, 255, (200, 200, 3), dtype=np.uint8), (800, 800), interpolation=cv2.INTER_CUBIC)
    (root / "big.jpg").write_bytes(cv2.imencode(".jpg", big, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes())
    (root / "small.jpg").write_bytes(jpeg_bytes())
    entries = [ListEntry(i, (float(i % 5),), "big.jpg" if i % 10 else "small.jpg") for i in range(SLOW_JOB)]
    entries[7] = ListEntry(7, (0.0,), "missing.jpg")
    write_lst(tmp_path / "slow.lst", entries)
    return tmp_path / "slow.lst", root


SLOW_ARGS = ["--resize", "224", "--full-decode", "--workers", "2", "-q"]


def descendants(pid):
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(c) for c in f.read().split()]
                out += kids
                stack += kids
        except OSError:
            pass
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def wait_for_records(path, n, proc, timeout=30):
    until = time.time() + timeout  # a hang guard, not a measure: the file grows long before
    while time.time() < until and proc.poll() is None:
        if os.path.exists(path) and os.path.getsize(path) > n:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} did not grow past {n} bytes")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc"), reason="needs Linux /proc")
@pytest.mark.parametrize("sig,status,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_signal_stops_workers_and_leaves_no_final_file(slow_job, tmp_path, sig, status, word):
    lst, root = slow_job
    proc = cli("pack", lst, root, tmp_path / "o.rec", *SLOW_ARGS)
    wait_for_records(tmp_path / "o.rec.partial", 20_000, proc)
    workers = descendants(proc.pid)
    assert len(workers) >= 2
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)  # a hang guard: the run stops, it does not wait for its workers
    assert proc.returncode == status
    kept = (tmp_path / "o.idx.partial").read_text().splitlines()
    assert 0 < len(kept) < SLOW_JOB - 1  # stopped part-way: the records before the signal kept, not the run finished
    assert err == f"Error: {word}; the finished part is kept in {tmp_path / 'o.rec.partial'}: rerun with --resume to continue\n"
    assert not any(alive(p) for p in workers)
    assert not any((tmp_path / n).exists() for n in ("o.rec", "o.idx", "o.failed.tsv"))


@pytest.mark.slow
def test_kill_9_then_resume_gives_identical_bytes(slow_job, tmp_path):
    lst, root = slow_job
    ref = run("pack", lst, root, tmp_path / "ref.rec", *SLOW_ARGS)
    assert ref.exit_code == 0, ref.output
    proc = cli("pack", lst, root, tmp_path / "o.rec", *SLOW_ARGS)
    wait_for_records(tmp_path / "o.rec.partial", 300_000, proc)
    workers = descendants(proc.pid)
    assert len(workers) >= 2
    proc.kill()
    proc.wait()
    with deadline(60, "workers outliving their killed parent"):  # a hang guard: they are killed with it (PR_SET_PDEATHSIG)
        while any(alive(p) for p in workers):
            time.sleep(0.02)
    assert not (tmp_path / "o.rec").exists()
    again = run("pack", lst, root, tmp_path / "o.rec", *SLOW_ARGS)
    assert again.exit_code == 1 and "--resume" in again.stderr  # a plain rerun refuses to clobber
    resumed = subprocess.run([sys.executable, "-m", "im2rec", "pack", lst, root, tmp_path / "o.rec", *SLOW_ARGS[:-1], "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "(resumed after " in resumed.stdout
    for ext in ("rec", "idx", "failed.tsv"):
        assert file_or_none(tmp_path / f"o.{ext}") == file_or_none(tmp_path / f"ref.{ext}"), ext
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("o.")) == ["o.failed.tsv", "o.idx", "o.rec"]  # missing.jpg failed
    done = run("pack", lst, root, tmp_path / "o.rec", "--resume")
    assert done.exit_code == 0 and done.stdout == f"{tmp_path / 'o.rec'} is already complete: nothing to resume\n"


@pytest.mark.slow
def test_kill_9_then_resume_of_a_part(slow_job, tmp_path):
    lst, root = slow_job
    part = [*SLOW_ARGS, "--num-parts", "2", "--part-index", "1"]
    ref = run("pack", lst, root, tmp_path / "ref.rec", *part)
    assert ref.exit_code == 0, ref.output
    proc = cli("pack", lst, root, tmp_path / "o.rec", *part)
    wait_for_records(tmp_path / "o-00001-of-00002.rec.partial", 300_000, proc)
    proc.kill()
    proc.wait()
    resumed = subprocess.run([sys.executable, "-m", "im2rec", "pack", lst, root, tmp_path / "o.rec", *[a for a in part if a != "-q"], "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "(resumed after " in resumed.stdout
    for ext in ("rec", "idx", "failed.tsv"):
        assert file_or_none(tmp_path / f"o-00001-of-00002.{ext}") == file_or_none(tmp_path / f"ref-00001-of-00002.{ext}"), ext


def test_resume_with_torn_record_and_lagging_idx(data_dir, tmp_path):
    lst = data_dir / "im2rec" / "all.lst"
    args = ["--pass-through"]
    assert run("pack", lst, data_dir / "tree", tmp_path / "ref.rec", *args).exit_code == 0
    # Fake an interrupted run: a partial .rec cut inside its 6th record, an .idx lagging 2 records behind, its last line torn.
    assert run("pack", lst, data_dir / "tree", tmp_path / "o.rec", *args).exit_code == 0
    rec, idx = (tmp_path / "o.rec").read_bytes(), (tmp_path / "o.idx").read_text().splitlines()
    sixth = int(idx[5].split("\t")[1])
    (tmp_path / "o.rec.partial").write_bytes(rec[: sixth + 100])
    (tmp_path / "o.idx.partial").write_text("\n".join(idx[:3]) + "\n" + idx[3][:-2])  # and a line the kill cut short
    (tmp_path / "o.failed.tsv.partial").write_text("index\tpath\treason\n")
    (tmp_path / "o.rec").rename(tmp_path / "keep.rec")
    (tmp_path / "o.idx").unlink()
    assert not (tmp_path / "o.failed.tsv").exists()  # nothing failed
    from im2rec.image import ImageOptions
    from im2rec.packing import PackOptions
    from im2rec.packing.pipeline import _fingerprint

    state = _fingerprint(str(lst), str(lst), str(data_dir / "tree"), PackOptions(image=ImageOptions(pass_through=True)))
    (tmp_path / "o.resume.json").write_text(json.dumps(state))
    result = run("pack", lst, data_dir / "tree", tmp_path / "o.rec", *args, "--resume")
    assert result.exit_code == 0, result.output
    assert "resumed after 5" in result.stdout
    assert (tmp_path / "o.rec").read_bytes() == (tmp_path / "ref.rec").read_bytes()
    assert (tmp_path / "o.idx").read_bytes() == (tmp_path / "ref.idx").read_bytes()


@pytest.mark.slow
def test_resume_refuses_other_options(slow_job, tmp_path):
    lst, root = slow_job
    proc = cli("pack", lst, root, tmp_path / "o.rec", *SLOW_ARGS)
    wait_for_records(tmp_path / "o.rec.partial", 20_000, proc)
    proc.kill()
    proc.wait()
    result = run("pack", lst, root, tmp_path / "o.rec", "--resize", "100", "--resume")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: cannot resume {tmp_path / 'o.rec'}: the interrupted run was made with another --resize, --full-decode; "
        "rerun the same command with --resume, or use --overwrite to start again\n"
    )
    with open(lst, "a") as f:  # the same list file, another line: named as a user knows it
        f.write(f"{SLOW_JOB}\t0.000000\tbig.jpg\n")
    result = run("pack", lst, root, tmp_path / "o.rec", *SLOW_ARGS, "--resume")
    assert result.exit_code == 1
    assert f"Error: cannot resume {tmp_path / 'o.rec'}: the interrupted run was made with another LIST (its lines changed); rerun" in result.stderr
    assert run("pack", lst, root, tmp_path / "o.rec", "--resize", "100", "--overwrite", "--workers", "2").exit_code == 0
    assert not list(tmp_path.glob("*.partial")) and not (tmp_path / "o.resume.json").exists()


def test_resume_keeps_the_alpha_background_and_refuses_another(tmp_path):
    """--alpha-background changes bytes: a resumed run must have the same one (white and #FFFFFF are the same)."""
    root = tmp_path / "img"
    root.mkdir()
    picture = np.random.default_rng(0).integers(0, 256, (30, 40), dtype=np.uint8)
    cv2.imwrite(str(root / "a.png"), np.dstack([np.full_like(picture, 255)] * 3 + [picture]))
    cv2.imwrite(str(root / "b.png"), np.dstack([picture] * 3 + [255 - picture]))
    write_lst(tmp_path / "t.lst", [ListEntry(0, (0.0,), "a.png"), ListEntry(1, (0.0,), "gone.png"), ListEntry(2, (0.0,), "b.png")])
    args = ["--encoding", ".png", "--workers", "1"]
    assert run("pack", tmp_path / "t.lst", root, tmp_path / "ref.rec", *args, "--alpha-background", "white").exit_code == 0
    stopped = run("pack", tmp_path / "t.lst", root, tmp_path / "o.rec", *args, "--alpha-background", "white", "--max-errors", "0")
    assert stopped.exit_code == 1 and (tmp_path / "o.rec.partial").exists()
    for other in (["--alpha-background", "black"], []):
        refused = run("pack", tmp_path / "t.lst", root, tmp_path / "o.rec", *args, *other, "--resume")
        assert refused.exit_code == 1 and "the interrupted run was made with another --alpha-background; rerun" in refused.stderr
    resumed = run("pack", tmp_path / "t.lst", root, tmp_path / "o.rec", *args, "--alpha-background", "#FFFFFF", "--resume", "--stats", tmp_path / "s.json")
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.rstrip().endswith("; 1 image had transparency (since the resume), composited over #FFFFFF")
    assert (tmp_path / "o.rec").read_bytes() == (tmp_path / "ref.rec").read_bytes()
    transparency = json.loads((tmp_path / "s.json").read_text())["transparency"]
    assert transparency["images"] == 1 and transparency["counted_from"] == 1


@pytest.mark.slow
def test_file_size_limit_is_a_clear_error(slow_job, tmp_path):
    lst, root = slow_job

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    proc = subprocess.run(
        [sys.executable, "-m", "im2rec", "pack", lst, root, tmp_path / "o.rec", *SLOW_ARGS],
        capture_output=True,
        text=True,
        preexec_fn=limit,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"Error: {tmp_path / 'o.rec.partial'}: File too large; the partial output is kept")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o.rec").exists() and not (tmp_path / "o.idx").exists()


# --------------------------------------------------------------------------- the audit trail


def test_stats_json(data_dir, tmp_path):
    result = run("pack", data_dir / "im2rec" / "all.lst", data_dir / "tree", tmp_path / "a.rec", "--resize", "32", "--stats", tmp_path / "a.json")
    assert result.exit_code == 0
    stats = json.loads((tmp_path / "a.json").read_text())
    assert stats["im2rec"] == __import__("im2rec").__version__
    assert stats["options"]["image"]["resize"] == 32 and stats["options"]["image"]["quality"] is None
    assert stats["counts"] == {"images": 14, "packed": 14, "failed": 0, "failed_by_reason": {}, "requests_retried": 0}
    assert stats["bytes"] == (tmp_path / "a.rec").stat().st_size
    for key in ("rec", "idx"):
        path = stats["outputs"][key]["path"]
        assert stats["outputs"][key]["sha256"] == hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert stats["complete"] is True and stats["seconds"] > 0


@pytest.mark.slow
def test_ci_example_script(data_dir, tmp_path):
    script = os.path.join(os.path.dirname(__file__), "..", "examples", "ci_prepare.sh")
    images = tmp_path / "images"
    shutil.copytree(data_dir / "tree", images)
    env = dict(os.environ, IMAGES=str(images), OUT=str(tmp_path / "out"), PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    ok = subprocess.run(["bash", script], env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    packed = [json.loads((tmp_path / "out" / f"{split}.stats.json").read_text())["counts"]["packed"] for split in ("train", "val")]
    assert packed == [10, 4]  # 90% of every class (stratified), the rest in val
    (images / "cats" / "broken.jpg").write_bytes(b"oops")
    shutil.rmtree(tmp_path / "out")
    bad = subprocess.run(["bash", script], env=env, capture_output=True, text=True)
    assert bad.returncode == 1
    assert "1 image(s) failed (--strict)" in bad.stderr
    failed = [json.loads((tmp_path / "out" / f"{split}.stats.json").read_text())["counts"]["failed"] for split in ("train", "val")]
    assert sum(failed) == 1


# --------------------------------------------------------------------------- images libjpeg decodes only with a warning


def damaged_copies(jpeg: bytes) -> dict[str, tuple[bytes, str]]:
    """A real-size JPEG damaged two ways libjpeg decodes with a warning (OpenCV returns the
    image, grey where data was lost), and the reason each must get."""
    zeros = bytearray(jpeg)
    zeros[len(zeros) // 2 : len(zeros) // 2 + 2000] = b"\0" * 2000
    flipped = bytearray(jpeg)
    for i in np.random.default_rng(0).integers(1000, len(flipped) - 10, 20):
        flipped[i] ^= 0xFF
    return {
        "zeros.jpg": (bytes(zeros), "corrupt: premature end of data segment"),
        "flipped.jpg": (bytes(flipped), "corrupt: "),
    }


@pytest.fixture
def damaged_folder(real_size_folders, tmp_path):
    """The real-size ImageNet-like images, two damaged copies among them, and their list."""
    root = tmp_path / "img"
    shutil.copytree(real_size_folders["imagenet"], root)
    first = sorted(root.rglob("*.jpg"))[0]
    for name, (data, _) in damaged_copies(first.read_bytes()).items():
        (root / name).write_bytes(data)
    assert run("list", root, tmp_path / "all", "--no-shuffle").exit_code == 0
    return root, tmp_path / "all.lst"


@pytest.mark.slow
def test_a_jpeg_decoded_only_with_a_warning_is_a_named_failure(damaged_folder, tmp_path):
    """Default options, a process of its own (libjpeg prints to file descriptor 2): the damaged
    JPEGs are listed and counted, the others packed, and nothing of libjpeg's reaches stderr."""
    root, lst = damaged_folder
    proc = cli("pack", lst, root, tmp_path / "out.rec")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "Corrupt JPEG data" not in err and "premature end" not in err
    failed = {line.split("\t")[1]: line.split("\t")[2] for line in (tmp_path / "out.failed.tsv").read_text().splitlines()[1:]}
    reasons = {name: reason for name, (_, reason) in damaged_copies(b"\xff" * 3000).items()}
    assert set(failed) == set(reasons)
    for name, reason in reasons.items():
        assert failed[name].startswith(reason), failed[name]
    assert "packed 20 of 22 images" in out and "2 failed (2 corrupt)" in out


@pytest.mark.slow
def test_verify_decode_names_a_jpeg_decoded_only_with_a_warning(damaged_folder, tmp_path):
    root, lst = damaged_folder
    assert run("pack", lst, root, tmp_path / "p.rec", "--pass-through").exit_code == 0  # the bytes look fine
    index = recordio.read_index(tmp_path / "p.idx")
    keys = {line.split("\t")[2]: int(line.split("\t")[0]) for line in lst.read_text().splitlines()}
    proc = cli("verify", tmp_path / "p.rec", "--decode")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1
    key = keys["zeros.jpg"]
    assert f"byte {index.offset(key)}, key {key}: image damaged (decoded with the decoder's warning): premature end of data segment" in err, err
    assert "Corrupt JPEG data" not in err
    assert "22 records" in out and "20 images decoded" in out


@pytest.mark.slow
def test_im2rec_py_lists_the_damaged_jpegs(damaged_folder, tmp_path):
    root, lst = damaged_folder
    shutil.copy(lst, tmp_path / "legacy.lst")
    proc = subprocess.run([sys.executable, "-m", "im2rec.legacy", str(tmp_path / "legacy"), str(root) + os.sep, "--resize", "64"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    failed = (tmp_path / "legacy.failed.tsv").read_text()
    assert "zeros.jpg\tcorrupt: premature end of data segment" in failed and "flipped.jpg\tcorrupt: " in failed
    assert "Corrupt JPEG data" not in proc.stderr


@pytest.mark.slow
def test_import_with_image_options_lists_a_jpeg_decoded_only_with_a_warning(damaged_folder, tmp_path):
    """An export of the pass-through pack (its bytes as they are), imported with --resize: the
    damaged JPEGs are decoded in pack's pool, and are failures there too."""
    root, lst = damaged_folder
    assert run("pack", lst, root, tmp_path / "p.rec", "--pass-through").exit_code == 0
    assert run("export", tmp_path / "p.rec", tmp_path / "wds", "--format", "webdataset").exit_code == 0
    proc = cli("import", tmp_path / "wds", tmp_path / "back.rec", "--resize", "64")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "packed 20 of 22 images" in out and "2 failed (2 corrupt)" in out
    failed = (tmp_path / "back.failed.tsv").read_text()
    assert "corrupt: premature end of data segment" in failed and "Corrupt JPEG data" not in err


@pytest.mark.parametrize(
    "args,option,said",
    [
        (["pack", "{lst}", "{root}", "outdir/"], "'[OUT]'", "'outdir/' ends with '/', a folder: name the file"),
        (["pack", "{lst}", "{root}", "o.rec", "--stats", "nodir/"], "'--stats'", "'nodir/' ends with '/', a folder: name the file"),
        (["inspect", "{rec}", "--grid", "nodir/"], "'--grid'", "'nodir/' ends with '/', a folder: name the file"),
        (["list", "{root}", "data/"], "'PREFIX'", "'data/' ends with '/', a folder: name the lists, such as data/train"),
    ],
)
def test_an_output_named_as_a_folder_is_a_usage_error(data_dir, tmp_path, monkeypatch, args, option, said):
    """Found by the new user: `pack ... outdir/` and `--stats nodir/` ended in a traceback, `list ... data/` wrote data/.lst."""
    monkeypatch.chdir(tmp_path)
    golden = data_dir / "im2rec_pack_pass"
    given = [a.format(lst=golden / "all.lst", root=data_dir / "tree", rec=golden / "all.rec") for a in args]
    result = run(*given)
    assert result.exit_code == 2 and result.stderr.endswith(f"\nError: Invalid value for {option}: {said}\n"), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_an_output_folder_that_cannot_be_written_is_one_error_line(data_dir):
    golden = data_dir / "im2rec_pack_pass"
    result = run("pack", golden / "all.lst", data_dir / "tree", "/proc/x.rec", "--pass-through")
    assert (result.exit_code, result.stderr) == (1, "Error: cannot write /proc/x.failed.tsv: No such file or directory\n")
