"""im2rec's S3 client (s3client): its signatures against botocore's, and every request against a
real S3 server on loopback (SeaweedFS, which checks signatures), with the latency/fault proxy."""

import datetime
import os
import time

import pytest
from conftest import s3_endpoint

from im2rec import storage
from im2rec.storage import s3client
from im2rec.storage.s3client import AccessDenied, Credentials, NoSuchObject, S3Client, S3Error
from im2rec.testing.proxy import LatencyProxy

KEYS = ["plain.bin", "a b+c/ü=1&x.bin", "dir/sub/~tilde_(1).rec", "percent%20.jpg"]


@pytest.fixture(scope="module")
def s3():
    with s3_endpoint() as endpoint:
        client = s3client.client_for("s3://c/x")
        assert client is not None
        yield endpoint, client


@pytest.fixture
def bucket(s3):
    name = f"c{time.monotonic_ns()}"
    from conftest import seaweed

    seaweed().make_bucket(name)
    return name


def test_the_signature_is_botocore_s(monkeypatch):
    """For fixed keys and time, the signature botocore's SigV4 gives, for keys that need
    encoding, a query string and a session token."""
    pytest.importorskip("botocore")
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    now = datetime.datetime(2026, 12, 1, 12, 30, 0, tzinfo=datetime.timezone.utc)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now)
    for key in KEYS:
        for query, token in (({}, None), ({"partNumber": "3", "uploadId": "abc/+="}, "TOKEN")):
            path = "/bucket/" + s3client.quote(key, safe="/~")
            headers: dict = {}
            s3client.sign("GET", "127.0.0.1:9000", path, query, headers, s3client.EMPTY_SHA256, Credentials("AKID", "SECRET", token), "eu-west-1", now)
            url = "http://127.0.0.1:9000" + path + ("?" + s3client._query_string(query) if query else "")
            request = AWSRequest(method="GET", url=url, headers={"x-amz-content-sha256": s3client.EMPTY_SHA256})
            botocore.auth.S3SigV4Auth(BotoCredentials("AKID", "SECRET", token), "s3", "eu-west-1").add_auth(request)
            assert headers["Authorization"] == request.headers["Authorization"], (key, query)


@pytest.mark.slow
def test_objects_round_trip_with_keys_that_need_encoding(s3, bucket):
    _, client = s3
    for i, key in enumerate(KEYS):
        body = bytes([i]) * (1000 + i)
        etag = client.put(bucket, key, body)
        assert etag and client.get(bucket, key) == body
        assert client.get(bucket, key, 10, 20) == body[10:20]
        assert client.head(bucket, key) == {"size": len(body), "etag": etag}
    assert client.has_prefix(bucket, "dir/") and not client.has_prefix(bucket, "nothing/")


@pytest.mark.slow
def test_errors_are_said_in_the_store_s_words(s3, bucket):
    _, client = s3
    with pytest.raises(NoSuchObject) as e:
        client.get(bucket, "missing.bin")
    assert e.value.code == "NoSuchKey" and e.value.status == 404
    assert str(storage.storage_error(f"s3://{bucket}/missing.bin", e.value)) == f"s3://{bucket}/missing.bin: no such object"
    with pytest.raises(NoSuchObject) as e:
        client.get("no-such-bucket", "x")
    assert str(storage.storage_error("s3://no-such-bucket/x", e.value)) == "s3://no-such-bucket/x: the bucket no-such-bucket does not exist (or these credentials cannot see it)"
    wrong = S3Client(s3client.config_for({"key": os.environ["AWS_ACCESS_KEY_ID"], "secret": "wrong"}))
    with pytest.raises(AccessDenied) as e:
        wrong.get(bucket, "missing.bin")
    assert e.value.code == "SignatureDoesNotMatch" and str(storage.storage_error("s3://b/k", e.value)).startswith("s3://b/k: access denied: 403 SignatureDoesNotMatch: ")
    closed = S3Client(s3client.config_for({"endpoint_url": "http://127.0.0.1:9"}))
    with pytest.raises(S3Error, match=r"cannot reach http://127.0.0.1:9: Connection refused") as e:
        closed.get(bucket, "x")
    assert not storage.retries.permanent(e.value)  # retried by the callers


