"""Training from S3: one cold epoch of a .rec in the store, im2rec against litdata, MosaicML streaming, webdataset and s3torchconnector, in one run.

    python benchmarks/bench_train.py [--images 5000] [--latency 0.02] [--workers 2] [--store seaweed|moto]

The corpus is the ImageNet-like one (`common.corpus("imagenet")`: 5,000 JPEGs of 100
classes, built by `python -m im2rec.synthetic` on first use), listed and packed as a user
does it: `python -m im2rec list ROOT PREFIX` (one list of every image, shuffled), its first
--images lines, then `python -m im2rec pack LIST ROOT OUT.rec --pass-through` (the records
hold the files' own JPEG bytes). The peers' formats are written from the same records
(JPEG bytes, label), in chunks or shards of 64 MB each (litdata's recommended
`chunk_bytes`, MDS's default `size_limit`, and the same for webdataset's `maxsize`). All
of it is cached under common.CACHE, so a second run starts at once.

SeaweedFS's S3 server (`weed mini`, a real object store that checks signatures) runs on
loopback in a process of its own, or with --store moto moto's (patched to serve a ranged GET
without copying the whole object first: see common.MOTO_WITH_RANGES); everything is uploaded to it directly, and
read through `python -m im2rec.testing.proxy --latency` (another process, so that the proxy does
not share the measured process's GIL), which adds --latency seconds to every request, as
a cloud store's time to first byte, and counts the requests (`GET /__stats`).

Every contender runs in a subprocess of its own: one cold epoch, or the best of --rounds (each library's local
cache folder is new and empty for each run), a torch DataLoader with --workers workers,
batches of 64, shuffled, first handing out the raw JPEG bytes and labels ("raw"), then,
in a second cold run, decoding each with the same function inside the workers
(`cv2.imdecode`, BGR to RGB, `cv2.resize` to 224x224: "decoded"). For each: samples/s
(the epoch's time from building the DataLoader to its last batch), requests per decoded
epoch (from the proxy's counter), CPU seconds of the process and its workers, and peak memory: the summed PSS of the contender's
process tree (the process and its DataLoader workers), sampled every 20 ms, the larger
of its two runs.

1. im2rec, local disk: `RecordDataset(path, mode="raw")`, `shuffle=True`.
2. im2rec, S3, one ranged request per record (the reads before issue 19):
   `RecordDataset("s3://bench/train.rec", mode="raw")` behind a wrapper without
   `__getitems__`, `shuffle=True`.
3. im2rec, S3, the training path (the README's recipe): `sampler=RecordSampler(ds, seed=0,
   batch_size=64, num_workers=--workers)` (block-local order, each worker its own blocks),
   and as another row the same with `RecordDataset(url, mode="raw", cache_dir=TMP,
   cache_limit="20GB")`. Skipped, with a message, where `im2rec.RecordSampler` is missing.
4. litdata: `litdata.optimize` into 64 MB chunks, `litdata.StreamingDataset(url,
   shuffle=True)` (its boto3 client pointed at the proxy by `storage_options`),
   `litdata.StreamingDataLoader`.
5. MosaicML streaming: `MDSWriter(columns={"jpg": "bytes", "cls": "int"})`,
   `StreamingDataset(remote=url, local=TMP, shuffle=True, batch_size=64)` (`S3_ENDPOINT_URL`
   names the proxy). `import streaming` imports torchvision and transformers, and the only
   torchvision wheel for this torch (a CUDA build) does not load next to the CPU torch 2.13.0
   ("operator torchvision::nms does not exist"): its subprocess gets stand-in `torchvision`
   and `transformers` packages of a few names (written to a temporary folder put first on
   PYTHONPATH); streaming only subclasses and imports them.
6. webdataset: `ShardWriter` tar shards, `WebDataset(urls, shardshuffle=...).shuffle(1000)`,
   each shard opened through fsspec (s3fs, 8 MB read-ahead requests: an `s3` entry in
   `webdataset.gopen.gopen_schemes`, since webdataset opens only pipes, files and
   curl/gsutil URLs itself).

7. s3torchconnector (AWS's, on the CRT client): one object per image (`LABEL/INDEX.jpg`),
   `S3MapDataset.from_prefix(url, endpoint=..., s3client_config=S3ClientConfig(force_path_style=True))`,
   a DataLoader with `shuffle=True`: a GET per sample.

A peer that is not installed is skipped with the pip command that brings it.
Goals (issues 19 and 28), on decoded samples/s: im2rec S3 (the training path) at least 0.9x
im2rec from the local disk, at least 10x the per-record reads, and ahead of every peer.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, STORES, corpus, proxy_stats, start_proxy, start_store, stop, tree_pss_kb

from im2rec.formats.mds import write_streaming_stand_ins

BATCH = 64
SIZE = 224
CHUNK_BYTES = 64_000_000
BUCKET = "bench"
CONTENDERS = ["local", "s3-per-record", "s3-sampler", "s3-cache", "litdata", "streaming", "webdataset", "s3torchconnector"]
TITLES = {
    "local": "im2rec, local disk",
    "s3-per-record": "im2rec S3, a request per record (before)",
    "s3-sampler": "im2rec S3, RecordSampler",
    "s3-cache": "im2rec S3, RecordSampler + cache_dir",
    "litdata": "litdata StreamingDataset",
    "streaming": "MosaicML StreamingDataset",
    "webdataset": "webdataset WebDataset",
    "s3torchconnector": "s3torchconnector S3MapDataset",
}
PIP = {"litdata": "litdata", "streaming": "mosaicml-streaming", "webdataset": "webdataset", "s3torchconnector": "s3torchconnector"}


def decode(data: bytes):
    """Every contender's decode, inside the DataLoader workers: JPEG bytes to a 224x224 RGB array."""
    import cv2
    import numpy as np

    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    return cv2.resize(image, (SIZE, SIZE), interpolation=cv2.INTER_LINEAR)


