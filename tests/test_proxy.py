"""The loopback latency proxy: s3fs through it to a real S3 endpoint on 127.0.0.1 (SeaweedFS),
the added latency, the counters, each fault kind, HTTP framing both ways, and its command line."""

import http.client
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from conftest import s3_endpoint

from im2rec.testing.proxy import LatencyProxy

s3fs = pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'im2rec[s3]')")

LATENCY = 0.03
BIG = os.urandom(6 << 20)  # multi-MB: a multipart upload through s3fs, several blocks both ways


@pytest.fixture(scope="module")
def store():
    """The loopback S3 server; its endpoint."""
    with s3_endpoint() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def proxy(store):
    with LatencyProxy(store, latency=LATENCY) as p:
        fs = client(p, retries=1)
        fs.mkdir("proxied")
        fs.pipe_file("proxied/small", b"hello")
        yield p


@pytest.fixture(scope="module")
def shared(proxy):
    """One s3fs client through the proxy for the module (a new one costs 0.15-0.3 s)."""
    return client(proxy)


@pytest.fixture
def fresh(proxy):
    """The module's proxy with its counters at zero and no fault left over."""
    proxy.reset_counters()
    yield proxy
    proxy.clear_faults()


def client(proxy, retries=5, retries_botocore=1, **config):
    """A new s3fs client through the proxy; botocore's own retries off by default, so that
    s3fs's (short, deterministic backoff: 0.1 s, 0.17 s, ...) are the only ones."""
    config["retries"] = {"total_max_attempts": retries_botocore, "mode": "standard"}
    fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, endpoint_url=proxy.url, config_kwargs=config)
    fs.retries = retries  # a class attribute, not an argument
    return fs


def get(fs, retries=None):
    """One GET request for the small object (a ranged cat_file: s3fs sends a HEAD before a whole one)."""
    if retries is not None:
        fs.retries = retries
    return fs.cat_file("proxied/small", start=0, end=5)


@pytest.mark.slow
def test_puts_and_gets_through_the_proxy_byte_identical(fresh, shared):
    fs = shared
    fs.pipe_file("proxied/big", BIG)  # one PUT
    with fs.open("proxied/parts", "wb", block_size=5 << 20) as f:  # a multipart upload
        f.write(BIG)
    assert fs.cat_file("proxied/big") == BIG
    assert fs.cat_file("proxied/parts") == BIG
    assert fs.cat_file("proxied/big", start=1_000_003, end=3_000_001) == BIG[1_000_003:3_000_001]
    assert fs.info("proxied/big")["size"] == len(BIG)  # HEAD: a response without a body
    assert {"proxied/big", "proxied/parts", "proxied/small"} <= set(fs.ls("proxied"))  # (and other tests' objects)
    assert fresh.requests >= 9 and fresh.faults == 0
    assert fresh.bytes_sent > 2 * len(BIG) + 2_000_000


@pytest.mark.slow
def test_latency_is_added_to_every_request_and_counted(fresh, shared):
    fs = shared
    assert get(fs) == b"hello"  # the client's first connection, outside the timing
    fresh.reset_counters()
    fresh.log = log = []
    t = time.perf_counter()
    for _ in range(10):
        assert get(fs) == b"hello"
    assert time.perf_counter() - t >= 10 * LATENCY
    fresh.log = None
    assert log == ["GET /proxied/small"] * 10
    assert fresh.requests == 10 and fresh.faults == 0
    assert fresh.bytes_sent >= 10 * len(b"hello")
    assert fresh.stats() == {"requests": 10, "bytes_sent": fresh.bytes_sent, "faults": 0, "most_waiting": 1, "tunnels": 0}  # one after another
    fresh.reset_counters()
    assert fresh.stats() == {"requests": 0, "bytes_sent": 0, "faults": 0, "most_waiting": 0, "tunnels": 0}


@pytest.mark.slow
def test_concurrent_requests_wait_in_parallel(fresh, shared):
    fs = shared
    get(fs)
    fresh.reset_counters()
    fs.pipe_file("proxied/ranges", BIG[:20_000])  # its own object: under pytest-xdist, another test's may be elsewhere
    fresh.reset_counters()
    results = fs.cat_ranges(["proxied/ranges"] * 20, [i * 1000 for i in range(20)], [i * 1000 + 10 for i in range(20)])
    assert results == [BIG[i * 1000 : i * 1000 + 10] for i in range(20)]
    assert fresh.requests == 20
    assert fresh.stats()["most_waiting"] > 1  # they overlapped: not 20 latencies one after another


@pytest.mark.slow
def test_503_is_retried_until_the_faults_are_used_up(fresh, shared):
    fresh.fail(2, "503", match="/proxied/small")
    fresh.fail(5, "503", match="/no/such/path")  # matches nothing here
    assert get(shared, retries=3) == b"hello"  # the third try (s3fs retries S3's SlowDown)
    assert fresh.faults == 2 and fresh.requests == 3


