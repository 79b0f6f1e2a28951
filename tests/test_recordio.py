"""The format core: golden bytes from MXNet 1.9.1, round trips, and damaged files."""

import hashlib
import os
import pickle
import struct
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import im2rec
from im2rec import recordio
from im2rec.errors import (
    BadFlagError,
    BadMagicError,
    HeaderError,
    Im2recError,
    IndexFormatError,
    IndexOffsetError,
    RecordTooLargeError,
    TruncatedRecordError,
)

M = bytes.fromhex("0a23d7ce")


def sha(b):
    return hashlib.sha256(b).hexdigest()


def write_rec(path, payloads, keys=None):
    keys = list(range(len(payloads))) if keys is None else keys
    with recordio.MXIndexedRecordIO(str(path) + ".idx", str(path), "w") as w:
        for k, p in zip(keys, payloads):
            w.write_idx(k, p)
    return str(path), str(path) + ".idx"


# --------------------------------------------------------------------------- golden files


def test_reads_golden_raw_by_key(data_dir, manifest):
    records = manifest["files"]["raw.rec"]["records"]
    with recordio.MXIndexedRecordIO(data_dir / "raw.idx", data_dir / "raw.rec", "r") as r:
        assert r.keys == [rec["key"] for rec in records]
        assert r.idx == {rec["key"]: rec["offset"] for rec in records}
        for rec in records:
            payload = r.read_idx(rec["key"])
            assert len(payload) == rec["length"]
            assert sha(payload) == rec["sha256"], rec["name"]
            if rec["hex"] is not None:
                assert payload.hex() == rec["hex"]


def test_reads_golden_raw_sequentially(data_dir, manifest):
    records = manifest["files"]["raw.rec"]["records"]
    r = recordio.MXRecordIO(data_dir / "raw_seq.rec", "r")
    got = []
    while (payload := r.read()) is not None:
        got.append(sha(payload))
    assert got == [rec["sha256"] for rec in records]
    r.close()


def test_reader_scan_gives_offsets(data_dir, manifest):
    records = manifest["files"]["raw.rec"]["records"]
    with recordio.RecordReader(data_dir / "raw.rec") as r:
        assert [(off, sha(p)) for off, p in r.scan()] == [(rec["offset"], rec["sha256"]) for rec in records]


def golden_payloads(data_dir):
    with recordio.RecordReader(data_dir / "raw.rec", data_dir / "raw.idx") as r:
        return r.keys(), [r.read(k) for k in r.keys()]


def test_writes_golden_raw_byte_for_byte(data_dir, tmp_path):
    keys, payloads = golden_payloads(data_dir)
    rec, idx = write_rec(tmp_path / "raw.rec", payloads, keys)
    assert open(rec, "rb").read() == (data_dir / "raw.rec").read_bytes()
    assert open(idx, "rb").read() == (data_dir / "raw.idx").read_bytes()


def test_writes_golden_raw_from_frames_byte_for_byte(data_dir, tmp_path):
    keys, payloads = golden_payloads(data_dir)
    with recordio.RecordWriter(tmp_path / "raw.rec", tmp_path / "raw.idx") as w:
        offsets = [w.write_framed_idx(k, recordio.frame(p)) for k, p in zip(keys, payloads)]
        assert w.tell() == (data_dir / "raw.rec").stat().st_size
    assert (tmp_path / "raw.rec").read_bytes() == (data_dir / "raw.rec").read_bytes()
    assert (tmp_path / "raw.idx").read_bytes() == (data_dir / "raw.idx").read_bytes()
    assert offsets == [int(line.split("\t")[1]) for line in (data_dir / "raw.idx").read_text().splitlines()]


def test_write_framed_refuses_a_bare_payload(tmp_path):
    with recordio.RecordWriter(tmp_path / "x.rec") as w:
        with pytest.raises(ValueError, match=r"^.*/x\.rec: write_framed\(\) takes the bytes of frame\(\), not a payload$"):
            w.write_framed(b"abcd")
        with pytest.raises(ValueError, match=r"^.*/x\.rec: write_framed\(\) takes the bytes of frame\(\), not a payload$"):
            w.write_framed(recordio.frame(b"abc")[:-1])
        assert w.tell() == 0
    assert (tmp_path / "x.rec").read_bytes() == b""


