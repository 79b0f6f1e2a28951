"""ImageRecordIter and ImageDetRecordIter against MXNet 1.9.1's own batches, and what MXNet leaves random.

``tests/data/iterators`` holds the inputs and MXNet's first epoch of each configuration of its
``configs.json`` (made by its ``make.py`` with the real MXNet): every batch's data (within
0.01 of a level; exact for uint8), label and pad, ``provide_data``/``provide_label`` and
the number of batches must be MXNet's.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, deadline

import im2rec
from im2rec import ndfile, recordio
from im2rec.errors import Im2recError, ImageError, LabelError, OptionError
from im2rec.mx.epochs import part_items, plan_epoch
from im2rec.mx.iterators import RECORD_ITER_ARGS

GOLD = DATA / "iterators"
CONFIGS = json.loads((GOLD / "configs.json").read_text())
MXNET = np.load(GOLD / "golden.npz")


def _pack_from_list(lst, out):
    """``out`` (.rec/.idx): the images of images.rec, with the labels of ``lst``, as
    ``im2rec pack --pass-through --pack-label`` writes them from the same files."""
    images = recordio.RecordReader(GOLD / "images.rec", GOLD / "images.idx")
    with recordio.RecordWriter(out, out.with_suffix(".idx")) as w:
        for line in lst.read_text().splitlines():
            fields = line.split("\t")
            key, labels = int(fields[0]), [float(v) for v in fields[1:-1]]
            _, img = recordio.unpack(images.read(key))
            w.write_idx(key, recordio.pack(recordio.IRHeader(len(labels), labels, key, 0), img))


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    """A folder with the iterator inputs: the kept ones, multi.rec and det.rec packed again
    (checked against the sha256 of the files MXNet read), and no mean.nd."""
    work = tmp_path_factory.mktemp("iter")
    for f in GOLD.iterdir():
        if f.suffix in (".rec", ".idx", ".lst"):
            shutil.copy(f, work / f.name)
    manifest = json.loads((GOLD / "manifest.json").read_text())
    for name in ("multi", "det"):
        _pack_from_list(work / f"{name}.lst", work / f"{name}.rec")
        assert hashlib.sha256((work / f"{name}.rec").read_bytes()).hexdigest() == manifest[f"{name}.rec"]
    return work


def _make(config, cwd, **extra):
    c = {k: v for k, v in config.items() if k not in ("iter", "note")}
    c.update(extra)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return getattr(im2rec, config["iter"])(**c)
    finally:
        os.chdir(old)


def _compare(name, it):
    """Every difference between ``it``'s first epoch and MXNet's, as lines."""
    config = CONFIGS[name]
    problems = []
    batches = int(MXNET[f"{name}/batches"])
    if len(it) != batches:
        problems.append(f"{len(it)} batches, MXNet {batches}")
    for what, desc in (("provide_data", it.provide_data), ("provide_label", it.provide_label)):
        if tuple(desc[0].shape) != tuple(MXNET[f"{name}/{what}"].tolist()):
            problems.append(f"{what} {desc[0].shape}, MXNet {tuple(MXNET[f'{name}/{what}'].tolist())}")
    got = list(it)
    if len(got) != batches:
        problems.append(f"the epoch gave {len(got)} batches, MXNet {batches}")
    for n, batch in enumerate(got[:batches]):
        want = np.stack([MXNET[key] for key in MXNET[f"{name}/data/{n}"]])
        pad = int(MXNET[f"{name}/pad/{n}"])
        keep = len(want)
        if config.get("round_batch", True) is False and n == batches - 1:
            # MXNet 1.9.1's ImageRecordIter says pad 0 there and leaves the rows after the
            # last record as they were; the detection iterator counts them. im2rec counts them.
            keep = len(it.part) - n * len(want)
            if config["iter"] == "ImageRecordIter" and pad == 0:
                pad = len(want) - keep
        if batch.pad != pad:
            problems.append(f"batch {n}: pad {batch.pad}, MXNet {pad}")
        data = batch.data[0]
        if data.dtype == np.uint8 or config.get("dtype") in ("uint8", "int8"):
            bad = np.argwhere(data[:keep] != want[:keep])
        else:
            bad = np.argwhere(np.abs(data[:keep].astype(np.float64) - want[:keep]) > 0.01)
        if bad.size:
            rows = sorted(set(bad[:, 0].tolist()))
            problems.append(f"batch {n}: {len(bad)} values differ in rows {rows} (ids {batch.index[rows].tolist()})")
        label = MXNET[f"{name}/label/{n}"]
        if batch.label[0].shape != label.shape or not np.array_equal(batch.label[0][:keep], label[:keep]):
            problems.append(f"batch {n}: labels {batch.label[0][:keep].tolist()}, MXNet {label[:keep].tolist()}")
    return problems


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_first_epoch_is_mxnets(name, inputs, tmp_path):
    work = inputs
    if name == "mean_img_create":  # the mean image is computed afresh here, written beside
        work = tmp_path / "w"
        shutil.copytree(inputs, work)
    with _make(CONFIGS[name], work) as it:
        assert _compare(name, it) == []
    if name == "mean_img_create":
        ours, theirs = ndfile.load(work / "mean.nd"), ndfile.load(GOLD / "mean.nd")
        assert list(ours) == list(theirs) == ["mean_img"]
        assert np.abs(ours["mean_img"] - theirs["mean_img"]).max() < 1e-3


def test_a_mean_image_file_written_by_mxnet_is_read(inputs, tmp_path):
    shutil.copytree(inputs, tmp_path / "w")
    shutil.copy(GOLD / "mean.nd", tmp_path / "w" / "mean.nd")
    with _make(CONFIGS["mean_img_create"], tmp_path / "w") as it:
        assert _compare("mean_img_create", it) == []
    assert (tmp_path / "w" / "mean.nd").read_bytes() == (GOLD / "mean.nd").read_bytes()  # read, not rewritten


def test_ndfile_writes_mxnets_bytes(tmp_path):
    arrays = ndfile.load(GOLD / "mean.nd")
    ndfile.save(tmp_path / "again.nd", arrays)
    assert (tmp_path / "again.nd").read_bytes() == (GOLD / "mean.nd").read_bytes()


@pytest.mark.parametrize("cut", [4, 20, 40, 60, 100])
def test_ndfile_cut_short_is_refused_in_words(tmp_path, cut):
    data = (GOLD / "mean.nd").read_bytes()[:cut]
    (tmp_path / "cut.nd").write_bytes(data)
    with pytest.raises(Im2recError, match=rf"^{tmp_path / 'cut.nd'}: "):
        ndfile.load(tmp_path / "cut.nd")


def test_imdecode_is_mxnets(inputs):
    reader = recordio.RecordReader(GOLD / "images.rec", GOLD / "images.idx")
    checked = 0
    for key in reader.keys():
        _, img = recordio.unpack(reader.read(key))
        for flag in (0, 1):
            for to_rgb in (True, False):
                want_hash, want_shape = MXNET[f"imdecode/{key}/{flag}/{int(to_rgb)}"].tolist()
                got = im2rec.imdecode(img, flag=flag, to_rgb=to_rgb)
                assert (hashlib.sha256(got.tobytes()).hexdigest(), str(got.shape)) == (want_hash, want_shape), (key, flag, to_rgb)
                checked += 1
    assert checked == 4 * len(reader)


def test_cubic_resize_is_opencv_342s():
    from im2rec.mx.kernels import resize_cubic

    reader = recordio.RecordReader(GOLD / "images.rec", GOLD / "images.idx")
    checked = 0
    for key in reader.keys():
        img = im2rec.imdecode(recordio.unpack(reader.read(key))[1], to_rgb=False)
        for w, h in [(37, 23), (61, 90), (13, 13), (200, 150)]:
            assert hashlib.sha256(resize_cubic(img, (w, h)).tobytes()).hexdigest() == str(MXNET[f"cubic/{key}/{w}x{h}"]), (key, w, h)
            checked += 1
    assert checked == 4 * len(reader)


def test_imdecode_refuses_in_words():
    with pytest.raises(ImageError, match=r"^imdecode: 5 bytes that cannot be decoded as an image$"):
        im2rec.imdecode(b"hello")
    with pytest.raises(ValueError, match=r"^imdecode: the buffer is empty$"):
        im2rec.imdecode(b"")
    with pytest.raises(ValueError, match=r"^imdecode: flag must be 0 \(gray\) or 1 \(colour\), got -1$"):
        im2rec.imdecode(b"\xff\xd8", flag=-1)


# --------------------------------------------------------------------------- the protocol


def test_mxnets_batch_protocol(inputs):
    with _make(CONFIGS["resize"], inputs) as it:
        assert it.provide_data[0].name == "data" and it.provide_label[0].name == "softmax_label"
        assert it.provide_data == [("data", (5, 3, 24, 24))] and it.provide_label == [("softmax_label", (5,))]
        assert it.provide_data[0].dtype == np.float32 and it.provide_data[0].layout == "NCHW"
        assert it.batch_size == 5
        seen = 0
        while it.iter_next():
            data, label, pad, index = it.getdata(), it.getlabel(), it.getpad(), it.getindex()
            assert data.shape == (5, 3, 24, 24) and label.shape == (5,) and index.dtype == np.uint64
            seen += 1
        assert seen == 4 and pad == 1
        with pytest.raises(StopIteration):
            it.next()
        it.reset()
        first = it.next()
        assert first.data[0].shape == (5, 3, 24, 24) and first.pad == 0
        assert repr(first) == "DataBatch: data shapes: [(5, 3, 24, 24)] label shapes: [(5,)] pad: 0"


def test_round_batch_lends_records_and_the_next_epoch_starts_after_them(inputs):
    with _make(CONFIGS["resize"], inputs) as it:
        ids = [b.index.tolist() for b in it]
        assert [i for b in ids for i in b][:19] == [int(line.split("\t")[0]) for line in (GOLD / "images.lst").read_text().splitlines()]
        assert ids[-1][-1] == ids[0][0]  # the last batch is filled from the start (pad 1)
        it.reset()
        second = [i for b in it for i in b.index.tolist()]
        assert second[0] == ids[0][1]  # the record lent to the last batch is not read twice
        assert len(second) == 20 and second[-2:] == [ids[0][0], ids[0][1]]


def test_three_epochs_are_mxnets(inputs):
    """Each epoch after the first starts after the records its predecessor lent, as MXNet's."""
    with im2rec.ImageRecordIter(path_imgrec=str(inputs / "images.rec"), path_imgidx=str(inputs / "images.idx"), path_imglist=str(inputs / "two_labels.lst"), label_width=2, data_shape=(3, 24, 24), batch_size=8, resize=28) as it:
        for e in range(3):
            batches = list(it)
            assert [b.pad for b in batches] == MXNET[f"epochs/{e}/pads"].tolist()
            assert np.array_equal(np.stack([b.label[0] for b in batches]), MXNET[f"epochs/{e}/labels"])
            it.reset()


