"""WebDataset shards: POSIX tar files of samples, one file per field, grouped by key.

A sample ``KEY`` is the consecutive members ``KEY.cls``, ``KEY.EXT``, ``KEY.json`` (in
that order: sorted by extension, as webdataset's ``TarWriter`` writes a sample's fields):

* ``KEY.EXT``: the image bytes as stored, ``EXT`` from the payload's real format (``jpg``, ``png``...);
* ``KEY.cls``: the class as decimal text, when the label is one integer;
* ``KEY.json``: ``{"label": [...], "id": ..., "id2": ..., "class": ..., "identity": ...}``
  (every label, the IRHeader's ids, a class name where one is known; see ``base.Sample``).

Every member header is a ustar header (512 bytes)::

    0 name[100]  100 mode[8] "0000444"  108 uid[8] 0  116 gid[8] 0  124 size[12] octal
    136 mtime[12] 0  148 chksum[8]  156 typeflag "0"  157 linkname[100]
    257 magic "ustar\\0"  263 version "00"  265 uname[32] ""  297 gname[32] ""
    329 devmajor[8]  337 devminor[8]  345 prefix[155]  500 pad[12]

followed by the data, zero-padded to 512 bytes. mtime, owner and mode are fixed, so the
same records give the same bytes. A shard ends with two zero blocks, and is cut when the
next sample would take it past the shard size (a sample bigger than that gets a shard of
its own). Shards are ``NAME-000000.tar``, ``NAME-000001.tar``...

The reader parses tar headers itself (ustar, GNU long names, pax ``path`` and ``size``
records), streaming each shard from disk or a store without a temporary file.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import IO, Any, NamedTuple

import numpy as np

from .. import storage
from ..errors import Im2recError
from ..fsutil import WriteBehind
from .base import Batch, DatasetMeta, OnShard, Sample, SampleReader, ShardWriter, check_listed, extension_of, meta_text, read_meta, shard_files, source_folder

__all__ = ["Reader", "Writer", "shard_name"]

BLOCK = 512
#: The shard list for ``wids.ShardListDataset(OUT/wids.json)``: each shard's name and length.
WIDS_NAME = "wids.json"
_END = bytes(2 * BLOCK)  # the end-of-archive marker
_IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "ppm", "pgm", "pnm", "jp2", "avif", "img", "image")
_LABEL_EXTS = ("cls", "cls2", "class", "label", "index")


_MID = b"0000444\0" + b"0000000\0" * 2  # mode, uid, gid
_MTIME = b"00000000000\0"
_TAIL = b"0" + bytes(100) + b"ustar\x0000" + bytes(64) + b"0000000\0" * 2 + bytes(167)  # typeflag .. pad
#: What every header's checksum counts besides its name and size: the fixed fields, and the
#: checksum field itself as eight spaces.
_FIXED_SUM = sum(_MID) + sum(_MTIME) + 8 * 32 + sum(_TAIL)


def member_header(name: bytes, size: int) -> bytes:
    """The 512-byte ustar header of a regular file ``name`` (at most 100 bytes) of ``size`` bytes."""
    if len(name) > 100:
        raise ValueError(f"tar member name longer than 100 bytes: {name[:40]!r}...")
    field = b"%011o\0" % size
    return name.ljust(100, b"\0") + _MID + field + _MTIME + b"%06o\0 " % (_FIXED_SUM + sum(name) + sum(field)) + _TAIL


_PADS = [bytes(-n % BLOCK) for n in range(BLOCK)]
#: A header with an empty name, size 0 and its checksum field as ``member_header`` ends it:
#: what ``headers`` fills in.
_HEADER_TEMPLATE = np.frombuffer(bytes(100) + _MID + b"00000000000\0" + _MTIME + b"000000\0 " + _TAIL, np.uint8)
_OCTAL11 = 3 * np.arange(10, -1, -1)
_OCTAL6 = 3 * np.arange(5, -1, -1)


def headers(names: list[bytes], sizes: list[int], as_array: bool = False) -> Any:
    """The ustar headers of regular files ``names`` of ``sizes`` bytes, one after the other:
    ``member_header`` for many at once, with numpy (``as_array``: as rows of 512 uint8)."""
    m = len(names)
    out = np.empty((m, BLOCK), np.uint8)
    if m == 0:
        return out if as_array else b""
    out[:] = _HEADER_TEMPLATE
    if max(map(len, names)) > 100:
        raise ValueError("tar member name longer than 100 bytes")
    name = np.array(names, dtype="S100").view(np.uint8).reshape(m, 100)
    out[:, :100] = name
    size = np.asarray(sizes, np.int64)
    if size.max() >= 8**11:  # 8 GB and more: the octal field is too small (never an image record)
        joined = b"".join(member_header(n, s) for n, s in zip(names, sizes))
        return np.frombuffer(joined, np.uint8).reshape(m, BLOCK) if as_array else joined
    digits = ((size[:, None] >> _OCTAL11) & 7) + 48
    out[:, 124:135] = digits
    chk = _FIXED_SUM + name.sum(axis=1, dtype=np.int64) + digits.sum(axis=1)
    out[:, 148:154] = ((chk[:, None] >> _OCTAL6) & 7) + 48
    return out if as_array else out.tobytes()  # the zero bytes after a member of n % 512 bytes


def shard_name(name: str, index: int) -> str:
    return f"{name}-{index:06d}.tar"


class Writer(ShardWriter):
    """Writes samples as ``NAME-000000.tar``... in ``folder`` (see the module)."""

    def __init__(self, folder: str, name: str, shard_size: int, meta: DatasetMeta, on_shard: OnShard):
        self.folder, self.name, self.shard_size, self.meta, self.on_shard = folder, name, shard_size, meta, on_shard
        self._file: IO[bytes] | None = None
        self._path = ""
        self._size = 0
        self._pieces: list[Any] = []
        self._pending = 0
        self._counts: list[int] = []  # samples per shard, for wids.json
        self.samples = 0

    def _open(self) -> None:
        self._path = os.path.join(self.folder, shard_name(self.name, len(self.meta.shards)))
        self.meta.shards.append(os.path.basename(self._path))
        self._counts.append(0)
        self._file = open(self._path, "wb")  # noqa: SIM115 (open across write calls, closed by _finish_shard)
        self._write_behind = WriteBehind(self._file)  # the disk writes start as the shard grows: a short fsync at the end
        self._size = 0

    def _flush(self) -> None:
        if self._pieces and self._file is not None:
            self._file.write(self._pieces[0] if len(self._pieces) == 1 else b"".join(self._pieces))
            self._write_behind(self._file.tell())
        self._pieces.clear()
        self._pending = 0

    def _finish_shard(self) -> None:
        if self._file is None:
            return
        self._pieces.append(_END)
        self._flush()
        self._file.close()
        self._file = None
        self.on_shard(self._path)

    def write(self, sample: Sample) -> None:
        self._add(sample.key, sample.image, sample.ext, sample.cls, sample.meta_json(with_label=True))

    def write_batch(self, batch: Batch) -> None:
        """``write`` for each record of ``batch``, without making Samples: the batch's tar bytes
        are laid out at once in a zeroed array of 512-byte blocks (headers from ``headers``,
        the small members by rows, the images copied in), then written shard by shard."""
        names = batch.class_names
        identities = batch.identities
        member_names: list[bytes] = []
        sizes: list[int] = []
        images: list[Any] = []
        small: list[bytes] = []  # cls and json texts, one block each
        big: list[int] = []  # members that are images (or texts of more than a block), by member position
        per_sample: list[int] = []  # members of each sample
        ids, id2s, flags = batch.ids, batch.id2s, batch.flags
        for i, key in enumerate(batch.keys):
            image, label = batch.images[i], batch.labels[i]
            x = label[0] if len(label) == 1 else math.nan
            cls = int(x) if x.is_integer() else None
            k = key.encode() + b"."
            if image[:3] == b"\xff\xd8\xff" and cls is not None and not flags[i] and names is None and not identities:
                # the common case, spelled out: KEY.cls, KEY.jpg, KEY.json, one integer label
                meta = b'{"label":[%s],"id":%d,"id2":%d}' % (repr(x).encode(), ids[i], id2s[i])
                per_sample.append(3)
                cls_text = b"%d" % cls
                member_names += (k + b"cls", k + b"jpg", k + b"json")
                sizes += (len(cls_text), len(image), len(meta))
                small += (cls_text, meta)
                big.append(len(sizes) - 2)
                images.append(image)
                continue
            ext = extension_of(image).encode()
            meta = meta_text(label, ids[i], id2s[i], flags[i], names[i] if names is not None else None, cls if identities else None, with_label=True).encode()
            members = [(b"cls", b"%d" % cls), (ext, image), (b"json", meta)] if cls is not None else [(ext, image), (b"json", meta)]
            if ext > b"json" or (cls is not None and ext < b"cls"):
                members.sort(key=lambda m: m[0])
            per_sample.append(len(members))
            for name, data in members:
                if name is ext or not 0 < len(data) <= BLOCK:
                    big.append(len(sizes))
                    images.append(data)
                else:
                    small.append(data)
                member_names.append(k + name)
                sizes.append(len(data))
        size = np.asarray(sizes, np.int64)
        blocks = 1 + (size + BLOCK - 1) // BLOCK  # header, data
        start = np.zeros(len(size) + 1, np.int64)
        np.cumsum(blocks, out=start[1:])
        out = np.zeros((int(start[-1]), BLOCK), np.uint8)
        out[start[:-1]] = headers(member_names, sizes, as_array=True)
        is_big = np.zeros(len(size), bool)
        is_big[big] = True
        if small:
            out[start[:-1][~is_big] + 1] = np.array(small, dtype="S512").view(np.uint8).reshape(-1, BLOCK)
        flat = memoryview(out.reshape(-1).data)
        for j, data in zip(big, images):
            at = (int(start[j]) + 1) * BLOCK
            flat[at : at + sizes[j]] = data
        # samples to shards: each sample's bytes, cut where the next would pass the shard size
        ends = start[np.cumsum(per_sample)] * BLOCK  # where each sample ends in ``out``
        i, taken = 0, 0  # samples done, bytes of ``out`` done
        n = len(per_sample)
        while i < n:
            if self._file is None:
                self._open()
            room = self.shard_size - len(_END) - self._size
            last = int(np.searchsorted(ends, taken + room, side="right"))  # samples [i, last) fit
            if last <= i:
                if self._size:  # the next sample does not fit: a new shard
                    self._finish_shard()
                    continue
                last = i + 1  # bigger than a shard: a shard of its own
            stop = int(ends[last - 1])
            self._pieces.append(flat[taken:stop])
            self._size += stop - taken
            self._counts[-1] += last - i
            self.samples += last - i
            i, taken = last, stop
            self._flush()

    def _add(self, key: str, image: Any, ext: str, cls: int | None, text: str) -> None:
        """One sample's members, in sorted extension order: ``cls``, the image, ``json``."""
        k = key.encode()
        meta = text.encode()
        n = len(image)
        size = (4 if cls is not None else 2) * BLOCK + n + (-n % BLOCK) + len(meta) + (-len(meta) % BLOCK)  # headers, a cls block
        if self._file is not None and self._size and self._size + size + len(_END) > self.shard_size:
            self._finish_shard()
        if self._file is None:
            self._open()
        pieces = self._pieces
        e = ext.encode()
        members = [(b"cls", str(cls).encode())] if cls is not None else []
        members.append((e, image))
        members.append((b"json", meta))
        if e > b"json" or (cls is not None and e < b"cls"):
            members.sort(key=lambda m: m[0])
        for x, data in members:
            m = len(data)
            pieces.append(member_header(k + b"." + x, m))
            pieces.append(data)
            if m % BLOCK:
                pieces.append(_PADS[m % BLOCK])
        self._size += size
        self._pending += size
        self.samples += 1
        self._counts[-1] += 1
        if self._pending >= 1 << 22:
            self._flush()

    def close(self) -> list[str]:
        self._finish_shard()
        self.meta.samples = self.samples
        self.meta.format = "webdataset"
        wids = os.path.join(self.folder, WIDS_NAME)
        with open(wids, "w", encoding="utf-8") as f:  # what wids.ShardListDataset reads: shards and their lengths
            shardlist = [{"url": name, "nsamples": count} for name, count in zip(self.meta.shards, self._counts)]
            json.dump({"wids_version": 1, "name": self.name, "shardlist": shardlist}, f, indent=1)
        meta_path = self.meta.write(self.folder)
        return [wids, meta_path]

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


