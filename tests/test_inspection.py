"""inspect, verify, extract and index, on good and deliberately damaged files."""

import json
import os
import shutil
import struct

import cv2
import numpy as np
import pytest
from conftest import run
from test_dataset import make_insightface

from im2rec import recordio


@pytest.fixture
def golden_copy(tmp_path, data_dir):
    """A writable copy of im2rec.py's pass-through output (14 JPEG/PNG records)."""
    for ext in ("rec", "idx", "lst"):
        shutil.copy(data_dir / "im2rec_pack_pass" / f"all.{ext}", tmp_path / f"all.{ext}")
    return tmp_path / "all.rec"


def offsets(rec):
    return [int(line.split("\t")[1]) for line in open(str(rec)[:-4] + ".idx").read().splitlines()]


def keys(rec):
    return [int(line.split("\t")[0]) for line in open(str(rec)[:-4] + ".idx").read().splitlines()]


def damage(rec, pos, value=None):
    blob = bytearray(rec.read_bytes())
    blob[pos] = value if value is not None else blob[pos] ^ 0xFF
    rec.write_bytes(bytes(blob))


# --------------------------------------------------------------------------- inspect


def test_inspect(golden_copy):
    result = run("inspect", golden_copy)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{golden_copy}: 14 records, 0.2 MB, index ")
    assert lines[1] == "  labels: 4 classes over 14 records (2 to 4 per class)"
    assert "sample of 14: 11 JPEG, 3 PNG" in result.stdout
    report = json.loads(run("inspect", golden_copy, "--json").stdout)
    assert report["records"] == 14 and report["labels"]["classes"] == 4
    assert report["labels"]["per_class"] == {"0": 2, "1": 4, "2": 4, "3": 4}
    assert report["sample"]["formats"] == {"JPEG": 11, "PNG": 3}
    assert report["payload_bytes"]["max"] > report["payload_bytes"]["min"] > 24
    assert report["damaged"] == []


def test_inspect_insightface(tmp_path):
    make_insightface(tmp_path / "train.rec")
    report = json.loads(run("inspect", tmp_path / "train.rec", "--json").stdout)
    assert report["insightface"] == {"images": 12, "identities": 3, "header": [13, 16]}
    assert report["image_records"] == 12 and report["labels"]["classes"] == 3
    assert "insightface: 12 images, 3 identities" in run("inspect", tmp_path / "train.rec").stdout


