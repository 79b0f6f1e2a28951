"""RecordSampler: exact over ranks, deterministic, elastic resume (W -> W'), StatefulDataLoader."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from im2rec import RecordDataset, RecordSampler
from im2rec.recordio import IRHeader, RecordWriter, pack

LENGTHS = (0, 1, 2, 7, 64, 97, 1000, 1001)
REPLICAS = (1, 2, 3, 4, 8, 13)


class Sized:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def epoch(n: int, replicas: int, *, seed: int = 0, epoch: int = 0, **kw) -> list[list[int]]:
    out = []
    for rank in range(replicas):
        sampler = RecordSampler(Sized(n), num_replicas=replicas, rank=rank, seed=seed, **kw)
        sampler.set_epoch(epoch)
        got = list(sampler)
        assert len(got) == len(sampler)
        out.append(got)
    return out


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("block_local", [True, False])
def test_exact_over_any_length_and_ranks(drop_last, block_local):
    for n in LENGTHS:
        for w in REPLICAS:
            ranks = epoch(n, w, drop_last=drop_last, block_local=block_local, block_size=5)
            assert len({len(r) for r in ranks}) == 1, (n, w)  # every rank the same number
            every = [i for r in ranks for i in r]
            assert all(0 <= i < n for i in every)
            if drop_last:
                assert len(every) == len(set(every)) == n - n % w, (n, w)  # none repeated, at most w - 1 left out
            else:
                assert set(every) == set(range(n)), (n, w)
                assert len(every) - n == (-n) % w <= w - 1, (n, w)  # the padding


def test_deterministic_and_new_each_epoch():
    a = epoch(1000, 4, seed=7, epoch=3)
    assert a == epoch(1000, 4, seed=7, epoch=3)
    assert a != epoch(1000, 4, seed=7, epoch=4)
    assert a != epoch(1000, 4, seed=8, epoch=3)
    # the same order in another interpreter (nothing depends on the process: no hash seed, no global RNG)
    code = (
        "import json, sys; from im2rec import RecordSampler\n"
        "class S:\n    def __len__(self): return 1000\n"
        "s = RecordSampler(S(), num_replicas=4, rank=2, seed=7); s.set_epoch(3); print(json.dumps(list(s)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout
    assert eval(out) == a[2]


def test_unshuffled_is_file_order_dealt_over_ranks():
    assert epoch(10, 3, shuffle=False) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    assert epoch(10, 3, shuffle=False, drop_last=True) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def test_block_local_order_keeps_blocks_together_and_mixes_windows():
    (order,) = epoch(640, 1, block_size=64, window=2, seed=1)
    blocks = [i // 64 for i in order]
    # each window of 2 blocks' records (128 positions) draws from exactly 2 blocks
    for w in range(5):
        assert len(set(blocks[w * 128 : (w + 1) * 128])) == 2
    assert sorted(order) == list(range(640)) and order != sorted(order)
    # a full permutation: no such structure
    (full,) = epoch(640, 1, block_local=False, seed=1)
    assert len({i // 64 for i in full[:128]}) > 5


def test_workers_get_blocks_of_their_own():
    """With the DataLoader's batch_size and num_workers, worker k's batches (k, k + 2, ...) read blocks no other worker reads."""
    (order,) = epoch(1024, 1, block_size=32, window=2, batch_size=16, num_workers=2)
    batches = [order[i : i + 16] for i in range(0, 1024, 16)]
    worker_blocks = [{i // 32 for b in batches[w::2] for i in b} for w in range(2)]
    assert not worker_blocks[0] & worker_blocks[1]
    assert sorted(order) == list(range(1024))


def consume(samplers, steps):
    iters = [iter(s) for s in samplers]
    return [[next(it) for _ in range(steps)] for it in iters]


@pytest.mark.parametrize(("w", "w2"), [(4, 4), (4, 2), (2, 4), (3, 5), (8, 1), (1, 3)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_elastic_resume_covers_the_rest_exactly_once(w, w2, drop_last):
    n, steps = 1001, 37
    first = [RecordSampler(Sized(n), num_replicas=w, rank=r, seed=5, drop_last=drop_last) for r in range(w)]
    for s in first:
        s.set_epoch(2)
    seen = [i for r in consume(first, steps) for i in r]
    state = first[0].state_dict()
    assert state["epoch"] == 2 and state["num_replicas"] == w and state["consumed"] == steps * w and state["seed"] == 5
    assert all(s.state_dict() == state for s in first)  # every rank saves the same state
    state = pickle.loads(pickle.dumps(state))
    after = [RecordSampler(Sized(n), num_replicas=w2, rank=r, seed=5, drop_last=drop_last) for r in range(w2)]
    for s in after:
        s.load_state_dict(state)
        s.set_epoch(2)  # the training loop's call for the resumed epoch keeps the resume
    expected = len(after[0])
    rest = [list(s) for s in after]
    assert {len(r) for r in rest} == {expected}
    rest_all = [i for r in rest for i in r]
    covered = set(seen) | set(rest_all)
    if drop_last:
        assert len(rest_all) == len(set(rest_all)) and not set(rest_all) & set(seen)  # none twice
        assert n - len(covered) <= (w - 1) + (w2 - 1)
    else:
        assert covered == set(range(n))
        assert len(seen) + len(rest_all) - n <= (w - 1) + (w2 - 1)  # padding only
    if w == w2:  # same ranks: the very same order as without the interruption
        whole = epoch(n, w, seed=5, epoch=2, drop_last=drop_last)
        assert rest == [r[steps:] for r in whole]


def test_resume_twice_and_by_hand():
    n = 500
    a = [RecordSampler(Sized(n), num_replicas=4, rank=r) for r in range(4)]
    seen = [i for r in consume(a, 20) for i in r]
    b = [RecordSampler(Sized(n), num_replicas=3, rank=r) for r in range(3)]
    for s in b:
        s.load_state_dict(a[0].state_dict())
    seen += [i for r in consume(b, 30) for i in r]
    state = b[0].state_dict()
    assert state["consumed"] == 80 + 90 and state["num_replicas"] == 4  # still positions of the 4-rank order
    c = [RecordSampler(Sized(n), num_replicas=2, rank=r) for r in range(2)]
    for s in c:
        s.load_state_dict({"epoch": 0, "num_replicas": 4, "consumed": 170})  # the documented minimum, by hand
    seen += [i for s in c for i in s]
    assert sorted(set(seen)) == list(range(n)) and len(seen) == n


@pytest.mark.xdist_group("torch")
def test_a_plain_dataloader_saves_what_the_loop_took():
    """A DataLoader's workers draw indices ahead of the loop: the state says what the loop took."""
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'im2rec[torch]')")
    ds = list(range(300))
    sampler = RecordSampler(ds, num_replicas=2, rank=1, seed=4)
    loader = torch.utils.data.DataLoader(ds, batch_size=10, sampler=sampler, num_workers=2, multiprocessing_context="fork")
    it = iter(loader)
    seen = [int(i) for _ in range(3) for i in next(it)]
    state = sampler.state_dict(taken=30)
    assert state["consumed"] == 60 and sampler.state_dict()["consumed"] > 60  # the workers' prefetch ran ahead
    del it
    again = RecordSampler(ds, num_replicas=2, rank=1, seed=4)
    again.load_state_dict(state)
    whole = list(RecordSampler(ds, num_replicas=2, rank=1, seed=4))
    assert seen + list(again) == whole


