"""im2rec's S3 client (s3client): its signatures against botocore's, and every request against a
real S3 server on loopback (SeaweedFS, which checks signatures), with the latency/fault proxy."""

import datetime
import hashlib
import os
import time

import pytest
from conftest import new_bucket, s3_endpoint

from im2rec import storage
from im2rec.storage import StorageError, s3client, store_for
from im2rec.storage.s3client import Credentials, S3Client, S3Error
from im2rec.testing.proxy import LatencyProxy

KEYS = ["plain.bin", "a b+c/ü=1&x.bin", "dir/sub/~tilde_(1).rec", "percent%20.jpg"]


@pytest.fixture(scope="module")
def s3():
    with s3_endpoint() as endpoint:
        yield endpoint


@pytest.fixture
def bucket(s3):
    return new_bucket("c")


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
    store = store_for("s3://x")
    for i, key in enumerate(KEYS):
        body = bytes([i]) * (1000 + i)
        url = f"s3://{bucket}/{key}"
        store.put(url, body)
        assert store.get(url) == body and store.get_range(url, 10, 20) == body[10:20]
        assert store.head(url) == storage.Info(len(body), f'"{hashlib.md5(body).hexdigest()}"')
    assert store.exists(f"s3://{bucket}/dir/") and not store.exists(f"s3://{bucket}/nothing/")
    assert sorted(store.list_prefix(f"s3://{bucket}")) == sorted(KEYS)
    store.delete([f"s3://{bucket}/{k}" for k in KEYS])
    assert store.list_prefix(f"s3://{bucket}") == []


@pytest.mark.slow
def test_a_body_is_sent_with_its_content_md5_which_the_store_checks(s3, bucket):
    client = s3client.client_for("s3://x")
    with pytest.raises(S3Error) as e:
        client.request("PUT", bucket, "bad.bin", body=b"what is sent", headers={"Content-MD5": s3client.content_md5(b"what was meant")})
    assert e.value.status == 400 and e.value.code == "BadDigest"  # so a body damaged on its way is refused, not stored
    client.request("PUT", bucket, "good.bin", body=b"what is sent")


@pytest.mark.slow
def test_a_multipart_upload_appears_whole_or_leaves_nothing(s3, bucket, tmp_path, monkeypatch):
    store = store_for("s3://x")
    data = os.urandom((5 << 20) * 2 + 1234)
    (tmp_path / "big").write_bytes(data)
    storage.upload(str(tmp_path / "big"), f"s3://{bucket}/big.bin")  # parts of 16 MB: one PUT
    assert store.get(f"s3://{bucket}/big.bin") == data
    with open(tmp_path / "big", "rb") as src:
        storage.upload_stream(src, f"s3://{bucket}/parts.bin", block_size=5 << 20)  # three parts, two at once
    assert store.get(f"s3://{bucket}/parts.bin") == data and store.head(f"s3://{bucket}/parts.bin").etag.endswith('-3"')

    class Failing:
        def __init__(self):
            self.reads = 0

        def read(self, n):
            self.reads += 1
            if self.reads > 2:
                raise OSError("the disk went away")
            return b"x" * n

    with pytest.raises(storage.StorageError, match=rf"^s3://{bucket}/torn.bin: OSError: the disk went away$"):
        storage.upload_stream(Failing(), f"s3://{bucket}/torn.bin", block_size=5 << 20)
    assert not storage.exists(f"s3://{bucket}/torn.bin") and store.uploads(f"s3://{bucket}/torn.bin") == []  # aborted