@pytest.mark.parametrize("with_idx", [True, False])
def test_inspect_skips_a_damaged_record(golden_copy, with_idx):
    fifth = offsets(golden_copy)[5]
    damage(golden_copy, fifth)  # the magic of the 6th record
    if not with_idx:
        golden_copy.with_suffix(".idx").unlink()
    result = run("inspect", golden_copy, "--json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["image_records"] == 13
    assert len(report["damaged"]) == 1 and report["damaged"][0].startswith(f"byte {fifth}")


# --------------------------------------------------------------------------- verify


def test_verify_clean(golden_copy, data_dir):
    result = run("verify", golden_copy, "--decode")
    assert result.exit_code == 0
    assert result.stdout == f"{golden_copy}: 14 records, 14 images decoded, 0 problems\n"
    assert run("verify", data_dir / "raw.rec").exit_code == 0


def test_verify_bad_magic_in_the_middle(golden_copy):
    offs, k = offsets(golden_copy), keys(golden_copy)
    damage(golden_copy, offs[5])
    result = run("verify", golden_copy)
    assert result.exit_code == 1
    assert f"{golden_copy}: byte {offs[5]}, key {k[5]}: no record at byte {offs[5]}: expected the magic 0xced7230a, found 0xced723f5; the next record starts at byte {offs[6]}" in result.stderr
    assert f"byte {offs[5]}, key {k[5]}: {golden_copy.with_suffix('.idx')}:6: the offset is not a record head" in result.stderr
    assert result.stdout.endswith("13 records, 2 problems\n")


def test_verify_corrupt_length_hides_records(golden_copy):
    offs = offsets(golden_copy)
    length = struct.unpack_from("<I", golden_copy.read_bytes(), offs[2] + 4)[0]
    blob = bytearray(golden_copy.read_bytes())
    struct.pack_into("<I", blob, offs[2] + 4, length + (offs[4] - offs[3]))  # swallow the 4th record
    golden_copy.write_bytes(bytes(blob))
    result = run("verify", golden_copy)
    assert result.exit_code == 1
    assert f"byte {offs[3]}, key {keys(golden_copy)[3]}: a record head inside the record at byte {offs[2]}: that record's length is probably corrupt" in result.stderr


def test_verify_index_problems(golden_copy):
    idx = golden_copy.with_suffix(".idx")
    lines = idx.read_text().splitlines()
    k0, o0 = lines[0].split("\t")
    lines[3] = f"{k0}\t{lines[3].split(chr(9))[1]}"  # a duplicate key
    lines[4] = f"{lines[4].split(chr(9))[0]}\t{o0}"  # a duplicate offset, and record 5 missing
    lines[6] = f"{lines[6].split(chr(9))[0]}\t{int(lines[6].split(chr(9))[1]) + 4}"  # not a head
    idx.write_text("\n".join(lines) + "\n")
    result = run("verify", golden_copy)
    assert result.exit_code == 1
    err = result.stderr
    assert f"{idx}:4: key {k0} is also on line 1" in err
    assert f"{idx}:5: offset {o0} is also on line 1 (a duplicate offset ends a dmlc epoch early)" in err
    assert f"{idx}:7: the offset is not a record head" in err
    assert err.count(f"the record is missing from {idx}") == 2


def test_verify_file_size_and_truncation(golden_copy):
    golden_copy.write_bytes(golden_copy.read_bytes()[:-2])
    result = run("verify", golden_copy)
    assert result.exit_code == 1
    assert "not a multiple of 4: dmlc's InputSplit refuses to open it" in result.stderr
    size = golden_copy.stat().st_size
    assert f"the file ends at byte {size:,}: it was cut (a partial download?): 1 record of its .idx (key " in result.stderr
    assert result.stderr.count("\n") == 2  # the size, and the cut: no line per record


def test_verify_decode_finds_a_broken_image(tmp_path):
    img = cv2.imencode(".jpg", np.full((20, 20, 3), 90, np.uint8))[1].tobytes()
    with recordio.MXIndexedRecordIO(tmp_path / "d.idx", tmp_path / "d.rec", "w") as w:
        w.write_idx(0, recordio.pack((0, 1.0, 0, 0), img))
        w.write_idx(1, recordio.pack((0, 1.0, 1, 0), img[: len(img) // 2]))
        w.write_idx(2, recordio.pack((0, 1.0, 2, 0), b"<html>"))
    assert run("verify", tmp_path / "d.rec").exit_code == 0
    result = run("verify", tmp_path / "d.rec", "--decode")
    assert result.exit_code == 1
    assert "key 1: image not decodable: OpenCV could not decode the JPEG data (corrupt or truncated)" in result.stderr
    assert "key 2: image not decodable: it starts with '<html>' (text)" in result.stderr


def test_verify_insightface_skips_non_image_records(tmp_path):
    make_insightface(tmp_path / "train.rec")
    result = run("verify", tmp_path / "train.rec", "--decode")
    assert result.exit_code == 0, result.stderr
    assert "12 images decoded" in result.stdout


# --------------------------------------------------------------------------- extract


def test_extract_then_repack_gives_identical_bytes(golden_copy, tmp_path):
    out = tmp_path / "out"
    result = run("extract", golden_copy, out)
    assert result.exit_code == 0, result.output
    assert f"rebuild with: im2rec pack {out / 'all.lst'} {out} NEW.rec --pass-through" in result.stdout
    assert sorted(p.name for p in (out / "1").iterdir()) == ["2.jpg", "3.jpg", "4.jpg", "5.png"]
    assert run("pack", out / "all.lst", out, tmp_path / "new.rec", "--pass-through").exit_code == 0
    assert (tmp_path / "new.rec").read_bytes() == golden_copy.read_bytes()
    assert (tmp_path / "new.idx").read_bytes() == golden_copy.with_suffix(".idx").read_bytes()


def test_extract_multi_label_then_repack(data_dir, tmp_path):
    golden = data_dir / "im2rec_pack_multilabel"
    result = run("extract", golden / "ml.rec", tmp_path / "out", "--flat")
    assert result.exit_code == 0
    assert "--pass-through --label-width 3" in result.stdout
    assert run("pack", tmp_path / "out" / "ml.lst", tmp_path / "out", tmp_path / "new.rec", "--pass-through", "--label-width", "3").exit_code == 0
    assert (tmp_path / "new.rec").read_bytes() == (golden / "ml.rec").read_bytes()


def test_extract_skips_a_damaged_record(golden_copy, tmp_path):
    offs = offsets(golden_copy)
    damage(golden_copy, offs[5])
    result = run("extract", golden_copy, tmp_path / "out")
    assert result.exit_code == 1
    assert f"byte {offs[5]}, key {keys(golden_copy)[5]}: no record at byte {offs[5]}" in result.stderr
    assert "extracted 13 images" in result.stdout


def test_extract_refuses_to_overwrite(golden_copy, tmp_path):
    assert run("extract", golden_copy, tmp_path / "out", "-q").exit_code == 0
    result = run("extract", golden_copy, tmp_path / "out")
    assert (result.exit_code, result.stderr) == (1, f"Error: {tmp_path / 'out' / 'all.lst'} exists: pass --overwrite to replace it\n")
    assert run("extract", golden_copy, tmp_path / "out", "--overwrite", "-q").exit_code == 0


# --------------------------------------------------------------------------- index


def test_index_rebuild_gives_the_same_idx(golden_copy):
    idx = golden_copy.with_suffix(".idx")
    original = idx.read_bytes()
    idx.unlink()
    result = run("index", golden_copy)
    assert result.exit_code == 0 and result.stdout == f"{idx}: 14 entries\n"
    assert idx.read_bytes() == original


def test_index_counter_keys_and_overwrite(golden_copy, tmp_path):
    result = run("index", golden_copy)
    assert (result.exit_code, result.stderr) == (1, f"Error: {golden_copy.with_suffix('.idx')} exists: pass --overwrite to replace it\n")
    assert run("index", golden_copy, "--keys", "counter", "--idx", tmp_path / "c.idx").exit_code == 0
    keys = [line.split("\t")[0] for line in (tmp_path / "c.idx").read_text().splitlines()]
    assert keys == [str(i) for i in range(14)]


def test_index_needs_headers_for_id_keys(data_dir, tmp_path):
    shutil.copy(data_dir / "raw.rec", tmp_path / "raw.rec")
    result = run("index", tmp_path / "raw.rec")
    assert result.exit_code == 1
    assert result.stderr == f"Error: {tmp_path / 'raw.rec'}: the record at byte 0 is 0 bytes, too short for an IRHeader to take a key from: use --keys counter\n"
    assert run("index", tmp_path / "raw.rec", "--keys", "counter").exit_code == 0


def test_index_skips_a_damaged_record(golden_copy):
    offs = offsets(golden_copy)
    damage(golden_copy, offs[5])
    result = run("index", golden_copy, "--overwrite")
    assert result.exit_code == 1
    assert f"byte {offs[5]}: no record at byte {offs[5]}" in result.stderr
    assert result.stdout.endswith("13 entries\n")


def test_index_and_extract_into_new_folders(golden_copy, tmp_path):
    assert run("index", golden_copy, "--idx", tmp_path / "new" / "a.idx", "-q").exit_code == 0
    assert (tmp_path / "new" / "a.idx").read_bytes() == golden_copy.with_suffix(".idx").read_bytes()
    assert run("extract", golden_copy, tmp_path / "x" / "y", "-q").exit_code == 0
    assert (tmp_path / "x" / "y" / "all.lst").exists()


# --------------------------------------------------------------------------- records DALI cannot read


def test_records_split_inside_their_header_are_warned_about(tmp_path, data_dir):
    """An index whose low 32 bits, or a label whose float32 bits, equal the magic: MXNet's writer splits
    the record inside its IRHeader; DALI's parser reads the header right after the first part and fails."""
    magic_label = struct.unpack("<f", struct.pack("<I", recordio.MAGIC))[0]
    lst = tmp_path / "m.lst"
    lst.write_text(f"0\t1.000000\tcats/cats_0.jpg\n{recordio.MAGIC}\t2.000000\tcats/cats_1.jpg\n5\t{magic_label:f}\tdogs/dogs_0.jpg\n")
    result = run("pack", lst, data_dir / "tree", tmp_path / "m.rec", "--pass-through", "-q")
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"warning: {tmp_path / 'm.rec'}: 2 record(s) split inside their header, because an index or label equals the "
        f"RecordIO magic 0xCED7230A (keys {recordio.MAGIC}, 5): MXNet reads them, DALI's fn.readers.mxnet cannot; "
        "change those indices or labels if DALI will read this file\n"
    )
    with recordio.RecordReader(tmp_path / "m.rec", tmp_path / "m.idx") as r:  # they read back exactly
        assert [recordio.unpack(r.read(k))[0] for k in r.keys()] == [
            recordio.IRHeader(0, 1.0, 0, 0), recordio.IRHeader(0, 2.0, recordio.MAGIC, 0), recordio.IRHeader(0, magic_label, 5, 0)
        ]
        offsets = [r.index.offset(k) for k in r.keys()]
    result = run("verify", tmp_path / "m.rec")
    assert result.exit_code == 0
    assert result.stdout == f"{tmp_path / 'm.rec'}: 3 records (2 multi-part), 0 problems, 2 warnings\n"
    split = "the record is split inside its header (a header word or label equals the RecordIO magic 0xCED7230A): MXNet reads it, DALI's fn.readers.mxnet cannot"
    assert result.stderr == (
        f"warning: {tmp_path / 'm.rec'}: byte {offsets[1]}, key {recordio.MAGIC}: {split}\n"
        f"warning: {tmp_path / 'm.rec'}: byte {offsets[2]}, key 5: {split}\n"
    )
    result = run("inspect", tmp_path / "m.rec")
    assert result.exit_code == 0
    assert "  multi-part records: 2 (an aligned magic word in the payload, escaped)\n" in result.stdout
    assert result.stderr == f"warning: {tmp_path / 'm.rec'}: byte {offsets[1]}, key {recordio.MAGIC}: {split}\nwarning: {tmp_path / 'm.rec'}: byte {offsets[2]}, key 5: {split}\n"
    report = json.loads(run("inspect", tmp_path / "m.rec", "--json").stdout)
    assert report["multi_part_records"] == 2 and len(report["header_split"]) == 2


def test_a_magic_word_in_the_image_is_multi_part_but_not_header_split(tmp_path):
    payload = b"\x00" * 8 + struct.pack("<I", recordio.MAGIC) + b"tail"
    rec = tmp_path / "p.rec"
    with recordio.MXIndexedRecordIO(str(tmp_path / "p.idx"), str(rec), "w") as w:
        w.write_idx(0, recordio.pack(recordio.IRHeader(0, 1.0, 0, 0), payload))
    result = run("verify", rec)
    assert result.exit_code == 0 and result.stdout == f"{rec}: 1 records (1 multi-part), 0 problems\n" and result.stderr == ""


# --------------------------------------------------------------------------- contact sheet


@pytest.fixture
def listed_and_packed(tmp_path, data_dir):
    """The golden tree listed (train/val) and its train list packed at --resize 48, beside ds.classes.tsv."""
    assert run("list", data_dir / "tree", tmp_path / "ds", "--train-ratio", "0.5", "-q").exit_code == 0
    assert run("pack", tmp_path / "ds_train.lst", data_dir / "tree", "--resize", "48", "-q").exit_code == 0
    return tmp_path / "ds_train.rec"


def tile_at(sheet, i, columns, tile):
    from im2rec.sheet import CAPTION, PAD

    x, y = PAD + (i % columns) * (tile + PAD), PAD + (i // columns) * (tile + CAPTION + PAD)
    return sheet[y : y + tile, x : x + tile], sheet[y + tile : y + tile + CAPTION, x : x + tile]


def test_contact_sheet_size_tiles_and_class_captions(listed_and_packed, tmp_path):
    rec = listed_and_packed
    result = run("inspect", rec, "--grid", tmp_path / "sheets" / "s.png", "--samples", "5", "--tile-size", "64")
    assert result.exit_code == 0, result.output
    assert f"  contact sheet: {tmp_path / 'sheets' / 's.png'} (5 records, 3x2, captions from {tmp_path / 'ds.classes.tsv'})\n" in result.stdout
    sheet = cv2.imread(str(tmp_path / "sheets" / "s.png"))
    assert sheet.shape == (4 + 2 * (64 + 18 + 4), 4 + 3 * (64 + 4), 3)
    for i in range(5):
        image, caption = tile_at(sheet, i, 3, 64)
        assert image.std() > 10 and (caption > 150).any()  # a picture, and a caption
    assert not (tile_at(sheet, 5, 3, 64)[0] != 40).any()  # the sixth cell stays empty
    report = json.loads(run("inspect", rec, "--grid", tmp_path / "j.jpg", "--samples", "100", "--json").stdout)
    assert report["grid"] == {"path": str(tmp_path / "j.jpg"), "tiles": 7, "columns": 3, "rows": 3, "classes": str(tmp_path / "ds.classes.tsv"), "marked": []}
    again = tmp_path / "again.jpg"
    run("inspect", rec, "--grid", again, "--samples", "100")
    assert again.read_bytes() == (tmp_path / "j.jpg").read_bytes()  # the same seed draws the same sheet


def test_contact_sheet_captions_use_folder_names(listed_and_packed, tmp_path):
    from im2rec.lst import find_classes, read_classes
    from im2rec.sheet import _caption

    rec = listed_and_packed
    assert find_classes(str(rec)) == str(tmp_path / "ds.classes.tsv")
    assert find_classes(str(tmp_path / "ds_0_train-00001-of-00004.rec")) == str(tmp_path / "ds.classes.tsv")
    assert find_classes(str(tmp_path / "other.rec")) is None
    names = read_classes(str(tmp_path / "ds.classes.tsv"))
    assert set(names.values()) == {".", "cats", "dogs", "zebra"}
    assert _caption(12, [names and next(k for k, v in names.items() if v == "cats")], names) == "12: cats"
    assert _caption(3, [7.0, 1.0, 2.0], {}) == "3: 7 +2"


def test_contact_sheet_marks_damaged_and_non_image_records(tmp_path, data_dir):
    rec = tmp_path / "m.rec"
    with recordio.MXIndexedRecordIO(str(tmp_path / "m.idx"), str(rec), "w") as w:
        good = (data_dir / "tree" / "cats" / "cats_0.jpg").read_bytes()
        w.write_idx(0, recordio.pack(recordio.IRHeader(0, 1.0, 0, 0), good))
        w.write_idx(1, recordio.pack(recordio.IRHeader(0, 2.0, 1, 0), b"not an image at all"))
        zeroed = bytearray(good)
        zeroed[len(good) // 2 : len(good) // 2 + 2000] = bytes(2000)  # decodes, with libjpeg's warning
        w.write_idx(2, recordio.pack(recordio.IRHeader(0, 3.0, 2, 0), bytes(zeroed)))
        w.write_idx(3, recordio.pack(recordio.IRHeader(0, 4.0, 3, 0), good))
    damage(rec, offsets(rec)[3])  # record 3's magic
    result = run("inspect", rec, "--grid", tmp_path / "s.png", "--tile-size", "32")
    assert result.exit_code == 0, result.output
    assert "(4 records, 2x2, 3 marked)" in result.stdout
    marks = [line.split(": ", 1)[1] for line in result.stderr.splitlines() if ": image " in line or ": damaged record: " in line]
    assert marks[:2] == [
        f"byte {offsets(rec)[1]}, key 1: image not decodable: it starts with 'not an image' (text)",
        f"byte {offsets(rec)[2]}, key 2: image damaged (decoded with the decoder's warning): 2099 extraneous bytes before marker 0xd9",
    ]
    assert marks[2] == f"byte {offsets(rec)[3]}, key 3: damaged record: no record at byte {offsets(rec)[3]}: expected the magic 0xced7230a, found 0xced723f5"
    sheet = cv2.imread(str(tmp_path / "s.png"))
    red = [(tile_at(sheet, i, 2, 32)[0][..., 2] > 150).mean() > 0.5 for i in range(4)]
    assert red == [False, True, True, True]


def test_contact_sheet_bad_extension(golden_copy, tmp_path):
    result = run("inspect", golden_copy, "--grid", tmp_path / "s.xyz")
    assert result.exit_code == 1 and result.stderr == f"Error: {tmp_path / 's.xyz'}: OpenCV cannot write a .xyz image; use .jpg or .png\n"
    assert not (tmp_path / "s.xyz").exists()


# --------------------------------------------------------------------------- a .rec cut short


@pytest.fixture
def cut_rec(real_size_folders, tmp_path):
    """The real-size ImageNet-like images packed with the default options, the .rec cut inside
    its 12th record (of 20) as a partial download leaves it: (rec, records still whole, their keys)."""
    folder = real_size_folders["imagenet"]
    assert run("list", folder, tmp_path / "t").exit_code == 0
    assert run("pack", tmp_path / "t.lst", folder, "-q").exit_code == 0
    rec = tmp_path / "t.rec"
    index = recordio.read_index(tmp_path / "t.idx")
    order = np.argsort(index.offsets)
    twelfth = int(index.offsets[order[11]])
    rec.write_bytes(rec.read_bytes()[: twelfth + 1000])  # a multiple of 4: only the cut to report
    return rec, 11, sorted(index.keys()[int(i)] for i in order[:11])


def test_a_cut_rec_gives_up_only_what_is_lost(cut_rec, tmp_path):
    rec, whole, keys = cut_rec
    assert len(keys) == whole
    lost = f"{rec}: the file ends at byte {rec.stat().st_size:,}: it was cut (a partial download?): 9 records of its .idx (in file order the first is key "
    mend = f"`im2rec index {rec} --overwrite` rebuilds the .idx from what is there\n"

    result = run("inspect", rec)
    assert result.exit_code == 0 and result.stdout.startswith(f"{rec}: 11 records,")
    assert result.stderr.startswith(lost) and result.stderr.endswith(mend) and result.stderr.count("\n") == 1

    result = run("verify", rec)
    assert result.exit_code == 1 and result.stdout == f"{rec}: 11 records, 1 problem\n"
    assert result.stderr.startswith(lost) and result.stderr.endswith(mend) and result.stderr.count("\n") == 1

    result = run("extract", rec, tmp_path / "x")
    assert result.exit_code == 1 and "extracted 11 images" in result.stdout and result.stderr.startswith(lost)

    result = run("export", rec, tmp_path / "w", "--format", "webdataset")
    assert result.exit_code == 1 and "exported 11 records" in result.stdout and result.stderr.startswith(lost)

    from im2rec import ImageRecordIter, RecordDataset
    from im2rec.errors import TruncatedRecordError

    with pytest.raises(TruncatedRecordError) as e:
        RecordDataset(rec)
    assert str(e.value).startswith(lost) and str(e.value).endswith("; or pass on_missing='skip' to read the records that are there")
    ds = RecordDataset(rec, on_missing="skip")
    assert len(ds) == 11 and sorted(ds.header(i).id for i in range(11)) == keys and ds.cuts[0].keys[0] not in keys
    assert ds[10][0].shape[2] == 3  # the records that are there decode
    with ImageRecordIter(path_imgrec=str(rec), data_shape=(3, 224, 224), batch_size=4, round_batch=False) as it:
        assert sorted(int(i) for b in it for i in b.index[: 4 - b.pad]) == keys

    result = run("index", rec, "--overwrite")  # the mend: then the records that are there read plainly
    assert result.exit_code == 0 and result.stderr.startswith(f"warning: {rec}: byte ") and result.stderr.count("\n") == 1
    assert "it was cut short (a partial download?); the records before it are whole, and `truncate -s " in result.stderr
    assert run("inspect", rec).stderr == "" and len(RecordDataset(rec)) == 11
    result = run("verify", rec)  # the partial record is still at the end (dmlc's sequential reader would stop on it)
    assert result.exit_code == 1 and "`truncate -s " in result.stderr
    cut_at = int(result.stderr.split("`truncate -s ", 1)[1].split(" ", 1)[0])
    os.truncate(rec, cut_at)  # as the message says
    assert run("verify", rec).exit_code == 0


def test_a_file_of_no_records_is_refused_and_its_idx_name_left_alone(golden_copy, tmp_path):
    """The new user's trap: `verify all.lst` (the .lst shares its .idx name with the .rec) advised
    `index all.lst --overwrite`, which replaced the good all.idx with an empty one."""
    lst, idx = golden_copy.with_suffix(".lst"), golden_copy.with_suffix(".idx")
    good = idx.read_bytes()
    said = f"Error: {lst}: not a RecordIO file: no record starts in its {lst.stat().st_size:,} bytes (each starts with the magic 0xced7230a)\n"
    for args in (["verify", lst], ["verify", lst, "--decode"], ["inspect", lst], ["index", lst, "--overwrite"], ["extract", lst, tmp_path / "x"], ["export", lst, tmp_path / "w", "--format", "webdataset"]):
        result = run(*args)
        assert (result.exit_code, result.stderr) == (1, said), args
    assert idx.read_bytes() == good
    assert not (tmp_path / "x").exists() and not (tmp_path / "w").exists()
    # a damaged .rec is still a RecordIO file: its first record's magic gone, the rest is read and reported
    data = bytearray(golden_copy.read_bytes())
    data[0:4] = b"\0\0\0\0"
    golden_copy.write_bytes(bytes(data))
    result = run("verify", golden_copy)
    assert result.exit_code == 1 and f"{golden_copy}: byte 0, key 10: no record at byte 0: expected the magic 0xced7230a, found 0x00000000" in result.stderr
    # and an empty file holds no records
    (tmp_path / "empty.rec").write_bytes(b"")
    assert run("index", tmp_path / "empty.rec").exit_code == 0