def test_a_new_epoch_drops_a_loaded_resume():
    s = RecordSampler(Sized(100), num_replicas=2, rank=0)
    s.load_state_dict({"epoch": 3, "num_replicas": 2, "consumed": 40})
    assert s.epoch == 3 and len(s) == 30
    s.set_epoch(4)
    assert len(s) == 50 and len(list(s)) == 50


def test_refuses_a_state_of_another_dataset():
    s = RecordSampler(Sized(100))
    with pytest.raises(ValueError, match=r"^the state was saved for a dataset of 99 samples; this one has 100$"):
        s.load_state_dict({**RecordSampler(Sized(99)).state_dict()})
    with pytest.raises(ValueError, match=r"^the state was saved with seed 1; this sampler has seed 0$"):
        s.load_state_dict(RecordSampler(Sized(100), seed=1).state_dict())
    with pytest.raises(ValueError, match=r"^a RecordSampler state needs consumed$"):
        s.load_state_dict({"epoch": 0, "num_replicas": 1})
    with pytest.raises(ValueError, match=r"^rank must be in \[0, num_replicas=2\), got 2$"):
        RecordSampler(Sized(10), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match=r"^num_replicas=2 needs rank \(or an initialised torch\.distributed\)$"):
        RecordSampler(Sized(10), num_replicas=2)
    assert RecordSampler(Sized(10), num_replicas=1).rank == 0