def test_writes_golden_raw_seq_byte_for_byte(data_dir, tmp_path):
    _, payloads = golden_payloads(data_dir)
    with recordio.MXRecordIO(tmp_path / "seq.rec", "w") as w:
        for p in payloads:
            w.write(p)
    assert (tmp_path / "seq.rec").read_bytes() == (data_dir / "raw_seq.rec").read_bytes()


def golden_header(u):
    label = u["label"]
    return recordio.IRHeader(u["flag"], label, u["id"], u["id2"])


def test_golden_headers_unpack(data_dir, manifest):
    records = manifest["files"]["headers.rec"]["records"]
    with recordio.MXIndexedRecordIO(data_dir / "headers.idx", data_dir / "headers.rec", "r") as r:
        for rec in records:
            packed = r.read_idx(rec["key"])
            assert packed.hex() == rec["packed_hex"], rec["name"]
            header, payload = recordio.unpack(packed)
            u = rec["unpacked"]
            assert (header.flag, header.id, header.id2) == (u["flag"], u["id"], u["id2"])
            assert payload.hex() == u["payload_hex"]
            if header.flag:
                assert header.label.dtype == np.float32
                assert header.label.tolist() == u["label"]
            else:
                assert isinstance(header.label, float) and header.label == u["label"]


def test_golden_headers_pack_and_write_byte_for_byte(data_dir, manifest, tmp_path):
    records = manifest["files"]["headers.rec"]["records"]
    packed = [recordio.pack(golden_header(r["unpacked"]), bytes.fromhex(r["unpacked"]["payload_hex"])) for r in records]
    assert [p.hex() for p in packed] == [r["packed_hex"] for r in records]
    rec, idx = write_rec(tmp_path / "headers.rec", packed, [r["key"] for r in records])
    assert open(rec, "rb").read() == (data_dir / "headers.rec").read_bytes()
    assert open(idx, "rb").read() == (data_dir / "headers.idx").read_bytes()


# --------------------------------------------------------------------------- framing, spec section 1.7

HEXDUMPS = [
    (M + b"ABCDEFGH", "0a23d7ce 00000020 0a23d7ce 08000060 41424344 45464748"),
    (b"abcd" + M + b"efgh", "0a23d7ce 04000020 61626364 0a23d7ce 04000060 65666768"),
    (b"abcde" + M + b"fgh", "0a23d7ce 0c000000 61626364 650a23d7 ce666768"),
    (b"abcdefgh" + M + b"ij", "0a23d7ce 08000020 61626364 65666768 0a23d7ce 02000060 696a0000"),
    (b"abcdefgh" + M, "0a23d7ce 08000020 61626364 65666768 0a23d7ce 00000060"),
    (b"abcdefg" + M, "0a23d7ce 0b000000 61626364 6566670a 23d7ce00"),
    (M, "0a23d7ce 00000020 0a23d7ce 00000060"),
    (b"", "0a23d7ce 00000000"),
    (b"12345", "0a23d7ce 05000000 31323334 35000000"),
    (
        M + M + b"." + M + b"..." + M + b"...." + M,
        "0a23d7ce 00000020 0a23d7ce 00000040 0a23d7ce 08000040 2e0a23d7 ce2e2e2e"
        "0a23d7ce 04000040 2e2e2e2e 0a23d7ce 00000060",
    ),
]


@pytest.mark.parametrize("payload,dump", HEXDUMPS)
def test_spec_hexdumps(tmp_path, payload, dump):
    path = tmp_path / "x.rec"
    with recordio.RecordWriter(path) as w:
        assert w.write(payload) == 0
        assert w.tell() == len(bytes.fromhex(dump.replace(" ", "")))
    assert path.read_bytes().hex() == dump.replace(" ", "")
    assert len(recordio.frame(payload)) == path.stat().st_size
    with recordio.RecordReader(path) as r:
        assert list(r) == [payload]


