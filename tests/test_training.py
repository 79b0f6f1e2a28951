"""Training reads from a store: a loopback S3 (SeaweedFS) behind a latency proxy that also injects faults.

Every read is checked against the same read of the local file, byte for byte.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import deadline, s3_endpoint

from im2rec import RecordDataset, RecordSampler, storage
from im2rec.cli import main
from im2rec.errors import StorageError
from im2rec.storage.cache import BlockCache
from im2rec.testing.proxy import LatencyProxy

s3fs = pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'im2rec[s3]')")
# one pytest-xdist process for the module: its store (a pack, a bucket, an upload) is set up once,
# beside the other DataLoader tests (which share one torch import)
pytestmark = pytest.mark.xdist_group("torch")


@pytest.fixture(scope="module")
def store(real_size_folders, tmp_path_factory):
    """``(local .rec, proxy)``: the real-size ImageNet-like folder packed with default options,
    uploaded to s3://train/, read through a proxy that adds 5 ms to every request."""
    tmp = tmp_path_factory.mktemp("training")
    root = real_size_folders["imagenet"]
    runner = CliRunner()
    assert runner.invoke(main, ["list", str(root), str(tmp / "data")]).exit_code == 0
    result = runner.invoke(main, ["pack", str(tmp / "data.lst"), str(root), "-q"])
    assert result.exit_code == 0, result.output
    rec = tmp / "data.rec"
    with s3_endpoint() as endpoint:
        fs = s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=endpoint)
        fs.mkdir("train")
        fs.put(str(rec), "train/data.rec")
        fs.put(str(tmp / "data.idx"), "train/data.idx")
        with LatencyProxy(endpoint, latency=0.005) as proxy:
            yield rec, proxy


def options(proxy, **config):
    opts: dict = {"endpoint_url": proxy.url, "skip_instance_cache": True}
    if config:
        opts["config_kwargs"] = config
    return opts


URL = "s3://train/data.rec"


@pytest.mark.slow
def test_a_batch_is_one_round_of_concurrent_requests(store):
    rec, proxy = store
    local = RecordDataset(rec, mode="raw")
    remote = RecordDataset(URL, mode="raw", storage_options=options(proxy))
    assert len(local) == len(remote) == 20
    batch = [17, 3, 4, 5, 11]
    proxy.reset_counters()
    assert remote.__getitems__(batch) == local.__getitems__(batch) == [local[i] for i in batch]
    # records 3, 4, 5 are neighbours in the file: one request; 11 and 17 one each
    assert proxy.stats()["requests"] == 3
    assert remote.read_stats()["requests"] == 1 + 1 + 3  # and at open the HEAD and record 0 (is it an insightface header?)
    # exactly the records' bytes (each up to the next record), and record 0's
    reader = local.readers[0]
    extent = {o: int(reader.record_ends(np.asarray([o]))[0]) - o for o in reader.require_index().offsets.tolist()}
    assert remote.read_stats()["fetched"] == extent[reader.require_index().offset(0)] + sum(extent[local.locate(i)[1]] for i in batch)