# -- the packed corpus and the peers' formats, cached -------------------------------------------


def packed(images: int) -> Path:
    """The .rec of the first `images` lines of the corpus's list, packed --pass-through by the CLI (cached)."""
    root = corpus("imagenet")
    out = CACHE / "train" / f"imagenet-{images}"
    rec = out / "train.rec"
    if (out / ".complete").exists():
        return rec
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "im2rec", "list", str(root), str(out / "all")], check=True, stdout=subprocess.DEVNULL)
    lines = (out / "all.lst").read_text().splitlines(keepends=True)
    if len(lines) < images:
        raise SystemExit(f"--images {images}: the corpus has {len(lines)} images")
    (out / "train.lst").write_text("".join(lines[:images]))
    subprocess.run([sys.executable, "-m", "im2rec", "pack", str(out / "train.lst"), str(root), str(rec), "--pass-through", "-q"], check=True)
    (out / ".complete").touch()
    return rec


def records(rec: Path):
    """(JPEG bytes, int label) of every record, in file order."""
    from im2rec import RecordDataset

    ds = RecordDataset(str(rec), mode="raw")
    for i in range(len(ds)):
        image, label = ds[i]
        yield image, int(label)


def _litdata_item(args):
    return {"jpg": args[0], "cls": args[1]}


