"""The store seam (storage.store): every verb of the S3 store through the fault proxy in front of a
real S3 server (SeaweedFS) under each fault kind, the retry bounds, what is left after a failure,
forward proxies from the environment, TLS with a CA bundle, and a process with many open files."""

import hashlib
import os
import resource
import shutil
import subprocess
import threading
import time

import pytest
from conftest import new_bucket, s3_endpoint, seaweed

from im2rec import storage
from im2rec.storage import ObjectMissing, StorageError, s3client, store_for
from im2rec.storage.store import FsspecStore, S3Store
from im2rec.testing.proxy import FAULT_KINDS, LatencyProxy

#: Seconds a stalled request waits before it fails, here (the default is 15).
STALL = 0.5


@pytest.fixture(scope="module")
def s3():
    with s3_endpoint() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def proxy(s3):
    with LatencyProxy(s3, latency=0.001) as p:
        yield p


@pytest.fixture
def bucket(s3):
    return new_bucket("st")


@pytest.fixture
def forgetting():
    """Clients made in the test (with its proxy variables, its CA bundle) are dropped after it."""
    yield
    s3client.forget_clients()


@pytest.fixture
def fast(monkeypatch):
    """Retries after at most 10 ms (full jitter below it), not 0.2 s."""
    monkeypatch.setattr(storage.retries, "RETRY_DELAY", 0.01)


def through(proxy, **config):
    """Storage options for the store through the proxy, stalls timing out after STALL s."""
    return {"endpoint_url": proxy.url, "config_kwargs": {"read_timeout": STALL, **config}}


def direct():
    return store_for("s3://x")


BODY = bytes(range(256)) * 40  # 10 KB


def _prepare(store, bucket):
    """What each verb works on: objects, an open upload with one part, a completed-upload's parts."""
    url = f"s3://{bucket}"
    store.put(f"{url}/a/one.bin", BODY)
    store.put(f"{url}/a/two.bin", BODY[::-1])
    store.put(f"{url}/a/sub/three.bin", b"3")
    open_id = store.create_upload(f"{url}/open.bin")
    done_id = store.create_upload(f"{url}/done.bin")
    done_parts = [(1, store.upload_part(f"{url}/done.bin", done_id, 1, b"p" * (5 << 20))), (2, store.upload_part(f"{url}/done.bin", done_id, 2, b"q"))]
    copy_id = store.create_upload(f"{url}/copy.bin")
    return {"open": open_id, "done": (done_id, done_parts), "copy": copy_id}