@pytest.mark.slow
def test_sampler_epoch_reads_whole_blocks_byte_identical(store):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'im2rec[torch]')")
    rec, proxy = store

    def epoch(path, **kw):
        ds = RecordDataset(path, mode="raw", block_bytes=256 << 10, **kw)
        sampler = RecordSampler(ds, seed=1, window=2, batch_size=4, num_workers=2)
        loader = torch.utils.data.DataLoader(ds, batch_size=4, sampler=sampler, num_workers=2, collate_fn=list, multiprocessing_context="fork")
        proxy.reset_counters()
        return ds, list(sampler), [batch for batch in loader]

    local_ds, order, local = epoch(rec)
    remote_ds, _, remote = epoch(URL, storage_options=options(proxy))
    assert remote == local and len(local) == 5
    assert sorted(label for b in local for _, label in b) == sorted(local_ds[i][1] for i in range(20))
    # one request per read block of each worker (the two workers share at most the block where their shares meet)
    block_of = np.searchsorted(remote_ds.blocks, order, side="right") - 1
    per_worker = [{int(block_of[i]) for i in range(len(order)) if (i // 4) % 2 == w} for w in range(2)]
    assert len(per_worker[0] & per_worker[1]) <= 1
    assert proxy.stats()["requests"] == len(per_worker[0]) + len(per_worker[1]) >= len(remote_ds.blocks) - 1


def test_each_batch_fetches_the_next_ones_blocks_ahead(store):
    """In one process (a DataLoader without workers): while a batch is decoded, the next one's
    blocks are fetched; every block is still fetched once."""
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'im2rec[torch]')")
    rec, proxy = store
    ds = RecordDataset(URL, mode="raw", block_bytes=128 << 10, storage_options=options(proxy))
    loader = torch.utils.data.DataLoader(ds, batch_size=3, sampler=RecordSampler(ds, seed=5, window=2), collate_fn=list)
    proxy.reset_counters()
    got = [item for batch in loader for item in batch]
    local = RecordDataset(rec, mode="raw", block_bytes=128 << 10)
    assert got == [local[i] for i in RecordSampler(local, seed=5, window=2)]
    assert ds.read_stats()["read_ahead"] == 6  # 7 batches: each but the last fetched the next one's blocks
    assert ds.read_stats()["fetched"] == Path(rec).stat().st_size  # every byte once (record 0's at open included)
    assert proxy.stats()["requests"] <= len(ds.blocks) - 1


def test_decoded_rgb_matches_local(store):
    rec, proxy = store
    local = RecordDataset(rec)
    remote = RecordDataset(URL, storage_options=options(proxy), read_blocks=True)
    got = remote.__getitems__([0, 19, 7])
    for (image, label), i in zip(got, [0, 19, 7]):
        assert np.array_equal(image, local[i][0]) and label == local[i][1] and image.shape[2] == 3


def test_second_epoch_from_the_cache_makes_no_request(store, tmp_path):
    rec, proxy = store
    local = RecordDataset(rec, mode="raw")
    ds = RecordDataset(URL, mode="raw", storage_options=options(proxy), cache_dir=tmp_path / "cache", cache_limit="50MB")
    order = list(RecordSampler(ds, seed=2))
    proxy.reset_counters()
    first = ds.__getitems__(order)
    assert proxy.stats()["requests"] == len(ds.blocks) - 1 == 1  # 2 MB of records: one default 4 MB block
    again = RecordDataset(URL, mode="raw", storage_options=options(proxy), cache_dir=tmp_path / "cache")  # a new process would start so
    proxy.reset_counters()
    assert again.__getitems__(order) == first == local.__getitems__(order)
    assert proxy.stats()["requests"] == 0 and again.read_stats()["cache_hits"] == 1
    files = os.listdir(tmp_path / "cache")
    assert [f for f in files if f.endswith(".blk")] and not [f for f in files if f.endswith(".tmp")]


def test_cache_limit_must_hold_a_block(store, tmp_path):
    _, proxy = store
    for limit in ("1MB", 0, 20.5, "0"):
        with pytest.raises(ValueError, match="cache_limit must hold at least one read block|is not a positive size"):
            RecordDataset(URL, storage_options=options(proxy), cache_dir=tmp_path, cache_limit=limit)
    assert RecordDataset(URL, storage_options=options(proxy), cache_dir=tmp_path).cache.limit == 10 * 10**9


def test_a_header_scan_goes_through_the_cache(store, tmp_path):
    """The example's class count (every label, before training): from the store once, then from the cache."""
    rec, proxy = store
    labels = [RecordDataset(rec).header(i).label for i in range(20)]
    for round_ in range(2):
        ds = RecordDataset(URL, storage_options=options(proxy), cache_dir=tmp_path)
        proxy.reset_counters()
        assert [ds.header(i).label for i in range(20)] == labels
        assert proxy.stats()["requests"] == (1 if round_ == 0 else 0)


def read_all(args):
    url, endpoint, key, secret, cache, limit, seed = args
    # the credentials too: a fork server started by an earlier test has not the environment s3_endpoint set
    options = {"endpoint_url": endpoint, "key": key, "secret": secret, "client_kwargs": {"region_name": "us-east-1"}, "skip_instance_cache": True}
    ds = RecordDataset(url, mode="raw", storage_options=options, cache_dir=cache, cache_limit=limit, block_bytes=128 << 10)
    order = list(RecordSampler(ds, seed=seed))
    return [(i, bytes(ds[i][0])) for i in order]


def folder_bytes(folder: Path) -> int:
    total = 0
    for entry in os.scandir(folder):
        with contextlib.suppress(FileNotFoundError):
            total += entry.stat().st_size
    return total


@pytest.mark.slow
def test_cache_shared_by_racing_processes_stays_under_its_limit(store, tmp_path):
    """Three processes read every record through one cache folder that holds about half the file:
    they race to fetch, write and evict the same blocks; none reads a torn block, and the folder
    never holds more than the limit."""
    rec, proxy = store
    local = RecordDataset(rec, mode="raw")
    cache, limit = tmp_path / "cache", Path(rec).stat().st_size // 2
    cache.mkdir()
    peak, stop = [0], threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], folder_bytes(cache))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        context = multiprocessing.get_context("forkserver")  # not fork: this process runs threads (the proxy's)
        context.set_forkserver_preload(["im2rec.dataset", "s3fs"])
        pool = context.Pool(3)
        try:
            with deadline(120, "three processes reading through one cache"):
                keys = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
                results = pool.map(read_all, [(URL, proxy.url, *keys, str(cache), limit, seed) for seed in range(3)])
        finally:
            pool.close()  # not terminate (the with statement's): its semaphores are released, not leaked
            pool.join()
    finally:
        stop.set()
        watcher.join()
    for got in results:
        assert len(got) == 20 and all(data == bytes(local[i][0]) for i, data in got)
    assert 0 < peak[0] <= limit, (peak[0], limit)
    assert BlockCache(str(cache), limit).usage() <= limit