def test_names_data_and_label_as_asked(inputs):
    with _make(CONFIGS["resize"], inputs, data_name="image", label_name="label") as it:
        assert [d.name for d in it.provide_data + it.provide_label] == ["image", "label"]


def test_torch_takes_the_batch_without_a_copy(inputs):
    torch = pytest.importorskip("torch")
    with _make(CONFIGS["resize"], inputs) as it:
        batch = it.next()
        tensor = torch.from_numpy(batch.data[0])
        assert tensor.data_ptr() == batch.data[0].ctypes.data
        second = it.next()  # a new array each batch: the tensor still holds the first
        assert not np.shares_memory(second.data[0], batch.data[0])


# --------------------------------------------------------------------------- arguments


def _args(**kw):
    return {"path_imgrec": str(GOLD / "images.rec"), "data_shape": (3, 24, 24), "batch_size": 4, **kw}


@pytest.mark.parametrize(
    "kwargs, message, option",
    [
        (_args(rand_crops=True), "ImageRecordIter: cannot find argument 'rand_crops' (did you mean 'rand_crop'?)", "rand_crops"),
        ({"path_imgrec": "x.rec", "batch_size": 4}, "Required parameter data_shape of Shape(tuple) is not presented", "data_shape"),
        ({"path_imgrec": "x.rec", "data_shape": (3, 24, 24)}, "Required parameter batch_size of int (non-negative) is not presented", "batch_size"),
        (_args(data_shape=(3, 24)), "value (3, 24) for Parameter data_shape has wrong dimensions, expected dimension=3", "data_shape"),
        (_args(data_shape=(2, 24, 24)), "Invalid output shape (2, 24, 24) for Parameter data_shape: its channels (the first number) must be 1, 3 or 4", "data_shape"),
        (_args(data_shape="3,0,24"), "value (3, 0, 24) for Parameter data_shape has a dimension that is not positive", "data_shape"),
        (_args(num_parts=2, part_index=2), "Invalid Parameter part_index=2: it must be less than num_parts=2", "part_index"),
        (_args(label_width=0), "value 0 for Parameter label_width should be greater equal to 1", "label_width"),
        (_args(batch_size="many"), "Invalid Parameter format for batch_size expect int but value='many'", "batch_size"),
        (_args(rand_mirror="yes"), "Invalid Parameter format for rand_mirror expect boolean but value='yes'", "rand_mirror"),
        (_args(dtype="complex64"), "Invalid Input: 'complex64' for Parameter dtype, valid values are: {float32, float16, float64, uint8, int8}", "dtype"),
        (_args(dtype="int32"), "Invalid Input: 'int32' for Parameter dtype, valid values are: {float32, float16, float64, uint8, int8}", "dtype"),
        (_args(resize=0), "value 0 for Parameter resize must be -1 (no resize) or a size in pixels", "resize"),
        (_args(pad=-2), "value -2 for Parameter pad should be greater equal to 0", "pad"),
        (_args(path_imglist="nope.lst"), "nope.lst: no such file (path_imglist)", "path_imglist"),
        (_args(inter_method=5), "invalid inter_method 5: valid values are 0-4, 9 and 10", "inter_method"),
        (_args(path_imgrec=""), "ImageRecordIter: must specify path_imgrec", "path_imgrec"),
        (_args(random_resized_crop=True, rand_crop=True), "random_resized_crop conflicts with min_random_scale, max_random_scale, min_crop_size, max_crop_size and rand_crop", "random_resized_crop"),
    ],
)
def test_wrong_arguments_are_refused_naming_them(kwargs, message, option):
    with pytest.raises(OptionError) as e:
        im2rec.ImageRecordIter(**kwargs)
    assert (str(e.value), e.value.option) == (message, option)