#: Each verb: (name, the call (store, bucket URL, prepared) -> what it gave, the check (what it gave, bucket URL, prepared)).
VERBS = [
    ("get", lambda s, u, p: s.get(f"{u}/a/one.bin"), lambda got, u, p: got == BODY),
    ("get_range", lambda s, u, p: s.get_range(f"{u}/a/one.bin", 10, 20), lambda got, u, p: got == BODY[10:20]),
    ("get_many", lambda s, u, p: s.get_many([f"{u}/a/one.bin"] * 1 + [f"{u}/a/two.bin"]), lambda got, u, p: got == [BODY, BODY[::-1]]),
    ("get_ranges", lambda s, u, p: s.get_ranges(f"{u}/a/one.bin", [(0, 5), (5, 9)]), lambda got, u, p: got == [BODY[:5], BODY[5:9]]),
    ("head", lambda s, u, p: s.head(f"{u}/a/one.bin"), lambda got, u, p: got.size == len(BODY)),
    ("exists", lambda s, u, p: s.exists(f"{u}/a/one.bin"), lambda got, u, p: got is True),
    ("exists (a folder)", lambda s, u, p: s.exists(f"{u}/a/sub"), lambda got, u, p: got is True),
    ("check_bucket", lambda s, u, p: s.check_bucket(f"{u}/x"), lambda got, u, p: got is None),
    ("put", lambda s, u, p: s.put(f"{u}/new.bin", b"new"), lambda got, u, p: direct().get(f"{u}/new.bin") == b"new"),
    ("list_prefix", lambda s, u, p: s.list_prefix(f"{u}/a"), lambda got, u, p: sorted(got) == ["one.bin", "sub/three.bin", "two.bin"]),
    ("list_prefix (one level)", lambda s, u, p: s.list_prefix(f"{u}/a", recursive=False), lambda got, u, p: sorted(got) == ["one.bin", "two.bin"]),
    ("glob", lambda s, u, p: s.glob(f"{u}/a/*.bin"), lambda got, u, p: got == [f"{u}/a/one.bin", f"{u}/a/two.bin"]),
    ("delete", lambda s, u, p: s.delete([f"{u}/a/two.bin", f"{u}/never.bin"]), lambda got, u, p: not direct().exists(f"{u}/a/two.bin")),
    ("open", lambda s, u, p: s.open(f"{u}/a/one.bin").read(), lambda got, u, p: got == BODY),
    ("create_upload", lambda s, u, p: s.create_upload(f"{u}/made.bin"), lambda got, u, p: direct().uploads(f"{u}/made.bin") == [got]),
    ("upload_part", lambda s, u, p: s.upload_part(f"{u}/open.bin", p["open"], 1, b"part"), lambda got, u, p: got.strip('"') == hashlib.md5(b"part").hexdigest()),
    ("copy_part", lambda s, u, p: s.copy_part(f"{u}/copy.bin", p["copy"], 1, f"{u}/a/one.bin", 0, 100), lambda got, u, p: len(got) > 2),
    ("complete_upload", lambda s, u, p: s.complete_upload(f"{u}/done.bin", *p["done"]), lambda got, u, p: direct().head(f"{u}/done.bin").size == (5 << 20) + 1),
    ("abort_upload", lambda s, u, p: s.abort_upload(f"{u}/open.bin", p["open"]), lambda got, u, p: direct().uploads(f"{u}/open.bin") == []),
    ("uploads", lambda s, u, p: s.uploads(f"{u}/open.bin"), lambda got, u, p: got == [p["open"]]),
]


@pytest.mark.slow
@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_every_verb_gets_through_two_faults_of_each_kind(proxy, bucket, fast, kind):
    """Two faults in a row on a verb's first request (a client that retries 4 times gets through):
    each verb gives what it gives without faults, and counts 2 retries."""
    for name, call, check in VERBS:
        store = store_for("s3://x", through(proxy))
        assert isinstance(store, S3Store)
        prepared = _prepare(direct(), bucket)
        proxy.fail(2, kind)
        got = call(store, f"s3://{bucket}", prepared)
        assert check(got, f"s3://{bucket}", prepared), (name, kind, got)
        assert store.tally.retried == 2, (name, kind, store.tally.retried)
        proxy.clear_faults()
        storage.remove([f"s3://{bucket}/{k}" for k in direct().list_prefix(f"s3://{bucket}")])
        for upload in ("open.bin", "done.bin", "copy.bin", "made.bin"):
            for upload_id in direct().uploads(f"s3://{bucket}/{upload}"):
                direct().abort_upload(f"s3://{bucket}/{upload}", upload_id)


