"""URL outputs and inputs of the commands that work on local files: ``StagedOutput`` (written in a local
staging folder, uploaded whole, ``.idx`` last) and ``StagedInput`` (downloaded first); ``staging_dir``, the
one rule for a resumable staging folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import ObjectMissing, OutputExistsError, StorageError
from ..fsutil import is_url
from .store import store_for
from .uploads import upload
from .urls import check_bucket, exists

__all__ = ["StagedInput", "StagedOutput", "staging_base", "staging_dir"]

def staging_base() -> str:
    """Where URL outputs are written before they are uploaded (and URL inputs downloaded):
    ``$IM2REC_STAGING``, or the system's temporary folder."""
    user = f"-{os.getuid()}" if hasattr(os, "getuid") else ""  # one per user: the folder is not shared
    return os.environ.get("IM2REC_STAGING") or os.path.join(tempfile.gettempdir(), f"im2rec-staging{user}")


def staging_dir(url: str, kind: str = "") -> str:
    """The staging folder of the output at ``url``: one per URL (and ``kind`` of command), under
    ``staging_base()``, so that a rerun (``--resume``) finds what the interrupted one wrote."""
    return os.path.join(staging_base(), kind + hashlib.sha256(url.encode()).hexdigest()[:16])


def _split_url(url: str) -> tuple[str, str]:
    """``s3://b/out/t.rec`` -> ``("s3://b/out", "t.rec")``; a trailing ``/`` (a folder) is dropped."""
    folder, _, name = url.rstrip("/").rpartition("/")
    if not name or folder.endswith(":/"):
        raise StorageError(f"{url}: name an object or a folder inside a bucket (s3://BUCKET/NAME)")
    return folder, name


class _Staging:
    """A staging folder of its own under ``staging_base()``, removed by ``close`` (or the ``with``)."""

    _dir = ""

    def _make(self, prefix: str) -> str:
        os.makedirs(staging_base(), exist_ok=True)
        self._dir = tempfile.mkdtemp(prefix=prefix, dir=staging_base())
        return self._dir

    def close(self) -> None:
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class StagedOutput(_Staging):
    """A command's output that may be a URL: the command writes ``path``, a local name.

    For a local target ``path`` is the target itself and nothing else happens. For a
    URL it is the same name in a new local staging folder (``staging_base()``); when
    the ``with`` block ends without error every file the command wrote there (the
    output, its siblings such as ``.idx`` and ``property``, a folder's contents) is
    uploaded next to the URL, each object appearing only complete (``upload``), and
    ``.idx`` files last, since readers look for them; the staging folder is removed
    either way. So no command ever writes a local path that begins with ``s3:``.

    Checked before any work: the bucket exists, and without ``overwrite`` the target
    is not there yet. Checked again before the first upload: no object the command
    produced would replace one (without ``overwrite``).

    Raises:
        StorageError: a missing bucket, an existing object, a failed upload.
    """

    def __init__(self, target: str, storage_options: Mapping[str, Any] | None = None, overwrite: bool = False, folder: bool = False):
        self.target = target
        self.remote = is_url(target)
        self._options = storage_options
        self._overwrite = overwrite
        self._shown = ""  # the staging folder, kept after it is removed
        if not self.remote:
            self.path = target
            return
        self._folder, name = _split_url(target)
        check_bucket(target, storage_options)
        if not overwrite and not folder and exists(target, storage_options):  # a folder may hold other files
            raise OutputExistsError(target)
        self._shown = self._make("out-")
        self.path = os.path.join(self._dir, name)

    def shown(self, text: str) -> str:
        """``text`` (a path the command wrote, or a message naming some) with the staging
        folder replaced by the URL's folder: what to show the user."""
        if not self._shown:
            return text
        return text.replace(self._shown + os.sep, self._folder + "/").replace(self._shown, self._folder)

    def upload(self) -> list[str]:
        """Send what the command wrote; returns the URLs written."""
        if not self.remote:
            return []
        files = sorted(os.path.join(d, f) for d, _, names in os.walk(self._dir) for f in names)
        urls = {path: self.shown(path).replace(os.sep, "/") for path in files}
        if not self._overwrite:
            store = store_for(self.target, self._options)
            taken = [u for u in urls.values() if store.exists(u)]
            if taken:
                raise OutputExistsError(taken[0])
        first = [p for p in files if not p.endswith(".idx")]
        with ThreadPoolExecutor(8) as pool:  # a folder of extracted images: many small objects
            list(pool.map(lambda p: upload(p, urls[p], self._options), first))
        for path in files:
            if path.endswith(".idx"):  # last: a reader that finds the .idx finds the .rec whole
                upload(path, urls[path], self._options)
        return [urls[p] for p in files]

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        try:
            if kind is None:
                self.upload()
        finally:
            self.close()


class StagedInput(_Staging):
    """An input that a command reads as a local file: for a URL, a downloaded copy in a new
    staging folder, with the ``siblings`` it reads beside it (the URLs of its ``.idx`` and
    ``property``, say: those that exist), removed when the ``with`` block ends. ``path`` is
    the name to read (None for no ``source``).

    Raises:
        StorageError: the object is missing or cannot be read.
    """

    def __init__(self, source: str | None, siblings: tuple[str, ...] = (), storage_options: Mapping[str, Any] | None = None):
        self.source = source
        self.path = source
        if source is None or not is_url(source):
            return
        _, name = _split_url(source)
        store = store_for(source, storage_options)
        self.path = os.path.join(self._make("in-"), name)
        try:
            store.download(source, self.path)
            for sibling in siblings:
                with contextlib.suppress(ObjectMissing):
                    store.download(sibling, os.path.join(self._dir, _split_url(sibling)[1]))
        except BaseException:
            self.close()
            raise

    def shown(self, text: str) -> str:
        """``text`` (a message naming the local copy) with the copy named by its URL."""
        if self.path is None or self.source is None or self.path == self.source:
            return text
        return text.replace(self.path, self.source)
