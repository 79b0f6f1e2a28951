"""im2rec's S3 client: requests signed here (AWS Signature Version 4) and sent on the kept-alive
connections of ``http``, one attempt each; the verbs, their retries and their words are the
store seam's (``store.S3Store``).

s3fs (aiobotocore) spends about 2.8-5.6 ms of CPU per request: on two cores, more than the
pool spends decoding and re-encoding an image. This client spends about 0.2 ms (0.3 with 32
requests in flight), less than obstore (Rust, 0.4 ms through its Python binding), and unlike
obstore it keeps working in a process forked after it was used (a PyTorch DataLoader worker):
obstore's tokio runtime does not survive a fork, and a forked child's first request hangs.
Connections belong to a thread and a process; a child opens its own.

The signer is this module's, not botocore's: the same signature (``tests/test_s3client.py``
checks it against botocore's for keys that need encoding, queries and tokens) for 0.02 ms
against botocore's 0.08 ms a request (``benchmarks/bench_remote.py``, section 0).

Credentials and endpoints follow botocore's rules, as s3fs does: ``storage_options`` (s3fs's
``key``, ``secret``, ``token``, ``anon``, ``profile``, ``endpoint_url``,
``client_kwargs.endpoint_url``/``region_name``/``verify``, ``config_kwargs.connect_timeout``/
``read_timeout``/``proxies``), else ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``
(``AWS_SESSION_TOKEN``), else botocore's own chain (profiles, SSO, instance roles; botocore comes
with s3fs). The endpoint: ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``, else AWS in the
bucket's region (a redirect to another region is followed). TLS is verified against
``client_kwargs.verify`` or ``AWS_CA_BUNDLE``, else certifi's bundle; proxies come from
``config_kwargs.proxies`` or the environment (``HTTPS_PROXY``, ``NO_PROXY``: see ``http``).
``IM2REC_S3_CLIENT=fsspec`` turns this client off (s3fs does the work).

Errors: ``S3Error`` with the store's ``status`` and ``code`` (``NoSuchObject`` for 404,
``AccessDenied`` for 403), or status 0 and the transport's failure as ``cause`` when no answer came.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import os
import re
import socket
import ssl
import threading
import weakref
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlsplit

from .http import Answer, Connection, ConnectionClosed, Pool, ProtocolError, SetupError, TunnelRefused, proxy_for, tls_context
from .retries import TIMEOUT, check_options

__all__ = ["AccessDenied", "Config", "Credentials", "NoSuchObject", "S3Client", "S3Error", "client_for", "config_for", "forget_clients", "sign", "split", "xml_fields"]

#: Requests in flight at once for the store's ``get_many``, ``get_ranges`` and ``delete``.
CONCURRENCY = 32
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED = "UNSIGNED-PAYLOAD"
#: s3fs storage options this client understands; with any other, it declines (s3fs does the work).
KNOWN_OPTIONS = {"key", "secret", "token", "anon", "profile", "endpoint_url", "client_kwargs", "config_kwargs", "skip_instance_cache", "use_listings_cache", "default_block_size"}
KNOWN_CLIENT_KWARGS = {"endpoint_url", "region_name", "verify"}
KNOWN_CONFIG_KWARGS = {"connect_timeout", "read_timeout", "retries", "proxies"}


class S3Error(OSError):
    """A request the store answered with an error, or did not answer.

    ``status`` and ``code`` are the store's (0 and "" when no answer came, ``cause`` then the
    transport's failure); ``said`` is what happened, without the object's name (``403
    SignatureDoesNotMatch: ...``, ``cannot reach http://...: connection refused``);
    ``retry_after`` the answer's ``Retry-After``, if any."""

    def __init__(self, message: str, status: int = 0, code: str = "", said: str = "", retry_after: str | None = None, cause: BaseException | None = None):
        super().__init__(message)
        self.status, self.code, self.said = status, code, said or message
        self.retry_after, self.cause = retry_after, cause


class NoSuchObject(S3Error, FileNotFoundError):
    """404: the object, or its bucket (``code`` says which), is not there."""


class AccessDenied(S3Error, PermissionError):
    """403: the credentials do not allow it (or the signature does not match)."""


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None


class _Credentials:
    """Where the keys come from: fixed ones, or botocore's (refreshable) credentials, asked
    at each signing (botocore refreshes them before they expire)."""

    def __init__(self, fixed: Credentials | None = None, botocore: Any = None):
        self.fixed, self.botocore = fixed, botocore

    def get(self) -> Credentials | None:
        if self.fixed is not None:
            return self.fixed
        if self.botocore is None:
            return None
        frozen = self.botocore.get_frozen_credentials()
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token)