# --------------------------------------------------------------------------- reading


def _octal(field: bytes, path: str, offset: int) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256, for sizes of 8 GB and more
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise Im2recError(f"{path}: byte {offset}: not a tar header (size field {field!r})") from None


def _pax(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(data):
        space = data.index(b" ", i)
        length = int(data[i:space])
        key, _, value = data[space + 1 : i + length - 1].partition(b"=")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
        i += length
    return out


_READ = 8 << 20  # a shard is read in pieces of this size


def _chunks(f: IO[bytes]) -> Iterator[bytes]:
    while True:
        data = f.read(_READ)
        if not data:
            return
        yield data


class Damage(NamedTuple):
    """Bytes of a tar that hold no member: what ``members`` yields for them, in their place."""

    offset: int
    message: str


def _checksum_ok(h: bytes) -> bool:
    """Whether a header block's checksum field matches its bytes (unsigned, as POSIX says)."""
    stored = h[148:156].split(b"\0", 1)[0].strip()
    return bool(stored) and all(c in b"01234567" for c in stored) and int(stored, 8) == sum(h[:148]) + 256 + sum(h[156:])


def members(f: IO[bytes], path: str) -> Iterator[tuple[str, memoryview, int] | Damage]:
    """The regular files of a tar stream: ``(name, data, offset of the header)``; ``data`` is a
    view of the piece read (copy what is kept past the next member). Bytes that are no member
    (a header with a bad checksum, a lone zero block: a damaged header) are one ``Damage``; the
    reading goes on at the next valid header.

    Raises:
        Im2recError: the file is empty, or cut short (inside a member, or before tar's
            end-of-archive blocks: a partial download), naming the byte offset.
    """
    base = 0  # the file offset of buf[0]
    buf: bytes = b""
    pos = 0
    long_name: str | None = None
    pax: dict[str, str] = {}
    chunks = _chunks(f)

    def have(n: int) -> bool:
        """Whether ``n`` bytes from ``pos`` are in ``buf`` (reading on as needed)."""
        nonlocal base, buf, pos
        while len(buf) - pos < n:
            more = next(chunks, b"")
            if not more:
                return False
            base, buf, pos = base + pos, buf[pos:] + more, 0
        return True

    while True:
        if not have(BLOCK):
            if base + len(buf) == 0:
                raise Im2recError(f"{path}: the tar file is empty (0 bytes)")
            if len(buf) - pos:
                raise Im2recError(f"{path}: byte {base + pos}: the tar file ends inside a header (truncated)")
            raise Im2recError(f"{path}: the tar file ends at byte {base + pos:,} without tar's end-of-archive blocks: it was cut short (a partial download?), and its members after that are lost")
        h = buf[pos : pos + BLOCK]
        offset = base + pos
        if h == _ZERO_BLOCK:
            if not have(2 * BLOCK) or buf[pos + BLOCK : pos + 2 * BLOCK] == _ZERO_BLOCK:
                return  # the end of the archive (two zero blocks, or one at the end of the file)
        elif _checksum_ok(h):
            pass
        else:  # not a header: a damaged one; read on at the next valid header
            pos += BLOCK
            while have(BLOCK) and not (buf[pos : pos + BLOCK] != _ZERO_BLOCK and _checksum_ok(buf[pos : pos + BLOCK])):
                pos += BLOCK
            found = have(BLOCK)
            yield Damage(offset, f"byte {offset}: {base + pos - offset:,} bytes that are no tar member (a damaged header: a bad checksum){'' if found else ', to the end of the file'}; what they held is lost")
            pax, long_name = {}, None
            if not found:
                return
            continue
        if h == _ZERO_BLOCK:  # a lone zero block before more data: a header zeroed
            pos += BLOCK
            while have(BLOCK) and not (buf[pos : pos + BLOCK] != _ZERO_BLOCK and _checksum_ok(buf[pos : pos + BLOCK])):
                pos += BLOCK
            found = have(BLOCK)
            yield Damage(offset, f"byte {offset}: a lone zero block where a header should be, then {base + pos - offset - BLOCK:,} bytes of no member{'' if found else ', to the end of the file'}; what they held is lost")
            if not found:
                return
            continue
        try:
            size = int(h[124:135], 8)
        except ValueError:
            size = _octal(h[124:136], path, offset)
        if "size" in pax:
            size = int(pax["size"])
        if not have(BLOCK + size):  # the member's data crosses the piece and the file ends first
            raise Im2recError(f"{path}: byte {offset}: the member's {size:,} bytes are cut short at byte {base + len(buf)} (truncated)")
        end = pos + BLOCK + size
        data = memoryview(buf)[pos + BLOCK : end]
        pos = end + (-size % BLOCK)
        kind = h[156:157]
        if kind in (b"0", b"\0", b"7"):
            nul = h.find(b"\0", 0, 100)
            name = h[: nul if nul >= 0 else 100].decode("utf-8", "replace")
            if h[345] != 0:
                name = h[345:500].split(b"\0", 1)[0].decode("utf-8", "replace") + "/" + name
            if pax or long_name:
                name = pax.get("path") or long_name or name
                pax, long_name = {}, None
            yield name, data, offset
        elif kind == b"x":
            pax = _pax(bytes(data))
        elif kind == b"L":
            long_name = bytes(data).rstrip(b"\0").decode("utf-8", "replace")
        elif kind != b"g":  # folders, links: not samples
            pax, long_name = {}, None


_ZERO_BLOCK = bytes(BLOCK)


def _number(text: bytes | str) -> float | str:
    s = text.decode("utf-8", "replace").strip() if isinstance(text, bytes) else text.strip()
    try:
        return float(s)
    except ValueError:
        return s


class Reader(SampleReader):
    """Samples of WebDataset shards: a ``.tar``, a folder (or URL prefix) of them, or a glob.

    A sample's image is its first field with an image extension (``jpg``, ``png``, ...;
    ``image.jpg`` style compound extensions count by their last part); its label, ``json``'s
    ``label`` (a number, a list, or a class name) or else ``cls`` (or ``class``, ``label``);
    ``json``'s ``id``, ``id2``, ``flag``, ``class`` and ``identity`` as ``export`` wrote them.
    """

    def __init__(self, src: str, storage_options: dict | None = None, label_field: str | None = None):
        self.label_field = label_field
        self.src = src
        self.storage_options = storage_options
        self.shards = shard_files(src, ".tar", storage_options)
        self.meta: DatasetMeta | None = read_meta(source_folder(src), storage_options)
        check_listed(self.shards, self.meta, "webdataset", src)

    def shard_names(self) -> list[str | None]:
        return list(self.shards)

    def count(self) -> int | None:
        if self.meta is not None and self.meta.format == "webdataset" and len(self.meta.shards) == len(self.shards):
            return self.meta.samples
        return None

    def _open(self, shard: str) -> IO[bytes]:
        if storage.is_url(shard):
            try:
                return storage.store_for(shard, self.storage_options).open(shard)
            except storage.ObjectMissing:
                raise Im2recError(storage.missing(shard, self.storage_options)) from None
        return open(shard, "rb", buffering=1 << 20)

    def _grouped(self) -> Iterator[tuple[str, str, dict[str, memoryview]] | tuple[str, Damage]]:
        """``(shard, key, {ext: data})`` for every sample, in order; ``(shard, Damage)`` where
        bytes of a shard hold no member."""
        for shard in self.shards:
            with self._open(shard) as f:
                key: str | None = None
                fields: dict[str, memoryview] = {}
                for member in members(f, shard):
                    if isinstance(member, Damage):
                        if key is not None:
                            yield shard, key, fields
                            key, fields = None, {}
                        yield shard, member
                        continue
                    name, data, _ = member
                    dot = name.find(".", name.rfind("/") + 1)  # webdataset's rule: the key ends at the basename's first dot
                    if dot <= 0:
                        continue
                    k, ext = name[:dot], name[dot + 1 :]
                    if k != key:
                        if key is not None:
                            yield shard, key, fields
                        key, fields = k, {}
                    fields[ext] = data
                if key is not None:
                    yield shard, key, fields

    def class_names(self) -> list[str] | None:
        names: set[str] = set()
        for item in self._grouped():
            if len(item) == 2:  # damage: listed when read
                continue
            _, _, fields = item
            doc = None
            if "json" in fields:
                try:
                    doc = json.loads(bytes(fields["json"]))
                except ValueError:
                    continue  # listed as a failure when read
            label = _label_field(fields, doc, self.label_field)
            if isinstance(label, str):
                names.add(label)
            elif label is not None:
                return None
        return sorted(names) if names else None

    def samples(self, start: int = 0) -> Iterator[Sample]:
        for position, item in enumerate(self._grouped()):
            if position < start:
                continue
            if len(item) == 2:
                shard, damage = item
                where = f"{shard.rsplit('/', 1)[-1]}:byte {damage.offset}"
                yield Sample(key=where, image=b"", label=(), where=where, problem=("corrupt", damage.message))
                continue
            yield _sample(*item, self.label_field)


def _label_field(fields: dict[str, Any], doc: Any, name: str | None = None) -> Any:
    """The label of a sample: from its parsed ``json`` (``doc``) or a label field (``name``, a
    field's extension or a key of its json, when given); a float, a tuple of floats, a class
    name, or None."""
    if name is not None:
        if name in fields:
            return _number(bytes(fields[name]))
        if not (isinstance(doc, dict) and name in doc):
            return None
    key = name or "label"
    if isinstance(doc, dict) and key in doc:
        label = doc[key]
        if isinstance(label, list):
            return tuple(float(x) for x in label)
        if isinstance(label, (int, float)) and not isinstance(label, bool):
            return float(label)
        if isinstance(label, str):
            return label
    for ext in _LABEL_EXTS if name is None else ():
        if ext in fields:
            return _number(bytes(fields[ext]))
    return None


def _sample(shard: str, key: str, fields: dict[str, Any], label_field: str | None = None) -> Sample:
    where = shard.rsplit("/", 1)[-1] + ":" + key
    image = None
    for ext, data in fields.items():
        if ext.rsplit(".", 1)[-1].lower() in _IMAGE_EXTS:
            image = data
            break
    sample = Sample(key=key.rsplit("/", 1)[-1], image=image if image is not None else b"", label=(), where=where)
    if image is None:
        sample.problem = ("missing", f"no image field (fields: {', '.join(sorted(fields)) or 'none'})")
        return sample
    sample.ext = extension_of(image)
    doc = None
    if "json" in fields:
        try:
            doc = json.loads(str(fields["json"], "utf-8"))
        except ValueError as e:
            sample.problem = ("bad-label", f"its json cannot be read: {e}")
            return sample
    try:
        label = _label_field(fields, doc, label_field)
    except (ValueError, TypeError) as e:
        sample.problem = ("bad-label", f"cannot read its label: {e}")
        return sample
    if isinstance(label, str):
        sample.class_name = label
    elif isinstance(label, tuple):
        sample.label = label
    elif label is not None:
        sample.label = (label,)
    else:
        wanted = f"no {label_field!r} field" if label_field else f"no json 'label', no {', '.join(_LABEL_EXTS)} field"
        sample.problem = ("bad-label", f"no label ({wanted}; --label-field names another)")
        return sample
    if isinstance(doc, dict):
        sample.with_meta(doc)
    return sample
