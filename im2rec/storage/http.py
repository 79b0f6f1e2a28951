"""HTTP/1.1 as the S3 client speaks it: kept-alive connections (one per thread and route, new in a
forked child), forward proxies (``HTTPS_PROXY``/``HTTP_PROXY``, ``NO_PROXY`` honoured, ``CONNECT``
tunnels for TLS), TLS verified against ``AWS_CA_BUNDLE`` or certifi's bundle, timeouts to connect
and between bytes, and every answer checked: what is not HTTP is a ``ProtocolError`` in words.

Why not urllib3: measured on SeaweedFS (``benchmarks/bench_remote.py``, section 0), a 70 KB GET
costs 0.33-0.39 ms of CPU through urllib3's pool (``http.client`` parses headers with the email
package) against 0.15 ms here, with the same signer; the fetching budget is 0.3 ms an object.
What urllib3 would bring is kept: a pool per process reset at fork (``os.register_at_fork``, no
pid polling), proxies from the environment with ``NO_PROXY`` (the standard library's rules, as
botocore reads them), certifi's bundle, timeouts, and no ``select()`` on descriptors (``poll``:
a process with thousands of open files, each ``.rec`` an mmap, is fine).
"""

from __future__ import annotations

import base64
import contextlib
import os
import select
import socket
import ssl
import threading
import urllib.request
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = ["MAX_HEAD", "Answer", "Connection", "ConnectionClosed", "Pool", "ProtocolError", "Proxy", "SetupError", "TunnelRefused", "proxy_for", "tls_context"]

#: The most bytes of status line and headers an answer may have.
MAX_HEAD = 64 << 10


class ProtocolError(OSError):
    """The server's answer is not valid HTTP (not retried: a server that says nonsense says it again)."""

    def __init__(self, what: str):
        super().__init__(f"the server's answer is not valid HTTP: {what}")


class ConnectionClosed(ConnectionError):
    """The connection ended before the whole answer (retried). The message has no subject:
    "closed the connection after 10 of 100 bytes", said after the server's address."""


class SetupError(OSError):
    """A connection cannot be set up as configured: the CA bundle cannot be loaded, a proxy's
    URL is not ``http://`` (not retried)."""


class TunnelRefused(OSError):
    """The forward proxy answered ``CONNECT`` with an error; ``status`` is its."""

    def __init__(self, proxy: str, status: int, line: str):
        super().__init__(f"the proxy {proxy} refused the tunnel: {line}")
        self.status = status


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: ``status``, ``headers`` by lower-case name, ``body``, and whether the
    connection must be closed after it (``closing``)."""

    status: int
    headers: dict[str, str]
    body: bytes
    closing: bool


# --------------------------------------------------------------------------- proxies and TLS


@dataclass(frozen=True)
class Proxy:
    """A forward proxy: ``url`` (without its credentials, to show), ``address``, and the
    ``Proxy-Authorization`` value its URL's user and password give (or None)."""

    url: str
    address: tuple[str, int]
    authorization: str | None


def proxy_for(scheme: str, netloc: str, proxies: Mapping[str, str] | None = None) -> Proxy | None:
    """The forward proxy a request to ``scheme://netloc`` goes through, or None (direct).

    ``proxies`` (botocore's ``Config(proxies={"https": URL})``, the storage option
    ``config_kwargs.proxies``) when given; else the environment's ``https_proxy`` or ``http_proxy``
    (either case, the lower one first; not ``all_proxy``), unless ``no_proxy`` covers the host, by
    the standard library's rules (host or ``host:port``, domain suffixes, ``*``; no CIDR ranges),
    as botocore reads them.

    Raises:
        SetupError: the proxy's URL is not ``http://HOST[:PORT]``.
    """
    if proxies is None:
        found = urllib.request.getproxies_environment()
        url = found.get(scheme)  # not all_proxy: botocore reads the scheme's own variable only
        if not url or urllib.request.proxy_bypass_environment(netloc, found):  # type: ignore[attr-defined]  # (in every CPython, not in typeshed)
            return None
        named = f"{scheme.upper()}_PROXY"
    else:
        url = proxies.get(scheme)
        if not url:
            return None
        named = f"config_kwargs.proxies[{scheme!r}]"
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme != "http" or not parts.hostname:
        raise SetupError(f"{named} names {url!r}: a proxy is reached over http://HOST:PORT here")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode()
    port = parts.port or 80
    return Proxy(f"http://{parts.hostname}:{port}", (parts.hostname, port), authorization)


def ca_bundle() -> str | None:
    """The CA bundle TLS is verified against when none is named: certifi's (botocore's choice),
    else botocore's own ``cacert.pem``; None: the system's store."""
    try:
        import certifi

        return str(certifi.where())
    except ImportError:
        pass
    try:
        import botocore

        path = os.path.join(os.path.dirname(botocore.__file__), "cacert.pem")
        return path if os.path.exists(path) else None
    except ImportError:
        return None