@dataclass(frozen=True)
class Config:
    """What a client is: its endpoint, region, keys, TLS rule, timeouts and proxies. Two equal configs share a client."""

    endpoint: str | None  # None: AWS, virtual-hosted, in the bucket's region
    region: str
    anonymous: bool
    fixed: Credentials | None
    profile: str | None
    verify: bool | str
    timeout: float
    connect_timeout: float
    proxies: tuple[tuple[str, str], ...] | None  # config_kwargs.proxies; None: the environment's


def config_for(storage_options: Mapping[str, Any] | None) -> Config | None:
    """The client's config for these s3fs-style options and this environment, or None when this
    client must decline: an option it does not know, or ``IM2REC_S3_CLIENT=fsspec``."""
    if os.environ.get("IM2REC_S3_CLIENT", "").lower() == "fsspec":
        return None
    options = dict(storage_options or {})
    client_kwargs = dict(options.get("client_kwargs") or {})
    config_kwargs = dict(options.get("config_kwargs") or {})
    if set(options) - KNOWN_OPTIONS or set(client_kwargs) - KNOWN_CLIENT_KWARGS or set(config_kwargs) - KNOWN_CONFIG_KWARGS:
        return None
    endpoint = options.get("endpoint_url") or client_kwargs.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = client_kwargs.get("region_name") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    fixed = None
    profile = options.get("profile")
    if options.get("key") and options.get("secret"):
        fixed = Credentials(str(options["key"]), str(options["secret"]), options.get("token"))
    elif not profile and os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        fixed = Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"], os.environ.get("AWS_SESSION_TOKEN") or None)
    verify: bool | str = client_kwargs.get("verify", os.environ.get("AWS_CA_BUNDLE") or True)
    proxies = config_kwargs.get("proxies")
    read_timeout, connect_timeout, _ = check_options(options)
    return Config(
        endpoint=str(endpoint).rstrip("/") if endpoint else None,
        region=str(region),
        anonymous=bool(options.get("anon")),
        fixed=fixed,
        profile=profile,
        verify=verify,
        timeout=read_timeout or TIMEOUT,
        connect_timeout=connect_timeout or TIMEOUT,
        proxies=tuple(sorted((str(k), str(v)) for k, v in dict(proxies).items())) if proxies is not None else None,
    )


# --------------------------------------------------------------------------- signing


def _signing_key(secret: str, day: str, region: str) -> bytes:
    key = hmac.new(("AWS4" + secret).encode(), day.encode(), hashlib.sha256).digest()
    for part in (region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _query_string(query: Mapping[str, str]) -> str:
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items()))


def sign(method: str, host: str, path: str, query: Mapping[str, str], headers: dict[str, str], payload_hash: str, credentials: Credentials, region: str, now: datetime.datetime | None = None) -> None:
    """Add AWS Signature Version 4 to ``headers`` (``x-amz-date``, ``x-amz-content-sha256``,
    the token, ``Authorization``) for a request to ``host`` at ``path`` (already URI-encoded)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    headers["x-amz-date"] = stamp
    headers["x-amz-content-sha256"] = payload_hash
    if credentials.token:
        headers["x-amz-security-token"] = credentials.token
    signed = {"host": host, **{k.lower(): v.strip() for k, v in headers.items() if k.lower().startswith("x-amz-") or k.lower() in ("content-md5", "content-type")}}
    names = sorted(signed)
    canonical = "\n".join([method, path, _query_string(query), "".join(f"{n}:{signed[n]}\n" for n in names), ";".join(names), payload_hash])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.new(_signing_key(credentials.secret_key, day, region), to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"


# --------------------------------------------------------------------------- answers


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _strip(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def xml_fields(body: bytes) -> dict[str, str]:
    """The leaf elements of an S3 XML answer, by name (the first of each)."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return {}
    found: dict[str, str] = {}
    for element in root.iter():
        found.setdefault(_strip(element.tag), (element.text or "").strip())
    return found