@pytest.mark.slow
def test_a_multipart_upload_appears_whole_or_leaves_nothing(s3, bucket, tmp_path, monkeypatch):
    _, client = s3
    data = os.urandom((5 << 20) * 2 + 1234)
    (tmp_path / "big").write_bytes(data)
    storage.upload(str(tmp_path / "big"), f"s3://{bucket}/big.bin")  # parts of 16 MB: one PUT
    assert client.get(bucket, "big.bin") == data
    with open(tmp_path / "big", "rb") as src:
        storage.upload_stream(src, f"s3://{bucket}/parts.bin", block_size=5 << 20)  # three parts, two at once
    assert client.get(bucket, "parts.bin") == data and client.head(bucket, "parts.bin")["etag"].endswith('-3"')

    class Failing:
        def __init__(self):
            self.reads = 0

        def read(self, n):
            self.reads += 1
            if self.reads > 2:
                raise OSError("the disk went away")
            return b"x" * n

    with pytest.raises(storage.StorageError, match=rf"s3://{bucket}/torn.bin: OSError: the disk went away"):
        storage.upload_stream(Failing(), f"s3://{bucket}/torn.bin", block_size=5 << 20)
    assert not storage.exists(f"s3://{bucket}/torn.bin") and client.uploads(bucket, "torn") == []  # aborted


@pytest.mark.slow
def test_the_streamed_rec_upload_aborts_stale_uploads_and_completes(s3, bucket, tmp_path):
    _, client = s3
    stale = client.create_upload(bucket, "out.rec")  # a killed run's
    local = tmp_path / "out.rec"
    streamer = storage.Streamer(f"s3://{bucket}/out.rec", str(local), upload_part=5 << 20)
    assert [u for _, u in client.uploads(bucket, "out.rec")] == [streamer.upload_id] != [stale]
    data = os.urandom(12 << 20)
    with open(local, "wb") as f:
        for i in range(0, len(data), 1 << 20):
            f.write(data[i : i + (1 << 20)])
            f.flush()
            streamer.feed(f.tell(), f.flush)
    streamer.finish(len(data))
    assert client.get(bucket, "out.rec") == data and client.uploads(bucket, "out.rec") == []


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")  # the fork is the point: a DataLoader forks so
def test_a_forked_child_reads_with_connections_of_its_own(s3, bucket):
    """What a DataLoader worker does: the parent has used the client (connections, its thread
    pool); the child's requests work, where obstore's tokio runtime would hang."""
    _, client = s3
    client.put(bucket, "f.bin", b"forked" * 1000)
    assert client.map(lambda r: client.get(bucket, "f.bin", *r), [(0, 6), (6, 12)]) == [b"forked", b"forked"]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            got = client.map(lambda r: client.get(bucket, "f.bin", *r), [(0, 6), (6, 12)])
            os.write(write, b"ok" if got == [b"forked", b"forked"] else repr(got).encode())
        except BaseException as e:
            os.write(write, repr(e).encode())
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
        time.sleep(0.05)
    else:
        if time.monotonic() >= deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    assert os.read(read, 1000) == b"ok"
    os.close(read)


@pytest.mark.slow
def test_transient_faults_are_retried_and_counted_through_the_proxy(s3, bucket, monkeypatch):
    endpoint, client = s3
    monkeypatch.setattr(storage.retries, "RETRY_DELAY", 0.01)
    client.put(bucket, "r.bin", bytes(range(256)) * 100)
    with LatencyProxy(endpoint, latency=0.005) as proxy:
        options = {"endpoint_url": proxy.url, "config_kwargs": {"read_timeout": 2}}
        for kind in ("503", "500", "reset", "stall"):
            source = storage.RemoteSource(f"s3://{bucket}/r.bin", options)
            proxy.fail(2, kind)
            assert source[100:200] == (bytes(range(256)) * 100)[100:200]
            assert source.retried == 2 and source.requests == 3, kind
        source = storage.RemoteSource(f"s3://{bucket}/r.bin", options)
        proxy.fail(storage.RETRIES + 1, "503")
        with pytest.raises(storage.StorageError, match=rf"^s3://{bucket}/r.bin: 503 SlowDown: .* \(reading bytes 0-25600 after 4 retries\)$"):
            source[0:10]
        proxy.clear_faults()