@pytest.mark.slow
def test_500_is_an_internal_error_that_botocore_retries(fresh, shared):
    fresh.fail(2, "500")
    with pytest.raises(OSError, match="internal error"):
        get(shared, retries=1)  # s3fs does not retry it
    assert fresh.faults == 1
    fs = client(fresh, retries=1, retries_botocore=2)  # botocore does (after 0-1 s)
    assert get(fs) == b"hello"
    assert fresh.faults == 2 and fresh.requests == 3


@pytest.mark.slow
def test_503_gives_an_error_once_the_retries_are_exhausted(fresh, shared):
    fs = shared
    fresh.fail(3, "503")
    with pytest.raises(OSError, match="reduce your request rate"):
        get(fs, retries=2)
    assert fresh.faults == 2
    with pytest.raises(OSError, match="reduce your request rate"):
        get(fs, retries=1)  # the third fault
    assert get(fs, retries=1) == b"hello"
    assert fresh.faults == 3 and fresh.requests == 4


def test_the_503_body_is_s3s_slowdown_error(fresh):
    fresh.fail(1, "503")
    conn = http.client.HTTPConnection("127.0.0.1", fresh.port, timeout=5)
    conn.request("GET", "/proxied/small")
    response = conn.getresponse()
    body = response.read()
    assert response.status == 503 and b"<Error><Code>SlowDown</Code>" in body
    conn.request("GET", "/proxied/small")  # the same connection goes on, to the store (403: no signature)
    response = conn.getresponse()
    assert response.status == 403 and response.getheader("Server").startswith("SeaweedFS")
    conn.close()


def test_reset_is_a_connection_error(fresh, shared):
    fs = shared
    fresh.fail(2, "reset")
    with pytest.raises(Exception) as info:
        get(fs, retries=2)
    assert "onnect" in f"{type(info.value).__name__} {info.value}" or isinstance(info.value, ConnectionError)
    assert fresh.faults == 2 and fresh.requests == 2
    fresh.fail(1, "reset")
    assert get(fs, retries=2) == b"hello"


@pytest.mark.slow
def test_stall_is_a_timeout_for_the_client(fresh):
    fs = client(fresh, retries=1, read_timeout=1, connect_timeout=1)
    fresh.fail(1, "stall")
    t = time.perf_counter()
    with pytest.raises(Exception, match="(?i)timeout|timed out"):
        get(fs)
    assert time.perf_counter() - t >= 1
    assert fresh.faults == 1


def test_unknown_fault_kind_is_refused(proxy):
    with pytest.raises(ValueError, match="unknown fault kind"):
        proxy.fail(1, "teapot")


class _Upstream(http.server.BaseHTTPRequestHandler):
    """Answers chunked: the request body it read (Content-Length or chunked) in 3 chunks and a trailer."""

    protocol_version = "HTTP/1.1"

    def do_PUT(self):
        if self.headers.get("Transfer-Encoding") == "chunked":
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
        else:
            body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Trailer", "X-Check")
        self.end_headers()
        third = len(body) // 3
        for part in (body[:third], body[third : 2 * third], body[2 * third :]):
            self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
        self.wfile.write(b"0\r\nX-Check: done\r\n\r\n")

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "12345")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_chunked_bodies_both_ways_and_head():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        with LatencyProxy(f"http://127.0.0.1:{server.server_address[1]}", latency=0) as p:
            conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=5)
            body = os.urandom(1_000_001)
            conn.request("PUT", "/echo", body=(body[i : i + 70_000] for i in range(0, len(body), 70_000)), encode_chunked=True)
            response = conn.getresponse()
            assert response.read() == body
            conn.request("PUT", "/echo", body=b"plain", headers={"Expect": "100-continue"})
            assert conn.getresponse().read() == b"plain"
            conn.request("HEAD", "/anything")
            response = conn.getresponse()
            assert response.getheader("Content-Length") == "12345" and response.read() == b""
            conn.request("PUT", "/echo", body=b"still alive")
            assert conn.getresponse().read() == b"still alive"
            conn.close()
            assert p.requests == 4
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_command_line_prints_its_url_and_serves_stats(store):
    proc = subprocess.Popen([sys.executable, "-m", "im2rec.testing.proxy", store, "--latency", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        fs = s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=url)
        assert fs.cat_file("proxied/small") == b"hello"
        with urllib.request.urlopen(f"{url}/__stats", timeout=5) as r:
            stats = json.loads(r.read())
        assert stats["requests"] >= 1 and stats["bytes_sent"] > len(b"hello") and stats["faults"] == 0
        proc.stdin.close()  # closing stdin ends it
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