def test_det_arguments_are_refused_naming_them():
    with pytest.raises(OptionError) as e:
        im2rec.ImageDetRecordIter(path_imgrec="det.rec", data_shape=(3, 28, 28), batch_size=2, rand_crop=True)
    assert str(e.value) == "ImageDetRecordIter: cannot find argument 'rand_crop' (did you mean 'rand_crop_prob'?)"
    with pytest.raises(OptionError) as e:
        im2rec.ImageDetRecordIter(path_imgrec="det.rec", data_shape=(3, 28, 28), batch_size=2, num_crop_sampler=2, min_crop_scales=(0.1, 0.2, 0.3))
    assert str(e.value) == "min_crop_scales has 3 values for 2 crop samplers (give one, or one per sampler)"


def test_mxnets_inert_arguments_are_accepted(inputs):
    with _make(CONFIGS["resize"], inputs, ctx="cpu", device_id=1, verbose=False, shuffle_chunk_size=64, shuffle_chunk_seed=3) as it:
        assert _compare("resize", it) == []


def test_strings_as_mxnets_python_passes_them(inputs):
    """mx.io passes every value on as str(value): those strings parse to the same batches."""
    config = {k: (str(v) if k not in ("iter", "note") else v) for k, v in CONFIGS["mirror_mean_std"].items()}
    config["data_shape"] = "(3, 24, 24)"
    with _make(config, inputs) as it:
        assert _compare("mirror_mean_std", it) == []


def test_every_mxnet_argument_of_the_issue_is_known():
    named = "path_imgrec path_imgidx path_imglist label_width data_shape batch_size round_batch shuffle seed seed_aug num_parts part_index preprocess_threads prefetch_buffer dtype resize rand_crop random_resized_crop min_random_area max_random_area min_aspect_ratio max_aspect_ratio min_crop_size max_crop_size min_random_scale max_random_scale max_img_size min_img_size max_rotate_angle rotate max_shear_ratio fill_value pad inter_method mirror rand_mirror brightness contrast saturation pca_noise random_h random_s random_l max_random_contrast max_random_illumination mean_img mean_r mean_g mean_b mean_a std_r std_g std_b std_a scale ctx device_id verbose shuffle_chunk_size shuffle_chunk_seed"
    assert [n for n in named.split() if n not in RECORD_ITER_ARGS] == []


# --------------------------------------------------------------------------- parts and epochs