def test_empty_record_reads_as_empty_bytes_not_eof(tmp_path):
    rec, _ = write_rec(tmp_path / "e.rec", [b"", b"x"])
    r = recordio.MXRecordIO(rec, "r")
    assert r.read() == b""
    assert r.read() == b"x"
    assert r.read() is None


def test_empty_file_has_no_records(tmp_path):
    (tmp_path / "e.rec").write_bytes(b"")
    (tmp_path / "e.idx").write_bytes(b"")
    r = recordio.MXIndexedRecordIO(tmp_path / "e.idx", tmp_path / "e.rec", "r")
    assert r.read() is None and r.keys == []


def test_record_too_large_is_refused_before_writing(tmp_path, monkeypatch):
    assert recordio.MAX_RECORD_SIZE == 2**29 - 1
    monkeypatch.setattr(recordio, "MAX_RECORD_SIZE", 15)
    path = tmp_path / "big.rec"
    with recordio.RecordWriter(path, tmp_path / "big.idx") as w:
        w.write_idx(0, b"a" * 15)
        with pytest.raises(RecordTooLargeError, match=r"^.*/big\.rec: record of 16 bytes at byte 24 is too large: RecordIO records must be under 2\*\*29 \(536870912\) bytes$"):
            w.write_idx(1, b"a" * 16)
    with pytest.raises(RecordTooLargeError, match=r"^record of 16 bytes is too large: RecordIO records must be under 2\*\*29 \(536870912\) bytes$"):
        recordio.frame(b"a" * 16)
        assert w.tell() == 24
    assert path.stat().st_size == 24
    assert (tmp_path / "big.idx").read_text() == "0\t0\n"


def test_write_refuses_str(tmp_path):
    w = recordio.MXRecordIO(tmp_path / "x.rec", "w")
    with pytest.raises(TypeError, match=r"^a record payload must be bytes, not str$"):
        w.write("text")


def test_invalid_flag():
    with pytest.raises(ValueError, match=r"^Invalid flag 'a': use 'r' to read or 'w' to write$"):
        recordio.MXRecordIO("x.rec", "a")


# --------------------------------------------------------------------------- properties

WORDS = st.sampled_from([M, b"\x0a\x23\xd7", b"\x23\xd7\xce", b"abcd", b"\0\0\0\0"])
PIECES = st.one_of(st.binary(max_size=9), WORDS)
PAYLOADS = st.lists(PIECES, max_size=12).map(b"".join)


def parts_of(blob):
    """Walk a .rec blob part by part: (offset, cflag, length)."""
    pos, parts = 0, []
    while pos < len(blob):
        magic, lrec = struct.unpack_from("<II", blob, pos)
        assert magic == recordio.MAGIC
        length = lrec & (2**29 - 1)
        parts.append((pos, lrec >> 29, length))
        pos += 8 + (length + 3) // 4 * 4
    assert pos == len(blob)
    return parts


@pytest.mark.slow
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(PAYLOADS, min_size=1, max_size=6))
def test_roundtrip_any_payload(tmp_path, payloads):
    rec, idx = write_rec(tmp_path / "p.rec", payloads, [7 * i for i in range(len(payloads))])
    blob = open(rec, "rb").read()
    # Every 4-aligned magic in the file is a part header: readers can resync anywhere.
    parts = parts_of(blob)
    heads = {off for off, _, _ in parts}
    aligned = {i for i in range(0, len(blob) - 3, 4) if blob[i : i + 4] == M}
    assert aligned == heads
    for _off, cflag, length in parts:
        assert cflag in (0, 1, 2, 3)
        if cflag in (1, 2):
            assert length % 4 == 0
    assert len(blob) == sum(len(recordio.frame(p)) for p in payloads)
    assert blob == b"".join(recordio.frame(p) for p in payloads)
    for p in payloads:  # the split count follows dmlc: aligned magics below len - len % 4
        n_aligned = sum(1 for i in range(0, len(p) - 3, 4) if p[i : i + 4] == M)
        assert len(recordio.frame(p)) == 8 + 4 * n_aligned + (len(p) + 3) // 4 * 4
    with recordio.MXIndexedRecordIO(idx, rec, "r") as r:
        assert [r.read_idx(7 * i) for i in range(len(payloads))] == payloads
        assert [p for p in r._reader] == payloads


