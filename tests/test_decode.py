"""The one checked decode (``image.imdecode_checked``): OpenCV's pixels byte for byte, damage
said in-band by the decoder, nothing on stderr, no lock: threads decode in parallel."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import pytest

import im2rec
from im2rec import recordio
from im2rec.dataset import RecordDataset
from im2rec.image import IGNORE_ORIENTATION, imdecode_checked, png_damage

DATA = Path(__file__).parent / "data"
#: every imdecode flag a reader uses: colour, gray, unchanged, the reduced decodes, without EXIF turns
FLAGS = (1, 0, -1, 17, 33, 65, 16, 64, 1 | IGNORE_ORIENTATION, 0 | IGNORE_ORIENTATION)


def _jpegs(real_size_folders) -> list[tuple[str, bytes]]:
    """Real-size JPEGs, the odd ones (CMYK, EXIF-rotated, progressive), those of the golden
    files, and every chroma subsampling, baseline and progressive, of one photo."""
    files = sorted(real_size_folders["imagenet"].rglob("*.jpg"))[:40] + sorted(real_size_folders["large"].rglob("*.jpg"))[:4]
    out = [(p.name, p.read_bytes()) for p in files]
    out += [(p.name, p.read_bytes()) for p in sorted((DATA / "odd").glob("*.jpg"))]
    for rec in sorted(r for r in DATA.rglob("*.rec") if r.parent.name != "damaged"):
        idx = rec.with_suffix(".idx")
        if not idx.exists():
            continue
        reader = recordio.RecordReader(rec, idx)
        for key in list(reader.keys())[:6]:
            try:
                img = recordio.unpack(reader.read(key))[1]
            except Exception:  # an insightface header, a raw record
                continue
            if img[:2] == b"\xff\xd8":
                out.append((f"{rec.name}:{key}", bytes(img)))
    photo = cv2.imdecode(np.frombuffer(out[0][1], np.uint8), 1)
    for progressive in (0, 1):
        for sampling in (0x411111, 0x221111, 0x211111, 0x121111, 0x111111):
            _, enc = cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_PROGRESSIVE, progressive, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, sampling])
            out.append((f"sampling {sampling:x} progressive {progressive}", enc.tobytes()))
    out.append(("gray", cv2.imencode(".jpg", cv2.cvtColor(photo, cv2.COLOR_BGR2GRAY))[1].tobytes()))
    out.append(("odd size", cv2.imencode(".jpg", cv2.resize(photo, (333, 257)))[1].tobytes()))
    return out


def test_the_pixels_are_opencvs_byte_for_byte(real_size_folders):
    """Every flag, every kind of JPEG (and the PNGs, the other formats, which OpenCV decodes)."""
    jpegs = _jpegs(real_size_folders)
    assert len(jpegs) > 60
    others = [(p.name, p.read_bytes()) for p in sorted((DATA / "odd").glob("*.png"))]
    for name, data in jpegs + others:
        for flag in FLAGS if data[:2] == b"\xff\xd8" else (1, 0, -1):
            want = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
            got, damage = imdecode_checked(data, flag)
            assert damage is None, (name, flag, damage)
            assert got is not None and got.shape == want.shape and got.dtype == want.dtype, (name, flag)
            assert np.array_equal(got, want), (name, flag)


def _damaged(jpeg: bytes) -> bytes:
    """2,000 zero bytes in the middle of the scan: libjpeg decodes it with a warning, grey below."""
    data = bytearray(jpeg)
    data[len(data) // 2 : len(data) // 2 + 2000] = bytes(2000)
    return bytes(data)


def test_damage_comes_back_as_the_decoders_words_with_the_pixels_libjpeg_makes(real_size_folders, capfd):
    jpeg = sorted(real_size_folders["imagenet"].rglob("*.jpg"))[0].read_bytes()
    img, damage = imdecode_checked(_damaged(jpeg), 1)
    assert damage == "Corrupt JPEG data: premature end of data segment"
    good = cv2.imdecode(np.frombuffer(jpeg, np.uint8), 1)
    assert img.shape == good.shape
    rows = np.flatnonzero(np.any(img != good, axis=(1, 2)))
    assert 0 < rows[0] < img.shape[0] // 2 + img.shape[0] // 4  # the top as it was, made up below the damage
    flipped = bytearray(jpeg)
    flipped[len(flipped) - 3] ^= 0xFF
    assert imdecode_checked(bytes(flipped), 0).damage is not None
    assert "Corrupt JPEG" not in capfd.readouterr().err  # libjpeg's own line never reaches stderr


def test_a_png_is_checked_chunk_by_chunk_before_libpng_sees_it(capfd):
    png = cv2.imencode(".png", np.arange(64 * 64 * 3, dtype=np.uint8).reshape(64, 64, 3))[1].tobytes()
    assert png_damage(png) is None and imdecode_checked(png).damage is None
    idat = png.index(b"IDAT") - 4
    bad = bytearray(png)
    bad[idat + 20] ^= 0x55
    assert imdecode_checked(bytes(bad)) == (None, f"PNG: the IDAT chunk at byte {idat} fails its CRC (damaged data)")
    assert png_damage(png[:-20]) == f"PNG: truncated: the IDAT chunk at byte {idat} needs {int.from_bytes(png[idat : idat + 4], 'big'):,} bytes, {len(png) - 20 - idat - 12:,} are there"
    assert png_damage(png[: idat + int.from_bytes(png[idat : idat + 4], "big") + 12]) == f"PNG: truncated: no IEND chunk ({idat + int.from_bytes(png[idat : idat + 4], 'big') + 12:,} bytes)"
    assert "libpng" not in capfd.readouterr().err


def _parallelism(work, items, threads: int) -> float:
    """Process CPU seconds per wall second while ``threads`` threads run ``work`` over ``items``."""
    cpu, wall = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, items))
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


def test_a_thread_decodes_while_another_is_inside_a_decode(real_size_folders):
    """No lock between decoders: while one thread decodes a large photo (tens of ms), another
    decodes small ones, even on a loaded machine (with a lock it would wait for the large one)."""
    large = max(real_size_folders["large"].rglob("*.jpg"), key=lambda p: p.stat().st_size).read_bytes()
    small = [p.read_bytes() for p in sorted(real_size_folders["imagenet"].rglob("*.jpg"))[:4]]
    for _ in range(5):
        inside = threading.Event()
        spans: list[tuple[float, float]] = []
        finished: list[float] = []

        def big(inside: threading.Event, spans: list) -> None:
            inside.set()
            start = time.perf_counter()
            imdecode_checked(large, 1)
            spans.append((start, time.perf_counter()))

        thread = threading.Thread(target=big, args=(inside, spans))
        thread.start()
        inside.wait()
        while thread.is_alive():
            imdecode_checked(small[len(finished) % 4], 1)
            finished.append(time.perf_counter())
        thread.join()
        start, end = spans[0]
        if sum(start < t < end for t in finished) >= 3:
            return
    raise AssertionError(f"no small decode finished while the large one ran ({end - start:.3f} s): decoders take turns")


@pytest.mark.xdist_group("timing")
def test_two_threads_decode_in_parallel(real_size_folders):
    """As a ratio measured side by side, in rounds where hashing (which holds no lock) keeps 2
    cores busy before and after: 2 threads decode at 1.7x one thread or more (passes); 4 such
    rounds all below 1.3x mean the decoders take turns (fails: a lock gives about 1.0x).
    Otherwise the machine is too busy to tell, and it skips (bench_dataset has the figure)."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core")
    blobs = [p.read_bytes() for p in sorted(real_size_folders["imagenet"].rglob("*.jpg"))[:200]]
    damaged = [_damaged(b) for b in blobs[:20]]
    chunk = np.random.default_rng(0).bytes(8 << 20)

    def rate(threads: int) -> float:
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda b: imdecode_checked(b, 1), (blobs + damaged) * 2))
        return 1 / (time.perf_counter() - start)

    quiet = []  # rounds in which the machine had 2 free cores (hashing, which holds no lock, used them)
    controls = []

    def control() -> float:
        return _parallelism(lambda _: hashlib.sha256(chunk).digest(), range(48), 2)

    for _ in range(12):
        before = control()
        controls.append(before)
        if before >= 1.6:
            ratio = rate(2) / rate(1)
            if control() >= 1.6:  # quiet all along: the round counts
                quiet.append(ratio)
                if ratio >= 1.7:
                    return
        if len(quiet) >= 4:
            break
        time.sleep(0.2)
    # decoders that took turns (a lock) give about 1.0x; a shared machine's noise, 1.4-1.7x
    if len(quiet) >= 4 and max(quiet) < 1.3:
        raise AssertionError(f"2 threads decode at {max(quiet):.2f}x one thread at best, in {len(quiet)} quiet rounds: decoders take turns")
    pytest.skip(f"inconclusive on this machine: 2 threads at {max(quiet, default=0):.2f}x one thread at best in {len(quiet)} quiet rounds (hashing kept at most {max(controls):.2f} cores busy)")


