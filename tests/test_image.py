"""Per-image work: headers, decoding at reduced scale, odd but valid images, bad bytes."""

import cv2
import numpy as np
import pytest

from im2rec.errors import ImageError
from im2rec.image import ImageOptions, image_info, transform


def jpeg(img, quality=92, progressive=False):
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] + ([cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if progressive else [])
    return cv2.imencode(".jpg", img, params)[1].tobytes()


def decode(data, flag=cv2.IMREAD_UNCHANGED):
    return cv2.imdecode(np.frombuffer(data, np.uint8), flag)


def detailed(h, w, seed=0):
    """A photo-like image with fine detail (aliasing shows on it)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = 127 + 60 * np.sin(x * 0.9) * np.cos(y * 0.7) + 40 * np.sin((x + y) * 0.05)
    img = np.stack([base, np.roll(base, 7, 1), np.roll(base, 13, 0)], -1) + rng.normal(0, 8, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def test_image_info_reads_headers(data_dir):
    assert image_info((data_dir / "tree" / "cats" / "cats_0.jpg").read_bytes()) == ("JPEG", 160, 106)
    assert image_info((data_dir / "tree" / "cats" / "cats_3.png").read_bytes()) == ("PNG", 112, 75)
    gif = cv2.imencode(".bmp", np.zeros((7, 9, 3), np.uint8))[1].tobytes()
    assert image_info(gif) == ("BMP", 9, 7)
    assert image_info(b"not an image") is None
    assert image_info(b"\xff\xd8\xff\xe0\x00") is None  # truncated header


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b) ** 2)
    return 10 * np.log10(255**2 / mse)


def test_reduced_decode_is_antialiased_and_smaller_work():
    src = detailed(1600, 2400)
    data = jpeg(src)
    fast = decode(transform(data, ImageOptions(resize=200, encoding=".png")), 1)
    full = decode(transform(data, ImageOptions(resize=200, encoding=".png", reduced_decode=False)), 1)
    assert fast.shape == full.shape == (200, 300, 3)
    # The antialiased reference: a full decode shrunk with INTER_AREA.
    reference = cv2.resize(decode(data, 1), (300, 200), interpolation=cv2.INTER_AREA)
    assert psnr(fast, reference) > psnr(full, reference) + 3  # closer to the antialiased result than MXNet's way
    assert psnr(fast, reference) > 30


def test_no_reduction_below_three_times_the_target():
    src = detailed(500, 700)
    data = jpeg(src)
    a = transform(data, ImageOptions(resize=200))
    b = transform(data, ImageOptions(resize=200, reduced_decode=False))
    assert a == b


@pytest.mark.parametrize(
    "name,shape",
    [
        ("exif_rotated.jpg", (120, 80, 3)),  # rotated as cv2.imread does
        ("cmyk.jpg", (80, 120, 3)),
        ("progressive.jpg", (80, 120, 3)),
        ("gray16.png", (40, 60, 3)),
        ("rgba.png", (80, 120, 3)),
        ("tiny.png", (1, 1, 3)),
    ],
)
def test_unusual_but_valid_images(data_dir, name, shape):
    data = (data_dir / "odd" / name).read_bytes()
    assert decode(transform(data, ImageOptions()), 1).shape == shape
    assert decode(transform(data, ImageOptions(resize=16)), 1).shape[:2] in {(16, 16), (24, 16), (16, 24)}


def test_unchanged_16_bit_png_to_jpeg_is_scaled_not_saturated(data_dir):
    data = (data_dir / "odd" / "gray16.png").read_bytes()
    out = decode(transform(data, ImageOptions(color=-1)))
    src = decode(data)
    assert out.dtype == np.uint8 and out.shape == src.shape
    assert np.abs(out.astype(int) - src.astype(int) * 255 // 65535).max() <= 3
    png = decode(transform(data, ImageOptions(color=-1, encoding=".png")))
    assert png.dtype == np.uint16 and np.array_equal(png, src)


@pytest.mark.parametrize(
    "data,kind,message",
    [
        (b"", "empty", "the file is empty (0 bytes)"),
        (b"<html><body>404</body></html>", "not-an-image", "it starts with '<html><body>' (text)"),
        (bytes(range(200, 256)) * 4, "not-an-image", "it starts with bytes c8 c9 ca cb cc cd ce cf"),
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "corrupt", "OpenCV could not decode the PNG data (corrupt or truncated)"),
    ],
)
def test_bad_bytes(data, kind, message):
    with pytest.raises(ImageError) as e:
        transform(data, ImageOptions())
    assert e.value.kind == kind
    assert str(e.value).startswith(message)


def test_truncated_jpeg_is_refused_even_if_a_decoder_would_accept_it():
    data = jpeg(detailed(64, 64))
    cut = data[: len(data) * 2 // 3]
    for opts in (ImageOptions(), ImageOptions(pass_through=True)):
        with pytest.raises(ImageError, match=r"truncated JPEG: no end-of-image marker after byte \d+") as e:
            transform(cut, opts)
        assert e.value.kind == "corrupt"


def test_decompression_bomb_refused_from_the_header():
    data = jpeg(np.zeros((64, 64, 3), np.uint8))
    with pytest.raises(ImageError, match=r"JPEG of 64x64 = 4,096 pixels is above --max-pixels 4,000") as e:
        transform(data, ImageOptions(max_pixels=4000))
    assert e.value.kind == "too-large"
    # a PNG that claims 100000 x 100000 pixels is refused before any decoding
    png = bytearray(cv2.imencode(".png", np.zeros((2, 2), np.uint8))[1].tobytes())
    png[16:24] = (100000).to_bytes(4, "big") * 2
    with pytest.raises(ImageError, match=r"PNG of 100000x100000 = 10,000,000,000 pixels"):
        transform(bytes(png), ImageOptions())


def test_pass_through_keeps_bytes(data_dir):
    data = (data_dir / "odd" / "cmyk.jpg").read_bytes()
    assert transform(data, ImageOptions(pass_through=True, resize=10)) is data


def test_options_validation():
    with pytest.raises(ValueError, match="JPEG quality must be between 1 and 100, got 101"):
        ImageOptions(quality=101)
    with pytest.raises(ValueError, match="color must be 1, 0 or -1, got 2"):
        ImageOptions(color=2)


def test_opencv_constants_written_as_numbers_match_cv2():
    from im2rec import dataset, image

    assert image._REDUCED == {
        (1, 2): cv2.IMREAD_REDUCED_COLOR_2,
        (1, 4): cv2.IMREAD_REDUCED_COLOR_4,
        (1, 8): cv2.IMREAD_REDUCED_COLOR_8,
        (0, 2): cv2.IMREAD_REDUCED_GRAYSCALE_2,
        (0, 4): cv2.IMREAD_REDUCED_GRAYSCALE_4,
        (0, 8): cv2.IMREAD_REDUCED_GRAYSCALE_8,
    }
    assert dataset._IMDECODE_FLAG == {"rgb": cv2.IMREAD_COLOR, "bgr": cv2.IMREAD_COLOR, "gray": cv2.IMREAD_GRAYSCALE, "unchanged": cv2.IMREAD_UNCHANGED}
    assert dataset._COLOR_BGR2RGB == cv2.COLOR_BGR2RGB


def test_the_cli_starts_without_opencv():
    import subprocess
    import sys

    code = "import sys, im2rec.cli; print('cv2' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


# --------------------------------------------------------------------------- output sizes: exactly im2rec.py's


def im2rec_py_size(h, w, resize, center_crop):
    """(width, height) of tools/im2rec.py's output, its code transcribed (MXNet 1.9.1, image_encode)."""
    if center_crop:
        if h > w:
            h = w
        else:
            w = h
    if resize:
        if h > w:
            return resize, h * resize // w
        return w * resize // h, resize
    return w, h


def with_exif_orientation(data, orientation):
    """A JPEG with an APP1 Exif segment whose IFD0 holds only Orientation."""
    tiff = b"II*\x00" + (8).to_bytes(4, "little") + (1).to_bytes(2, "little")
    tiff += (0x0112).to_bytes(2, "little") + (3).to_bytes(2, "little") + (1).to_bytes(4, "little") + orientation.to_bytes(2, "little") + b"\0\0"
    tiff += b"\0\0\0\0"
    app1 = b"Exif\0\0" + tiff
    return data[:2] + b"\xff\xe1" + (len(app1) + 2).to_bytes(2, "big") + app1 + data[2:]


SIZES = [(128, 150), (672, 683), (683, 672), (97, 101), (331, 1009), (1009, 331), (257, 263), (800, 793), (793, 800), (8, 9), (1, 1), (1201, 1601)]


@pytest.mark.parametrize("h,w", SIZES)
def test_output_sizes_are_im2rec_py_s_for_every_decode_path(h, w):
    data = jpeg(detailed(h, w))
    for resize in (0, 1, 7, 32, 100, 224):
        for center_crop in (False, True):
            for reduced in (True, False):
                opts = ImageOptions(resize=resize, center_crop=center_crop, reduced_decode=reduced)
                out = decode(transform(data, opts))
                assert out.shape[1::-1] == im2rec_py_size(h, w, resize, center_crop), (resize, center_crop, reduced)


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
@pytest.mark.parametrize("h,w", [(672, 683), (800, 793), (331, 1009)])
def test_output_sizes_of_exif_rotated_jpegs(h, w, orientation):
    """imdecode turns the image as cv2.imread does (im2rec.py's reader): sizes follow the turned image."""
    data = with_exif_orientation(jpeg(detailed(h, w)), orientation)
    th, tw = (w, h) if orientation in (6, 8) else (h, w)
    assert decode(data, cv2.IMREAD_COLOR).shape[:2] == (th, tw)
    for resize in (32, 100):
        for center_crop in (False, True):
            out = decode(transform(data, ImageOptions(resize=resize, center_crop=center_crop)))
            assert out.shape[1::-1] == im2rec_py_size(th, tw, resize, center_crop), (resize, center_crop)


def test_reduced_and_full_decode_crop_the_same_window():
    """A centre crop of a reduced decode shows the same part of the picture as im2rec.py's full decode."""
    img = detailed(600, 1000)
    img[:, :200] = 0  # the left and right margins a centre crop cuts away
    img[:, 800:] = 255
    data = jpeg(img)
    full = decode(transform(data, ImageOptions(resize=64, center_crop=True, reduced_decode=False)))
    reduced = decode(transform(data, ImageOptions(resize=64, center_crop=True)))
    assert full.shape == reduced.shape == (64, 64, 3)
    assert np.abs(full.astype(int) - reduced).mean() < 12


def test_golden_tree_at_resize_32_has_im2rec_py_sizes(data_dir, tmp_path):
    from click.testing import CliRunner

    from im2rec import recordio
    from im2rec.cli import main
    from im2rec.lst import read_lst

    lst = data_dir / "im2rec" / "all.lst"
    assert CliRunner().invoke(main, ["pack", str(lst), str(data_dir / "tree"), str(tmp_path / "r.rec"), "--resize", "32", "-q"]).exit_code == 0
    paths = {e.index: e.path for e in read_lst(lst)}
    with recordio.RecordReader(tmp_path / "r.rec", tmp_path / "r.idx") as r:
        for key in r.keys():
            source = cv2.imread(str(data_dir / "tree" / paths[key]), cv2.IMREAD_COLOR)
            out = decode(recordio.unpack(r.read(key))[1])
            assert out.shape[1::-1] == im2rec_py_size(*source.shape[:2], 32, False), paths[key]