@given(
    label=st.one_of(
        st.floats(width=32, allow_nan=False),
        st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=8),
    ),
    id_=st.integers(0, 2**64 - 1),
    id2=st.integers(0, 2**64 - 1),
    payload=st.binary(max_size=40),
)
def test_pack_unpack_roundtrip(label, id_, id2, payload):
    packed = recordio.pack(recordio.IRHeader(99, label, id_, id2), payload)
    header, rest = recordio.unpack(packed)
    assert rest == payload
    assert (header.id, header.id2) == (id_, id2)
    if isinstance(label, list):
        assert header.flag == len(label)
        assert header.label.tolist() == label
        assert packed[4:8] == b"\0\0\0\0"
    else:
        assert header.flag == 0
        assert header.label == label


def test_pack_semantics_from_spec():
    assert recordio.unpack(recordio.pack((5, 16777217, 0, 0), b""))[0].label == 16777216.0
    assert recordio.unpack(recordio.pack((0, np.array(3.0), 0, 0), b""))[0].flag == 1
    assert recordio.unpack(recordio.pack((0, [], 0, 0), b""))[0] == (0, 0.0, 0, 0)
    two_d = recordio.unpack(recordio.pack((0, [[1, 2], [3, 4]], 1, 2), b"z"))
    assert two_d[0].label.tolist() == [1, 2, 3, 4] and two_d[1] == b"z"
    with pytest.raises(ValueError, match=r"^IRHeader\.id must be in \[0, 2\*\*64\), got -1$"):
        recordio.pack((0, 1.0, -1, 0), b"")
    with pytest.raises(TypeError, match=r"^IRHeader\.id2 must be an integer, got 1\.5$"):
        recordio.pack((0, 1.0, 0, 1.5), b"")


def test_unpack_short_records():
    with pytest.raises(HeaderError, match=r"^record of 10 bytes is too short for the 24-byte IRHeader$"):
        recordio.unpack(b"x" * 10)
    bad = struct.pack("<IfQQ", 0xFFFFFFFF, 0, 0, 0)
    with pytest.raises(HeaderError, match=r"^record of 24 bytes is too short for its IRHeader with flag 4294967295 \(4294967295 float32 labels need 17179869204 bytes\)$"):
        recordio.unpack(bad)


def test_pack_img_unpack_img():
    img = np.zeros((8, 10, 3), np.uint8)
    img[:, :5] = (255, 0, 0)
    header, out = recordio.unpack_img(recordio.pack_img((0, 2.0, 3, 0), img, img_fmt=".png"))
    assert header == (0, 2.0, 3, 0)
    assert np.array_equal(out, img)
    smooth = np.add.outer(np.arange(16), np.arange(24)).astype(np.uint8)[:, :, None].repeat(3, 2) * 5
    header, out = recordio.unpack_img(recordio.pack_img((0, [1, 2], 3, 0), smooth, quality=90), 1)
    assert header.flag == 2 and header.label.tolist() == [1, 2] and out.shape == (16, 24, 3)
    assert np.abs(out.astype(int) - smooth).mean() < 2


# --------------------------------------------------------------------------- the .idx file


def test_index_tolerates_crlf_spaces_and_blank_lines(tmp_path):
    rec, _ = write_rec(tmp_path / "a.rec", [b"a", b"bb", b"ccc"])
    (tmp_path / "b.idx").write_bytes(b"0\t0\r\n\r\n1 12\r\n2\t24")
    r = recordio.MXIndexedRecordIO(tmp_path / "b.idx", rec, "r")
    assert [r.read_idx(k) for k in (0, 1, 2)] == [b"a", b"bb", b"ccc"]


