"""Object storage behind one seam: URLs (``s3://``, ``gs://``, ``memory://``, ...).

Every request to a store goes through a ``Store`` (``store``), chosen once per URL from a
table: ``S3Store`` (im2rec's own S3 client, ``s3client``, on the transport of ``http``) for
``s3://``, ``FsspecStore`` (fsspec, imported only when used) for every other scheme and for S3
options only s3fs knows. Retries, timeouts, the words of a failure and the counters live in the
seam; callers get bytes or a ``StorageError`` naming the URL. Everything that reads a ``.rec``
from a URL goes through ``RemoteSource``, the byte source of ``recordio.RecordReader`` made of
ranged reads: a record read by key is one request for exactly its bytes (the ``.idx`` says
where the next record starts), a sequential scan reads large blocks. The format core never
imports this package; a local path never reaches it.

The rooms, in the order they import each other:

* ``http``: HTTP/1.1 connections, proxies, TLS, answers checked (standard library only);
* ``retries``: what is transient, the ``Policy`` (backoff, jitter, bounds), the ``Tally``;
* ``s3client``: S3's signing and one attempt of a request;
* ``multipart``: the parts of an upload, and a stream sent in parts;
* ``store``: the ``Store`` protocol, ``S3Store``, ``FsspecStore``, ``store_for``, ``storage_error``;
* ``urls``: what a URL names and the small calls on it;
* ``fetching``: ``fetch_in_order``, pack's images from a store;
* ``uploads``: objects that appear only complete (``upload_stream``, ``concatenate``, ``Streamer``);
* ``remote``: ``RemoteSource``, a remote ``.rec`` read by ranges;
* ``staging``: URL outputs and inputs staged in a local folder;
* ``cache``: the local block cache, which imports nothing of im2rec.

fsspec and the store's driver are optional extras (``pip install 'im2rec[s3]'`` for
S3; gcsfs, adlfs for the others). Credentials and endpoints come the way boto3 and s3fs users
set them: the environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, profiles, ``AWS_CA_BUNDLE``,
``HTTPS_PROXY``/``NO_PROXY``) or ``storage_options`` (``--storage-option KEY=VALUE``).
"""

from ..errors import ObjectMissing, StorageError
from .fetching import FETCH_AHEAD, OUTAGE, FetchStats, StoreUnreachable, fetch_in_order
from .remote import HOLD, READAHEAD, RemoteSource, hold_at_least
from .retries import RETRIES, TIMEOUT, Tally, check_options
from .staging import StagedInput, StagedOutput, staging_base, staging_dir
from .store import Info, Store, storage_error, store_for
from .uploads import UPLOAD_PART, UPLOAD_PARTS_IN_FLIGHT, Streamer, concatenate, upload, upload_part_size, upload_stream
from .urls import (
    check_bucket,
    exists,
    expand,
    is_url,
    join,
    list_files,
    merge_options,
    missing,
    parse_storage_option,
    read_any,
    read_bytes,
    remove,
    there,
    write_bytes,
)

__all__ = [
    "FETCH_AHEAD",
    "HOLD",
    "OUTAGE",
    "READAHEAD",
    "RETRIES",
    "TIMEOUT",
    "UPLOAD_PART",
    "UPLOAD_PARTS_IN_FLIGHT",
    "FetchStats",
    "Info",
    "ObjectMissing",
    "RemoteSource",
    "StagedInput",
    "StagedOutput",
    "StorageError",
    "Store",
    "StoreUnreachable",
    "Streamer",
    "Tally",
    "check_bucket",
    "check_options",
    "concatenate",
    "exists",
    "expand",
    "fetch_in_order",
    "hold_at_least",
    "is_url",
    "join",
    "list_files",
    "merge_options",
    "missing",
    "parse_storage_option",
    "read_any",
    "read_bytes",
    "remove",
    "staging_base",
    "staging_dir",
    "storage_error",
    "store_for",
    "there",
    "upload",
    "upload_part_size",
    "upload_stream",
    "write_bytes",
]