def write_format(name: str, rec: Path, out: Path) -> None:
    """The peer `name`'s files for the records of `rec`, written into `out`."""
    if name == "litdata":
        import litdata

        litdata.optimize(fn=_litdata_item, inputs=list(records(rec)), output_dir=str(out), chunk_bytes=CHUNK_BYTES, num_workers=1, mode="overwrite")
    elif name == "streaming":
        from streaming import MDSWriter

        with MDSWriter(out=str(out), columns={"jpg": "bytes", "cls": "int"}, size_limit=CHUNK_BYTES) as writer:
            for image, label in records(rec):
                writer.write({"jpg": image, "cls": label})
    elif name == "s3torchconnector":  # one object per image, as S3MapDataset reads them: LABEL/INDEX.jpg
        for i, (image, label) in enumerate(records(rec)):
            (out / f"{label:04d}").mkdir(parents=True, exist_ok=True)
            (out / f"{label:04d}" / f"{i:08d}.jpg").write_bytes(image)
    elif name == "webdataset":
        import webdataset as wds

        out.mkdir(parents=True, exist_ok=True)
        with wds.ShardWriter(str(out / "shard-%06d.tar"), maxsize=CHUNK_BYTES, maxcount=10**9, verbose=0) as writer:
            for i, (image, label) in enumerate(records(rec)):
                writer.write({"__key__": f"{i:08d}", "jpg": image, "cls": label})


def formatted(name: str, rec: Path, env: dict) -> Path:
    """The folder of the peer's format (cached beside the .rec), written in a subprocess (the stand-in torchvision for streaming)."""
    out = rec.parent / name
    if not (rec.parent / f".{name}-complete").exists():
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([sys.executable, __file__, "--write", name, "--rec", str(rec), "--out", str(out)], check=True, env=env, stdout=subprocess.DEVNULL)
        (rec.parent / f".{name}-complete").touch()
    return out


# -- one contender's epoch, in its own process -----------------------------------------------------


def _decoded_pair(pair):
    return decode(pair[0]), pair[1]


def _decoded_item(item):
    return decode(item["jpg"]), int(item["cls"])


def _raw_item(item):
    return bytes(item["jpg"]), int(item["cls"])  # litdata gives a memoryview of its chunk


def _wds_pair(sample, do_decode):
    image = sample["jpg"]
    return (decode(image) if do_decode else image), int(sample["cls"])


def _int_label(label):
    return int(label)


def _raw_object(reader):
    """s3torchconnector's item: an S3Reader of one object, its label in its key (``LABEL/INDEX.jpg``)."""
    return reader.read(), int(reader.key.rsplit("/", 2)[-2])


def _decoded_object(reader):
    image, label = _raw_object(reader)
    return decode(image), label


def _s3fs_open(url, mode="rb", bufsize=8192, **kw):
    """webdataset's opener for s3:// URLs: fsspec's s3fs, reading ahead 8 MB per request."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs.open(path, mode, block_size=8 << 20, cache_type="readahead")


class OneByOne:
    """The reads before issue 19: the DataLoader asks for each record of a batch in turn
    (``__getitem__``, one ranged request each), as it does a dataset without ``__getitems__``."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        return self.ds[i]