def test_index_duplicates_last_wins_and_keys_keep_all(tmp_path):
    rec, _ = write_rec(tmp_path / "a.rec", [b"a", b"bb", b"ccc"])
    (tmp_path / "d.idx").write_text("5\t0\n5\t12\n100\t24\n")
    r = recordio.MXIndexedRecordIO(tmp_path / "d.idx", rec, "r")
    assert r.keys == [5, 5, 100]
    assert r.idx == {5: 12, 100: 24}
    assert r.read_idx(5) == b"bb"
    with pytest.raises(KeyError):
        r.read_idx(6)
    with pytest.raises(KeyError):
        r.seek("5")


def test_index_str_keys(tmp_path):
    path = tmp_path / "s.rec"
    with recordio.MXIndexedRecordIO(tmp_path / "s.idx", path, "w", key_type=str) as w:
        w.write_idx("cat/1.jpg", b"one")
        w.write_idx("dog 2", b"two")  # a space in a key is not supported by the .idx format
    with pytest.raises(IndexFormatError, match=r"^.*/s\.idx:2: expected 'key<TAB>offset', got 'dog 2\\t12'$"):
        recordio.MXIndexedRecordIO(tmp_path / "s.idx", path, "r", key_type=str)
    (tmp_path / "s.idx").write_text("cat/1.jpg\t0\n")
    r = recordio.MXIndexedRecordIO(tmp_path / "s.idx", path, "r", key_type=str)
    assert r.read_idx("cat/1.jpg") == b"one"


@settings(max_examples=200)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 10**18 - 1), st.integers(0, 10**17).map(lambda x: 4 * x)), max_size=30),
    crlf=st.booleans(),
)
@pytest.mark.slow
def test_index_fast_and_line_parsers_agree(pairs, crlf):
    eol = "\r\n" if crlf else "\n"
    data = "".join(f"{k}\t{o}{eol}" for k, o in pairs).encode()
    keys, offsets, _ = recordio._parse_index_lines(data, "x.idx", int)
    assert (keys, offsets) == ([k for k, _ in pairs], [o for _, o in pairs])
    fast = recordio._parse_index_fast(data)
    if not crlf:
        assert fast is not None
    if fast is not None:
        assert fast[:, 0].tolist() == keys and fast[:, 1].tolist() == offsets


@pytest.mark.parametrize(
    "text,message",
    [
        ("0\t0\n1\n", r"bad\.idx:2: expected 'key<TAB>offset', got '1'"),
        ("0\t0\n1\t2\t3\n", r"bad\.idx:2: expected 'key<TAB>offset', got '1\\t2\\t3'"),
        ("x\t0\n", r"bad\.idx:1: key 'x' is not a valid int"),
        ("0\t-8\n", r"bad\.idx:1: offset '-8' is not a non-negative integer"),
        ("0\t1e3\n", r"bad\.idx:1: offset '1e3' is not a non-negative integer"),
        ("0\t99999999999999999999\n", r"bad\.idx:1: offset 99999999999999999999 is impossibly large"),
    ],
)
def test_malformed_index_lines(tmp_path, text, message):
    rec, _ = write_rec(tmp_path / "a.rec", [b"abc"])
    (tmp_path / "bad.idx").write_text(text)
    with pytest.raises(IndexFormatError if "impossibly" not in message else IndexOffsetError, match=message):
        recordio.MXIndexedRecordIO(tmp_path / "bad.idx", rec, "r")


def test_index_offset_checks(tmp_path):
    rec, _ = write_rec(tmp_path / "a.rec", [b"a" * 20, b"b" + M + b"cdefgh" + M])  # 2nd: 3 parts? no: unaligned
    size = os.path.getsize(rec)
    (tmp_path / "a.idx").write_text(f"0\t0\n1\t{size}\n")
    with pytest.raises(TruncatedRecordError) as e:
        recordio.MXIndexedRecordIO(tmp_path / "a.idx", rec, "r")
    assert str(e.value) == f"{rec}: the file ends at byte {size:,}: it was cut (a partial download?): 1 record of its .idx (key 1) is not in it; `im2rec index {rec} --overwrite` rebuilds the .idx from what is there"
    (tmp_path / "a.idx").write_text("0\t0\n1\t6\n")
    with pytest.raises(IndexOffsetError, match=r"^.*/a\.idx:2: offset 6 is not a record head \(records start at multiples of 4\)$"):
        recordio.MXIndexedRecordIO(tmp_path / "a.idx", rec, "r")
    (tmp_path / "a.idx").write_text("0\t0\n1\t8\n")
    r = recordio.MXIndexedRecordIO(tmp_path / "a.idx", rec, "r")
    with pytest.raises(IndexOffsetError, match=r"^.*/a\.idx:2: key 1 points at byte 8 of .*/a\.rec, which is not a record head \(.*/a\.rec: no record at byte 8: expected the magic 0xced7230a, found 0x61616161\)$"):
        r.read_idx(1)