def xml_records(body: bytes, tag: str) -> list[dict[str, str]]:
    """Each ``<tag>`` element of an XML answer as ``{child: text}`` (``Contents``, ``Upload``...)."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        raise ProtocolError(f"an XML answer that does not parse ({body[:60]!r})") from None
    return [{_strip(c.tag): (c.text or "") for c in e} for e in root.iter() if _strip(e.tag) == tag]


def content_md5(body: bytes | memoryview) -> str:
    """The ``Content-MD5`` of a body: the store checks it (S3, SeaweedFS: 400 BadDigest)."""
    return base64.b64encode(hashlib.md5(body).digest()).decode()


# --------------------------------------------------------------------------- the client


class S3Client:
    """Requests to one S3 endpoint with one set of credentials (see the module's docstring):
    one attempt each. Safe to use from many threads; a forked child opens its own connections."""

    def __init__(self, config: Config):
        self.config = config
        self._credentials = self._resolve_credentials(config)
        self._regions: dict[str, str] = {}  # bucket -> its region, when a redirect said so
        self._tls: ssl.SSLContext | None = None
        self._pool = Pool(self._connect)
        self._threads: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        _LIVE.add(self)

    @staticmethod
    def _resolve_credentials(config: Config) -> _Credentials:
        if config.anonymous or config.fixed is not None:
            return _Credentials(config.fixed)
        try:
            import botocore.session
        except ImportError:
            return _Credentials()  # no keys anywhere: unsigned requests, as anon
        session = botocore.session.Session(profile=config.profile) if config.profile else botocore.session.get_session()
        return _Credentials(botocore=session.get_credentials())

    def after_fork(self) -> None:
        """In a forked child: the parent's threads are not in this process (its connections: ``http.Pool``)."""
        self._threads = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close every connection and stop the threads (idle ones end now, busy ones after their request)."""
        self._pool.close()
        with self._lock:
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)

    # -- connections ---------------------------------------------------------- #

    def _connect(self, scheme: str, netloc: str) -> Connection:
        proxies = dict(self.config.proxies) if self.config.proxies is not None else None
        tls = None
        if scheme == "https":
            if self._tls is None:
                self._tls = tls_context(self.config.verify)
            tls = self._tls
        return Connection(scheme, netloc, timeout=self.config.timeout, connect_timeout=self.config.connect_timeout, tls=tls, proxy=proxy_for(scheme, netloc, proxies))

    def where(self, bucket: str, key: str) -> tuple[str, str, str]:
        """``(scheme, host, URI-encoded path)`` of an object."""
        encoded = quote(key, safe="/~")
        if self.config.endpoint:
            parts = urlsplit(self.config.endpoint)
            base = parts.path.rstrip("/")
            return parts.scheme, parts.netloc, f"{base}/{bucket}/{encoded}" if key else f"{base}/{bucket}"
        region = self._regions.get(bucket, self.config.region)
        if re.fullmatch(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", bucket):
            return "https", f"{bucket}.s3.{region}.amazonaws.com", f"/{encoded}"
        return "https", f"s3.{region}.amazonaws.com", f"/{bucket}/{encoded}" if key else f"/{bucket}"

    # -- one request ---------------------------------------------------------- #

    def request(
        self,
        method: str,
        bucket: str,
        key: str = "",
        *,
        query: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | memoryview = b"",
        ok: Sequence[int] = (200, 204, 206),
    ) -> Answer:
        """Send one signed request (a body with its ``Content-MD5``), one attempt.

        Raises:
            NoSuchObject, AccessDenied, S3Error: as the module's docstring says.
        """
        query = dict(query or {})
        sent_headers = dict(headers or {})
        if body and "Content-MD5" not in sent_headers:
            sent_headers["Content-MD5"] = content_md5(body)
        for _ in range(2):  # a second time only after a redirect to the bucket's region
            scheme, host, path = self.where(bucket, key)
            sent = dict(sent_headers)
            credentials = None if self.config.anonymous else self._credentials.get()
            if credentials is not None:
                payload = EMPTY_SHA256 if not body else UNSIGNED if scheme == "https" else hashlib.sha256(body).hexdigest()  # TLS guards a body
                sign(method, host, path, query, sent, payload, credentials, self._regions.get(bucket, self.config.region))
            target = path + ("?" + _query_string(query) if query else "")
            if body or method in ("PUT", "POST"):
                sent["Content-Length"] = str(len(body))
            try:
                connection = self._pool.connection(scheme, host)
            except SetupError as e:  # the CA bundle, a proxy's URL: said, not retried
                said = f"cannot reach {scheme}://{host}: {e}"
                raise S3Error(f"{method} {bucket}/{key}: {said}", said=said, cause=e) from None
            try:
                answer = connection.exchange(method, target, sent, body)
            except OSError as e:
                connection.close()
                said = _unanswered(connection, e)
                raise S3Error(f"{method} {bucket}/{key}: {said}", said=said, cause=e) from None
            if answer.closing:
                connection.close()
            if answer.status in ok:
                return answer
            region = answer.headers.get("x-amz-bucket-region")
            if answer.status in (301, 307, 400) and region and region != self._regions.get(bucket, self.config.region) and not self.config.endpoint:
                self._regions[bucket] = region  # the bucket lives elsewhere: ask there
                continue
            raise _error(method, bucket, key, answer)
        raise S3Error(f"{method} {bucket}/{key}: no answer")

    def map(self, function: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """``function`` of each item, ``CONCURRENCY`` at a time: a result or the exception, in order."""
        items = list(items)
        if len(items) <= 1:
            return [_result(function, x) for x in items]
        with self._lock:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(CONCURRENCY, thread_name_prefix="im2rec-s3")
            threads = self._threads
        return list(threads.map(lambda x: _result(function, x), items))


def _unanswered(connection: Connection, e: BaseException) -> str:
    """What happened to a request that got no answer, in words, naming where it went."""
    origin = connection.origin
    via = f" through the proxy {connection.proxy.url}" if connection.proxy is not None else ""
    if isinstance(e, ConnectionClosed):
        return f"{origin}{via} {e}"
    if isinstance(e, (ProtocolError, TunnelRefused)):
        return f"{e} ({origin}{via})"
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"cannot reach {origin}: its certificate does not verify ({e.verify_message or e.reason}); if a private authority signs it, name its bundle in AWS_CA_BUNDLE"
    if isinstance(e, TimeoutError):
        return f"{origin}{via} did not answer within {connection.timeout:g} s"
    if isinstance(e, ConnectionRefusedError):
        return f"cannot reach {origin}{via}: connection refused"
    if isinstance(e, socket.gaierror):
        return f"cannot reach {origin}{via}: the name {connection.hostname if not via else connection.proxy.address[0]} does not resolve ({e.strerror})"  # type: ignore[union-attr]
    if isinstance(e, ConnectionResetError):
        return f"{origin}{via} reset the connection"
    if isinstance(e, BrokenPipeError):
        return f"{origin}{via} closed the connection while the request was sent"
    reason = e.strerror if isinstance(e, OSError) and e.strerror else (str(e) or type(e).__name__)
    return f"{type(e).__name__} from {origin}{via}: {reason}"


def _error(method: str, bucket: str, key: str, answer: Answer) -> S3Error:
    fields = xml_fields(answer.body) if answer.body else {}
    code = fields.get("Code", "")
    message = fields.get("Message", "") or _phrase(answer.status)
    said = f"{answer.status} {code}: {message}" if code else f"{answer.status} {message}"
    where = f"{bucket}/{key}" if key else bucket
    retry_after = answer.headers.get("retry-after")
    if answer.status == 404:  # a HEAD's answer has no body: which of the two is missing is not said
        return NoSuchObject(f"{where}: {said}", answer.status, code, said)
    if answer.status == 403:
        if not code:
            said += " (these credentials may not read it, or the signature does not match)"
        return AccessDenied(f"{where}: {said}", answer.status, code, said)
    return S3Error(f"{method} {where}: {said}", answer.status, code, said, retry_after)


def _result(function: Callable[[Any], Any], item: Any) -> Any:
    try:
        return function(item)
    except Exception as e:
        return e


_CLIENTS: dict[Config, S3Client] = {}
_CLIENTS_LOCK = threading.Lock()
_LIVE: weakref.WeakSet[S3Client] = weakref.WeakSet()


def _after_fork() -> None:
    global _CLIENTS_LOCK
    _CLIENTS_LOCK = threading.Lock()
    for client in list(_LIVE):
        client.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def client_for(url: str, storage_options: Mapping[str, Any] | None = None) -> S3Client | None:
    """The client for an ``s3://`` URL with these options, or None (another scheme, or options
    this client leaves to s3fs)."""
    if not url.startswith(("s3://", "s3a://")):
        return None
    config = config_for(storage_options)
    if config is None:
        return None
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(config)
        if client is None:
            client = _CLIENTS[config] = S3Client(config)
    return client


def forget_clients() -> None:
    """Drop every client, its connections closed and its threads stopped: the next request makes new ones."""
    with _CLIENTS_LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
    for client in clients:
        client.close()


def split(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b.rec`` -> ``("bucket", "a/b.rec")``."""
    rest = url.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key
