"""Object storage behind one seam: URLs (``s3://``, ``gs://``, ``memory://``, ...).

``s3://`` requests that move bytes go through im2rec's own client (``s3client``); the
rest (listing, globs, deletes, other schemes, options the client declines) through
fsspec, imported only when used. Everything that reads a ``.rec`` from a URL goes
through ``RemoteSource``, the byte-source interface of ``recordio.RecordReader``
implemented with ranged reads: a record read by key is one request for exactly its
bytes (the ``.idx`` says where the next record starts), a sequential scan reads large
blocks. The format core never imports fsspec; a local path never reaches this package.

The rooms, in the order they import each other:

* ``urls``: what a URL names and the small calls on it, and ``storage_error``;
* ``retries``: how a transient failure is retried, and what is permanent;
* ``fetching``: ``fetch_in_order``, pack's images from a store;
* ``uploads``: objects that appear only complete (``upload_stream``, ``Streamer``);
* ``remote``: ``RemoteSource``, a remote ``.rec`` read by ranges;
* ``staging``: URL outputs and inputs staged in a local folder;
* ``s3client`` (the S3 requests) and ``cache`` (the local block cache), which import nothing of im2rec.

fsspec and the store's driver are optional extras (``pip install 'im2rec[s3]'`` for
S3; gcsfs, adlfs likewise). Credentials and endpoints come the way fsspec users set
them: the environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, profiles) or
``storage_options`` (``--storage-option KEY=VALUE`` on the command line).
"""

from ..errors import StorageError
from .fetching import FETCH_AHEAD, OUTAGE, FetchStats, StoreUnreachable, fetch_in_order
from .remote import HOLD, READAHEAD, RemoteSource, hold_at_least
from .retries import RETRIES, TIMEOUT
from .staging import StagedInput, StagedOutput, staging_base, staging_dir
from .uploads import UPLOAD_PART, UPLOAD_PARTS_IN_FLIGHT, Streamer, upload, upload_part_size, upload_stream
from .urls import (
    check_bucket,
    exists,
    expand,
    filesystem,
    is_url,
    join,
    list_files,
    merge_options,
    missing,
    object_path,
    parse_storage_option,
    read_any,
    read_bytes,
    remove,
    storage_error,
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
    "RemoteSource",
    "StagedInput",
    "StagedOutput",
    "StorageError",
    "StoreUnreachable",
    "Streamer",
    "check_bucket",
    "exists",
    "expand",
    "fetch_in_order",
    "filesystem",
    "hold_at_least",
    "is_url",
    "join",
    "list_files",
    "merge_options",
    "missing",
    "object_path",
    "parse_storage_option",
    "read_any",
    "read_bytes",
    "remove",
    "staging_base",
    "staging_dir",
    "storage_error",
    "there",
    "upload",
    "upload_part_size",
    "upload_stream",
    "write_bytes",
]