def loader(name: str, args, tmp: Path, do_decode: bool):
    """The DataLoader of contender `name` over --images records, with its fresh local cache in tmp."""
    import torch

    url = f"s3://{BUCKET}/{args.images}"
    transform = decode if do_decode else None
    if name in ("local", "s3-per-record", "s3-sampler", "s3-cache"):
        from im2rec import RecordDataset

        path = args.rec if name == "local" else f"{url}/train.rec"
        options = {"cache_dir": str(tmp / "cache"), "cache_limit": "20GB"} if name == "s3-cache" else {}
        ds = RecordDataset(path, mode="raw", transform=transform, target_transform=_int_label, **options)
        if name in ("s3-sampler", "s3-cache"):
            from im2rec import RecordSampler

            sampler = RecordSampler(ds, seed=0, batch_size=BATCH, num_workers=args.workers)
            return torch.utils.data.DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=args.workers)
        if name == "s3-per-record":
            ds = OneByOne(ds)
        return torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=args.workers)
    if name == "litdata":
        import litdata
        import litdata.streaming.downloader

        # litdata fetches chunks with obstore, which refuses an http:// endpoint unless told
        # (allow_http), and litdata has no option for it: the loopback store needs it, a real one not.
        litdata.streaming.downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"
        ds = litdata.StreamingDataset(f"{url}/litdata", cache_dir=str(tmp / "cache"), shuffle=True, seed=0, storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}, transform=_decoded_item if do_decode else _raw_item)
        return litdata.StreamingDataLoader(ds, batch_size=BATCH, num_workers=args.workers)
    if name == "streaming":
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()

        class Dataset(StreamingDataset):
            def __getitem__(self, i):
                item = super().__getitem__(i)
                return (_decoded_item if do_decode else _raw_item)(item)

        ds = Dataset(remote=f"{url}/streaming", local=str(tmp / "cache"), shuffle=True, shuffle_seed=0, batch_size=BATCH)
        return torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=args.workers)
    if name == "s3torchconnector":
        from s3torchconnector import S3ClientConfig, S3MapDataset

        ds = S3MapDataset.from_prefix(
            f"{url}/s3torchconnector/", region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"), endpoint=os.environ["AWS_ENDPOINT_URL"],
            transform=_decoded_object if do_decode else _raw_object, s3client_config=S3ClientConfig(force_path_style=True),
        )
        return torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=args.workers)
    if name == "webdataset":
        import fsspec
        import webdataset as wds
        wds_gopen = importlib.import_module("webdataset.gopen")  # the module: webdataset.gopen is also a function

        wds_gopen.gopen_schemes["s3"] = _s3fs_open
        # s3fs closes its aiobotocore sessions at a worker's exit on another event loop than theirs, and asyncio
        # logs a "Task exception was never retrieved" traceback for each: after the epoch, harmless, silenced.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        shards = sorted(fsspec.filesystem("s3").ls(f"{BUCKET}/{args.images}/webdataset"))
        ds = wds.WebDataset([f"s3://{s}" for s in shards], shardshuffle=len(shards), seed=0, empty_check=False).shuffle(1000).map(lambda s: _wds_pair(s, do_decode))
        return torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=args.workers)
    raise ValueError(name)


def epoch(name: str, args) -> None:
    """`--run NAME`: one epoch; writes {"seconds", "samples"} to --result."""
    tmp = Path(tempfile.mkdtemp(prefix=f"im2rec-bench-train-{name}-"))
    try:
        t = time.perf_counter()
        samples = 0
        for images, _labels in loader(name, args, tmp, args.decode):
            samples += len(images)
        seconds = time.perf_counter() - t
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import resource

    cpu = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
    Path(args.result).write_text(json.dumps({"seconds": seconds, "samples": samples, "cpu": cpu}))


# -- the driver ---------------------------------------------------------------------------------


def missing(name: str) -> str | None:
    """Why contender `name` cannot run here, or None."""
    if name in PIP and importlib.util.find_spec(name) is None:
        return f"skipped: pip install {PIP[name]}"
    if name in ("s3-sampler", "s3-cache"):
        import im2rec

        if not hasattr(im2rec, "RecordSampler"):
            return "skipped: this im2rec has no RecordSampler yet"
        if name == "s3-cache" and "cache_dir" not in inspect.signature(im2rec.RecordDataset).parameters:
            return "skipped: this im2rec's RecordDataset has no cache_dir yet"
    if name in ("s3-sampler", "s3-cache", "s3-per-record", "local") and importlib.util.find_spec("torch") is None:
        return "skipped: pip install torch"
    return None