@pytest.mark.slow
def test_when_it_declines_s3fs_does_the_work(monkeypatch):
    assert s3client.client_for("gs://b/k") is None
    assert s3client.config_for({"requester_pays": True}) is None  # an option it does not know
    assert s3client.config_for({"client_kwargs": {"use_ssl": False}}) is None
    assert s3client.config_for({"key": "k", "secret": "s"}) is not None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert s3client.config_for({}) is None  # botocore knows how to go through a proxy; this client does not
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setenv("IM2REC_S3_CLIENT", "fsspec")
    assert s3client.config_for({}) is None


def test_credentials_and_region_from_a_profile(tmp_path, monkeypatch):
    """No keys in the environment: botocore's chain finds the profile's, as s3fs would."""
    pytest.importorskip("botocore")
    (tmp_path / "credentials").write_text("[work]\naws_access_key_id = PROFILEKEY\naws_secret_access_key = PROFILESECRET\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    client = S3Client(s3client.config_for({"profile": "work"}))
    assert client._credentials.get() == Credentials("PROFILEKEY", "PROFILESECRET", None)
    monkeypatch.setenv("AWS_PROFILE", "work")
    assert S3Client(s3client.config_for({}))._credentials.get() == Credentials("PROFILEKEY", "PROFILESECRET", None)


class _Scripted:
    """A loopback server that reads each request and answers with the next of `answers` (raw
    bytes, written as they are; a None after an answer: close the connection once it is sent)."""

    def __init__(self, answers):
        import socket
        import threading

        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.answers:
            conn, _ = self.listener.accept()
            with conn:
                buffer = b""
                while self.answers:
                    while b"\r\n\r\n" not in buffer:
                        data = conn.recv(65536)
                        if not data:
                            break
                        buffer += data
                    if b"\r\n\r\n" not in buffer:
                        break
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
                    while len(buffer) < length:
                        buffer += conn.recv(65536)
                    self.requests.append(head + b"\r\n\r\n" + buffer[:length])
                    buffer = buffer[length:]
                    answer = self.answers.pop(0)
                    if answer is None:
                        break
                    conn.sendall(answer)
                    if self.answers and self.answers[0] is None:  # close right after this answer
                        self.answers.pop(0)
                        break
        self.listener.close()


def _client_of(server, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    s3client.forget_clients()
    client = s3client.client_for("s3://b/x")
    assert client is not None
    return client


def test_answers_are_read_by_length_chunks_or_to_the_end(monkeypatch):
    """Content-Length on a kept-alive connection; chunked with an extension and a trailer; an
    interim 100 Continue; a HEAD's length without a body; a body that ends at the close."""
    server = _Scripted([
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"e1\"\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n4\r\ndefg\r\n0\r\nX-Trailer: t\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 206 Partial Content\r\nContent-Length: 2\r\n\r\nxy",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nLast-Modified: Tue, 01 Dec 2026 00:00:00 GMT\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
    ])
    client = _client_of(server, monkeypatch)
    assert client.get("b", "one") == b"hello"
    assert client.get("b", "two") == b"abcdefg"
    assert client.get("b", "three", 0, 2) == b"xy"
    assert client.head("b", "four")["size"] == 1234
    assert client.get("b", "five") == b"until the end"
    server.thread.join(10)
    assert [r.split(b" ")[1] for r in server.requests] == [b"/b/one", b"/b/two", b"/b/three", b"/b/four", b"/b/five"]
    assert b"Range: bytes=0-1" in server.requests[2] and server.requests[3].startswith(b"HEAD ")


def test_an_answer_cut_short_is_a_dropped_connection_named(monkeypatch):
    """A server that closes mid-body, or after a garbled status line: an S3Error (an OSError,
    retried by storage) naming what happened, and the next request opens a new connection."""
    server = _Scripted([
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", None,
        b"SMTP ready\r\n\r\n", None,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ])
    client = _client_of(server, monkeypatch)
    with pytest.raises(S3Error) as cut:
        client.get("b", "k")
    assert str(cut.value) == f"GET b/k: ConnectionClosed from http://127.0.0.1:{server.port}: the server closed the connection after 10 of 100 bytes"
    with pytest.raises(S3Error) as garbled:
        client.get("b", "k")
    assert str(garbled.value) == f"GET b/k: ConnectionClosed from http://127.0.0.1:{server.port}: not an HTTP answer: 'SMTP ready'"
    assert client.get("b", "k") == b"ok"
