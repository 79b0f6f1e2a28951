"""RecordLoader: DataLoader's batches, from threads of one process."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import deadline  # noqa: E402

import im2rec  # noqa: E402
from im2rec import recordio  # noqa: E402
from im2rec.errors import ImageError  # noqa: E402

DATA = Path(__file__).parent / "data"


def crop(img: np.ndarray) -> np.ndarray:
    """The shorter side to 64 (OpenCV, area), the centre 56x56, float32 CHW in [0, 1]."""
    import cv2

    h, w = img.shape[:2]
    s = 64 / min(h, w)
    img = cv2.resize(img, (max(64, round(w * s)), max(64, round(h * s))), interpolation=cv2.INTER_AREA)
    y, x = (img.shape[0] - 56) // 2, (img.shape[1] - 56) // 2
    return np.ascontiguousarray(img[y : y + 56, x : x + 56].transpose(2, 0, 1), dtype=np.float32) / 255


@pytest.fixture(scope="module")
def rec(real_size_folders, tmp_path_factory):
    """The ImageNet-like corpus, listed and packed with the default options."""
    from click.testing import CliRunner

    from im2rec.cli import main

    out = tmp_path_factory.mktemp("loader")
    for args in (["list", str(real_size_folders["imagenet"]), str(out / "all")], ["pack", str(out / "all.lst"), str(real_size_folders["imagenet"]), "-q"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
    return out / "all.rec"


def _data_loader_batches(rec, batch_size, sampler, **kw):
    ds = im2rec.RecordDataset(rec, transform=crop)
    return list(torch.utils.data.DataLoader(ds, batch_size=batch_size, sampler=sampler, **kw))


def test_the_batches_are_a_data_loaders(rec):
    """The same order, pixels and labels as DataLoader(RecordDataset, num_workers=2) with the
    same sampler and transform, in every thread count; the last batch short."""
    ds = im2rec.RecordDataset(rec)
    want = _data_loader_batches(rec, 6, im2rec.RecordSampler(ds, shuffle=True, seed=3), num_workers=2)
    for threads in (1, 3):
        with deadline(120, "an epoch"):
            got = list(im2rec.RecordLoader(rec, 6, transform=crop, sampler=im2rec.RecordSampler(ds, shuffle=True, seed=3), threads=threads))
        assert len(got) == len(want) == 4
        for (images, labels), (want_images, want_labels) in zip(got, want):
            assert images.dtype == torch.float32 and images.shape[1:] == (3, 56, 56)
            assert torch.equal(images, want_images) and torch.equal(labels, want_labels) and labels.dtype == torch.float64


def test_shuffle_seed_epochs_drop_last_and_len(rec):
    n = len(im2rec.RecordDataset(rec))
    loader = im2rec.RecordLoader(rec, 8, transform=crop, shuffle=True, seed=5)
    assert len(loader) == 3 and len(im2rec.RecordLoader(rec, 8, transform=crop, drop_last=True)) == 2
    first = torch.cat([labels for _, labels in loader])
    second = torch.cat([labels for _, labels in loader])  # the next epoch: another order
    assert first.numel() == second.numel() == n and not torch.equal(first, second)
    again = im2rec.RecordLoader(rec, 8, transform=crop, shuffle=True, seed=5)
    assert torch.equal(torch.cat([labels for _, labels in again]), first)
    again.set_epoch(1)
    assert torch.equal(torch.cat([labels for _, labels in again]), second)
    dropped = [images.shape[0] for images, _ in im2rec.RecordLoader(rec, 8, transform=crop, drop_last=True)]
    assert dropped == [8, 8]
    plain = [labels for _, labels in im2rec.RecordLoader(rec, 8, transform=crop)]
    ds = im2rec.RecordDataset(rec, mode="raw")
    assert torch.cat(plain).tolist() == [ds.header(i).label for i in range(n)]  # no shuffle: file order


def test_resume_gives_the_rest_of_the_epoch(rec):
    loader = im2rec.RecordLoader(rec, 4, transform=crop, shuffle=True, seed=1)
    whole = [labels for _, labels in loader]
    loader = im2rec.RecordLoader(rec, 4, transform=crop, shuffle=True, seed=1)
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    assert state["taken"] == 8 and state["sampler"]["consumed"] == 8
    it.close()
    resumed = im2rec.RecordLoader(rec, 4, transform=crop, shuffle=True, seed=1)
    resumed.load_state_dict(state)
    rest = [labels for _, labels in resumed]
    assert torch.equal(torch.cat(rest), torch.cat(whole[2:]))


def test_ranks_share_the_epoch(rec):
    ds = im2rec.RecordDataset(rec)
    seen = []
    for rank in (0, 1):
        sampler = im2rec.RecordSampler(ds, shuffle=True, num_replicas=2, rank=rank)
        seen += [i for images, _ in im2rec.RecordLoader(ds, 3, transform=lambda img: np.asarray(img.shape, np.int64), sampler=sampler) for i in range(images.shape[0])]
    assert len(seen) == len(ds)


def test_images_without_a_transform_and_insightface_sets():
    """A face set (112x112 each): HWC uint8 batches, no transform needed; a tensor transform."""
    train = DATA / "insightface" / "train.rec"
    ds = im2rec.RecordDataset(train)
    images, labels = next(iter(im2rec.RecordLoader(train, 5)))
    assert images.shape == (5, 112, 112, 3) and images.dtype == torch.uint8
    assert torch.equal(images[2], torch.from_numpy(ds[2][0])) and labels.tolist() == [ds[i][1] for i in range(5)]
    flipped, _ = next(iter(im2rec.RecordLoader(train, 5, transform=lambda img: torch.from_numpy(img).permute(2, 0, 1).flip(-1), target_transform=int)))
    assert flipped.shape == (5, 3, 112, 112) and torch.equal(flipped[0], torch.from_numpy(ds[0][0]).permute(2, 0, 1).flip(-1))

    class Image(torch.Tensor):  # a tensor subclass, as torchvision's v2 ToImage gives (tv_tensors.Image)
        pass

    made, _ = next(iter(im2rec.RecordLoader(train, 5, transform=lambda img: torch.from_numpy(img).permute(2, 0, 1).as_subclass(Image))))
    assert type(made) is torch.Tensor and made.shape == (5, 3, 112, 112) and torch.equal(made[4], torch.from_numpy(ds[4][0]).permute(2, 0, 1))


def test_images_of_several_sizes_need_a_transform_and_the_error_names_the_record(rec):
    ds = im2rec.RecordDataset(rec)
    shapes = [ds[i][0].shape for i in range(2)]
    assert shapes[0] != shapes[1]
    with pytest.raises(ImageError) as e:
        list(im2rec.RecordLoader(rec, 4, threads=1))  # one thread: record 0 sets the batch's shape
    (path, offset, key), (_, first, key0) = ds.locate(1), ds.locate(0)
    assert str(e.value) == f"{path}: record {key} (byte {offset}): its image is {shapes[1]} torch.uint8, the batch's are {shapes[0]} torch.uint8 (as record {key0}'s at byte {first}, the first made): a batch needs one shape and dtype (resize or crop in the transform)"
    with pytest.raises(ImageError, match=r"the transform gave a str: a RecordLoader batches numpy arrays and tensors"):
        list(im2rec.RecordLoader(rec, 4, transform=str))


@pytest.fixture()
def damaged_rec(real_size_folders, tmp_path):
    jpegs = [p.read_bytes() for p in sorted(real_size_folders["imagenet"].rglob("*.jpg"))[:10]]
    bad = bytearray(jpegs[3])
    bad[len(bad) // 2 : len(bad) // 2 + 2000] = bytes(2000)
    jpegs[3] = bytes(bad)
    with recordio.RecordWriter(tmp_path / "d.rec", tmp_path / "d.idx") as w:
        for key, data in enumerate(jpegs):
            w.write_idx(key, recordio.pack(recordio.IRHeader(0, float(key), key, 0), data))
    return tmp_path / "d.rec"


def test_damaged_records_warn_skip_or_raise(damaged_rec, caplog):
    from im2rec.image import imdecode_checked

    offset = recordio.read_index(damaged_rec.with_suffix(".idx")).offset(3)
    where = f"{damaged_rec}: record 3 (byte {offset})"
    words = imdecode_checked(im2rec.RecordDataset(damaged_rec, mode="raw")[3][0]).damage
    assert words.startswith("Corrupt JPEG data: ")
    with caplog.at_level(logging.WARNING):
        loader = im2rec.RecordLoader(damaged_rec, 4, transform=crop)
        assert torch.cat([labels for _, labels in loader]).tolist() == list(range(10)) and loader.damaged == 1
    assert [r.getMessage() for r in caplog.records] == [f"{where}: {words}: the image is damaged (`im2rec verify {damaged_rec} --decode` lists every such record)"]
    assert [r.name for r in caplog.records] == ["im2rec.image"]
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="im2rec.image"):  # the README's way to quiet them: the count stays
        quiet = im2rec.RecordLoader(damaged_rec, 4, transform=crop)
        assert sum(len(labels) for _, labels in quiet) == 10 and quiet.damaged == 1
    assert caplog.records == []
    skipping = im2rec.RecordLoader(damaged_rec, 4, transform=crop, on_damaged="skip")
    batches = [labels.tolist() for _, labels in skipping]
    assert batches == [[0, 1, 2, 4], [4, 5, 6, 7], [8, 9]]  # its row taken by the next good record: the batches keep their size
    with pytest.raises(ImageError, match=r"^" + __import__("re").escape(f"{where}: {words}: the image is damaged (on_damaged='raise')") + "$"):
        list(im2rec.RecordLoader(damaged_rec, 4, transform=crop, on_damaged="raise"))


def test_arguments_are_checked_and_pin_memory_without_a_gpu_warns(rec, caplog):
    with pytest.raises(ValueError, match=r"^batch_size must be a positive integer, got 0$"):
        im2rec.RecordLoader(rec, 0)
    with pytest.raises(ValueError, match=r"^mode, on_damaged: the RecordDataset's own \(RecordDataset\(\.\.\., mode=\.\.\.\)\), not RecordLoader's when it is given one$"):
        im2rec.RecordLoader(im2rec.RecordDataset(rec), 2, mode="gray", on_damaged="skip")
    with pytest.raises(ValueError, match=r"^sampler and shuffle are mutually exclusive"):
        im2rec.RecordLoader(rec, 2, shuffle=True, sampler=[0, 1])
    with caplog.at_level(logging.WARNING):
        loader = im2rec.RecordLoader(rec, 4, transform=crop, pin_memory=True, sampler=[3, 1, 2])
        ((images, _),) = list(loader)
    assert images.shape[0] == 3 and loader.pin_memory == torch.cuda.is_available()
    assert not torch.cuda.is_available() and "pin_memory=True, but there is no GPU" in caplog.text


def test_a_loop_that_breaks_stops_the_threads(rec):
    with deadline(60, "a broken-off epoch"):
        loader = im2rec.RecordLoader(rec, 2, transform=crop, prefetch=1)
        for _ in loader:
            break
        assert loader._live is None  # the producer thread joined
        threads = list(loader._pool._threads)
        loader.close()
    assert threads and not [t for t in threads if t.is_alive()]
    assert not [t for t in threading.enumerate() if t.name == "im2rec-loader-batches"]


def test_the_training_example_trains_and_resumes(rec, tmp_path):
    """examples/train_pytorch.py as the README runs it: an epoch, a checkpoint, then the next epoch from it."""
    import subprocess
    import sys

    script = Path(__file__).parent.parent / "examples" / "train_pytorch.py"
    ck = tmp_path / "ck.pt"
    first = subprocess.run([sys.executable, str(script), str(rec), "--epochs", "1", "--batch-size", "4", "--checkpoint", str(ck), "--save-every", "2"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("epoch 0: 20 images on rank 0, loss ")
    state = torch.load(ck, weights_only=False)["loader"]
    assert state["epoch"] == 1 and state["sampler"]["consumed"] == 0
    second = subprocess.run([sys.executable, str(script), str(rec), "--epochs", "2", "--batch-size", "4", "--checkpoint", str(ck)], capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    lines = second.stdout.splitlines()
    assert lines[0] == "resumed epoch 1 after 0 samples" and lines[1].startswith("epoch 1: 20 images on rank 0, loss ")


def test_a_transform_with_out_writes_its_row_of_the_batch(rec):
    """``transform(image, out=None)``: given its row (once the first sample showed the shape),
    it writes there; the batches are those of the same transform returning new arrays."""
    calls = {"out": 0, "new": 0}

    def into(img, out=None):
        calls["new" if out is None else "out"] += 1
        result = crop(img)
        if out is None:
            return result
        out[...] = result
        return out

    want = list(im2rec.RecordLoader(rec, 4, transform=crop, threads=2))
    got = list(im2rec.RecordLoader(rec, 4, transform=into, threads=2))
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(want, got)) and len(got) == 5
    assert calls["out"] >= 16 and calls["new"] + calls["out"] == 20


def test_skip_keeps_batches_and_ranks_in_step_whatever_is_damaged(real_size_folders, tmp_path):
    """One record in four damaged at random, or the last ones, or the first: every batch of
    every rank its size (a DDP job's ranks stay in step), ``len(loader)`` what comes out."""
    jpegs = [p.read_bytes() for p in sorted(real_size_folders["imagenet"].rglob("*.jpg"))[:12]]
    bad = bytearray(jpegs[0])
    bad[len(bad) // 2 : len(bad) // 2 + 2000] = bytes(2000)
    rng = np.random.default_rng(1)
    for name, damaged in {"random": list(rng.random(41) < 0.25), "end": [False] * 20 + [True] * 4, "start": [True] * 5 + [False] * 4}.items():
        rec = tmp_path / f"{name}.rec"
        with recordio.RecordWriter(rec, rec.with_suffix(".idx")) as w:
            for key, is_bad in enumerate(damaged):
                w.write_idx(key, recordio.pack(recordio.IRHeader(0, float(key), key, 0), bytes(bad) if is_bad else jpegs[key % 12]))
        ds = im2rec.RecordDataset(rec, on_damaged="skip")
        for batch_size in (4, 5, 10):
            for drop_last in (False, True):
                sizes = []
                for rank in (0, 1):
                    loader = im2rec.RecordLoader(ds, batch_size, transform=crop, drop_last=drop_last, sampler=im2rec.RecordSampler(ds, shuffle=True, num_replicas=2, rank=rank))
                    got = [labels.tolist() for _, labels in loader]
                    assert len(got) == len(loader)
                    assert all(not damaged[int(x)] for b in got for x in b)
                    sizes.append([len(b) for b in got])
                share = -(-len(damaged) // 2)
                assert sizes[0] == sizes[1] == ([batch_size] * (share // batch_size) + ([share % batch_size] if share % batch_size and not drop_last else []))


def test_a_list_given_for_the_rec_and_a_transform_that_fails_are_said_with_the_file(rec, tmp_path):
    lst = rec.with_suffix(".lst")
    with pytest.raises(im2rec.Im2recError) as e:
        im2rec.RecordLoader(lst, 4)
    size = min(lst.stat().st_size, 1 << 16)
    assert str(e.value) == f"{lst}: not a RecordIO file: it starts with bytes {lst.read_bytes()[:4].hex(' ')}, and no record magic (ce d7 23 0a) is in its first {size:,} bytes (a .lst: pack it first, `im2rec pack`)"

    def broken(img):
        raise ZeroDivisionError("no")

    with pytest.raises(ZeroDivisionError) as z:
        list(im2rec.RecordLoader(rec, 4, transform=broken, threads=1))
    path, offset, key = im2rec.RecordDataset(rec).locate(0)
    if hasattr(z.value, "add_note"):
        assert z.value.__notes__ == [f"(in RecordLoader's transform, on {path}: record {key} (byte {offset}))"]