def measure(name: str, args, env: dict, proxy_url: str, do_decode: bool) -> tuple[float, int, float, float]:
    """(samples/s, requests, peak MB of the summed PSS, CPU seconds of the process and its
    workers) of one cold epoch of `name` in a subprocess."""
    result = Path(tempfile.mkstemp(prefix="im2rec-bench-train-", suffix=".json")[1])
    cmd = [sys.executable, __file__, "--run", name, "--images", str(args.images), "--workers", str(args.workers), "--rec", str(args.rec), "--result", str(result)]
    before = proxy_stats(proxy_url)["requests"]
    proc = subprocess.Popen(cmd + (["--decode"] if do_decode else []), env=env, stdout=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_pss_kb(proc.pid)[0])
        time.sleep(0.02)
    requests = proxy_stats(proxy_url)["requests"] - before
    try:
        if proc.returncode:
            raise SystemExit(f"{name}: its epoch failed with status {proc.returncode} ({' '.join(cmd)})")
        out = json.loads(result.read_text())
    finally:
        result.unlink(missing_ok=True)
    if out["samples"] != args.images:
        print(f"  note: {name} gave {out['samples']:,} samples of {args.images:,}", file=sys.stderr)
    return out["samples"] / out["seconds"], requests, peak / 1024, out["cpu"]