def tls_context(verify: bool | str) -> ssl.SSLContext:
    """A client TLS context: ``verify`` False checks nothing, a string names the CA bundle (a file
    or folder: ``AWS_CA_BUNDLE``, ``client_kwargs.verify``), True uses ``ca_bundle()``.

    Raises:
        SetupError: the bundle cannot be loaded (missing, not PEM).
    """
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    where = verify if isinstance(verify, str) else ca_bundle()
    try:
        if where and os.path.isdir(where):
            return ssl.create_default_context(capath=where)
        return ssl.create_default_context(cafile=where)
    except (OSError, ssl.SSLError) as e:
        said = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise SetupError(f"the CA bundle {where} (AWS_CA_BUNDLE, or client_kwargs.verify) cannot be loaded: {said}") from None


def _readable(sock: socket.socket) -> bool:
    """Whether ``sock`` has something to read (or was closed) now; ``poll`` where there is one,
    which takes any descriptor number (``select`` fails above 1,023)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])  # Windows: no poll, and its select has no such limit


# --------------------------------------------------------------------------- one connection


class Connection:
    """One kept-alive HTTP/1.1 connection to ``scheme://netloc``, direct or through ``proxy``: a
    request is written in one piece (a large body in a second write), the answer read by its
    Content-Length or its chunks, or to the end when it has neither."""

    def __init__(self, scheme: str, netloc: str, *, timeout: float, connect_timeout: float, tls: ssl.SSLContext | None, proxy: Proxy | None):
        parts = urlsplit(f"//{netloc}")
        self.scheme, self.netloc = scheme, netloc
        self.hostname = parts.hostname or netloc
        self.port = parts.port or (443 if scheme == "https" else 80)
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self.tls, self.proxy = tls, proxy
        self.sock: socket.socket | None = None
        self.buffer = b""  # what was received beyond the answer being read

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.netloc}"

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
        self.sock, self.buffer = None, b""

    def idle_closed(self) -> bool:
        """Whether this idle connection was closed by the server, or holds what nobody asked for."""
        sock = self.sock
        if sock is None:
            return False
        if self.buffer:
            return True
        if not _readable(sock):
            return False
        if isinstance(sock, ssl.SSLSocket):  # TLS 1.3 servers send session tickets after the handshake: not an answer
            sock.setblocking(False)
            try:
                sock.recv(1)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return False
            except OSError:
                return True
            finally:
                sock.settimeout(self.timeout)
        return True

    def _open(self) -> socket.socket:
        sock = socket.create_connection(self.proxy.address if self.proxy else (self.hostname, self.port), timeout=self.connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self.timeout)
            self.sock, self.buffer = sock, b""
            if self.scheme == "https":
                if self.proxy is not None:
                    self._tunnel()
                assert self.tls is not None
                sock = self.sock = self.tls.wrap_socket(sock, server_hostname=self.hostname)
        except BaseException:
            sock.close()
            self.sock = None
            raise
        return sock

    def _tunnel(self) -> None:
        assert self.proxy is not None and self.sock is not None
        target = f"{self.hostname}:{self.port}"
        extra = f"Proxy-Authorization: {self.proxy.authorization}\r\n" if self.proxy.authorization else ""
        self.sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{extra}\r\n".encode())
        status, line, _ = self._head()
        if status != 200:
            raise TunnelRefused(self.proxy.url, status, line)
        if self.buffer:
            raise ProtocolError(f"{len(self.buffer)} bytes after the proxy's answer to CONNECT")

    def exchange(self, method: str, target: str, headers: Mapping[str, str], body: bytes | memoryview = b"") -> Answer:
        """Send one request (``target``: the path and query) and read its answer.

        Raises:
            OSError: no connection, a timeout, ``ConnectionClosed`` before the whole answer,
                ``ProtocolError`` for an answer that is not HTTP, ``TunnelRefused``.
        """
        sock = self.sock if self.sock is not None else self._open()
        extra = ""
        if self.proxy is not None and self.scheme == "http":  # a forward proxy takes the absolute form
            target = f"http://{self.netloc}{target}"
            if self.proxy.authorization:
                extra = f"Proxy-Authorization: {self.proxy.authorization}\r\n"
        head = f"{method} {target} HTTP/1.1\r\nHost: {self.netloc}\r\n{extra}" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        if len(body) <= 1 << 16:
            sock.sendall(head.encode() + bytes(body))
        else:
            sock.sendall(head.encode())
            sock.sendall(body)
        status, _, answer = self._head()
        while 100 <= status < 200:  # 100 Continue (never asked for) and the like: the answer follows
            status, _, answer = self._head()
        closing = answer.get("connection", "").lower() == "close"
        if method == "HEAD" or status in (204, 304):
            return Answer(status, answer, b"", closing)
        if "chunked" in answer.get("transfer-encoding", "").lower():
            return Answer(status, answer, self._chunked(), closing)
        if "content-length" in answer:
            length = answer["content-length"]
            if not length.isdigit():
                raise ProtocolError(f"a Content-Length that is not a number ({length[:40]!r})")
            return Answer(status, answer, self._exactly(int(length)), closing)
        return Answer(status, answer, self._to_the_end(), True)

    def _receive(self, what: str) -> bytes:
        assert self.sock is not None
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionClosed(f"closed the connection {what}")
        return data

    def _line_block(self, end: bytes, what: str) -> bytes:
        """What the buffer holds up to ``end`` (received as needed), ``end`` consumed."""
        while (at := self.buffer.find(end)) < 0:
            if len(self.buffer) > MAX_HEAD:
                raise ProtocolError(f"a head of more than {MAX_HEAD:,} bytes")
            self.buffer += self._receive(what if self.buffer else "before any answer")
        block, self.buffer = self.buffer[:at], self.buffer[at + len(end) :]
        return block

    def _head(self) -> tuple[int, str, dict[str, str]]:
        """``(status, status line, headers by lower-case name)`` of the next answer."""
        lines = self._line_block(b"\r\n\r\n", "in the middle of its answer's head").decode("latin-1").split("\r\n")
        fields = lines[0].split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or not (fields[1].isdigit() and len(fields[1]) == 3):
            raise ProtocolError(f"a status line that is not HTTP/1.x ({lines[0][:80]!r})")
        answer: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name.strip():
                raise ProtocolError(f"a header line without a name and a colon ({line[:80]!r})")
            answer[name.strip().lower()] = value.strip()
        return int(fields[1]), lines[0], answer

    def _exactly(self, size: int) -> bytes:
        if len(self.buffer) >= size:
            data, self.buffer = self.buffer[:size], self.buffer[size:]
            return data
        assert self.sock is not None
        body = bytearray(size)
        view = memoryview(body)
        got = len(self.buffer)
        view[:got] = self.buffer
        self.buffer = b""
        while got < size:
            n = self.sock.recv_into(view[got:])
            if not n:
                raise ConnectionClosed(f"closed the connection after {got:,} of {size:,} bytes")
            got += n
        return bytes(body)

    def _chunked(self) -> bytes:
        chunks = []
        while True:
            line = self._line_block(b"\r\n", "in the middle of a chunked answer").split(b";")[0].strip()
            try:
                size = int(line, 16)
            except ValueError:
                raise ProtocolError(f"a chunk size that is not hexadecimal ({line[:40]!r})") from None
            if size < 0:
                raise ProtocolError(f"a negative chunk size ({line[:40]!r})")
            if not size:
                break
            chunks.append(self._exactly(size))
            if self._exactly(2) != b"\r\n":
                raise ProtocolError(f"a chunk of {size:,} bytes not followed by CRLF")
        while self._line_block(b"\r\n", "in the middle of a chunked answer's trailer"):  # trailers, up to the empty line
            pass
        return b"".join(chunks)

    def _to_the_end(self) -> bytes:
        assert self.sock is not None
        chunks = [self.buffer]
        while data := self.sock.recv(1 << 16):
            chunks.append(data)
        self.buffer = b""
        return b"".join(chunks)


# --------------------------------------------------------------------------- the pool


class Pool:
    """The connections of one client: one per thread and route (scheme, netloc, proxy), reused
    while they stay open; ``close`` closes every one. A forked child starts with none (``_POOLS``
    are reset at fork): a socket shared with the parent would mix their answers."""

    def __init__(self, make: Callable[[str, str], Connection]):
        self._make = make
        self.forget()
        _POOLS.add(self)

    def forget(self) -> None:
        """Drop every connection unclosed (in a forked child: the sockets are the parent's too)."""
        self._local = threading.local()
        self._lock = threading.Lock()
        self._every: weakref.WeakSet[Connection] = weakref.WeakSet()

    def connection(self, scheme: str, netloc: str) -> Connection:
        """This thread's connection to ``scheme://netloc``, a new one if it was closed while idle."""
        mine: dict[tuple[str, str], Connection] | None = getattr(self._local, "connections", None)
        if mine is None:
            mine = self._local.connections = {}
        connection = mine.get((scheme, netloc))
        if connection is not None and connection.idle_closed():
            connection.close()
        if connection is None:
            connection = mine[(scheme, netloc)] = self._make(scheme, netloc)
            with self._lock:
                self._every.add(connection)
        return connection

    def close(self) -> None:
        with self._lock:
            every = list(self._every)
        for connection in every:
            connection.close()


_POOLS: weakref.WeakSet[Pool] = weakref.WeakSet()


def _after_fork() -> None:
    for pool in list(_POOLS):
        pool.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