@pytest.mark.slow
def test_a_key_that_always_fails_is_one_error_in_bounded_time_and_leaves_nothing(proxy, bucket, fast, tmp_path):
    url = f"s3://{bucket}/always.bin"
    store = store_for(url, through(proxy))
    proxy.fail(10**6, "503", match="/always.bin")
    started = time.monotonic()
    with pytest.raises(StorageError) as e:
        store.get(url)
    assert str(e.value) == f"{url}: 503 SlowDown: Please reduce your request rate. (after {storage.RETRIES + 1} attempts)"
    assert e.value.transient and e.value.attempts == storage.RETRIES + 1 and e.value.url == url
    assert store.tally.requests == storage.RETRIES + 1 and store.tally.retried == storage.RETRIES
    # a multipart upload whose parts always fail: the upload is aborted, no object appears
    (tmp_path / "big").write_bytes(os.urandom((5 << 20) * 2 + 7))
    proxy.clear_faults()
    proxy.fail(10**6, "500", match="partNumber=2")
    with open(tmp_path / "big", "rb") as src, pytest.raises(StorageError, match=r"^s3://.*/always.bin: 500 InternalError: We encountered an internal error. Please try again. \(after 5 attempts\)$"):
        storage.upload_stream(src, url, through(proxy), block_size=5 << 20)
    proxy.clear_faults()
    assert not direct().exists(url) and direct().uploads(url) == []
    assert time.monotonic() - started < 10  # 0.01 s backoffs: bounded by count, not by the store
    # the same from the command line: one Error line naming the URL, the answer and the attempts
    from conftest import run

    (tmp_path / "l.lst").write_text("0\t0\tbig\n")
    proxy.fail(10**6, "503", match="/always.rec")
    result = run("pack", tmp_path / "l.lst", tmp_path, f"s3://{bucket}/always.rec", "--pass-through", "--storage-option", f"endpoint_url={proxy.url}")
    proxy.clear_faults()
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == f"Error: s3://{bucket}/always.rec: 503 Service Unavailable (after 5 attempts)", result.stderr  # a HEAD's answer: no body to say SlowDown
    assert direct().list_prefix(f"s3://{bucket}") == [] and direct().uploads(f"s3://{bucket}/always.rec") == []


@pytest.mark.slow
def test_retry_after_is_honoured_and_the_time_bound_holds(proxy, bucket, fast, monkeypatch):
    url = f"s3://{bucket}/later.bin"
    direct().put(url, b"later")
    store = store_for(url, through(proxy))
    proxy.fail(1, "503", match="/later.bin", retry_after=1)
    started = time.monotonic()
    assert store.get(url) == b"later"
    assert time.monotonic() - started >= 1.0 and store.tally.retried == 1
    monkeypatch.setattr(storage.retries, "RETRY_WITHIN", 0.5)  # a wait past the bound: no retry
    store = store_for(url, through(proxy))
    proxy.fail(1, "503", match="/later.bin", retry_after=2)
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"503 SlowDown: Please reduce your request rate\.$"):
        store.get(url)
    assert time.monotonic() - started < 1.0 and store.tally.retried == 0


def test_retry_after_as_a_date_and_the_options_count_of_attempts():
    from im2rec.storage.retries import check_options, retry_after

    class Answer(Exception):
        def __init__(self, value):
            self.retry_after = value

    assert retry_after(Answer("3")) == 3.0 and retry_after(Answer(None)) is None and retry_after(Answer("soon")) is None
    assert retry_after(Answer("Wed, 21 Oct 2015 07:28:00 GMT")) == 0.0  # a date past: now
    assert check_options({"config_kwargs": {"retries": {"total_max_attempts": 3}}}) == (None, None, 2)
    assert check_options({"config_kwargs": {"retries": {"max_attempts": 3}, "read_timeout": 2, "connect_timeout": "0.5"}}) == (2.0, 0.5, 3)
    assert check_options({}) == (None, None, None) and check_options(None) == (None, None, None)


def test_storage_options_that_are_not_numbers_are_usage_errors(tmp_path):
    """On the command line, exit 2 naming the option; in the library, OptionError (a ValueError)."""
    from conftest import run

    from im2rec.errors import OptionError

    cases = {
        "config_kwargs.retries.total_max_attempts=abc": "config_kwargs.retries.total_max_attempts: expected a whole number of 1 or more, got 'abc'",
        "config_kwargs.retries.total_max_attempts=0": "config_kwargs.retries.total_max_attempts: expected a whole number of 1 or more, got 0",
        "config_kwargs.retries.max_attempts=-1": "config_kwargs.retries.max_attempts: expected a whole number of 0 or more, got -1",
        "config_kwargs.read_timeout=abc": "config_kwargs.read_timeout: expected a number of seconds of 0.001 or more, got 'abc'",
        "config_kwargs.read_timeout=0": "config_kwargs.read_timeout: expected a number of seconds of 0.001 or more, got 0",
        "config_kwargs.connect_timeout=-1": "config_kwargs.connect_timeout: expected a number of seconds of 0.001 or more, got -1",
    }
    for option, said in cases.items():
        result = run("verify", "s3://b/t.rec", "--storage-option", option)
        assert result.exit_code == 2 and result.stderr.endswith(f"Error: Invalid value for '--storage-option': {said}\n"), (option, result.stderr)
    with pytest.raises(OptionError, match=r"^config_kwargs\.read_timeout: expected a number of seconds of 0\.001 or more, got 'abc'$"):
        store_for("s3://b/t.rec", {"config_kwargs": {"read_timeout": "abc"}})