def order_report(rec: Path) -> None:
    """How random RecordSampler's block-local order is, against a full permutation: the mean
    distance between consecutive samples' places in the file, and the distinct labels per
    batch of 64, for this file (its list was shuffled) and for the same file in class order."""
    import numpy as np

    from im2rec import RecordDataset, RecordSampler

    ds = RecordDataset(rec, mode="raw")
    labels = np.asarray([int(ds.header(i).label) for i in range(len(ds))])
    print(f"\nhow random the order is ({len(ds):,} records in {len(ds.blocks) - 1} read blocks; means over one epoch of rank 0 of 1, batches of {BATCH})")
    print(f"  {'order':<44} {'|key step|':>10} {'labels/batch':>13} {'... in class order':>19}")
    for title, kw in (("RecordSampler (block-local, 2 workers)", {"batch_size": BATCH, "num_workers": 2}), ("RecordSampler(block_local=False)", {"block_local": False})):
        order = np.asarray(list(RecordSampler(ds, seed=0, **kw)))
        step = np.abs(np.diff(order)).mean()
        mixed = [np.mean([len(set(lab[order[i : i + BATCH]].tolist())) for i in range(0, len(order), BATCH)]) for lab in (labels, np.sort(labels))]
        print(f"  {title:<44} {step:>10,.0f} {mixed[0]:>13.1f} {mixed[1]:>19.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=5000, help="records in the .rec (the first lines of the shuffled list)")
    ap.add_argument("--latency", type=float, default=0.02, help="seconds the proxy adds to every request")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    ap.add_argument("--rounds", type=int, default=1, help="cold epochs of each contender, the best kept (a shared machine is noisy)")
    ap.add_argument("--only", nargs="+", choices=CONTENDERS, help="these contenders alone")
    ap.add_argument("--store", choices=STORES, default="seaweed", help="the loopback S3 server: SeaweedFS (a real store), or moto")
    # The subprocesses: one epoch of a contender, or writing a peer's format.
    ap.add_argument("--run", choices=CONTENDERS, help=argparse.SUPPRESS)
    ap.add_argument("--write", choices=list(PIP), help=argparse.SUPPRESS)
    ap.add_argument("--decode", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rec", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        return epoch(args.run, args)
    if args.write:
        return write_format(args.write, Path(args.rec), Path(args.out))

    rec = args.rec = packed(args.images)
    stop_store, endpoint, store_env = start_store(args.store)
    proxy, proxy_url = start_proxy(endpoint, args.latency)
    stub = Path(tempfile.mkdtemp(prefix="im2rec-bench-torchvision-"))
    write_streaming_stand_ins(stub)  # for `import streaming` in its subprocesses
    try:
        import s3fs

        direct = dict(os.environ, **store_env)
        os.environ.update(direct)
        through = dict(direct, AWS_ENDPOINT_URL=proxy_url, S3_ENDPOINT_URL=proxy_url)
        fs = s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=endpoint)
        fs.mkdir(BUCKET)
        prefix = f"{BUCKET}/{args.images}"
        fs.put([str(rec), str(rec.with_suffix(".idx"))], [f"{prefix}/train.rec", f"{prefix}/train.idx"])
        import im2rec

        print(f"im2rec {im2rec.__version__} from {Path(im2rec.__file__).parent}; the {args.store} store at {endpoint}")
        contenders = args.only or CONTENDERS
        skipped = {name: why for name in contenders if (why := missing(name))}
        for name in contenders:
            if name in PIP and name not in skipped:
                env = dict(direct, PYTHONPATH=os.pathsep.join([str(stub), os.environ.get("PYTHONPATH", "")])) if name == "streaming" else direct
                fs.put(str(formatted(name, rec, env)), f"{prefix}/{name}", recursive=True)
        mb = rec.stat().st_size / 1e6
        print(f"one cold epoch of {args.images:,} ImageNet-like JPEGs ({mb:,.1f} MB packed), {args.workers} DataLoader workers, batches of {BATCH},")
        print(f"through a proxy adding {args.latency * 1000:g} ms per request to the loopback S3; decoded = cv2.imdecode, BGR2RGB, resize to {SIZE}x{SIZE}")
        print(f"\n  {'contender':<40} {'raw':>10} {'decoded':>10} {'requests':>9} {'CPU s':>7} {'peak MB':>8}")
        results: dict[str, tuple[float, float, int, float]] = {}
        for name in contenders:
            if name in skipped:
                print(f"  {TITLES[name]:<40} {skipped[name]}")
                continue
            env = dict(through, PYTHONPATH=os.pathsep.join([str(stub), os.environ.get("PYTHONPATH", "")])) if name == "streaming" else through
            raws = [measure(name, args, env, proxy_url, False) for _ in range(args.rounds)]
            decodeds = [measure(name, args, env, proxy_url, True) for _ in range(args.rounds)]
            raw, peak_raw = max(r[0] for r in raws), max(r[2] for r in raws)
            decoded, requests, peak, cpu = max(r[0] for r in decodeds), decodeds[-1][1], max(r[2] for r in decodeds), min(r[3] for r in decodeds)
            results[name] = (raw, decoded, requests, max(peak, peak_raw))
            print(f"  {TITLES[name]:<40} {raw:>10,.0f} {decoded:>10,.0f} {requests:>9,} {cpu:>7.1f} {max(peak, peak_raw):>8,.0f}", flush=True)
        print("  (samples/s raw and decoded; requests, CPU seconds (the process and its workers) and peak memory (summed PSS of the process tree) of the decoded epoch)")

        print("\nratios (issue 19's goals): raw samples/s, decoded samples/s")
        new = max((results[n][1], n) for n in ("s3-sampler", "s3-cache") if n in results) if any(n in results for n in ("s3-sampler", "s3-cache")) else None
        peers = [(results[n][1], n) for n in PIP if n in results]

        def ratio(a: str, b: str, goal: str = "") -> None:
            print(f"  {a + ' / ' + b:<44} {results[a][0] / results[b][0]:>8.2f}x {results[a][1] / results[b][1]:>8.2f}x  {goal}")

        if new is None:
            print("  im2rec S3's training path: not measured (see above)")
        else:
            name = new[1]
            print(f"  the training path: {TITLES[name]} (the faster of the two, decoded)")
            if "local" in results:
                ratio(name, "local", "goal >= 0.9x decoded")
            if "s3-per-record" in results:
                ratio(name, "s3-per-record", "goal >= 10x")
            if peers:
                ratio(name, max(peers)[1], "the best peer, decoded: goal >= 1x")
        for base in ("s3-per-record", *(peer for _, peer in sorted(peers, reverse=True))):
            if "local" in results and base in results:
                ratio(base, "local")
        if "local" in results:
            order_report(args.rec)
    finally:
        stop(proxy)
        stop_store()
        shutil.rmtree(stub, ignore_errors=True)


if __name__ == "__main__":
    main()
