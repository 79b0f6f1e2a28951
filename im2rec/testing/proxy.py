"""A loopback HTTP/1.1 proxy that adds latency and injects faults, for tests and benchmarks.

A loopback S3 server (SeaweedFS's `weed mini`, see `im2rec.testing.seaweed`, or moto's) answers on
127.0.0.1 in well under a millisecond; a cloud store takes
10-100 ms to the first byte of every request, and now and then slows down (503 SlowDown),
fails (500), drops a connection or stops answering. Put a `LatencyProxy` in front of the
loopback server and point the client at ``proxy.url``: every request then waits `latency`
seconds (an asyncio sleep, so that concurrent requests wait in parallel, as a store's do)
before it is forwarded, and `fail` makes the next requests fail in one of those ways.

    with LatencyProxy("http://127.0.0.1:5000", latency=0.02) as proxy:
        fs = s3fs.S3FileSystem(endpoint_url=proxy.url)
        proxy.fail(3, "503", match="/bucket/train.rec")

The requests are forwarded unchanged (the Host header included, so that signatures stay
valid), on one upstream connection per client connection, kept alive on both sides.
Bodies are copied in blocks of up to `BLOCK` bytes as they arrive, framed by Content-Length
or chunked transfer-encoding (copied verbatim, chunk lines included); ``Expect:
100-continue`` is answered by the proxy itself. ``GET /__stats`` is answered by the proxy
(its counters as JSON) and neither forwarded nor counted, so that a benchmark can read the
counters of a proxy running in another process.

``chaos(every=3, kinds=("503", "reset", "cut"), most=2)`` faults every third request, the kinds
in turn, but never one request (its method, target and Range) more than ``most`` times: a client
that retries ``most`` times always gets through, one that does not retry fails.

With ``upstream=None`` it is a forward proxy (what ``HTTP_PROXY`` names): a request in absolute
form (``GET http://host:port/path``) is sent to that host, ``CONNECT host:port`` opens a tunnel
(counted in ``tunnels``; bytes copied both ways, no fault inside). With ``tls`` (an
``ssl.SSLContext`` of the server side) it answers over TLS, as an ``https://`` store does.

``python -m im2rec.testing.proxy UPSTREAM [--latency 0.02] [--port 0]`` serves in a process of its
own (a benchmark keeps it from sharing the measured process's GIL): its URL on the first
line of stdout, then until it is killed or its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import ssl
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import urlsplit

__all__ = ["FAULT_KINDS", "LatencyProxy", "main"]

#: The most bytes copied in one read: big enough that copying costs little per byte.
BLOCK = 1 << 20
#: The longest request or response head (request line or status line, and headers) accepted.
MAX_HEAD = 64 << 10

#: What `LatencyProxy.fail` can do to a request: an error answer, a reset connection, no answer at
#: all, or the answer's body cut in its middle (the connection then reset).
FAULT_KINDS = ("503", "500", "reset", "stall", "cut")

_ERRORS = {
    "503": (b"503 Slow Down", b"SlowDown", b"Please reduce your request rate."),
    "500": (b"500 Internal Server Error", b"InternalError", b"We encountered an internal error. Please try again."),
}
_NO_BODY_STATUS = (204, 304)
_Counter = Callable[..., None]


@dataclass
class _Fault:
    count: int
    kind: str
    match: str | None
    retry_after: str | None = None


@dataclass
class _Chaos:
    every: int
    kinds: Sequence[str]
    most: int
    match: str | None
    seen: int = 0
    given: dict[str, int] = field(default_factory=dict)  # request identity -> faults it got


@dataclass
class _Head:
    """A request or response head: its first line, its header lines as read, and the framing they give."""

    first: bytes
    lines: list[bytes]
    length: int | None  # Content-Length, or None
    chunked: bool
    close: bool  # Connection: close
    expect_continue: bool

    @classmethod
    def parse(cls, raw: bytes) -> _Head:
        first, *lines = raw[:-4].split(b"\r\n")
        length, chunked, close, expect = None, False, False, False
        for line in lines:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = value.split(b",")[-1].strip() == b"chunked"
            elif name == b"connection":
                close = b"close" in value
            elif name == b"expect":
                expect = value == b"100-continue"
        return cls(first, lines, length, chunked, close, expect)

    def header(self, name: bytes) -> str:
        """The value of header ``name`` (lower case), or ""."""
        for line in self.lines:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name:
                return value.strip().decode("latin-1")
        return ""

    def with_first(self, first: bytes) -> _Head:
        return _Head(first, self.lines, self.length, self.chunked, self.close, self.expect_continue)

    def encode(self, drop: tuple[bytes, ...] = ()) -> bytes:
        kept = [line for line in self.lines if line.partition(b":")[0].strip().lower() not in drop]
        return b"\r\n".join([self.first, *kept, b"", b""])


class LatencyProxy:
    """Forwards HTTP/1.1 requests to `upstream` after `latency` seconds each; counts them; injects faults.

    Args:
        upstream: the server's URL, ``http://HOST:PORT`` (a loopback S3 server).
        latency: seconds every request waits before it is forwarded.
        host, port: where the proxy listens (port 0: a free port, see `url`).

    Counters (read them from any thread): `requests` (every request, faulted ones included),
    `bytes_sent` (response bytes written to clients), `faults` (requests that got a fault),
    `most_waiting` (the most requests in their latency wait at once: above 1, they overlapped),
    `tunnels` (CONNECTs, as a forward proxy).
    """

    def __init__(self, upstream: str | None, latency: float = 0.02, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None) -> None:
        self.upstream: tuple[str, int] | None = None
        if upstream is not None:
            parts = urlsplit(upstream)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(f"upstream must be http://HOST:PORT, got {upstream!r}")
            self.upstream = (parts.hostname, parts.port or 80)
        self.latency = latency
        self.host, self.port = host, port
        self.tls = tls
        self.requests = self.bytes_sent = self.faults = self.tunnels = 0
        self._chaos: _Chaos | None = None
        self.waiting = self.most_waiting = 0  # requests in their latency wait: now, and at most at once
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        #: A list to append "METHOD PATH" of every request to, or None (the default: no log).
        self.log: list[str] | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> LatencyProxy:
        """Listen, in an event loop of its own in a daemon thread; returns self once listening."""
        if self._thread is not None:
            return self
        loop = self._loop = asyncio.new_event_loop()
        try:
            self._server = loop.run_until_complete(asyncio.start_server(self._serve, self.host, self.port, limit=BLOCK, ssl=self.tls))
        except BaseException:
            loop.close()
            self._loop = None
            raise
        self.port = self._server.sockets[0].getsockname()[1]
        self._thread = threading.Thread(target=loop.run_forever, name=f"LatencyProxy:{self.port}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop listening, drop every connection (stalled ones included) and end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = self._server = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- counters and faults --------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """The counters, as ``GET /__stats`` answers them."""
        with self._lock:
            return {"requests": self.requests, "bytes_sent": self.bytes_sent, "faults": self.faults, "most_waiting": self.most_waiting, "tunnels": self.tunnels}

    def reset_counters(self) -> None:
        with self._lock:
            self.requests = self.bytes_sent = self.faults = self.most_waiting = self.tunnels = 0

    def fail(self, count: int, kind: str, match: str | None = None, retry_after: float | str | None = None) -> None:
        """Give the next `count` requests (those whose path contains `match`, if given) a fault.

        Kinds: ``"503"`` (S3's SlowDown XML error, status 503; with ``Retry-After: retry_after``
        if given), ``"500"`` (InternalError), ``"reset"`` (the client's connection is reset,
        unanswered), ``"stall"`` (no answer: the connection is held open until the client closes
        it), ``"cut"`` (the request is forwarded; its answer's head and half its body are sent,
        then the connection is reset). Calls add up: each call's faults are used in turn, after
        those of earlier calls that match.
        """
        _check_kind(kind)
        if count > 0:
            with self._lock:
                self._faults.append(_Fault(count, kind, match, None if retry_after is None else str(retry_after)))

    def chaos(self, every: int = 3, kinds: Sequence[str] = ("503", "reset", "cut"), most: int = 2, match: str | None = None) -> None:
        """From now on fault every `every`-th request (of those whose path contains `match`), the
        `kinds` in turn, but no request (method, target, Range) more than `most` times."""
        for kind in kinds:
            _check_kind(kind)
        with self._lock:
            self._chaos = _Chaos(every, tuple(kinds), most, match)

    def clear_faults(self) -> None:
        """Drop the faults that `fail` set and no request has used yet, and stop `chaos`."""
        with self._lock:
            self._faults.clear()
            self._chaos = None

    def _take_fault(self, path: str, identity: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.match is None or fault.match in path:
                    fault.count -= 1
                    if fault.count == 0:
                        self._faults.remove(fault)
                    self.faults += 1
                    return fault
            chaos = self._chaos
            if chaos is not None and (chaos.match is None or chaos.match in path):
                chaos.seen += 1
                if chaos.seen % chaos.every == 0 and chaos.given.get(identity, 0) < chaos.most:
                    chaos.given[identity] = chaos.given.get(identity, 0) + 1
                    self.faults += 1
                    return _Fault(1, chaos.kinds[(chaos.seen // chaos.every - 1) % len(chaos.kinds)], None)
        return None

    def _count(self, requests: int = 0, sent: int = 0) -> None:
        with self._lock:
            self.requests += requests
            self.bytes_sent += sent

    # -- serving --------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter, tuple[str, int]] | None = None
        where: tuple[str, int] = ("", 0)
        try:
            while True:
                try:
                    raw = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return  # the client closed its connection (between requests, as keep-alive does)
                request = _Head.parse(raw)
                method, target = (request.first.split(b" ") + [b"", b""])[:2]
                if self.upstream is None and not target.startswith(b"/"):  # a forward proxy: the target names the server
                    if method == b"CONNECT":
                        await self._tunnel(target.decode("latin-1"), reader, writer)
                        return
                    where, target = _origin_form(target)
                    request = request.with_first(b" ".join([method, target, request.first.rsplit(b" ", 1)[-1]]))
                    if upstream is not None and upstream[2] != where:
                        upstream[1].close()
                        upstream = None
                path = target.decode("latin-1")
                if path == "/__stats":
                    await self._drain_body(reader, writer, request)
                    body = json.dumps(self.stats()).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                    await writer.drain()
                    continue
                self._count(requests=1)
                if self.log is not None:
                    self.log.append(f"{method.decode('latin-1')} {path}")
                fault = self._take_fault(path, f"{method.decode('latin-1')} {path} {request.header(b'range')}")
                kind = fault.kind if fault is not None else None
                if kind != "stall":
                    with self._lock:
                        self.waiting += 1
                        self.most_waiting = max(self.most_waiting, self.waiting)
                    try:
                        await asyncio.sleep(self.latency)
                    finally:
                        with self._lock:
                            self.waiting -= 1
                if kind == "reset":
                    _reset(writer)
                    return
                if kind == "stall":
                    while await reader.read(BLOCK):
                        pass
                    return
                if kind is not None and kind != "cut":
                    assert fault is not None
                    await self._drain_body(reader, writer, request)
                    await self._error(writer, kind, path, head_only=method == b"HEAD", retry_after=fault.retry_after)
                    continue
                if upstream is None or upstream[0].at_eof():
                    if upstream is not None:
                        upstream[1].close()
                    address = self.upstream or where
                    upstream = (*await asyncio.open_connection(*address, limit=BLOCK), address)
                if not await self._forward(reader, writer, (upstream[0], upstream[1]), request, method == b"HEAD", cut=kind == "cut"):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            return  # either side broke the exchange off: drop this connection, as a store would
        except asyncio.CancelledError:
            return  # close(): the proxy is shutting down
        finally:
            self._tasks.discard(task)
            if upstream is not None:
                upstream[1].close()
            writer.close()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: _Head, head_only: bool, cut: bool = False) -> bool:
        """One exchange: the request to upstream, its response back (``cut``: half its body, then
        a reset). False if the connection must close."""
        up_reader, up_writer = upstream
        if request.expect_continue:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        up_writer.write(request.encode(drop=(b"expect",)))
        await _copy_body(reader, up_writer, request)
        await up_writer.drain()
        while True:
            response = _Head.parse(await up_reader.readuntil(b"\r\n\r\n"))
            status = int(response.first.split(b" ", 2)[1])
            final = not 100 <= status < 200
            if cut and final and not (response.length and not head_only):  # no body to cut: the work done, the whole answer lost
                _reset(writer)
                return False
            head = response.encode()
            writer.write(head)
            self._count(sent=len(head))
            if final:
                break
        if cut:  # the head and half the body, then a reset
            half = await up_reader.readexactly((response.length or 0) // 2)
            writer.write(half)
            self._count(sent=len(half))
            await writer.drain()
            _reset(writer)
            return False
        if head_only or status in _NO_BODY_STATUS:
            pass
        elif response.chunked or response.length is not None:
            await _copy_body(up_reader, writer, response, count=self._count)
        else:  # the body runs to the end of the connection
            await _copy(up_reader, writer, None, count=self._count)
            await writer.drain()
            return False
        await writer.drain()
        return not (request.close or response.close)

    async def _drain_body(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: _Head) -> None:
        """Read and drop a request's body (one the proxy answers itself)."""
        if request.expect_continue:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await _copy_body(reader, None, request)

    async def _tunnel(self, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """``CONNECT host:port``: a connection to it, then the bytes copied both ways until either side closes."""
        host, _, port = target.rpartition(":")
        with self._lock:
            self.tunnels += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port), limit=BLOCK)
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                while data := await src.read(BLOCK):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            up_writer.close()

    async def _error(self, writer: asyncio.StreamWriter, kind: str, path: str, head_only: bool, retry_after: str | None = None) -> None:
        status, code, message = _ERRORS[kind]
        body = b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>im2rec-proxy</RequestId></Error>' % (
            code,
            message,
            path.encode("latin-1").replace(b"&", b"&amp;").replace(b"<", b"&lt;"),
        )
        extra = b"Retry-After: %s\r\n" % retry_after.encode() if retry_after is not None else b""
        data = b"HTTP/1.1 %s\r\nContent-Type: application/xml\r\n%sContent-Length: %d\r\n\r\n" % (status, extra, len(body))
        if not head_only:
            data += body
        writer.write(data)
        self._count(sent=len(data))
        await writer.drain()