def test_a_thread_writing_to_stderr_loses_no_line_while_others_decode_damaged_images(real_size_folders, tmp_path, capfd, caplog):
    jpeg = sorted(real_size_folders["imagenet"].rglob("*.jpg"))[0].read_bytes()
    with recordio.RecordWriter(tmp_path / "d.rec", tmp_path / "d.idx") as w:
        for key in range(40):
            w.write_idx(key, recordio.pack(recordio.IRHeader(0, 1.0, key, 0), _damaged(jpeg) if key % 2 else jpeg))
    ds = RecordDataset(tmp_path / "d.rec")
    decoding, done = threading.Event(), threading.Event()

    def decode(i: int) -> object:
        decoding.set()
        return ds[i]

    def write() -> None:
        decoding.wait(60)  # overlap the decoding, however fast this thread's 300 writes are
        for n in range(300):
            if n % 2:
                os.write(2, f"line {n}\n".encode())
            else:
                print(f"line {n}", file=sys.stderr, flush=True)
        done.set()

    writer = threading.Thread(target=write)
    with caplog.at_level(logging.WARNING, logger="im2rec.dataset"), ThreadPoolExecutor(2) as pool:
        writer.start()
        rounds = 0
        while not rounds or not done.is_set():  # at least one whole round, then until the writer is done
            list(pool.map(decode, range(len(ds))))
            rounds += 1
        writer.join()
    err = capfd.readouterr().err.splitlines()
    assert [line for line in err if line.startswith("line ")] == [f"line {n}" for n in range(300)]  # none lost, none split, in order
    assert not [line for line in err if "Corrupt JPEG" in line and not line.startswith(("warning: ", str(tmp_path)))]  # libjpeg's own: never
    assert ds.damaged == 20 and len([r for r in caplog.records if r.name == "im2rec.image" and "the image is damaged" in r.getMessage()]) == 20