def test_index_offset_on_continuation_part(tmp_path):
    rec, _ = write_rec(tmp_path / "a.rec", [b"abcd" + M + b"efgh"])
    (tmp_path / "a.idx").write_text("0\t0\n1\t12\n")
    r = recordio.MXIndexedRecordIO(tmp_path / "a.idx", rec, "r")
    assert r.read_idx(0) == b"abcd" + M + b"efgh"
    with pytest.raises(IndexOffsetError, match=r"^.*/a\.idx:2: key 1 points at byte 12 of .*/a\.rec, which is not a record head \(.*/a\.rec: byte 12 holds a part with cflag 3, not the start of a record \(cflag 0 or 1\)\)$"):
        r.read_idx(1)


# --------------------------------------------------------------------------- damaged .rec files


def damaged(tmp_path, blob):
    path = tmp_path / "bad.rec"
    path.write_bytes(blob)
    return path


def read_all(path):
    r = recordio.MXRecordIO(path, "r")
    out = []
    while (p := r.read()) is not None:
        out.append(p)
    return out


def test_truncated_final_record(tmp_path):
    rec, _ = write_rec(tmp_path / "a.rec", [b"first", b"x" * 30])
    blob = open(rec, "rb").read()
    for cut, message in [
        (len(blob) - 1, r"truncated record at byte 16: the part at byte 16 holds 30 bytes but the file ends 31 bytes after"),
        (16 + 5, r"truncated record at byte 16: the part header at byte 16 needs 8 bytes, the file ends after 5"),
    ]:
        path = damaged(tmp_path, blob[:cut])
        r = recordio.MXRecordIO(path, "r")
        assert r.read() == b"first"
        with pytest.raises(TruncatedRecordError, match=message):
            r.read()


def test_truncated_multipart_record(tmp_path):
    rec, _ = write_rec(tmp_path / "a.rec", [b"abcd" + M + b"efgh"])
    blob = open(rec, "rb").read()
    path = damaged(tmp_path, blob[:12])  # cut exactly after the first part: MXNet returns None silently
    with pytest.raises(TruncatedRecordError, match=r"^.*/bad\.rec: truncated record at byte 0: the part header at byte 12 needs 8 bytes, the file ends after 0$"):
        read_all(path)


def test_bad_magic(tmp_path):
    rec, _ = write_rec(tmp_path / "a.rec", [b"first", b"second"])
    blob = bytearray(open(rec, "rb").read())
    blob[16] ^= 0xFF
    with pytest.raises(BadMagicError, match=r"^.*/bad\.rec: no record at byte 16: expected the magic 0xced7230a, found 0xced723f5$"):
        read_all(damaged(tmp_path, bytes(blob)))


@pytest.mark.parametrize(
    "first,second,message",
    [
        (2, 3, r"byte 0 holds a part with cflag 2, not the start of a record"),
        (3, 0, r"byte 0 holds a part with cflag 3"),
        (5, 3, r"byte 0 holds a part with cflag 5"),
        (1, 0, r"record at byte 0: the part at byte 12 has cflag 0, expected a continuation"),
        (1, 1, r"record at byte 0: the part at byte 12 has cflag 1, expected a continuation"),
    ],
)
def test_impossible_cflag_sequences(tmp_path, first, second, message):
    blob = struct.pack("<II", recordio.MAGIC, first << 29 | 4) + b"abcd"
    blob += struct.pack("<II", recordio.MAGIC, second << 29 | 4) + b"efgh"
    with pytest.raises(BadFlagError, match=message):
        read_all(damaged(tmp_path, blob))