@pytest.mark.slow
def test_a_retried_complete_whose_first_answer_was_lost_succeeds(proxy, bucket, fast):
    """The proxy forwards the CompleteMultipartUpload and drops its answer (a cut): the store did
    the work; the retry finds it done (SeaweedFS answers it again; AWS says NoSuchUpload, and the
    object's ETag is checked: tests/test_s3client.py)."""
    url = f"s3://{bucket}/lost.bin"
    upload_id = direct().create_upload(url)
    parts = [(1, direct().upload_part(url, upload_id, 1, b"a" * (5 << 20))), (2, direct().upload_part(url, upload_id, 2, b"b"))]
    store = store_for(url, through(proxy))
    proxy.fail(1, "cut", match="uploadId=")
    store.complete_upload(url, upload_id, parts)
    assert store.tally.retried == 1 and direct().head(url).etag == storage.multipart.expected_etag(parts)


@pytest.mark.slow
def test_listings_are_paginated(bucket):
    store = direct()
    client = s3client.client_for("s3://x")
    names = [f"many/{i:04d}.bin" for i in range(1003)]
    client.map(lambda n: client.request("PUT", bucket, n, body=b"x"), names)
    assert sorted(store.list_prefix(f"s3://{bucket}/many")) == [n.removeprefix("many/") for n in names]
    assert store.glob(f"s3://{bucket}/many/1*.bin") == [f"s3://{bucket}/{n}" for n in names if n.startswith("many/1")]
    assert store.tally.requests == 2 + 1  # two pages, then one (the keys under many/1)


def test_glob_patterns_are_fsspec_s():
    from im2rec.storage.store import _glob_pattern

    cases = {
        "a/*.rec": (["a/x.rec"], ["a/b/x.rec", "a/x.idx"]),
        "a/**.rec": (["a/x.rec", "a/b/x.rec"], ["b/x.rec"]),
        "a/p-0000?-of-00002.rec": (["a/p-00001-of-00002.rec"], ["a/p-00010-of-00002.rec"]),
        "a/[!x]*.rec": (["a/y.rec"], ["a/x.rec"]),
        "a/[xy].rec": (["a/x.rec", "a/y.rec"], ["a/z.rec"]),
        "a/(1).rec": (["a/(1).rec"], ["a/1.rec"]),
    }
    for pattern, (yes, no) in cases.items():
        regex = _glob_pattern(pattern)
        assert all(regex.match(k) for k in yes) and not any(regex.match(k) for k in no), pattern


def test_missing_and_denied_are_not_retried(s3, bucket, fast):
    store = direct()
    with pytest.raises(ObjectMissing) as e:
        store.get(f"s3://{bucket}/nothing.bin")
    assert str(e.value) == f"s3://{bucket}/nothing.bin: no such object" and store.tally.requests == 1 and not e.value.transient
    with pytest.raises(ObjectMissing, match=r"^s3://no-such-bucket-here/x: the bucket no-such-bucket-here does not exist \(or these credentials cannot see it\)$"):
        store.check_bucket("s3://no-such-bucket-here/x")
    wrong = store_for("s3://x", {"key": os.environ["AWS_ACCESS_KEY_ID"], "secret": "wrong"})
    with pytest.raises(StorageError, match=rf"^s3://{bucket}/nothing.bin: access denied: 403 SignatureDoesNotMatch: ") as e:
        wrong.get(f"s3://{bucket}/nothing.bin")
    assert wrong.tally.requests == 1 and not e.value.transient


# --------------------------------------------------------------------------- the transport


