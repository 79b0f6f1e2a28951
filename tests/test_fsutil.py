"""Atomic outputs and write-behind."""

import os

import pytest

from im2rec import fsutil


def test_commit_replaces_atomically(tmp_path):
    tmp, final = tmp_path / "x.partial", tmp_path / "x"
    final.write_bytes(b"old")
    tmp.write_bytes(b"new")
    fsutil.commit(tmp, final)
    assert final.read_bytes() == b"new" and not tmp.exists()


def test_atomic_open_leaves_nothing_on_error(tmp_path):
    with pytest.raises(RuntimeError), fsutil.atomic_open(tmp_path / "out.txt") as f:
        f.write("half")
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_write_behind_starts_writeback_every_step(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(fsutil, "_SYNC_FILE_RANGE", lambda fd, start, n, flags: calls.append((start, n, flags)) or 0)
    with open(tmp_path / "out.rec", "wb", buffering=1 << 20) as f:
        f.write(b"h" * 10)
        behind = fsutil.WriteBehind(f, step=100)
        for _ in range(25):
            f.write(b"x" * 10)
            behind(f.tell())
    assert calls == [(10, 100, 2), (110, 100, 2)]  # from where it started, one step at a time
    assert (tmp_path / "out.rec").read_bytes() == b"h" * 10 + b"x" * 250


@pytest.mark.skipif(fsutil._SYNC_FILE_RANGE is None, reason="sync_file_range is Linux only")
def test_write_behind_real_syscall_keeps_the_bytes(tmp_path):
    with open(tmp_path / "out.rec", "wb") as f:
        behind = fsutil.WriteBehind(f, step=4096)
        for i in range(64):
            f.write(bytes([i]) * 1000)
            behind(f.tell())
    assert (tmp_path / "out.rec").read_bytes() == b"".join(bytes([i]) * 1000 for i in range(64))


def test_start_writeback_asks_for_the_whole_file(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(fsutil, "_SYNC_FILE_RANGE", lambda fd, start, n, flags: calls.append((start, n, flags)) or 0)
    (tmp_path / "done.rec").write_bytes(b"x" * 100)
    fsutil.start_writeback(tmp_path / "done.rec")
    assert calls == [(0, 0, 2)]
    assert (tmp_path / "done.rec").read_bytes() == b"x" * 100


def test_start_writeback_real_syscall(tmp_path):
    (tmp_path / "done.rec").write_bytes(b"y" * 10000)
    fsutil.start_writeback(tmp_path / "done.rec")  # must not raise, on Linux or elsewhere
    assert (tmp_path / "done.rec").read_bytes() == b"y" * 10000