def test_part_rules():
    assert [part_items(10, 3, k).tolist() for k in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert part_items(2, 3, 2).tolist() == []  # ceil(2/3) = 1 a part: the third is empty
    positions = np.array([0, 100, 200, 300, 400])  # 500 bytes: parts of 168 bytes
    assert [part_items(5, 3, k, positions, 500).tolist() for k in range(3)] == [[0, 1], [2, 3], [4]]


def test_plan_epoch_round_batch():
    plan = plan_epoch(np.arange(7), lambda: np.arange(7), 0, 3, True)
    assert plan.rows.tolist() == [[0, 1, 2], [3, 4, 5], [6, 0, 1]]
    assert plan.epochs[-1].tolist() == [0, 1, 1] and plan.pads.tolist() == [0, 0, 2] and plan.skip_next == 2
    plan = plan_epoch(np.arange(7), lambda: np.arange(7), 1, 3, False, skip=2)
    assert plan.rows.tolist() == [[2, 3, 4], [5, 6, -1]] and plan.pads.tolist() == [0, 1]
    with pytest.raises(OptionError, match=r"^batch_size 7 needs 5 more records to fill the last batch \(round_batch\), but this part has 2: the number of records must be larger than the batch size$"):
        plan_epoch(np.arange(2), lambda: np.arange(2), 0, 7, True)


def test_shuffle_covers_every_record_each_epoch_in_a_new_order(inputs):
    with _make(CONFIGS["resize"], inputs, shuffle=True, round_batch=False) as it:
        orders = []
        for _ in range(3):
            ids = np.concatenate([b.index[: 5 - b.pad] for b in it])
            orders.append(ids.tolist())
            it.reset()
    assert all(sorted(o) == list(range(19)) for o in orders)
    assert orders[0] != orders[1] != orders[2]


@pytest.mark.parametrize("by_index", [True, False])
def test_shuffled_parts_are_disjoint_and_cover_every_record(inputs, by_index):
    seen = []
    for k in range(3):
        extra = {} if by_index else {"path_imgidx": ""}
        with _make(CONFIGS["resize"], inputs, shuffle=True, num_parts=3, part_index=k, round_batch=False, **extra) as it:
            seen.append(sorted(int(i) for b in it for i in b.index[: 5 - b.pad]))
    assert sorted(i for part in seen for i in part) == list(range(19))
    assert all(not set(a) & set(b) for a in seen for b in seen if a is not b)


@pytest.mark.slow
def test_same_batches_with_any_threads_and_in_another_process(inputs):
    random = dict(CONFIGS["resize"], rand_crop=True, rand_mirror=True, max_rotate_angle=20, brightness=0.3, pca_noise=0.1, shuffle=True, seed_aug=7)
    runs = []
    for threads in (1, 3):
        with _make(random, inputs, preprocess_threads=threads) as it:
            runs.append(np.concatenate([b.data[0] for b in it]))
    assert np.array_equal(runs[0], runs[1])
    code = f"""
        import os, sys, numpy as np, im2rec
        os.chdir({str(inputs)!r})
        c = {({k: v for k, v in random.items() if k not in ("iter", "note")})!r}
        with im2rec.ImageRecordIter(**c) as it:
            np.save(sys.argv[1], np.concatenate([b.data[0] for b in it]))
    """
    out = inputs / "other_process.npy"
    subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(out)], check=True)
    assert np.array_equal(np.load(out), runs[0])


def test_each_epoch_draws_new_augmentations(inputs):
    with _make(CONFIGS["resize"], inputs, rand_crop=True, rand_mirror=True) as it:
        first = np.concatenate([b.data[0] for b in it])
        it.reset()
        second = np.concatenate([b.data[0] for b in it])
    assert not np.array_equal(first[:10], second[:10])


# --------------------------------------------------------------------------- random augmenters


def _rows(inputs, name, **extra):
    with _make(CONFIGS[name], inputs, round_batch=False, **extra) as it:
        return {int(i): row for b in it for i, row in zip(b.index[: 5 - b.pad], b.data[0][: 5 - b.pad])}


def test_rand_mirror_mirrors_about_half(inputs):
    plain, mirrored = _rows(inputs, "uint8"), _rows(inputs, "uint8", mirror=True)
    flips = []
    for seed in range(4):
        rows = _rows(inputs, "uint8", rand_mirror=True, seed_aug=seed)
        for i, row in rows.items():
            if not np.array_equal(plain[i], mirrored[i]):  # not symmetric
                assert np.array_equal(row, plain[i]) or np.array_equal(row, mirrored[i])
                flips.append(np.array_equal(row, mirrored[i]))
    assert len(flips) > 60 and 0.3 < np.mean(flips) < 0.7