@pytest.mark.slow
def test_more_than_1024_open_files_do_not_break_requests(s3, bucket, forgetting):
    """A reader of many shards holds a descriptor each: requests still work (poll, not select)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"this machine allows {hard} open files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        s3client.forget_clients()  # new connections: their descriptors above 1,024
        store = direct()
        store.put(f"s3://{bucket}/fd.bin", b"fd")
        assert max(held) > 1024 and store.get(f"s3://{bucket}/fd.bin") == b"fd" and store.get(f"s3://{bucket}/fd.bin") == b"fd"  # the second on the kept-alive connection
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.slow
def test_a_forward_proxy_in_the_environment_carries_the_requests_and_no_proxy_bypasses_it(s3, bucket, monkeypatch, forgetting):
    """HTTP_PROXY: every request goes through the forward proxy, on im2rec's own client (not s3fs);
    NO_PROXY covering the endpoint: none does, on the same direct path as with no variable at all."""
    with LatencyProxy(None, latency=0) as forward:
        monkeypatch.setenv("HTTP_PROXY", forward.url)
        s3client.forget_clients()
        store = direct()
        assert isinstance(store, S3Store)
        store.put(f"s3://{bucket}/p.bin", b"proxied")
        assert store.get(f"s3://{bucket}/p.bin") == b"proxied" and forward.requests == 2 and forward.tunnels == 0
        monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
        s3client.forget_clients()
        store = direct()
        assert store.get(f"s3://{bucket}/p.bin") == b"proxied" and forward.requests == 2  # none more
        connection = s3client.client_for("s3://x")._pool.connection(*s3client.client_for("s3://x").where(bucket, "p.bin")[:2])
        assert connection.proxy is None
        monkeypatch.delenv("NO_PROXY")
        monkeypatch.setenv("HTTP_PROXY", "http://user:p%40ss@127.0.0.1:9")  # credentials, unquoted; nothing listens there
        s3client.forget_clients()
        with pytest.raises(StorageError, match=r": cannot reach http://127\.0\.0\.1:\d+ through the proxy http://127\.0\.0\.1:9: connection refused \(after 2 attempts\)$"):
            store_for("s3://x", {"config_kwargs": {"retries": {"total_max_attempts": 2}}}).get(f"s3://{bucket}/p.bin")
    from im2rec.storage.http import proxy_for

    assert proxy_for("http", "h:1", {"http": "http://user:p%40ss@proxy:3128"}).authorization == "Basic dXNlcjpwQHNz"  # user:p@ss
    monkeypatch.setenv("HTTP_PROXY", "socks5://p:1080")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")  # not read, as botocore does not
    s3client.forget_clients()
    with pytest.raises(StorageError) as e:
        direct().get(f"s3://{bucket}/p.bin")
    assert str(e.value) == f"s3://{bucket}/p.bin: cannot reach {os.environ['AWS_ENDPOINT_URL']}: HTTP_PROXY names 'socks5://p:1080': a proxy is reached over http://HOST:PORT here"
    assert e.value.attempts == 1
    monkeypatch.delenv("HTTP_PROXY")
    s3client.forget_clients()
    assert direct().get(f"s3://{bucket}/p.bin") == b"proxied"  # ALL_PROXY alone: direct


def _certificate(folder):
    """A self-signed certificate for 127.0.0.1 (openssl), its key; skip without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl program to make a certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.mark.slow