@pytest.mark.slow
def test_transient_faults_are_retried_and_counted(store, monkeypatch):
    monkeypatch.setattr(storage.retries, "RETRY_DELAY", 0.01)  # the backoff's first wait (0.2 s)
    rec, proxy = store
    local = RecordDataset(rec, mode="raw")
    for kind in ("503", "500", "reset"):
        ds = RecordDataset(URL, mode="raw", storage_options=options(proxy), read_blocks=True)
        proxy.reset_counters()
        proxy.fail(2, kind, match="/train/data.rec")
        assert ds.__getitems__([1, 2]) == local.__getitems__([1, 2]), kind
        assert proxy.stats()["faults"] == 2, kind
        # 503 and 500: our two retries; a reset connection: aiohttp may reopen it once itself
        assert ds.read_stats()["retried"] == (2 if kind != "reset" else ds.read_stats()["retried"]) >= 1, kind


@pytest.mark.slow
def test_a_stalled_store_times_out_and_is_retried(store):
    rec, proxy = store
    ds = RecordDataset(URL, mode="raw", storage_options=options(proxy, read_timeout=1), read_blocks=True)
    proxy.fail(1, "stall", match="/train/data.rec")
    t = time.perf_counter()
    with deadline(60, "a read from a stalled store"):
        assert ds[4] == RecordDataset(rec, mode="raw")[4]
    assert ds.read_stats()["retried"] == 1 and time.perf_counter() - t >= 1


def test_a_record_that_stays_unreadable_names_the_url_and_key(store, monkeypatch):
    monkeypatch.setattr(storage.retries, "RETRY_DELAY", 0.01)
    _, proxy = store
    ds = RecordDataset(URL, mode="raw", storage_options=options(proxy), retries=2)
    proxy.fail(3, "500", match="/train/data.rec")
    with pytest.raises(StorageError) as e:
        ds.__getitems__([6])
    _, offset, key = ds.locate(6)
    assert str(e.value).startswith(f"s3://train/data.rec: record {key} (byte {offset}) cannot be read: s3://train/data.rec: ")
    assert str(e.value).endswith("after 3 attempts)")
    assert ds.read_stats()["requests"] == 2 + 3 and ds.read_stats()["retried"] == 2  # the HEAD and record 0 at open, then 3 attempts
    proxy.clear_faults()


@pytest.mark.slow
def test_a_failed_read_in_a_dataloader_worker_reaches_the_loop(store):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'im2rec[torch]')")
    _, proxy = store
    ds = RecordDataset(URL, mode="raw", storage_options=options(proxy), retries=0, read_blocks=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, sampler=RecordSampler(ds), num_workers=1, collate_fn=list, multiprocessing_context="fork")
    proxy.fail(1, "500", match="/train/data.rec")

    def failure() -> str:
        try:
            list(loader)
        except StorageError as e:
            return str(e)  # leaving the except block frees the traceback, and the loader's workers with it
        return "no error"

    with deadline(60, "a DataLoader over a failing store"):
        message = failure()
        gc.collect()  # the failed iterator (in a reference cycle through its traceback) ends its workers now, not at exit
    assert re.search(r"s3://train/data\.rec: record \d+ \(byte \d+\) cannot be read: s3://train/data\.rec: .*internal error.*\(reading bytes \d+-\d+\)\n", message), message
    proxy.clear_faults()