def test_taken_is_checked_when_the_state_is_saved():
    s = RecordSampler(Sized(100), num_replicas=2, rank=0)
    it = iter(s)
    [next(it) for _ in range(10)]
    assert s.state_dict(taken=4)["consumed"] == 8 and s.state_dict()["consumed"] == 20
    for taken in (-5, 11):
        with pytest.raises(ValueError, match=f"taken={taken}, but this rank has yielded 10 indices of the current iteration"):
            s.state_dict(taken=taken)


@pytest.fixture
def face_like_rec(tmp_path):
    """An insightface-style file: header record 0, 203 images in identity order, identity records."""
    rec, idx = tmp_path / "train.rec", tmp_path / "train.idx"
    labels = [i // 7 for i in range(203)]
    ids = sorted(set(labels))
    with RecordWriter(rec, idx) as w:
        w.write_idx(0, pack(IRHeader(2, [204, 204 + len(ids)], 0, 0), b""))
        for k, lab in enumerate(labels, 1):
            w.write_idx(k, pack(IRHeader(0, float(lab), k, 0), bytes([k % 256]) * (50 + k)))
        for j, ident in enumerate(ids):
            first = 1 + labels.index(ident)
            w.write_idx(204 + j, pack(IRHeader(2, [first, first + labels.count(ident)], 0, 0), b""))
    return rec


def test_face_set_images_only(face_like_rec):
    ds = RecordDataset(face_like_rec, mode="raw", block_bytes=1024)
    assert len(ds) == 203 and ds.blocks[0] == 0 and ds.blocks[-1] == 203 and len(ds.blocks) > 5
    ranks = [list(RecordSampler(ds, num_replicas=3, rank=r)) for r in range(3)]
    assert len({len(r) for r in ranks}) == 1
    assert set(i for r in ranks for i in r) == set(range(203))
    labels = {int(ds.header(i).label) for i in ranks[0]}
    assert len(labels) > 5


@pytest.mark.slow
@pytest.mark.xdist_group("torch")
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")  # torchdata 0.11 calls it itself
def test_stateful_dataloader_resumes_at_the_next_batch(face_like_rec):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'im2rec[torch]')")
    stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed (pip install torchdata)")
    ds = RecordDataset(face_like_rec, mode="raw", block_bytes=1024, target_transform=int)
    for workers in (0, 2):

        def loader(workers=workers):
            sampler = RecordSampler(ds, seed=3, batch_size=8, num_workers=workers)
            return stateful.StatefulDataLoader(ds, batch_size=8, sampler=sampler, num_workers=workers, collate_fn=lambda b: [label for _, label in b])

        whole = list(loader())
        first = loader()
        it = iter(first)
        head = [next(it) for _ in range(5)]
        state = first.state_dict()
        assert head + list(it) == whole  # (and its workers end with the epoch, not at interpreter exit)
        second = loader()
        second.load_state_dict(state)
        tail = list(second)
        assert head + tail == whole, workers
        assert torch.utils.data.get_worker_info() is None