def test_tls_is_verified_against_aws_ca_bundle_and_tunnels_through_an_https_proxy(s3, bucket, tmp_path, monkeypatch, forgetting):
    import ssl

    cert, key = _certificate(tmp_path)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    direct().put(f"s3://{bucket}/tls.bin", b"secret")
    with LatencyProxy(s3, latency=0, tls=server) as front:
        assert front.url.startswith("https://127.0.0.1:")
        s3client.forget_clients()
        with pytest.raises(StorageError) as e:
            store_for("s3://x", {"endpoint_url": front.url}).get(f"s3://{bucket}/tls.bin")
        assert str(e.value) == f"s3://{bucket}/tls.bin: cannot reach {front.url}: its certificate does not verify (self-signed certificate); if a private authority signs it, name its bundle in AWS_CA_BUNDLE"
        assert e.value.attempts == 1 and not e.value.transient  # not retried
        monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "missing.pem"))
        s3client.forget_clients()
        with pytest.raises(StorageError) as e:  # not "the bucket does not exist"
            store_for("s3://x", {"endpoint_url": front.url}).check_bucket(f"s3://{bucket}/tls.bin")
        assert str(e.value) == f"s3://{bucket}: cannot reach {front.url}: the CA bundle {tmp_path / 'missing.pem'} (AWS_CA_BUNDLE, or client_kwargs.verify) cannot be loaded: No such file or directory"
        assert e.value.attempts == 1 and not isinstance(e.value, ObjectMissing)
        monkeypatch.setenv("AWS_CA_BUNDLE", str(cert))
        s3client.forget_clients()
        assert store_for("s3://x", {"endpoint_url": front.url}).get(f"s3://{bucket}/tls.bin") == b"secret"
        with LatencyProxy(None, latency=0) as forward:
            monkeypatch.setenv("HTTPS_PROXY", forward.url)
            s3client.forget_clients()
            store = store_for("s3://x", {"endpoint_url": front.url})
            assert store.get(f"s3://{bucket}/tls.bin") == b"secret" and store.get(f"s3://{bucket}/tls.bin") == b"secret"
            assert forward.tunnels == 1  # one CONNECT; both requests inside the kept-alive tunnel


def test_forgotten_clients_leave_no_threads_behind(s3, bucket):
    store = direct()
    store.put(f"s3://{bucket}/t.bin", b"t")
    assert store.get_many([f"s3://{bucket}/t.bin"] * 8) == [b"t"] * 8

    def ours():
        return [t for t in threading.enumerate() if t.name.startswith("im2rec-s3")]

    assert ours()
    s3client.forget_clients()
    deadline = time.monotonic() + 5
    while ours() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ours() == []


# --------------------------------------------------------------------------- the other stores


def test_every_other_scheme_goes_through_fsspec_with_the_same_words(tmp_path, fast):
    store = store_for("memory://seam/x")
    assert isinstance(store, FsspecStore) and not store.multipart
    store.put("memory://seam/a/b.bin", b"memory")
    assert store.get("memory://seam/a/b.bin") == b"memory" and store.get_range("memory://seam/a/b.bin", 1, 3) == b"em"
    assert store.list_prefix("memory://seam/a") == ["b.bin"] and store.glob("memory://seam/a/*.bin") == ["memory://seam/a/b.bin"]
    assert store.get_many(["memory://seam/a/b.bin", "memory://seam/a/b.bin"]) == [b"memory", b"memory"]
    missing = store.get_many(["memory://seam/a/b.bin", "memory://seam/none"])[1]
    assert isinstance(missing, ObjectMissing) and str(missing) == "memory://seam/none: no such object (or its bucket does not exist)"
    with open(tmp_path / "src", "wb") as f:
        f.write(b"streamed" * 1000)
    with open(tmp_path / "src", "rb") as f:
        store.put_stream("memory://seam/s.bin", f)
    assert store.open("memory://seam/s.bin").read() == b"streamed" * 1000
    store.download("memory://seam/s.bin", str(tmp_path / "down"))
    assert (tmp_path / "down").read_bytes() == b"streamed" * 1000
    store.delete(["memory://seam/s.bin", "memory://seam/never"])
    assert not store.exists("memory://seam/s.bin")


def test_s3_options_only_s3fs_knows_go_to_fsspec_retried_by_the_seam(s3, bucket, proxy, fast):
    store = store_for("s3://x", {"endpoint_url": proxy.url, "requester_pays": False, "config_kwargs": {"read_timeout": STALL}})
    assert isinstance(store, FsspecStore) and store.multipart
    direct().put(f"s3://{bucket}/f.bin", b"fsspec")
    proxy.fail(2, "503", match="/f.bin")
    assert store.get(f"s3://{bucket}/f.bin") == b"fsspec" and store.tally.retried == 2
    proxy.fail(10**6, "500", match="/f.bin")
    with pytest.raises(StorageError, match=rf"^s3://{bucket}/f.bin: .*\(after 5 attempts\)$") as e:
        store.get(f"s3://{bucket}/f.bin")
    proxy.clear_faults()
    assert e.value.transient