@pytest.mark.slow
def test_the_streamed_rec_upload_aborts_stale_uploads_and_completes(s3, bucket, tmp_path):
    store = store_for("s3://x")
    url = f"s3://{bucket}/out.rec"
    stale = store.create_upload(url)  # a killed run's
    local = tmp_path / "out.rec"
    streamer = storage.Streamer(url, str(local), upload_part=5 << 20)
    assert store.uploads(url) == [streamer.upload_id] != [stale]
    data = os.urandom(12 << 20)
    with open(local, "wb") as f:
        for i in range(0, len(data), 1 << 20):
            f.write(data[i : i + (1 << 20)])
            f.flush()
            streamer.feed(f.tell(), f.flush)
    streamer.finish(len(data))
    assert store.get(url) == data and store.uploads(url) == []
    assert streamer.tally.requests == 1 + 1 + 1 + 3 + 1  # list, abort the stale one, create, 3 parts, complete


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")  # the fork is the point: a DataLoader forks so
def test_a_forked_child_reads_with_connections_of_its_own(s3, bucket):
    """What a DataLoader worker does: the parent has used the client (connections, its thread
    pool); the child's requests work, where obstore's tokio runtime would hang."""
    store = store_for("s3://x")
    url = f"s3://{bucket}/f.bin"
    store.put(url, b"forked" * 1000)
    assert store.get_ranges(url, [(0, 6), (6, 12)]) == [b"forked", b"forked"]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            got = store.get_ranges(url, [(0, 6), (6, 12)])
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
    assert store.get(url) == b"forked" * 1000  # and the parent's connections still serve it


@pytest.mark.slow
def test_transient_faults_are_retried_and_counted_through_the_proxy(s3, bucket, monkeypatch):
    endpoint = s3
    monkeypatch.setattr(storage.retries, "RETRY_DELAY", 0.01)
    store_for("s3://x").put(f"s3://{bucket}/r.bin", bytes(range(256)) * 100)
    with LatencyProxy(endpoint, latency=0.005) as proxy:
        options = {"endpoint_url": proxy.url, "config_kwargs": {"read_timeout": 2}}
        for kind in ("503", "500", "reset", "stall", "cut"):
            source = storage.RemoteSource(f"s3://{bucket}/r.bin", options)
            proxy.fail(2, kind)
            assert source[100:200] == (bytes(range(256)) * 100)[100:200]
            assert source.retried == 2 and source.requests == 1 + 3, kind  # the HEAD, then 3 attempts
        source = storage.RemoteSource(f"s3://{bucket}/r.bin", options)
        proxy.fail(storage.RETRIES + 1, "503")
        with pytest.raises(storage.StorageError, match=rf"^s3://{bucket}/r.bin: 503 SlowDown: .* \(reading bytes 0-25600, after 5 attempts\)$"):
            source[0:10]
        proxy.clear_faults()


def test_when_it_declines_s3fs_does_the_work(monkeypatch):
    assert s3client.client_for("gs://b/k") is None
    assert s3client.config_for({"requester_pays": True}) is None  # an option it does not know
    assert s3client.config_for({"client_kwargs": {"use_ssl": False}}) is None
    assert s3client.config_for({"key": "k", "secret": "s"}) is not None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert s3client.config_for({}) is not None  # a proxy: this client goes through it (tests/test_store.py)
    assert s3client.config_for({"config_kwargs": {"proxies": {"https": "http://p:1"}}}).proxies == (("https", "http://p:1"),)
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


def _store_of(server, monkeypatch, retries=0):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setattr(storage.retries, "RETRY_DELAY", 0.01)
    s3client.forget_clients()
    return store_for("s3://b/x", retries=retries)


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
    store = _store_of(server, monkeypatch)
    assert store.get("s3://b/one") == b"hello"
    assert store.get("s3://b/two") == b"abcdefg"
    assert store.get_range("s3://b/three", 0, 2) == b"xy"
    assert store.head("s3://b/four").size == 1234
    assert store.get("s3://b/five") == b"until the end"
    server.thread.join(10)
    assert [r.split(b" ")[1] for r in server.requests] == [b"/b/one", b"/b/two", b"/b/three", b"/b/four", b"/b/five"]
    assert b"Range: bytes=0-1" in server.requests[2] and server.requests[3].startswith(b"HEAD ")


