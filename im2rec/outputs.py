"""What every command that writes records leaves behind, and how: one home for the rules.

* **Names**: ``Outputs`` (``OUT.rec``, ``OUT.idx``, ``OUT.failed.tsv`` and the
  ``OUT.resume.json`` of an unfinished pack), from ``recordio.sibling``.
* **Nothing half-written under a final name**: files grow as ``NAME.partial`` and
  are fsynced, then renamed, together, by ``commit()``; ``abort()`` removes them.
  ``refuse_existing`` gives every command the same "exists: pass --overwrite" error.
* **Where records go**: ``RecordSink``, the interface one write loop drives:
  ``RecordFile`` (a ``.rec`` and its ``.idx``: ``convert``, ``combine``), ``PackFiles``
  (pack's single output: resumable, written behind, streamed to S3 while it grows)
  and ``shards.ShardedWriter`` (size-limited shards).
* **The failure list** ``OUT.failed.tsv`` (``FailureList``) and **resume**: the
  command's fingerprint in ``OUT.resume.json``; on ``--resume`` the complete records
  of the ``.partial`` files are kept, a torn one cut off, the ``.idx`` rebuilt.
* **The shard manifest** ``OUT.shards.json`` of a ``--shard-size`` pack, read by ``read_manifest``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol

from . import storage
from .errors import Im2recError, IndexFormatError, OutputExistsError, PackError
from .fsutil import WriteBehind, commit, make_parents, remove_quietly
from .recordio import IRHEADER_SIZE, RecordReader, RecordWriter, format_index, parse_index, sibling, unpack

__all__ = [
    "FAILED_HEADER",
    "FailureList",
    "Outputs",
    "PackFiles",
    "RecordFile",
    "RecordSink",
    "make_output_folder",
    "partial",
    "read_manifest",
    "refuse_existing",
]

FAILED_HEADER = "index\tpath\treason\n"
WRITE_BUFFER = 1 << 20  # records are copied into a 1 MiB buffer: one write call per MiB, not per record


class RecordSink(Protocol):
    """Where a write loop puts records: a ``.rec`` and its ``.idx``, shards, ..."""

    def write_framed_idx(self, key: Any, framed: bytes) -> int:
        """Append one record framed by ``recordio.frame`` and its ``.idx`` line; returns its offset."""
        ...

    def tell(self) -> int:
        """Bytes written so far."""
        ...

    def commit(self) -> None:
        """Put every output in place, complete."""
        ...

    def abort(self) -> None:
        """Remove what was written (or keep it for a resume, where the sink supports one)."""
        ...


#: What an output's name ends with while it grows, until it is complete (``partial``).
PARTIAL_SUFFIX = ".partial"


def partial(path: str) -> str:
    """The name ``path`` grows under until it is complete."""
    return path + PARTIAL_SUFFIX


def make_output_folder(path: str) -> None:
    """Create the missing folders of an output, once its command's checks have passed.

    Raises:
        PackError: a folder cannot be created.
    """
    try:
        make_parents(path)
    except OSError as e:
        raise PackError(f"cannot create the output folder {e.filename}: {e.strerror}") from None


def refuse_existing(paths: Iterable[str], overwrite: bool, there: Callable[[str], bool] = os.path.exists) -> None:
    """Raise OutputExistsError for the first of ``paths`` that exists, unless ``overwrite``."""
    if overwrite:
        return
    for path in paths:
        if there(path):
            raise OutputExistsError(path)


@dataclass(frozen=True)
class Outputs:
    """The files of one pack run: final names, and the partial names they grow under."""

    rec: str
    idx: str
    failed: str

    @classmethod
    def for_rec(cls, rec: str) -> Outputs:
        """``OUT.rec`` -> OUT.rec, OUT.idx, OUT.failed.tsv (same folder and stem)."""
        return cls(rec, sibling(rec, "idx"), sibling(rec, "failed"))

    @property
    def finals(self) -> tuple[str, str, str]:
        return (self.rec, self.idx, self.failed)

    @property
    def required(self) -> tuple[str, str]:
        """What a finished run always leaves (``OUT.failed.tsv`` only when something failed)."""
        return (self.rec, self.idx)

    @property
    def partials(self) -> tuple[str, str, str]:
        return (partial(self.rec), partial(self.idx), partial(self.failed))

    @property
    def state(self) -> str:
        """Where an unfinished run keeps its command, for ``--resume``."""
        return sibling(self.rec, "resume")

    def remove_partials(self) -> None:
        for path in (*self.partials, self.state):
            remove_quietly(path)


class RecordFile:
    """A ``.rec`` and its ``.idx`` written under ``.partial`` names, renamed together by ``commit``.

    Args:
        rec: the final ``.rec``; its ``.idx`` goes beside it.
        overwrite: replace existing outputs (else OutputExistsError for the first that exists).
        extra: other files the caller will write beside it, checked the same way.
    """

    def __init__(self, rec: str, overwrite: bool = False, extra: Sequence[str] = ()):
        self.rec, self.idx = rec, sibling(rec, "idx")
        refuse_existing([self.rec, self.idx, *extra], overwrite)
        make_parents(rec)
        self.writer = RecordWriter(partial(self.rec), partial(self.idx))

    @property
    def file(self) -> IO[bytes]:
        return self.writer.file

    def write_framed_idx(self, key: Any, framed: bytes) -> int:
        return self.writer.write_framed_idx(key, framed)

    def tell(self) -> int:
        return self.writer.tell()

    def commit(self) -> None:
        self.writer.close()
        commit(partial(self.rec), self.rec)
        commit(partial(self.idx), self.idx)

    def abort(self) -> None:
        self.writer.close()
        remove_quietly(partial(self.rec))
        remove_quietly(partial(self.idx))


class FailureList:
    """``OUT.failed.tsv``: one ``index<TAB>path<TAB>kind: reason`` line per image that could
    not be packed, under its ``.partial`` name until ``commit``. Each line is flushed as it
    is written, so that a resumed run finds every failure before its last record. A run
    without failures leaves no such file (and removes one an earlier run left)."""

    def __init__(self, path: str):
        self.path = path
        self.lines = 0
        self._file = open(partial(path) + ".new", "w", encoding="utf-8", newline="\n")  # noqa: SIM115 (closed by commit or abort)

    def previous(self) -> list[tuple[int, str]]:
        """The ``(index, line)`` of each failure an interrupted run listed."""
        found = []
        if os.path.exists(partial(self.path)):
            with open(partial(self.path), encoding="utf-8") as f:
                for line in f.read().splitlines()[1:]:
                    index = line.split("\t", 1)[0]
                    if index.isdigit():
                        found.append((int(index), line))
        return found

    def start(self, kept: Iterable[str] = ()) -> None:
        """Write the header and the ``kept`` lines of an interrupted run; the list is then
        ``OUT.failed.tsv.partial``."""
        kept = list(kept)
        self._file.write(FAILED_HEADER)
        self._file.writelines(line + "\n" for line in kept)
        self._file.flush()
        self.lines = len(kept)
        os.replace(partial(self.path) + ".new", partial(self.path))

    def add(self, index: int, path: str, kind: str, reason: str) -> None:
        self._file.write(f"{index}\t{_tsv_field(path)}\t{kind}: {_tsv_field(reason)}\n")
        self._file.flush()  # before any later record reaches the disk, so that --resume keeps it
        self.lines += 1

    def commit(self) -> None:
        """``OUT.failed.tsv`` in place when it lists a failure; else none at all."""
        self._file.close()
        if self.lines:
            commit(partial(self.path), self.path)
        else:
            remove_quietly(partial(self.path))
            remove_quietly(self.path)

    def abort(self) -> None:
        self.close()
        remove_quietly(partial(self.path))

    def close(self) -> None:
        """Close, keeping the partial list (an interrupted run, for --resume)."""
        self._file.close()
        remove_quietly(partial(self.path) + ".new")


def _tsv_field(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ").replace("\r", " ")


def kind_of(failure_line: str) -> str:
    """The failure kind of a ``FailureList`` line (``missing``, ``corrupt``, ...)."""
    return failure_line.rsplit("\t", 1)[-1].split(":", 1)[0]


@dataclass
class Resumed:
    """What an interrupted run left: its complete records, the key of the last one."""

    records: int = 0
    last_key: int | None = None


class PackFiles:
    """Pack's single output: ``OUT.rec`` and ``OUT.idx`` growing as ``.partial`` files next to
    ``OUT.resume.json`` (the command's fingerprint), the disk writes started as the file grows
    (``fsutil.WriteBehind``) and, with ``stream_to``, the ``.rec`` sent to S3 as it grows
    (``storage.Streamer``). ``abort`` keeps the partial files for ``--resume``.

    Use ``PackFiles.claim`` first: it says whether an interrupted run is to be resumed.
    """

    def __init__(self, out: Outputs, stream_to: str | None = None, storage_options: dict | None = None):
        self.out = out
        self._stream_to, self._storage_options = stream_to, storage_options
        self._rec_file: IO[bytes] | None = None
        self._idx_file: IO[str] | None = None
        self._writer: RecordWriter | None = None
        self._streamer: storage.Streamer | None = None
        self._write_behind: WriteBehind | None = None

    @staticmethod
    def claim(out: Outputs, fingerprint: dict, overwrite: bool, resume: bool) -> bool:
        """Check what exists: True to resume an interrupted run, False to start afresh.

        Raises:
            PackError: an interrupted run's files are there and neither ``overwrite`` nor
                ``resume`` was given, or ``resume`` was given for another command.
            OutputExistsError: a final output exists without ``overwrite``.
        """
        partial_exists = any(os.path.exists(p) for p in (*out.partials, out.state))
        if overwrite:
            out.remove_partials()
            return False
        if resume and partial_exists:
            if not os.path.exists(out.state) or not os.path.exists(out.partials[0]):
                raise PackError(f"cannot resume: {out.state} or {out.partials[0]} is missing; use --overwrite to start again")
            try:
                with open(out.state, encoding="utf-8") as f:
                    saved = json.load(f)
            except (ValueError, UnicodeDecodeError) as e:
                raise PackError(f"cannot resume: {out.state} is damaged ({e}); use --overwrite to start again") from None
            if not isinstance(saved, dict):
                raise PackError(f"cannot resume: {out.state} is damaged (not the object pack writes); use --overwrite to start again")
            changed = _changed(saved, fingerprint)
            if changed:
                raise PackError(
                    f"cannot resume {out.rec}: the interrupted run was made with another {', '.join(changed)}; "
                    f"rerun the same command with --resume, or use --overwrite to start again"
                )
            return True
        if partial_exists:
            raise PackError(f"{out.partials[0]} is left from an interrupted run: pass --resume to continue it, or --overwrite to start again")
        refuse_existing(out.finals, overwrite)
        return False

    def open(self, fingerprint: dict, resuming: bool) -> Resumed:
        """Open the partial files (fresh, or an interrupted run's, cut after its last complete record)."""
        rec_p, idx_p = partial(self.out.rec), partial(self.out.idx)
        if not resuming:
            with open(self.out.state, "w", encoding="utf-8") as f:
                json.dump(fingerprint, f)
            open(rec_p, "wb").close()
        self._rec_file = open(rec_p, "r+b", buffering=WRITE_BUFFER)  # noqa: SIM115 (closed by commit or abort)
        self._idx_file = open(idx_p + ".new", "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        resumed = self._cut_after_last_record() if resuming else Resumed()
        os.replace(idx_p + ".new", idx_p)
        self._writer = RecordWriter(self._rec_file, self._idx_file)
        self._write_behind = WriteBehind(self._rec_file)
        if self._stream_to:  # the .rec goes to the store as it grows; a resumed run sends it again
            self._streamer = storage.Streamer(self._stream_to, rec_p, self._storage_options)
        return resumed

    @property
    def retried(self) -> int:
        """Requests of the streamed upload sent again after a transient failure."""
        return self._streamer.tally.retried if self._streamer is not None else 0

    def _cut_after_last_record(self) -> Resumed:
        """Keep the complete records of the partial ``.rec`` and cut a torn record off its end.

        Their ``.idx`` lines come from the partial ``.idx`` where it lists them; it may lag
        behind the ``.rec``: then the records after it get key = id, as pack writes them, if
        every listed record had that key; otherwise (an import keeping other keys) they are
        cut off too, to be written again."""
        assert self._rec_file is not None and self._idx_file is not None
        listed: dict[int, Any] = {}
        idx_p = partial(self.out.idx)
        if os.path.exists(idx_p):
            with open(idx_p, "rb") as f:
                text = f.read()
            whole = text[: text.rfind(b"\n") + 1]  # a line the killed run did not finish is left out
            with contextlib.suppress(IndexFormatError):  # a damaged one: the records are keyed again below
                index = parse_index(whole, idx_p, _key_of)
                listed = dict(zip(index.offsets.tolist(), index.key_list))
        end, keys, offsets = 0, [], []
        keys_are_ids = True
        with RecordReader(partial(self.out.rec)) as reader:
            for offset, _length, nxt, error in reader.walk():
                if error is not None:
                    break  # a torn record at the end: cut off below
                header_id = unpack(reader.head_at(offset, IRHEADER_SIZE))[0].id
                if offset in listed:
                    key = listed[offset]
                    keys_are_ids = keys_are_ids and key == header_id
                elif keys_are_ids:
                    key = header_id
                else:
                    break
                keys.append(key)
                offsets.append(offset)
                end = nxt
        self._idx_file.write(format_index(keys, offsets))
        self._rec_file.truncate(end)
        self._rec_file.seek(end)
        return Resumed(len(keys), keys[-1] if keys else None)

    def write_framed_idx(self, key: Any, framed: bytes) -> int:
        assert self._writer is not None and self._write_behind is not None
        if self._streamer is not None:  # first: a failed part stops the run before this record, which is then not counted
            assert self._rec_file is not None
            self._streamer.feed(self._writer.tell(), self._rec_file.flush)
        offset = self._writer.write_framed_idx(key, framed)
        self._write_behind(offset + len(framed))
        return offset

    def tell(self) -> int:
        return self._writer.tell() if self._writer is not None else 0

    def _close(self) -> None:
        for f in (self._idx_file, self._rec_file):
            if f is not None:
                f.close()

    def commit(self) -> None:
        size = self.tell()
        self._close()
        if self._streamer is not None:
            self._streamer.finish(size)  # the object appears, whole
        commit(partial(self.out.rec), self.out.rec)
        commit(partial(self.out.idx), self.out.idx)
        remove_quietly(self.out.state)

    def abort(self) -> None:
        """Close, keeping the partial files for ``--resume``; a streamed upload is abandoned."""
        if self._streamer is not None:
            self._streamer.abort()
        with contextlib.suppress(OSError):
            self._close()


def _changed(saved: dict, now: dict) -> list[str]:
    """What differs between the fingerprint of the interrupted run and this one, named as the
    command line's options where the difference is one."""
    changed = [k for k in now if saved.get(k) != now[k]]
    if "list" in changed and "list_sha256" in changed:  # another list altogether
        changed.remove("list_sha256")
    names = {"list": "LIST", "list_sha256": "LIST (its lines changed)", "root": "ROOT"}  # as the command line says them
    changed = [names.get(k, k) for k in changed]
    if "options" in changed:  # name the options, not the group
        old_opts, new_opts = saved.get("options"), now["options"]
        old_opts = old_opts if isinstance(old_opts, dict) else {}  # a damaged state file: every option differs
        image = old_opts.get("image")
        old_image: dict = image if isinstance(image, dict) else {}
        old_opts, new_opts = {**old_opts, **old_image}, {**new_opts, **new_opts["image"]}
        changed.remove("options")
        flag = {"reduced_decode": "--full-decode", "part": "--part-index/--num-parts"}
        changed += [flag.get(k, f"--{k.replace('_', '-')}") for k in new_opts if k != "image" and old_opts.get(k) != new_opts[k]]
    return changed


def _key_of(word: str) -> int | str:
    """An ``.idx`` key as a resumed run reads it back: a number where it is one (pack's keys), else the text."""
    return int(word) if word.isdigit() else word


# --------------------------------------------------------------------------- the shard manifest (OUT.shards.json)


def read_manifest(path: str, storage_options: dict | None = None) -> list[str]:
    """The ``.rec`` shards listed in a manifest (a path or a URL), as paths (or URLs).

    Raises:
        Im2recError: the manifest cannot be read or names no shard.
    """
    try:
        manifest = json.loads(storage.read_any(path, storage_options))
        if storage.is_url(path):
            folder = path.rsplit("/", 1)[0]
            recs = [storage.join(folder, s["rec"]) for s in manifest["shards"]]
        else:
            folder = os.path.dirname(os.path.abspath(path))
            recs = [os.path.join(folder, s["rec"]) for s in manifest["shards"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Im2recError(f"{path}: not a shard manifest ({e})") from None
    if not recs:
        raise Im2recError(f"{path}: the manifest lists no shard")
    for rec in recs if not storage.is_url(path) else ():  # (a store's shards: a request each; their reader says it)
        if not os.path.isfile(rec):
            raise Im2recError(f"{storage.missing(rec)}: {path} names it as a shard (a damaged or stale manifest?)")
    return recs