# --------------------------------------------------------------------------- the commands through a failing store


@pytest.mark.slow
def test_every_command_gets_through_a_store_that_fails_one_request_in_three(s3, proxy, data_dir, tmp_path, monkeypatch, fast):
    """Through the proxy, every third request fails (503 SlowDown, 500, a reset, an answer cut
    short; none more than twice): each command's outputs are byte-identical to the same command's
    on a direct connection, and the commands that report retries count them."""
    from conftest import run

    from im2rec import RecordDataset

    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    monkeypatch.setattr(storage.multipart, "UPLOAD_PART", 5 << 20)  # the streamed .rec of 11.5 MB: 3 parts
    golden, tree, faces = data_dir / "im2rec_pack_pass", data_dir / "tree", data_dir / "insightface"
    seaweed().make_bucket("cmd")
    put = direct()
    for ext in ("rec", "idx", "lst"):
        put.put(f"s3://cmd/all.{ext}", (golden / f"all.{ext}").read_bytes())
    for name in ("train.rec", "train.idx", "property"):
        put.put(f"s3://cmd/faces/{name}", (faces / name).read_bytes())
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        put.put(f"s3://cmd/tree/{path.relative_to(tree).as_posix()}", path.read_bytes())
    lines = (golden / "all.lst").read_text().splitlines()
    (tmp_path / "big.lst").write_text("".join(f"{i}\t0\t{lines[i % len(lines)].rsplit(chr(9), 1)[1]}\n" for i in range(1000)))

    def commands(p):
        return [
            ["list", "s3://cmd/tree", f"s3://cmd/{p}/lists/d"],
            ["pack", golden / "all.lst", tree, f"s3://cmd/{p}/local.rec", "--pass-through"],
            ["pack", tmp_path / "big.lst", tree, f"s3://cmd/{p}/big.rec", "--pass-through"],
            ["pack", "s3://cmd/all.lst", "s3://cmd/tree", f"s3://cmd/{p}/s3.rec", "--resize", "32"],
            ["pack", tmp_path / "big.lst", tree, f"s3://cmd/{p}/parts/p.rec", "--pass-through", "--num-parts", "2", "--part-index", "0"],
            ["pack", tmp_path / "big.lst", tree, f"s3://cmd/{p}/parts/p.rec", "--pass-through", "--num-parts", "2", "--part-index", "1"],
            ["merge", f"s3://cmd/{p}/merged.rec", f"s3://cmd/{p}/parts/p-*.rec"],
            ["export", "s3://cmd/all.rec", f"s3://cmd/{p}/wds", "--format", "webdataset"],
            ["import", f"s3://cmd/{p}/wds", f"s3://cmd/{p}/imported.rec", "--format", "webdataset"],
            ["convert", "s3://cmd/faces/train.rec", f"s3://cmd/{p}/plain.rec", "--layout", "plain"],
            ["verify", "s3://cmd/all.rec"],
            ["inspect", "s3://cmd/all.rec", "--json"],
            ["extract", "s3://cmd/all.rec", tmp_path / p / "extracted"],
        ]

    said = {}
    for prefix, options in (("ref", []), ("run", ["--storage-option", f"endpoint_url={proxy.url}"])):
        if prefix == "run":
            proxy.reset_counters()
            proxy.chaos(every=3, kinds=("503", "500", "reset", "cut"), most=2)
        for command in commands(prefix):
            result = run(*command, *options)
            assert result.exit_code == 0, (prefix, command, result.output)
            said[prefix, command[0], str(command[-1]).replace(prefix, "P")] = result.stdout.replace(f"/{prefix}/", "/P/")
    proxy.clear_faults()
    assert proxy.faults > 50, proxy.stats()  # (84 of 275 requests, here)
    ref, got = sorted(put.list_prefix("s3://cmd/ref")), sorted(put.list_prefix("s3://cmd/run"))
    assert ref == got and len(ref) > 20, (ref, got)
    for name in ref:
        assert put.get(f"s3://cmd/run/{name}") == put.get(f"s3://cmd/ref/{name}"), name
    big = put.head("s3://cmd/run/big.rec")
    assert put.uploads("s3://cmd/run/big.rec") == [] and big.etag.endswith(f'-{-(-big.size // (5 << 20))}"') and big.size > 10 << 20  # streamed in parts, whole
    for folder in ("extracted",):
        names = sorted(p.relative_to(tmp_path / "ref" / folder) for p in (tmp_path / "ref" / folder).rglob("*") if p.is_file())
        assert names and all((tmp_path / "run" / folder / n).read_bytes() == (tmp_path / "ref" / folder / n).read_bytes() for n in names)
    assert said["run", "verify", "s3://cmd/all.rec"] == said["ref", "verify", "s3://cmd/all.rec"]
    assert said["run", "inspect", "--json"] == said["ref", "inspect", "--json"]
    big = said["run", "pack", "--pass-through"]
    assert big.startswith("packed 1,000 of 1,000 images into s3://cmd/P/big.rec") and big.rstrip().endswith(" requests retried"), big  # the streamed upload's retries
    # and a training reader
    proxy.chaos(every=3, kinds=("503", "500", "reset", "cut"), most=2)
    remote = RecordDataset("s3://cmd/all.rec", mode="raw", storage_options={"endpoint_url": proxy.url})
    local = RecordDataset(golden / "all.rec", mode="raw")
    assert [remote[i] for i in range(len(local))] == [local[i] for i in range(len(local))] and remote.read_stats()["retried"] > 0
    proxy.clear_faults()