def test_garbage_answers_are_said_in_words_naming_the_url(monkeypatch):
    """A server that closes mid-body or mid-head, answers what is not HTTP, a chunk size that is
    not hexadecimal, a Content-Length that is not a number, a header line without a colon: a
    StorageError that says so and names the URL; the next request opens a new connection."""
    server = _Scripted([
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", None,
        b"HTTP/1.1 200 OK\r\nContent-Le", None,
        b"SMTP ready\r\n\r\n", None,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", None,
        b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", None,
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", None,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ])
    store = _store_of(server, monkeypatch)
    origin = f"http://127.0.0.1:{server.port}"
    said = []
    for _ in range(6):
        with pytest.raises(StorageError) as e:
            store.get("s3://b/k")
        said.append(str(e.value))
    assert said == [
        f"s3://b/k: {origin} closed the connection after 10 of 100 bytes",
        f"s3://b/k: {origin} closed the connection in the middle of its answer's head",
        f"s3://b/k: the server's answer is not valid HTTP: a status line that is not HTTP/1.x ('SMTP ready') ({origin})",
        f"s3://b/k: the server's answer is not valid HTTP: a chunk size that is not hexadecimal (b'zz') ({origin})",
        f"s3://b/k: the server's answer is not valid HTTP: a Content-Length that is not a number ('ten') ({origin})",
        f"s3://b/k: the server's answer is not valid HTTP: a header line without a name and a colon ('no colon here') ({origin})",
    ]
    assert store.get("s3://b/k") == b"ok"


def test_garbage_is_not_retried_but_a_cut_answer_is(monkeypatch):
    server = _Scripted([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ncut", None, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"SMTP\r\n\r\n", None])
    store = _store_of(server, monkeypatch, retries=3)
    assert store.get("s3://b/k") == b"ok" and store.tally.retried == 1
    with pytest.raises(StorageError, match=r"not valid HTTP") as e:
        store.get("s3://b/k")
    assert e.value.attempts == 1 and not e.value.transient


def _answer(status, body):
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


def _complete_answers(etag):
    return [
        None,  # the first CompleteMultipartUpload: done by the store, its answer lost (the connection closed)
        _answer(404, b"<Error><Code>NoSuchUpload</Code><Message>gone</Message></Error>"),
        b'HTTP/1.1 200 OK\r\nContent-Length: 9\r\nETag: ' + etag + b"\r\n\r\n",
    ]


def test_a_complete_retried_into_no_such_upload_checks_the_object_s_etag(monkeypatch):
    """AWS answers a second CompleteMultipartUpload with NoSuchUpload: the object is there with
    the ETag its parts give, so the upload went through; with another ETag, it did not."""
    parts = [(1, '"' + hashlib.md5(b"a").hexdigest() + '"'), (2, '"' + hashlib.md5(b"b").hexdigest() + '"')]
    expected = storage.multipart.expected_etag(parts)
    assert expected == '"' + hashlib.md5(hashlib.md5(b"a").digest() + hashlib.md5(b"b").digest()).hexdigest() + '-2"'
    store = _store_of(_Scripted(_complete_answers(expected.encode())), monkeypatch, retries=2)
    store.complete_upload("s3://b/k", "up1", parts)
    store = _store_of(_Scripted(_complete_answers(b'"other-2"')), monkeypatch, retries=2)
    with pytest.raises(StorageError, match=r"^s3://b/k: 404 NoSuchUpload: gone \(after 2 attempts\)$"):
        store.complete_upload("s3://b/k", "up1", parts)


def test_multipart_uploads_are_listed_page_by_page(monkeypatch):
    def page(ids, more, marker=b""):
        uploads = b"".join(b"<Upload><Key>k</Key><UploadId>" + i + b"</UploadId></Upload><Upload><Key>k2</Key><UploadId>x</UploadId></Upload>" for i in ids)
        body = b"<ListMultipartUploadsResult><IsTruncated>" + (b"true" if more else b"false") + b"</IsTruncated><NextKeyMarker>k</NextKeyMarker><NextUploadIdMarker>" + marker + b"</NextUploadIdMarker>" + uploads + b"</ListMultipartUploadsResult>"
        return _answer(200, body)

    server = _Scripted([page([b"u1", b"u2"], True, b"u2"), page([b"u3"], False)])
    store = _store_of(server, monkeypatch)
    assert store.uploads("s3://b/k") == ["u1", "u2", "u3"]  # k2's not: another object
    server.thread.join(10)
    assert b"upload-id-marker=u2" in server.requests[1] and b"key-marker=k" in server.requests[1]