@pytest.mark.slow
def test_readme_training_recipe_runs_as_copied(real_size_folders, tmp_path, monkeypatch):
    """The README's "For training" block (RecordLoader) and its map-style one (RecordDataset in
    a DataLoader), on a real-size pack at --resize 256 (images of several sizes): the
    transform gives one size, the batches stack."""
    pytest.importorskip("torch")
    import re

    import torch
    from click.testing import CliRunner

    from im2rec.cli import main

    readme = (Path(__file__).parent.parent / "README.md").read_text()

    def block(title):
        code = re.findall(r"```python\n(.*?)```", readme.split(title, 1)[1].split("\n### ", 1)[0], re.S)
        assert len(code) == 1
        return code[0].replace("batch_size=64", "batch_size=8")

    monkeypatch.chdir(tmp_path)
    folder = real_size_folders["imagenet"]
    assert CliRunner().invoke(main, ["list", str(folder), "data/train"]).exit_code == 0
    assert CliRunner().invoke(main, ["pack", "data/train.lst", str(folder), "--resize", "256", "-q"]).exit_code == 0
    scope: dict = {"epochs": 2}
    with deadline(300, "the README's training block"):
        exec(compile(block("### For training: `RecordLoader`"), "README.md", "exec"), scope)
    assert tuple(scope["images"].shape) == (4, 3, 224, 224) and scope["labels"].shape[0] == 4  # 20 images: the last batch of 8 is short
    assert scope["targets"].dtype == torch.int64 and torch.equal(scope["targets"].double(), scope["labels"].double())
    with deadline(300, "the README's map-style block"):
        exec(compile(block("### A map-style dataset: `RecordDataset`"), "README.md", "exec"), scope)
    images, labels = next(iter(scope["loader"]))
    assert labels.shape == (8,)
    assert tuple(images.shape) == (8, 3, 224, 224) and tuple(scope["image"].shape) == (3, 224, 224)


@pytest.mark.slow
def test_a_wide_window_makes_room_for_its_blocks(store, monkeypatch):
    """RecordSampler(window=W) over a dataset in a store raises the process's budget of fetched
    ranges to W blocks being read and W fetched ahead, plus one (before, the sampler handed itself
    over before it had an order, and the room was never made)."""
    from im2rec import RecordSampler, storage

    _, proxy = store
    monkeypatch.setattr(storage.remote._HELD, "limit", storage.HOLD)
    remote = RecordDataset(URL, mode="raw", storage_options=options(proxy))
    RecordSampler(remote, seed=0)  # the default window, 8 blocks of 4 MB: within HOLD
    assert storage.remote._HELD.limit == storage.HOLD
    RecordSampler(remote, seed=0, window=32)
    assert storage.remote._HELD.limit == (2 * 32 + 1) * remote.block_bytes


@pytest.mark.slow
def test_record_loader_reads_a_rec_in_s3_as_the_local_one(store, tmp_path):
    """RecordLoader over s3:// (its RecordSampler block-local: whole blocks, a batch's at once),
    the same batches as from the local file, then an epoch from the cache without a request."""
    torch = pytest.importorskip("torch")
    from im2rec import RecordLoader

    rec, proxy = store

    def crop(img):
        return np.ascontiguousarray(img[:200, :200])

    local = [(x, y) for x, y in RecordLoader(rec, 6, transform=crop, shuffle=True, seed=2)]
    ds = RecordDataset(URL, storage_options=options(proxy), cache_dir=tmp_path / "cache")
    loader = RecordLoader(ds, 6, transform=crop, shuffle=True, seed=2)
    remote = list(loader)
    assert len(remote) == len(local) == 4
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(local, remote))
    fetched = ds.read_stats()["requests"]
    assert 0 < fetched <= 6  # whole blocks (20 records: one or two), not a request per record
    proxy.reset_counters()
    loader.set_epoch(0)
    again = list(loader)
    assert all(torch.equal(a, c) for (a, _), (c, _) in zip(remote, again)) and proxy.stats()["requests"] == 0