def _check_kind(kind: str) -> None:
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}: expected one of {', '.join(FAULT_KINDS)}")


def _origin_form(target: bytes) -> tuple[tuple[str, int], bytes]:
    """``http://host:port/p?q`` -> ``((host, port), b"/p?q")``: what a forward proxy connects to and sends."""
    parts = urlsplit(target.decode("latin-1"))
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"a forward proxy takes absolute http:// targets, got {target[:80]!r}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return (parts.hostname, parts.port or 80), path.encode("latin-1")


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close a connection with a TCP reset (SO_LINGER 0), as a store dropping it does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _copy_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None, head: _Head, count: _Counter | None = None) -> int:
    """Copy the body that `head` frames (chunked: verbatim, chunk lines and trailers included); None drops it."""
    if head.chunked:
        total = 0
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";", 1)[0].strip(), 16)
            total += _emit(writer, line, count)
            if size == 0:
                while True:  # trailers, up to the empty line
                    line = await reader.readuntil(b"\r\n")
                    total += _emit(writer, line, count)
                    if line == b"\r\n":
                        return total
            total += await _copy(reader, writer, size + 2, count)
    if head.length:
        return await _copy(reader, writer, head.length, count)
    return 0


def _emit(writer: asyncio.StreamWriter | None, data: bytes, count: _Counter | None) -> int:
    if writer is not None:
        writer.write(data)
        if count is not None:
            count(sent=len(data))
    return len(data)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None, length: int | None, count: _Counter | None = None) -> int:
    """Copy `length` bytes (None: up to the end of the stream) in blocks of up to BLOCK bytes."""
    left = length
    total = 0
    while left is None or left > 0:
        data = await reader.read(BLOCK if left is None else min(left, BLOCK))
        if not data:
            if left is None:
                return total
            raise asyncio.IncompleteReadError(b"", left)
        total += len(data)
        if left is not None:
            left -= len(data)
        if writer is not None:
            writer.write(data)
            if count is not None:
                count(sent=len(data))
            await writer.drain()
    return total


def main(argv: list[str] | None = None) -> None:
    """``python -m im2rec.testing.proxy UPSTREAM``: serve until killed, or until stdin closes."""
    parser = argparse.ArgumentParser(prog="python -m im2rec.testing.proxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", help="the server to forward to, http://HOST:PORT")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds added to every request (default 0.02)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on, on 127.0.0.1 (default: a free one)")
    args = parser.parse_args(argv)
    with LatencyProxy(args.upstream, latency=args.latency, port=args.port) as proxy:
        print(proxy.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while sys.stdin.read(1 << 16):
                pass


if __name__ == "__main__":
    main()