def test_rand_crop_takes_a_window_of_the_resized_image(inputs):
    with _make(CONFIGS["uint8"], inputs, rand_crop=True, resize=40, round_batch=False) as it:
        batches = list(it)
    reader = recordio.RecordReader(GOLD / "images.rec", GOLD / "images.idx")
    import cv2

    offsets = set()
    for b in batches:
        for i, row in zip(b.index[: 5 - b.pad], b.data[0][: 5 - b.pad]):
            _, buf = recordio.unpack(reader.read(int(i)))
            img = cv2.imdecode(np.frombuffer(buf, np.uint8), cv2.IMREAD_COLOR)
            h, w = img.shape[:2]
            img = cv2.resize(img, (40 * w // h, 40) if h <= w else (40, 40 * h // w), interpolation=cv2.INTER_LINEAR)[:, :, ::-1].transpose(2, 0, 1)
            found = [(y, x) for y in range(img.shape[1] - 23) for x in range(img.shape[2] - 23) if np.array_equal(img[:, y : y + 24, x : x + 24], row)]
            assert found, f"record {i}: the crop is no window of the resized image"
            offsets.add(found[0])
    assert len(offsets) > 5  # windows move


def test_random_resized_crop_follows_mxnets_area_and_aspect_rules():
    from im2rec.mx.augment import ImageAugmenter

    aug = ImageAugmenter(data_shape=(3, 32, 32), random_resized_crop=True, min_random_area=0.25, max_random_area=0.5, min_aspect_ratio=0.75, max_aspect_ratio=1.333)
    img = np.arange(200 * 300 * 3, dtype=np.uint32).reshape(200, 300, 3).astype(np.uint8)
    img[:, :, 0] = np.arange(300)[None, :] // 2  # half the column number
    img[:, :, 1] = np.arange(200)[:, None]  # row number
    areas, aspects = [], []
    import cv2

    for seed in range(40):
        out = aug.process(img, np.random.default_rng(seed))
        assert out.shape == (32, 32, 3)
        x0, x1 = int(out[0, 0, 0]), int(out[0, -1, 0])
        y0, y1 = int(out[0, 0, 1]), int(out[-1, 0, 1])
        w, h = 2 * (x1 - x0) * 32 / 31, (y1 - y0) * 32 / 31
        areas.append(w * h / (200 * 300))
        aspects.append(w / h)
    assert min(areas) > 0.2 and max(areas) < 0.56
    assert min(aspects) > 0.6 and max(aspects) < 1.6  # the ratio, or its inverse (MXNet swaps sides half the time)
    del cv2


@pytest.mark.parametrize(
    "kw",
    [
        {"brightness": 0.4},
        {"contrast": 0.4},
        {"saturation": 0.4},
        {"pca_noise": 0.5},
        {"random_h": 20, "random_s": 30, "random_l": 30},
        {"max_rotate_angle": 30},
        {"max_shear_ratio": 0.3},
        {"max_random_contrast": 0.3, "max_random_illumination": 20},
    ],
)
def test_random_augmenters_change_pixels_and_keep_shapes(inputs, kw):
    plain = _rows(inputs, "resize")
    changed = _rows(inputs, "resize", **kw)
    assert plain.keys() == changed.keys()
    differ = [i for i in plain if not np.array_equal(plain[i], changed[i])]
    assert len(differ) >= 15
    if "brightness" in kw:  # a brightness factor scales every pixel alike
        i = differ[0]
        ratio = changed[i].mean() / plain[i].mean()
        assert 0.55 < ratio < 1.45


# --------------------------------------------------------------------------- beyond MXNet


def test_a_damaged_image_names_the_rec_key_and_offset_and_does_not_hang(tmp_path):
    reader = recordio.RecordReader(GOLD / "images.rec", GOLD / "images.idx")
    with recordio.RecordWriter(tmp_path / "bad.rec", tmp_path / "bad.idx") as w:
        for key in reader.keys():
            header, img = recordio.unpack(reader.read(key))
            if key == 7:
                img = b"\xff\xd8\xff\xe0 this is no JPEG"
            w.write_idx(key, recordio.pack(header, img))
    offset = recordio.read_index(tmp_path / "bad.idx").offset(7)
    with deadline(60, "a damaged record"), im2rec.ImageRecordIter(path_imgrec=str(tmp_path / "bad.rec"), data_shape=(3, 24, 24), batch_size=4, resize=28) as it:
        with pytest.raises(ImageError) as e:
            list(it)
        assert str(e.value) == f"{tmp_path / 'bad.rec'}: record 7 (byte {offset}): the image cannot be decoded (20 bytes)"
        with pytest.raises(ImageError):  # asked again: the same error, not a hang
            it.next()


def test_a_damaged_record_names_its_key(tmp_path):
    from im2rec.errors import BadMagicError

    data = bytearray((GOLD / "images.rec").read_bytes())
    offset = recordio.read_index(GOLD / "images.idx").offset(7)
    data[offset : offset + 4] = b"\0\0\0\0"
    (tmp_path / "bad.rec").write_bytes(bytes(data))
    shutil.copy(GOLD / "images.idx", tmp_path / "bad.idx")
    with im2rec.ImageRecordIter(path_imgrec=str(tmp_path / "bad.rec"), data_shape=(3, 24, 24), batch_size=4, resize=28) as it, pytest.raises(BadMagicError) as e:
        list(it)
    assert str(e.value) == f"{tmp_path / 'bad.rec'}: no record at byte {offset}: expected the magic 0xced7230a, found 0x00000000 (the record of .idx key 7)"


def test_a_rec_without_its_idx_is_read_through_as_mxnet_reads_it(inputs, tmp_path):
    shutil.copy(inputs / "images.rec", tmp_path / "images.rec")
    for k in range(3):  # the byte-range parts, as MXNet's without path_imgidx
        config = dict(CONFIGS[f"parts_bytes_{k}"], path_imgrec=str(tmp_path / "images.rec"))
        with _make(config, inputs) as it:
            assert _compare(f"parts_bytes_{k}", it) == []
    with pytest.raises(Im2recError, match=r"^.*/images\.idx: no such file: reading .*/images\.rec needs its \.idx \(`im2rec index .*/images\.rec` writes one\)$"):
        _make(dict(CONFIGS["resize"], path_imgrec=str(tmp_path / "images.rec"), path_imgidx=str(tmp_path / "images.idx")), inputs)


def test_a_folder_is_no_rec(tmp_path):
    with pytest.raises(Im2recError) as e:
        im2rec.ImageRecordIter(path_imgrec=str(tmp_path), data_shape=(3, 24, 24), batch_size=4)
    assert str(e.value) == f"{tmp_path}: is a folder: give a .rec file, a list of them, or a shard manifest"


def test_labels_that_do_not_fit_are_named(inputs):
    with pytest.raises(LabelError) as e, _make(CONFIGS["resize"], inputs, label_width=2) as it:
        it.next()
    assert str(e.value).endswith("holds one label but label_width is 2: give path_imglist, or pack the records with 2 labels")
    with pytest.raises(LabelError) as e:
        _make(CONFIGS["imglist"], inputs, label_width=3)
    assert str(e.value) == "two_labels.lst:1: label_width is 3 but the line has 2 labels"


def test_insightface_set_yields_images_with_identities(data_dir):
    face = data_dir / "insightface"
    ds = im2rec.RecordDataset(face / "train.rec")
    with im2rec.ImageRecordIter(path_imgrec=str(face / "train.rec"), data_shape=(3, 112, 112), batch_size=4, round_batch=False) as it:
        ids = np.concatenate([b.index[: 4 - b.pad] for b in it])
        it.reset()
        labels = np.concatenate([b.label[0][: 4 - b.pad] for b in it])
    assert len(ids) == len(ds)
    assert labels.tolist() == [float(ds.header(i).label if np.ndim(ds.header(i).label) == 0 else ds.header(i).label[0]) for i in range(len(ds))]


def test_a_shard_manifest_reads_as_one(tmp_path, data_dir):
    from click.testing import CliRunner

    from im2rec.cli import main

    lst = data_dir / "im2rec" / "all.lst"
    result = CliRunner().invoke(main, ["pack", str(lst), str(data_dir / "tree"), str(tmp_path / "s.rec"), "--resize", "32", "--shard-size", "20KB", "-q"])
    assert result.exit_code == 0, result.output
    manifest = tmp_path / "s.shards.json"
    assert manifest.exists()
    with im2rec.ImageRecordIter(path_imgrec=str(manifest), data_shape=(3, 32, 32), batch_size=5, round_batch=False) as it:
        ids = sorted(int(i) for b in it for i in b.index[: 5 - b.pad])
    assert ids == sorted(int(line.split("\t")[0]) for line in lst.read_text().splitlines())


# --------------------------------------------------------------------------- real size, memory, stores


@pytest.fixture(scope="module")
def real_size_recs(real_size_folders, tmp_path_factory):
    """The ImageNet-like and the large corpora listed and packed with the default options."""
    from click.testing import CliRunner

    from im2rec.cli import main

    out = tmp_path_factory.mktemp("real")
    recs = {}
    for size, folder in real_size_folders.items():
        for args in (["list", str(folder), str(out / size)], ["pack", str(out / f"{size}.lst"), str(folder), "-q"]):
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 0, result.output
        recs[size] = out / f"{size}.rec"
    return recs


@pytest.mark.slow
@pytest.mark.parametrize("size", ["imagenet", "large"])
def test_real_size_default_arguments_give_the_centre_crop(real_size_recs, size):
    """Default arguments (no resize): every image's centre 224x224, RGB, as float32; labels from the records."""
    import cv2

    rec = real_size_recs[size]
    ds = im2rec.RecordDataset(rec, mode="raw")
    with deadline(300, "an epoch of real-size images"), im2rec.ImageRecordIter(path_imgrec=str(rec), data_shape=(3, 224, 224), batch_size=8) as it:
        batches = list(it)
    assert len(batches) == -(-len(ds) // 8) and batches[-1].pad == 8 * len(batches) - len(ds)
    by_id = {}
    for b in batches:
        for i, row, label in zip(b.index.tolist(), b.data[0], b.label[0]):
            by_id.setdefault(i, (row, label))
    assert len(by_id) == len(ds)
    for item in range(len(ds)):
        header, image = ds.record(item)
        img = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
        y, x = (img.shape[0] - 224) // 2, (img.shape[1] - 224) // 2
        want = img[y : y + 224, x : x + 224, ::-1].transpose(2, 0, 1).astype(np.float32)
        row, label = by_id[header.id]
        assert np.array_equal(row, want) and label == header.label


@pytest.mark.slow
def test_real_size_imagenet_recipe(real_size_recs):
    recipe = dict(data_shape=(3, 224, 224), resize=256, rand_crop=True, rand_mirror=True, mean_r=123.68, mean_g=116.779, mean_b=103.939, std_r=58.395, std_g=57.12, std_b=57.375, batch_size=6, shuffle=True)
    with deadline(300, "an epoch of real-size images"), im2rec.ImageRecordIter(path_imgrec=str(real_size_recs["large"]), **recipe) as it:
        batches = list(it)
    data = np.concatenate([b.data[0] for b in batches])
    assert data.shape[1:] == (3, 224, 224) and data.dtype == np.float32
    assert -2.5 < data.min() < -1.0 and 1.0 < data.max() < 2.8  # normalised pixels


def _mapped_kb(path) -> int:
    """This process's resident kB of the mappings of ``path``."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split(" ", 1)[0]:
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def _repeated(source_rec, times, rec):
    """``rec`` (and its .idx): the records of ``source_rec``, ``times`` over, keys and ids 0, 1, ..."""
    source = im2rec.RecordDataset(source_rec, mode="raw")
    with recordio.RecordWriter(rec, rec.with_suffix(".idx")) as w:
        for k in range(times * len(source)):
            header, image = source.record(k % len(source))
            w.write_idx(k, recordio.pack(header._replace(id=k), bytes(image)))
    return rec


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc/self/smaps")
def test_the_mapped_records_are_released_as_they_are_read(real_size_recs, tmp_path):
    """Over a shuffled epoch the .rec's mapped pages stay a small, flat share of the file."""
    rec = _repeated(real_size_recs["imagenet"], 10, tmp_path / "ten_times.rec")
    size_kb = rec.stat().st_size // 1024
    with im2rec.ImageRecordIter(path_imgrec=str(rec), data_shape=(3, 224, 224), resize=256, batch_size=2, shuffle=True, prefetch_buffer=1) as it:
        seen = []
        for _ in it:
            seen.append(_mapped_kb(rec))
        assert len(seen) == 100
        assert _mapped_kb(rec) < 64 and max(seen) < size_kb / 8, (max(seen), size_kb)


@pytest.mark.slow
def test_a_rec_in_s3_reads_as_the_local_one(inputs):
    s3fs = pytest.importorskip("s3fs")
    from conftest import s3_endpoint

    with s3_endpoint() as endpoint:
        fs = s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=endpoint)
        fs.mkdir("iterators")
        try:
            fs.put(str(inputs / "images.rec"), "iterators/images.rec")
            fs.put(str(inputs / "images.idx"), "iterators/images.idx")
            config = dict(CONFIGS["mirror_mean_std"], path_imgrec="s3://iterators/images.rec", path_imgidx="s3://iterators/images.idx")
            with _make(config, inputs) as it:
                assert _compare("mirror_mean_std", it) == []
        finally:
            fs.rm("iterators", recursive=True)


@pytest.mark.slow
def test_readme_section_runs_as_written(real_size_recs, tmp_path, monkeypatch):
    """The README's "Coming from mx.io.ImageRecordIter" code, on a real-size pack at data/train.rec."""
    import re

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Coming from `mx.io.ImageRecordIter`", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    (tmp_path / "data").mkdir()
    _repeated(real_size_recs["imagenet"], 5, tmp_path / "data" / "train.rec")  # 100 images: two batches
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    assert scope["x"].shape == (64, 3, 224, 224) and scope["y"].shape == (64,) and scope["n"] == 100 - 64  # the last batch
    scope["train"].close()


@pytest.mark.slow
def test_an_iterator_dropped_without_close_stops_its_threads(inputs):
    """MXNet code never closes its iterators: one let go mid-epoch is collected, its threads end."""
    import gc
    import threading
    import time

    def ours():
        return [t for t in threading.enumerate() if t.name.startswith("im2rec-")]

    before = len(ours())
    it = _make(CONFIGS["resize"], inputs, prefetch_buffer=3)
    it.next()
    time.sleep(0.3)  # the background thread waits with full batches
    assert len(ours()) > before
    del it
    gc.collect()
    with deadline(30, "the iterator's threads to end"):
        while len(ours()) > before:
            time.sleep(0.05)


# --------------------------------------------------------------------------- detection: boxes follow the pixels


@pytest.fixture(scope="module")
def red_box_rec(tmp_path_factory):
    """Detection records of a red rectangle on grey (lossless PNG), labelled with its box."""
    import cv2

    out = tmp_path_factory.mktemp("det")
    rec = out / "boxes.rec"
    rng = np.random.default_rng(3)
    with recordio.RecordWriter(rec, out / "boxes.idx") as w:
        for k in range(12):
            h, wd = int(rng.integers(120, 220)), int(rng.integers(120, 220))
            img = np.full((h, wd, 3), 128, np.uint8)
            x0, y0 = int(rng.integers(0, wd // 2)), int(rng.integers(0, h // 2))
            x1, y1 = x0 + int(rng.integers(30, wd // 2)), y0 + int(rng.integers(30, h // 2))
            img[y0:y1, x0:x1] = (0, 0, 255)
            label = [2, 5, 1, x0 / wd, y0 / h, x1 / wd, y1 / h]
            w.write_idx(k, recordio.pack(recordio.IRHeader(len(label), label, k, 0), cv2.imencode(".png", img)[1].tobytes()))
    return rec


def _red_box(row, rows, cols):
    red = (row[0, :rows, :cols] > 200) & (row[1, :rows, :cols] < 60)
    ys, xs = np.nonzero(red)
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


@pytest.mark.parametrize(
    "kw",
    [
        {"rand_mirror_prob": 1.0},
        {"rand_pad_prob": 1.0, "max_pad_scale": 2.0},
        {"rand_crop_prob": 1.0, "min_crop_scales": (0.5,), "max_crop_scales": (0.9,), "min_crop_aspect_ratios": (0.7,), "max_crop_aspect_ratios": (1.4,), "min_crop_object_coverages": (0.95,)},
        {"rand_crop_prob": 1.0, "rand_pad_prob": 1.0, "max_pad_scale": 1.5, "rand_mirror_prob": 0.5, "min_crop_scales": (0.6,), "min_crop_object_coverages": (0.95,), "resize_mode": "fit"},
    ],
)
def test_random_crops_pads_and_mirrors_move_the_boxes_with_the_pixels(red_box_rec, kw):
    moved = 0
    for seed in range(3):
        with im2rec.ImageDetRecordIter(path_imgrec=str(red_box_rec), data_shape=(3, 96, 96), batch_size=4, seed_aug=seed, **kw) as it:
            for b in it:
                for row, lab in zip(b.data[0], b.label[0]):
                    channels, rows, cols, n = (int(v) for v in lab[:4])
                    assert (channels, n) == (3, 7)
                    x0, y0, x1, y1 = (float(v) for v in lab[7:11])
                    got = _red_box(row, rows, cols)
                    want = (x0 * cols, y0 * rows, x1 * cols, y1 * rows)
                    assert np.allclose(got, want, atol=2.5), (got, want, lab.tolist())
                    moved += not np.allclose(lab[7:11], [0, 0, 1, 1])
    assert moved > 0


def test_real_size_detection_with_default_arguments(real_size_folders, tmp_path):
    from click.testing import CliRunner

    from im2rec.cli import main

    root = real_size_folders["imagenet"]
    assert CliRunner().invoke(main, ["list", str(root), str(tmp_path / "all")]).exit_code == 0
    lines = [line.split("\t") for line in (tmp_path / "all.lst").read_text().splitlines()]
    (tmp_path / "det.lst").write_text("".join(f"{i}\t2\t5\t{c}\t0.1\t0.2\t0.6\t0.9\t{p}\n" for i, c, p in lines))
    result = CliRunner().invoke(main, ["pack", str(tmp_path / "det.lst"), str(root), "--pack-label", "-q"])
    assert result.exit_code == 0, result.output
    with deadline(300, "a detection epoch"), im2rec.ImageDetRecordIter(path_imgrec=str(tmp_path / "det.rec"), data_shape=(3, 300, 300), batch_size=6) as it:
        batches = list(it)
    assert it.provide_label == [("softmax_label", (6, 11))]
    labels = np.concatenate([b.label[0] for b in batches])[: len(lines)]
    assert np.allclose(labels[:, :4], [3, 300, 300, 7]) and np.allclose(labels[:, 7:11], [0.1, 0.2, 0.6, 0.9], atol=1e-6)
    assert batches[0].data[0].shape == (6, 3, 300, 300)


# --------------------------------------------------------------------------- damaged images


@pytest.fixture(scope="module")
def damaged_recs(real_size_folders, tmp_path_factory):
    """12 ImageNet-like JPEGs, the 6th with 2,000 zero bytes in its middle, packed
    ``--pass-through`` (a classification .rec) and ``--pass-through --pack-label`` (detection)."""
    from click.testing import CliRunner

    from im2rec.cli import main

    out = tmp_path_factory.mktemp("damaged")
    files = sorted(real_size_folders["imagenet"].rglob("*.jpg"))[:12]
    (out / "images").mkdir()
    for n, f in enumerate(files):
        data = bytearray(f.read_bytes())
        if n == 5:
            data[len(data) // 2 : len(data) // 2 + 2000] = bytes(2000)
        (out / "images" / f"{n:02d}.jpg").write_bytes(bytes(data))
    (out / "cls.lst").write_text("".join(f"{n}\t{n % 3}\t{n:02d}.jpg\n" for n in range(12)))
    (out / "det.lst").write_text("".join(f"{n}\t2\t5\t{n % 3}\t0.1\t0.2\t0.6\t0.9\t{n:02d}.jpg\n" for n in range(12)))
    for name, extra in (("cls", []), ("det", ["--pack-label"])):
        result = CliRunner().invoke(main, ["pack", str(out / f"{name}.lst"), str(out / "images"), "--pass-through", "-q", *extra])
        assert result.exit_code == 0, result.output
    return {"cls": out / "cls.rec", "det": out / "det.rec"}


@pytest.mark.parametrize("kind", ["cls", "det"])
def test_a_damaged_jpeg_is_said_skipped_or_raised_as_on_damaged_asks(damaged_recs, kind, caplog, capfd):
    import logging

    rec = damaged_recs[kind]
    offset = recordio.read_index(rec.with_suffix(".idx")).offset(5)
    where = f"{rec}: record 5 (byte {offset})"
    make = im2rec.ImageRecordIter if kind == "cls" else im2rec.ImageDetRecordIter
    shape = {"data_shape": (3, 224, 224), "batch_size": 4, "resize": 256}

    def epoch(**kw):
        with deadline(120, "an epoch"), make(path_imgrec=str(rec), **shape, **kw) as it:
            batches = list(it)
            return batches, it.damaged

    with caplog.at_level(logging.WARNING):
        batches, damaged = epoch()
    ids = [int(i) for b in batches for i in b.index[: 4 - b.pad]]
    assert ids == list(range(12)) and damaged == 1  # "warn": MXNet's pixels, all 12 records
    assert [r.getMessage() for r in caplog.records] == [f"{where}: Corrupt JPEG data: premature end of data segment: the image is damaged (`im2rec verify {rec} --decode` lists every such record)"]
    caplog.clear()

    with caplog.at_level(logging.WARNING):
        skipped, damaged = epoch(on_damaged="skip")
    rows = [(int(i), b.data[0][r].copy()) for b in skipped for r, i in enumerate(b.index[: 4 - b.pad])]
    # its row taken by the next good record: the batches, their padding and the epoch keep their size
    assert [i for i, _ in rows] == [0, 1, 2, 3, 4, 6, 6, 7, 8, 9, 10, 11] and damaged == 1
    assert [b.pad for b in skipped] == [b.pad for b in batches] == [0, 0, 0]
    by_id = {int(i): b.data[0][r] for b in batches for r, i in enumerate(b.index[: 4 - b.pad])}
    assert all(np.array_equal(by_id[i], row) for i, row in rows)  # the same pixels
    assert [r.getMessage() for r in caplog.records] == [f"{where}: Corrupt JPEG data: premature end of data segment: left out (on_damaged='skip')"]

    with pytest.raises(ImageError) as e:
        epoch(on_damaged="raise")
    assert str(e.value) == f"{where}: Corrupt JPEG data: premature end of data segment: the image is damaged (on_damaged='raise')"
    with pytest.raises(OptionError, match=r"on_damaged"):
        epoch(on_damaged="ignore")
    assert not [line for line in capfd.readouterr().err.splitlines() if line.startswith("Corrupt JPEG")]  # libjpeg's own line never


def test_skip_keeps_every_batch_full_whatever_is_damaged_and_where(real_size_folders, tmp_path):
    """Damaged records at the end of the epoch, at its start, one in ten at random, all of
    them: every batch stays its size (only the last of the epoch short, as without damage),
    no row is empty, and a .rec whose every image is damaged is said as such."""
    jpegs = [p.read_bytes() for p in sorted(real_size_folders["imagenet"].rglob("*.jpg"))[:12]]
    bad = bytearray(jpegs[0])
    bad[len(bad) // 2 : len(bad) // 2 + 2000] = bytes(2000)
    rng = np.random.default_rng(3)
    layouts = {"end": [False] * 30 + [True] * 3, "start": [True] * 5 + [False] * 4, "random": list(rng.random(40) < 0.3), "all": [True] * 6}
    for name, damaged in layouts.items():
        rec = tmp_path / f"{name}.rec"
        with recordio.RecordWriter(rec, rec.with_suffix(".idx")) as w:
            for key, is_bad in enumerate(damaged):
                w.write_idx(key, recordio.pack(recordio.IRHeader(0, float(key), key, 0), bytes(bad) if is_bad else jpegs[key % 12]))
        for batch_size in (4, 5, 7):
            def make(rec=rec, batch_size=batch_size, **kw):
                return im2rec.ImageRecordIter(path_imgrec=str(rec), data_shape=(3, 32, 32), resize=40, batch_size=batch_size, on_damaged="skip", **kw)

            if name == "all":
                with pytest.raises(ImageError, match=rf"^{re.escape(str(rec))} \(part 0 of 1\): all 6 records are damaged \(on_damaged='skip'\)$"), make() as it:
                    list(it)
                continue
            for round_batch in (True, False):
                with deadline(60, "an epoch"), make(round_batch=round_batch) as it:
                    batches = list(it)
                n = len(damaged)
                assert len(batches) == -(-n // batch_size), (name, batch_size)
                assert [b.pad for b in batches[:-1]] == [0] * (len(batches) - 1) and batches[-1].pad == len(batches) * batch_size - n
                good = {i for i, d in enumerate(damaged) if not d}
                ids = [int(i) for b in batches for i in b.index[: batch_size - b.pad]]
                assert set(ids) == good and len(ids) == n  # every good record, each damaged one's row taken by a good one
