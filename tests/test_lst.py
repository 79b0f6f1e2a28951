"""The .lst reader and writer."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from im2rec.errors import ListFormatError
from im2rec.lst import ListEntry, format_entry, iter_lst, parse_line, read_lst, write_lst


def test_reads_golden_lists(data_dir):
    entries = read_lst(data_dir / "im2rec" / "all.lst")
    assert len(entries) == 14
    assert entries[0] == ListEntry(10, (3.0,), "zebra/zebra_0.jpg")
    ml = read_lst(data_dir / "im2rec_pack_multilabel" / "ml.lst")
    assert {len(e.labels) for e in ml} == {3}


def test_writes_percent_f_like_im2rec_py(tmp_path):
    write_lst(tmp_path / "a.lst", [ListEntry(0, (1.0,), "dog/0.jpg"), ListEntry(7, (1.0, 0.5, -2.0), "a b/ü.jpg")])
    assert (tmp_path / "a.lst").read_bytes() == (
        b"0\t1.000000\tdog/0.jpg\n7\t1.000000\t0.500000\t-2.000000\ta b/\xc3\xbc.jpg\n"
    )


def test_precision_beyond_six_decimals_is_kept():
    assert format_entry(ListEntry(1, (0.1234567,), "x.jpg")) == "1\t0.1234567\tx.jpg\n"


def test_crlf_bom_blank_lines_and_no_labels(tmp_path):
    (tmp_path / "w.lst").write_bytes("\ufeff0\t1.5\ta.jpg\r\n\r\n3\t\t b .jpg\r\n".encode())
    with pytest.raises(ListFormatError, match=r"^.*/w\.lst:3: label 1 \(''\) is not a number$"):
        read_lst(tmp_path / "w.lst")
    (tmp_path / "w.lst").write_bytes("\ufeff0\t1.5\ta.jpg\r\n\r\n3\t2\t b .jpg\r\n".encode())
    assert read_lst(tmp_path / "w.lst") == [ListEntry(0, (1.5,), "a.jpg"), ListEntry(3, (2.0,), " b .jpg")]


@pytest.mark.parametrize(
    "line,message",
    [
        ("0\ta.jpg", r"bad\.lst:2: expected 'index<TAB>label\.\.\.<TAB>path', got 2 fields"),
        ("0 1.0 a.jpg", r"bad\.lst:2: expected 'index<TAB>label\.\.\.<TAB>path', got 1 field$"),
        ("x\t1\ta.jpg", r"bad\.lst:2: index 'x' is not a non-negative integer"),
        ("-1\t1\ta.jpg", r"bad\.lst:2: index '-1' is not a non-negative integer"),
        ("1.5\t1\ta.jpg", r"bad\.lst:2: index '1.5' is not a non-negative integer"),
        ("1\t1\tcat\ta.jpg", r"bad\.lst:2: label 2 \('cat'\) is not a number"),
        ("1\t1\t ", r"bad\.lst:2: the path \(last field\) is empty"),
        ("18446744073709551616\t1\ta.jpg", r"bad\.lst:2: index 18446744073709551616 does not fit in 64 bits"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, message):
    (tmp_path / "bad.lst").write_text("0\t0\tok.jpg\n" + line + "\n")
    with pytest.raises(ListFormatError, match=message):
        read_lst(tmp_path / "bad.lst")


def test_malformed_lines_through_parse_line():
    with pytest.raises(ListFormatError, match=r"^x\.lst:9: label 1 \('a'\) is not a number$"):
        parse_line("0\ta\tp.jpg", "x.lst:9")
    assert parse_line("7\t1\t2\tp q.jpg", "x.lst:1") == ListEntry(7, (1.0, 2.0), "p q.jpg")


def test_iter_lst_range_counts_entries_and_parses_only_those(tmp_path):
    (tmp_path / "r.lst").write_text("0\t0\ta.jpg\n\nnot a line\n3\t1\tb.jpg\n\n4\t2\tc.jpg\n5\tx\td.jpg\n")
    # Positions count non-blank lines: 0 a.jpg, 1 "not a line", 2 b.jpg, 3 c.jpg, 4 d.jpg.
    got = list(iter_lst(tmp_path / "r.lst", 2, 4))
    assert got == [(4, ListEntry(3, (1.0,), "b.jpg")), (6, ListEntry(4, (2.0,), "c.jpg"))]
    assert list(iter_lst(tmp_path / "r.lst", 0, 1)) == [(1, ListEntry(0, (0.0,), "a.jpg"))]
    assert list(iter_lst(tmp_path / "r.lst", 5)) == []
    with pytest.raises(ListFormatError, match=r"^.*/r\.lst:7: label 1 \('x'\) is not a number$"):
        list(iter_lst(tmp_path / "r.lst", 4))
    with pytest.raises(ListFormatError, match=r"^.*/r\.lst:3: expected 'index<TAB>label\.\.\.<TAB>path', got 1 field$"):
        list(iter_lst(tmp_path / "r.lst"))


def test_not_utf8(tmp_path):
    (tmp_path / "bad.lst").write_bytes(b"0\t0\tok.jpg\n1\t0\t\xff.jpg\n")
    with pytest.raises(ListFormatError, match=r"^.*/bad\.lst:2: not UTF-8 text \(byte 5 of the line\)$"):
        read_lst(tmp_path / "bad.lst")


def test_writer_refuses_what_cannot_be_read_back(tmp_path):
    with pytest.raises(ValueError, match=r"^'a\\tb\.jpg': a TAB in the path cannot be stored in a \.lst$"):
        write_lst(tmp_path / "x.lst", [ListEntry(0, (0.0,), "a\tb.jpg")])
    with pytest.raises(ValueError, match=r"^'a\.jpg': a \.lst line needs at least one label$"):
        write_lst(tmp_path / "x.lst", [ListEntry(0, (), "a.jpg")])


PATHS = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n\r"),
    min_size=1,
).filter(lambda p: p.strip() and not p.startswith("\ufeff"))
ENTRIES = st.builds(
    ListEntry,
    st.integers(0, 2**64 - 1),
    st.lists(st.floats(allow_nan=False), min_size=1, max_size=6).map(tuple),
    PATHS,
)


@pytest.mark.slow
@given(st.lists(ENTRIES, max_size=20))
def test_write_then_read_roundtrips(tmp_path_factory, entries):
    path = tmp_path_factory.mktemp("lst") / "r.lst"
    assert write_lst(path, entries) == len(entries)
    assert read_lst(path) == entries