def test_huge_length_is_not_allocated(tmp_path):
    blob = struct.pack("<II", recordio.MAGIC, 2**29 - 1) + b"abcd"
    with pytest.raises(TruncatedRecordError, match=r"^.*/bad\.rec: truncated record at byte 0: the part at byte 0 holds 536870911 bytes but the file ends 4 bytes after its header$"):
        read_all(damaged(tmp_path, blob))


def test_errors_are_im2rec_errors():
    for cls in (BadFlagError, BadMagicError, HeaderError, IndexFormatError, IndexOffsetError, TruncatedRecordError):
        assert issubclass(cls, im2rec.Im2recError)
    assert recordio.Im2recError is im2rec.Im2recError


FUZZ_PAYLOADS = [b"", b"a", b"abcd" + M + b"efgh", M, b"x" * 37, b"abcde" + M + b"fg", bytes(range(256)) + M * 3]


@pytest.fixture(scope="module")
def fuzz_source(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    rec, idx = write_rec(d / "src.rec", FUZZ_PAYLOADS, [3 * i + 1 for i in range(len(FUZZ_PAYLOADS))])
    blob = open(rec, "rb").read()
    offsets = [int(line.split("\t")[1]) for line in open(idx).read().splitlines()]
    spans = [(o, o + len(recordio.frame(p))) for o, p in zip(offsets, FUZZ_PAYLOADS)]
    return blob, open(idx, "rb").read(), spans


@pytest.mark.slow
@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_damaged_rec_and_idx(tmp_path, fuzz_source, data):
    """Truncations and byte flips give the right records or an Im2recError: never a crash or a hang."""
    blob, idx_text, spans = fuzz_source
    target = data.draw(st.sampled_from(["rec", "idx"]))
    src = blob if target == "rec" else idx_text
    action = data.draw(st.sampled_from(["truncate", "flip"]))
    buf = bytearray(src)
    if action == "truncate":
        cut = data.draw(st.integers(0, len(buf)))
        damaged_at = set(range(cut, len(buf)))
        del buf[cut:]
    else:
        damaged_at = set(data.draw(st.lists(st.integers(0, len(buf) - 1), min_size=1, max_size=3)))
        for pos in damaged_at:
            buf[pos] ^= data.draw(st.integers(1, 255))
    rec_blob, idx_blob = (bytes(buf), idx_text) if target == "rec" else (blob, bytes(buf))
    (tmp_path / "f.rec").write_bytes(rec_blob)
    (tmp_path / "f.idx").write_bytes(idx_blob)

    def intact(payload, i):
        start, end = spans[i]
        return payload == FUZZ_PAYLOADS[i] or (target == "rec" and any(start <= p < end for p in damaged_at))

    # Sequential: the records in order, until an error. From the first damaged record on, a
    # record may come back wrong, and a corrupted length may swallow the records after it
    # (the format has no checksum; MXNet's readers do the same). Nothing else may differ.
    expected = 0
    try:
        for payload in recordio.RecordReader(tmp_path / "f.rec"):
            assert expected < len(FUZZ_PAYLOADS)
            if payload == FUZZ_PAYLOADS[expected]:
                expected += 1
                continue
            assert target == "rec" and min(damaged_at) < spans[expected][1], (expected, payload)
            later = [k for k in range(expected + 1, len(FUZZ_PAYLOADS)) if FUZZ_PAYLOADS[k] == payload]
            expected = later[0] + 1 if later else expected + 1
    except Im2recError:
        pass
    try:
        r = recordio.MXIndexedRecordIO(tmp_path / "f.idx", tmp_path / "f.rec", "r")
    except Im2recError:
        return
    for key in r.keys:
        try:
            payload = r.read_idx(key)
        except (Im2recError, KeyError):
            continue
        if target == "rec":
            assert intact(payload, (key - 1) // 3)
        else:  # a damaged .idx can point at another record, never at garbage
            assert payload in FUZZ_PAYLOADS


# --------------------------------------------------------------------------- MXNet's traps, defused


def test_pickle_keeps_original_open_and_copy_reads(data_dir):
    r = recordio.MXIndexedRecordIO(data_dir / "raw.idx", data_dir / "raw.rec", "r")
    r.seek(13)
    copy = pickle.loads(pickle.dumps(r))
    assert r.is_open
    assert copy.read() == r.read() == b"\x01"
    assert copy.read_idx(16) == b"\x01\x02"
    reader = pickle.loads(pickle.dumps(r._reader))
    assert reader.read(19) == b"\x01\x02\x03"


def test_pickling_a_writer_is_refused(tmp_path):
    w = recordio.MXRecordIO(tmp_path / "w.rec", "w")
    with pytest.raises(TypeError, match=r"^cannot pickle '.*/w\.rec' open for writing: the copy would truncate it$"):
        pickle.dumps(w)


def test_no_sticky_eof(data_dir):
    r = recordio.MXIndexedRecordIO(data_dir / "raw.idx", data_dir / "raw.rec", "r")
    r.seek(64)
    assert len(r.read()) == 300000
    assert r.read() is None
    assert r.read_idx(10) == b""
    r.seek(13)
    assert r.read() == b"\x01"
    r.reset()
    assert r.read() == b""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_read_after_fork(data_dir):
    r = recordio.MXIndexedRecordIO(data_dir / "raw.idx", data_dir / "raw.rec", "r")
    assert r.read() == b""
    with warnings.catch_warnings():  # a pytest-xdist worker runs a thread: the child only reads, then _exits
        warnings.filterwarnings("ignore", "This process .* is multi-threaded, use of fork", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # child: plain read() and read_idx() both work
        ok = r.read() == b"\x01" and r.read_idx(19) == b"\x01\x02\x03"
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert r.read() == b"\x01"


def test_tell_and_context_manager(tmp_path):
    with recordio.MXRecordIO(tmp_path / "t.rec", "w") as w:
        w.write(b"abc")
        assert w.tell() == 12
    assert not w.is_open
    with recordio.MXRecordIO(tmp_path / "t.rec", "r") as r:
        assert r.tell() == 0 and r.read() == b"abc" and r.tell() == 12
    with pytest.raises(ValueError, match=r"^.*/t\.rec: the file is closed$"):
        r.read()


@pytest.mark.slow
def test_format_core_imports_no_click_cv2_tqdm_nor_storage():
    """Nor sockets, TLS or XML: the format core reads URLs through ``recordio.URLS``, which
    imports storage at the first URL."""
    unwanted = ("click", "cv2", "tqdm", "im2rec.storage", "socket", "ssl", "xml.etree.ElementTree", "fsspec")
    code = f"import sys, im2rec, im2rec.recordio; print(sorted(m for m in {unwanted!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = "import sys, im2rec.recordio as r; r.RecordReader('memory://nothing/x.rec')"
    failed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert failed.returncode == 1 and failed.stderr.strip().endswith("im2rec.errors.ObjectMissing: memory://nothing/x.rec: no such object (or its bucket does not exist)")


@pytest.mark.parametrize("word", range(6))
def test_framed_splits_header_for_every_header_word(word):
    head = bytearray(recordio.pack(recordio.IRHeader(2, [1.0, 2.0], 7, 9), b"image"))
    words = list(struct.unpack_from("<8I", head))
    words[word] = recordio.MAGIC  # word 0: a flag equal to the magic
    struct.pack_into("<8I", head, 0, *words)
    assert recordio.framed_splits_header(recordio.frame(bytes(head)))


def test_framed_splits_header_on_labels_not_on_the_image():
    labels = recordio.pack(recordio.IRHeader(2, [1.0, struct.unpack("<f", struct.pack("<I", recordio.MAGIC))[0]], 7, 0), b"")
    assert recordio.framed_splits_header(recordio.frame(labels + b"abcd"))
    plain = recordio.pack(recordio.IRHeader(2, [1.0, 2.0], 7, 0), struct.pack("<I", recordio.MAGIC))
    assert not recordio.framed_splits_header(recordio.frame(plain))
    assert not recordio.framed_splits_header(recordio.frame(b"x" * 40))
