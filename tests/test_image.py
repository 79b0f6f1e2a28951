"""Per-image work: headers, decoding at reduced scale, odd but valid images, bad bytes."""

import dataclasses
import struct
import zlib

import cv2
import numpy as np
import pytest

from im2rec.errors import ImageError
from im2rec.image import ImageOptions, composite, decode_image, format_color, image_info, parse_color, transform, transform_image


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


@pytest.mark.slow
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
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "corrupt", "PNG: no chunk at byte 8: its type would be b'\\x00\\x00\\x00\\x00'"),
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
        with pytest.raises(ImageError, match=r"^truncated JPEG: no end-of-image marker after byte 609 \(1,902 bytes\)$") as e:
            transform(cut, opts)
        assert e.value.kind == "corrupt"


def test_truncated_png_is_refused_in_both_modes():
    data = cv2.imencode(".png", detailed(64, 64))[1].tobytes()
    for cut in (data[: len(data) // 2], data[:-1]):
        for opts in (ImageOptions(), ImageOptions(pass_through=True)):
            with pytest.raises(ImageError, match=rf"^truncated PNG: no IEND chunk \({len(cut):,} bytes\)$") as e:
                transform(cut, opts)
            assert e.value.kind == "corrupt"
    transform(data + b"trailing bytes", ImageOptions(pass_through=True))  # after IEND: not our business


def test_decompression_bomb_refused_from_the_header():
    data = jpeg(np.zeros((64, 64, 3), np.uint8))
    with pytest.raises(ImageError, match=r"^JPEG of 64x64 = 4,096 pixels is above --max-pixels 4,000 \(a decompression bomb\?\)$") as e:
        transform(data, ImageOptions(max_pixels=4000))
    assert e.value.kind == "too-large"
    # a PNG that claims 100000 x 100000 pixels is refused before any decoding
    png = bytearray(cv2.imencode(".png", np.zeros((2, 2), np.uint8))[1].tobytes())
    png[16:24] = (100000).to_bytes(4, "big") * 2
    with pytest.raises(ImageError, match=r"^PNG of 100000x100000 = 10,000,000,000 pixels is above --max-pixels 89,478,485 \(a decompression bomb\?\)$"):
        transform(bytes(png), ImageOptions())


def test_pass_through_keeps_bytes(data_dir):
    data = (data_dir / "odd" / "cmyk.jpg").read_bytes()
    assert transform(data, ImageOptions(pass_through=True, resize=10)) is data


def test_options_validation():
    with pytest.raises(ValueError, match=r"^JPEG quality must be between 1 and 100, got 101$"):
        ImageOptions(quality=101)
    with pytest.raises(ValueError, match=r"^color must be 1, 0 or -1, got 2$"):
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# --------------------------------------------------------------------------- transparency


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def handmade_png(width, height, color_type, depth, rows, chunks=b""):
    """A PNG written with zlib and struct, for what cv2.imwrite cannot express (palettes, tRNS)."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    idat = zlib.compress(b"".join(b"\0" + row for row in rows))
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + chunks + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


PALETTE = png_chunk(b"PLTE", bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255]))


def rgba_image(h=24, w=32, alpha=None, seed=0):
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
    img[..., 3] = rng.integers(0, 256, (h, w)) if alpha is None else alpha
    return img


def encoded(ext, img, *params):
    return cv2.imencode(ext, img, list(params))[1].tobytes()


TRANSPARENCY_CASES = {
    # name: (file bytes, had transparency)
    "rgba": (encoded(".png", rgba_image()), True),
    "rgba, alpha all 255": (encoded(".png", rgba_image(alpha=255)), False),
    "rgba, one pixel 254": (encoded(".png", np.dstack([rgba_image()[..., :3], np.pad(np.full((1, 1), 254, np.uint8), ((0, 23), (0, 31)), constant_values=255)])), True),
    "rgba 16-bit": (encoded(".png", rgba_image().astype(np.uint16) * 257), True),
    "rgba 16-bit, alpha all 65535": (encoded(".png", np.dstack([rgba_image()[..., :3].astype(np.uint16) * 257, np.full((24, 32), 65535, np.uint16)])), False),
    "gray+alpha": (handmade_png(2, 1, 4, 8, [bytes([100, 0, 200, 255])]), True),
    "gray+alpha 16-bit": (handmade_png(2, 1, 4, 16, [struct.pack(">4H", 100, 65535, 50000, 65534)]), True),
    "palette with tRNS": (handmade_png(4, 1, 3, 8, [bytes([0, 1, 2, 3])], PALETTE + png_chunk(b"tRNS", bytes([0, 128]))), True),
    "palette with tRNS all 255": (handmade_png(4, 1, 3, 8, [bytes([0, 1, 2, 3])], PALETTE + png_chunk(b"tRNS", bytes([255, 255]))), False),
    "palette 2-bit with tRNS": (handmade_png(4, 1, 3, 2, [bytes([0b00011011])], PALETTE + png_chunk(b"tRNS", bytes([0]))), True),
    "palette without tRNS": (handmade_png(4, 1, 3, 8, [bytes([0, 1, 2, 3])], PALETTE), False),
    "rgb with tRNS": (handmade_png(2, 1, 2, 8, [bytes([10, 20, 30, 40, 50, 60])], png_chunk(b"tRNS", struct.pack(">3H", 10, 20, 30))), True),
    # OpenCV returns gray+tRNS without alpha: the transparent value is read from the chunk
    "gray with tRNS": (handmade_png(4, 1, 0, 8, [bytes([50, 100, 150, 200])], png_chunk(b"tRNS", struct.pack(">H", 50))), True),
    "gray with an unused tRNS": (handmade_png(4, 1, 0, 8, [bytes([51, 100, 150, 200])], png_chunk(b"tRNS", struct.pack(">H", 50))), False),
    "gray 1-bit with tRNS": (handmade_png(8, 1, 0, 1, [bytes([0b10110000])], png_chunk(b"tRNS", struct.pack(">H", 1))), True),
    "gray 16-bit with tRNS": (handmade_png(2, 1, 0, 16, [struct.pack(">2H", 1000, 2000)], png_chunk(b"tRNS", struct.pack(">H", 2000))), True),
    "rgb": (encoded(".png", rgba_image()[..., :3]), False),
    "webp lossless": (encoded(".webp", rgba_image(), cv2.IMWRITE_WEBP_QUALITY, 101), True),
    "webp lossy": (encoded(".webp", rgba_image(), cv2.IMWRITE_WEBP_QUALITY, 80), True),
    "webp opaque": (encoded(".webp", rgba_image(alpha=255), cv2.IMWRITE_WEBP_QUALITY, 101), False),
    "bmp 32-bit": (encoded(".bmp", rgba_image()), True),
    "tiff": (encoded(".tiff", rgba_image()), True),
    "gif with a transparent index": (
        b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;",
        True,
    ),
    "jpeg": (jpeg(rgba_image()[..., :3]), False),
}


@pytest.mark.parametrize("name", list(TRANSPARENCY_CASES))
def test_transparency_is_detected_and_pixels_stay_im2rec_py_s(name):
    data, had = TRANSPARENCY_CASES[name]
    for color, flag in ((1, cv2.IMREAD_COLOR), (0, cv2.IMREAD_GRAYSCALE)):
        out = decode_image(data, ImageOptions(color=color))
        assert out.transparent is had, (name, color)
        assert np.array_equal(out.image, decode(data, flag)), (name, color)  # what im2rec.py's cv2.imread gives
        assert transform_image(data, ImageOptions(color=color)) == (transform(data, ImageOptions(color=color)), had)
    assert decode_image(data, ImageOptions(color=-1)).transparent is False  # alpha kept: nothing dropped


def test_opaque_images_keep_their_bytes_with_alpha_background():
    for name, (data, had) in TRANSPARENCY_CASES.items():
        if not had:
            for opts in (ImageOptions(resize=16), ImageOptions(resize=16, color=0, encoding=".png")):
                with_bg = transform_image(data, dataclasses.replace(opts, alpha_background=(255, 0, 255)))
                assert with_bg == (transform(data, opts), False), name


def test_jpegs_ignore_alpha_background_on_every_decode_path():
    data = jpeg(detailed(900, 1200))
    for opts in (ImageOptions(resize=100), ImageOptions(resize=100, reduced_decode=False), ImageOptions(color=0)):
        assert transform(data, dataclasses.replace(opts, alpha_background=(0, 0, 0))) == transform(data, opts)


def test_composite_is_colour_times_alpha_plus_background_rounded():
    c, a = np.meshgrid(np.arange(256), np.arange(256))
    img = np.dstack([c, c, c, a]).astype(np.uint8)
    for bg in ((0, 0, 0), (255, 255, 255), (12, 200, 77)):
        want = np.round(c[..., None] * (a[..., None] / 255) + np.array(bg[::-1]) * (1 - a[..., None] / 255))
        assert np.array_equal(composite(img, bg), want.astype(np.uint8)), bg
    # 16 bits: the same, with a = alpha / 65535 and the colour scaled to 0-255
    img16 = np.array([[[65535, 32768, 0, 32768], [1000, 2000, 3000, 0], [65535, 65535, 65535, 65535]]], np.uint16)
    assert composite(img16, (0, 0, 0)).tolist() == [[[128, 64, 0], [0, 0, 0], [255, 255, 255]]]
    assert composite(img16, (255, 255, 255)).tolist() == [[[255, 191, 127], [255, 255, 255], [255, 255, 255]]]


def test_a_picture_kept_in_alpha_shows_over_black():
    """MATE's 'abstract' wallpapers: white colour channels, the picture in the alpha channel."""
    picture = rgba_image()[..., 3]
    wallpaper = np.dstack([np.full_like(picture, 255)] * 3 + [picture])
    data = encoded(".png", wallpaper)
    assert np.all(decode_image(data, ImageOptions()).image == 255)  # im2rec.py's blank image
    over_black = decode_image(data, ImageOptions(alpha_background=(0, 0, 0)))
    assert over_black.transparent and over_black.image.shape == (24, 32, 3)
    assert all(np.array_equal(over_black.image[..., i], picture) for i in range(3))
    gray = decode_image(data, ImageOptions(color=0, alpha_background=(0, 0, 0))).image
    assert np.array_equal(gray, picture)
    assert np.all(decode_image(data, ImageOptions(alpha_background=(255, 255, 255))).image == 255)


def test_palette_and_gray_trns_composite():
    pal = TRANSPARENCY_CASES["palette with tRNS"][0]  # red a=0, green a=128, blue and white opaque; over blue:
    assert decode_image(pal, ImageOptions(alpha_background=(0, 0, 255))).image.tolist() == [[[255, 0, 0], [127, 128, 0], [255, 0, 0], [255, 255, 255]]]  # BGR
    gray = TRANSPARENCY_CASES["gray with tRNS"][0]  # 50 is transparent
    assert decode_image(gray, ImageOptions(alpha_background=(255, 255, 255))).image[..., 0].tolist() == [[255, 100, 150, 200]]


def with_png_exif(data, orientation):
    tiff = b"II*\x00" + (8).to_bytes(4, "little") + (1).to_bytes(2, "little")
    tiff += (0x0112).to_bytes(2, "little") + (3).to_bytes(2, "little") + (1).to_bytes(4, "little") + orientation.to_bytes(2, "little") + b"\0\0\0\0\0\0"
    return data[:33] + png_chunk(b"eXIf", tiff) + data[33:]  # after IHDR


def with_webp_exif(data, width, height, orientation):
    tiff = with_png_exif(b"\0" * 33, orientation)[33 + 8 : -4]
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes([0x18, 0, 0, 0]) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    body = b"WEBP" + vp8x + data[12:] + b"EXIF" + struct.pack("<I", len(tiff)) + tiff
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize("orientation", range(1, 9))
def test_composite_is_turned_as_the_plain_decode_is(orientation):
    """imdecode turns PNG and WebP by their EXIF, except with IMREAD_UNCHANGED (where alpha is): turned alike."""
    img = rgba_image(5, 7)
    flat = composite(img, (0, 0, 0))  # what compositing the unturned image gives
    for make in (lambda x: with_png_exif(encoded(".png", x), orientation), lambda x: with_webp_exif(encoded(".webp", x, cv2.IMWRITE_WEBP_QUALITY, 101), 7, 5, orientation)):
        want = decode(make(flat), cv2.IMREAD_COLOR)  # cv2 turns the composited picture
        got = decode_image(make(img), ImageOptions(alpha_background=(0, 0, 0)))
        assert got.transparent and np.array_equal(got.image, want)
        assert np.array_equal(decode_image(make(img), ImageOptions()).image, decode(make(img), cv2.IMREAD_COLOR))


def test_parse_color():
    assert parse_color("white") == (255, 255, 255)
    assert parse_color(" Black ") == (0, 0, 0)
    assert parse_color("#FF8000") == parse_color("#ff8000") == parse_color("255,128,0") == parse_color("255, 128, 0") == (255, 128, 0)
    assert format_color((255, 128, 0)) == "#FF8000"
    for bad in ("pink", "#FF80", "#GG0000", "256,0,0", "1,2", "-1,0,0", "", "1,2,3,4"):
        with pytest.raises(ValueError, match=r"is not a colour: use white, black, #RRGGBB or R,G,B \(each 0-255\)"):
            parse_color(bad)


def test_alpha_background_options_validation():
    assert ImageOptions(alpha_background=[1, 2, 3]).alpha_background == (1, 2, 3)
    with pytest.raises(ValueError, match=r"^alpha_background must be \(R, G, B\) with each 0-255, got \(0, 0, 256\)$"):
        ImageOptions(alpha_background=(0, 0, 256))
    with pytest.raises(ValueError, match=r"^--alpha-background composites decoded images: it cannot be combined with --pass-through, which stores the files unchanged$"):
        ImageOptions(alpha_background=(0, 0, 0), pass_through=True)
    with pytest.raises(ValueError, match=r"^--alpha-background cannot be combined with --color -1, which keeps the alpha channel: use --color 1 or 0$"):
        ImageOptions(alpha_background=(0, 0, 0), color=-1)