def test_imdecode_warns_of_damage_and_gives_mxnets_pixels(real_size_folders, caplog):
    jpeg = sorted(real_size_folders["imagenet"].rglob("*.jpg"))[0].read_bytes()
    bad = _damaged(jpeg)
    with caplog.at_level(logging.WARNING, logger="im2rec.mx.augment"):
        img = im2rec.imdecode(bad)
    want = cv2.cvtColor(imdecode_checked(bad, 1 | IGNORE_ORIENTATION).image, cv2.COLOR_BGR2RGB)
    assert np.array_equal(img, want)
    assert [r.getMessage() for r in caplog.records] == [f"imdecode: {len(bad)} bytes: Corrupt JPEG data: premature end of data segment: the image is damaged"]


def test_damaged_records_give_mxnets_own_batches_and_are_named(caplog):
    """tests/data/damaged: MXNet 1.9.1's ImageRecordIter batches of a .rec with two damaged
    JPEGs (make.py), value for value with ``on_damaged="warn"``, and each damaged record said once."""
    folder = DATA / "damaged"
    golden = np.load(folder / "golden.npz")
    rec = folder / "damaged.rec"
    index = recordio.read_index(folder / "damaged.idx")
    with caplog.at_level(logging.WARNING, logger="im2rec"):
        for threads in (1, 4):
            with im2rec.ImageRecordIter(path_imgrec=str(rec), path_imgidx=str(folder / "damaged.idx"), data_shape=(3, 32, 32), resize=40, batch_size=4, preprocess_threads=threads) as it:
                batches = list(it)
                assert it.damaged == 2
            assert np.array_equal(np.concatenate([b.data[0] for b in batches]), golden["data"].astype(np.float32))
            assert np.array_equal(np.concatenate([b.label[0] for b in batches]), golden["label"])
            assert [b.pad for b in batches] == golden["pads"].tolist()
    words = {3: "Corrupt JPEG data: 13 extraneous bytes before marker 0xd9", 8: "Corrupt JPEG data: premature end of data segment"}
    said = [f"{rec}: record {key} (byte {index.offset(key)}): {words[key]}: the image is damaged (`im2rec verify {rec} --decode` lists every such record)" for key in (3, 8)]
    assert sorted(r.getMessage() for r in caplog.records) == sorted(said * 2)  # once per record, for each of the two iterators


def test_a_warning_that_is_not_damage_is_no_damage():
    """libjpeg's "Warning: unknown JFIF revision number 2.05" (a header it does not know): the
    image is whole, decoded as OpenCV decodes it, and not called damaged (pack keeps it)."""
    from im2rec.image import ImageOptions, transform

    data = bytearray(cv2.imencode(".jpg", np.arange(48 * 64 * 3, dtype=np.uint8).reshape(48, 64, 3))[1].tobytes())
    assert data[6:11] == b"JFIF\0"
    data[11] = 2
    img, damage = imdecode_checked(bytes(data), 1)
    assert damage is None and np.array_equal(img, cv2.imdecode(np.frombuffer(bytes(data), np.uint8), 1))
    transform(bytes(data), ImageOptions())