@pytest.mark.slow
def test_a_failed_streamed_part_stops_the_pack_with_the_count_it_keeps(s3, proxy, data_dir, tmp_path, monkeypatch, fast):
    """The .rec's second part always fails: pack stops with one line whose count is the records
    kept in the staging folder, and --resume, once the store answers, finishes the same bytes as a local pack."""
    import re

    from conftest import run

    monkeypatch.setenv("IM2REC_STAGING", str(tmp_path / "staging"))
    monkeypatch.setattr(storage.multipart, "UPLOAD_PART", 5 << 20)
    tree = data_dir / "tree"
    lines = (data_dir / "im2rec_pack_pass" / "all.lst").read_text().splitlines()
    (tmp_path / "big.lst").write_text("".join(f"{i}\t0\t{lines[i % len(lines)].rsplit(chr(9), 1)[1]}\n" for i in range(2000)))  # 23 MB: part 2's failure is met when part 3 is due
    bucket = new_bucket("fs")
    args = ["pack", tmp_path / "big.lst", tree, f"s3://{bucket}/big.rec", "--pass-through", "--storage-option", f"endpoint_url={proxy.url}"]
    proxy.fail(10**6, "500", match="partNumber=2")
    result = run(*args)
    proxy.clear_faults()
    assert result.exit_code == 1
    said = result.stderr.strip().splitlines()[-1]
    assert said.startswith(f"Error: s3://{bucket}/big.rec: 500 InternalError: We encountered an internal error. Please try again. (after 5 attempts); what was packed before it is kept in "), said
    kept = int(re.search(r"\(([\d,]+) packed\)", said).group(1).replace(",", ""))
    partial = next((tmp_path / "staging").rglob("big.idx.partial"))
    assert kept == len(partial.read_text().splitlines()) > 0
    assert direct().uploads(f"s3://{bucket}/big.rec") == [] and not direct().exists(f"s3://{bucket}/big.rec")
    result = run(*args, "--resume")
    assert result.exit_code == 0 and f"(resumed after {kept:,}" in result.stdout, result.output
    assert run("pack", tmp_path / "big.lst", tree, tmp_path / "local.rec", "--pass-through").exit_code == 0
    assert direct().get(f"s3://{bucket}/big.rec") == (tmp_path / "local.rec").read_bytes()
