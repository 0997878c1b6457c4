"""recforge.imaging: every image kind on purpose, every broken one refused by name."""

from __future__ import annotations

import io
import math
import os
import struct

import cv2
import numpy as np
import pytest

from recforge import quarantine
from recforge.imaging import (
    ImageRejected,
    PackOptions,
    choose_scale,
    decode,
    load,
    output_size,
    probe,
    process,
    verify,
)
from tests.common import image_corpus as ic

FULL = PackOptions(resize=0)
IM2REC = PackOptions(resize=64, upscale=True, rounding="floor", interpolation="auto")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def rejected(data: bytes, opts: PackOptions = FULL) -> ImageRejected:
    with pytest.raises(ImageRejected) as info:
        process(data, opts)
    assert info.value.reason in quarantine.FIXES, info.value.reason
    return info.value


class TestProbe:
    def test_jpeg_header(self):
        info = probe(ic.jpeg(ic.photo(96, 128)))
        assert (info.format, info.width, info.height, info.components) == ("jpeg", 128, 96, 3)
        assert info.complete and not info.progressive

    def test_progressive_and_truncated_flags(self):
        data = ic.jpeg(ic.photo(), progressive=True)
        assert probe(data).progressive
        assert not probe(ic.truncated(data)).complete

    def test_png_header(self):
        info = probe(ic.png16(ic.photo(40, 50), gray=True))
        assert (info.format, info.width, info.height, info.precision) == ("png", 50, 40, 16)

    def test_unknown_bytes(self):
        assert probe(os.urandom(64)) is None


def bmp_claiming(width: int, height: int, dib: int = 40) -> bytes:
    """A BMP file header and DIB header claiming width x height (negative: top-down), with
    a token row of pixels: a decompression bomb's header without the bomb."""
    if dib == 12:  # BITMAPCOREHEADER: unsigned 16-bit sides
        header = struct.pack("<IHHHH", 12, width, height, 1, 24)
    else:
        header = struct.pack("<IiiHHIIiiII", dib, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
        header += b"\0" * (dib - len(header))
    start = 14 + len(header)
    return b"BM" + struct.pack("<IHHI", start + 16, 0, 0, start) + header + b"\0" * 16


def gif_claiming(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(ic.photo(16, 24)).save(out, "GIF")
    data = bytearray(out.getvalue())
    data[6:10] = struct.pack("<HH", width, height)  # the logical screen descriptor
    return bytes(data)


def webp_claiming(width: int, height: int, chunk: bytes) -> bytes:
    if chunk == b"VP8X":
        body = struct.pack("<I", 0) + (width - 1).to_bytes(3, "little") \
            + (height - 1).to_bytes(3, "little")
    elif chunk == b"VP8 ":
        body = b"\x10\x02\x00\x9d\x01\x2a" + struct.pack("<HH", width, height) + b"\0" * 8
    else:  # VP8L
        body = b"\x2f" + struct.pack("<I", (width - 1) | (height - 1) << 14) + b"\0" * 8
    riff = b"WEBP" + chunk + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", len(riff)) + riff


def tiff_claiming(width: int, height: int, order: str = "<") -> bytes:
    entries = [(256, 4, width), (257, 3 if height < 65536 else 4, height), (258, 3, 8),
               (259, 3, 1), (262, 3, 1), (273, 4, 8), (277, 3, 1), (279, 4, 1)]
    ifd = struct.pack(order + "H", len(entries))
    for tag, kind, value in entries:
        field = struct.pack(order + ("HH" if kind == 3 else "I"), *((value, 0) if kind == 3
                                                                   else (value,)))
        ifd += struct.pack(order + "HHI", tag, kind, 1) + field
    head = (b"II*\0" if order == "<" else b"MM\0*") + struct.pack(order + "I", 9)
    return head + b"\0" + ifd + struct.pack(order + "I", 0)


CLAIMED_SIZES = {
    "bmp": (bmp_claiming(50000, 50000), 50000, 50000),
    "bmp-wide": (bmp_claiming(50000, 40000), 50000, 40000),
    "bmp-top-down": (bmp_claiming(50000, -40000), 50000, 40000),
    "bmp-v5": (bmp_claiming(40000, 50000, dib=124), 40000, 50000),
    "bmp-core": (bmp_claiming(65535, 40000, dib=12), 65535, 40000),
    "png": (ic.png_header_only(50000, 40000), 50000, 40000),
    "jpeg": (ic.jpeg_claiming(50000, 40000), 50000, 40000),
    "gif": (gif_claiming(50000, 40000), 50000, 40000),
    "webp-vp8x": (webp_claiming(50000, 40000, b"VP8X"), 50000, 40000),
    "webp-vp8": (webp_claiming(16000, 12000, b"VP8 "), 16000, 12000),
    "webp-vp8l": (webp_claiming(16000, 12000, b"VP8L"), 16000, 12000),
    "tiff-le": (tiff_claiming(50000, 40000), 50000, 40000),
    "tiff-be": (tiff_claiming(40000, 70000, ">"), 40000, 70000),
    "ppm": (b"P6\n50000 40000\n255\n" + b"\0" * 48, 50000, 40000),  # Pillow reads it
}


@pytest.mark.parametrize("name", CLAIMED_SIZES)
def test_pixel_limit_reports_the_headers_width_x_height(name):
    data, w, h = CLAIMED_SIZES[name]
    info = probe(data)
    assert (info.width, info.height) == (w, h)
    err = rejected(data)
    assert err.reason == "too_many_pixels"
    assert err.detail.startswith(f"{w}x{h} = {w * h} pixels > max_pixels")


@pytest.mark.parametrize("ext, params", [(".bmp", []), (".tiff", []),
                                         (".webp", [cv2.IMWRITE_WEBP_QUALITY, 80]),
                                         (".webp", [cv2.IMWRITE_WEBP_QUALITY, 101])])
def test_real_headers_give_the_decoded_size(ext, params):
    data = cv2.imencode(ext, ic.photo(40, 50), params)[1].tobytes()
    info = probe(data)
    assert (info.width, info.height) == (50, 40)
    assert process(data, FULL).width == 50


def test_a_top_down_bmp_decodes_at_its_header_size():
    img = ic.photo(6, 8)
    data = bytearray(cv2.imencode(".bmp", img)[1].tobytes())
    rows = [bytes(data[54 + r * 24:54 + (r + 1) * 24]) for r in range(6)]
    data[22:26] = struct.pack("<i", -6)  # the same rows, stored top-down
    data[54:] = b"".join(reversed(rows))
    assert (probe(bytes(data)).width, probe(bytes(data)).height) == (8, 6)
    assert np.array_equal(cv2.imdecode(np.frombuffer(bytes(data), np.uint8), 1), img)
    assert (process(bytes(data), FULL).width, process(bytes(data), FULL).height) == (8, 6)


class TestRefusals:
    def test_zero_bytes(self):
        assert rejected(b"").reason == "zero_bytes"

    def test_not_an_image(self):
        assert rejected(b"hello, I am a text file\n" * 20).reason == "undecodable"

    @pytest.mark.parametrize("progressive", [False, True])
    def test_truncated_jpeg(self, progressive):
        err = rejected(ic.truncated(ic.jpeg(ic.photo(), progressive=progressive)))
        assert err.reason == "truncated"
        assert "end-of-image" in err.detail

    def test_corrupt_jpeg_is_caught_from_libjpeg_warning(self):
        data = ic.corrupt_jpeg(ic.jpeg(ic.photo()))
        assert cv2.imdecode(np.frombuffer(data, np.uint8), 1) is not None  # OpenCV says ok
        err = rejected(data)
        assert err.reason == "corrupt"
        assert "Corrupt JPEG data" in err.detail

    def test_corrupt_jpeg_caught_at_reduced_scale_too(self):
        data = ic.corrupt_jpeg(ic.jpeg(ic.photo(512, 512)))
        assert rejected(data, PackOptions(resize=64)).reason == "corrupt"

    def test_truncated_png(self):
        assert rejected(ic.truncated(ic.png(ic.photo()))).reason == "truncated"

    def test_crc_broken_png(self):
        assert rejected(ic.crc_broken_png(ic.png(ic.photo()))).reason == "corrupt"

    @pytest.mark.parametrize("data", [ic.png_header_only(30000, 30000),
                                      ic.jpeg_claiming(60000, 60000)], ids=["png", "jpeg"])
    def test_pixel_limit_before_decoding(self, data):
        err = rejected(data)
        assert err.reason == "too_many_pixels"
        assert "> max_pixels 178956970" in err.detail

    def test_pixel_limit_is_configurable(self):
        data = ic.jpeg(ic.photo(96, 128))
        assert rejected(data, PackOptions(resize=0, max_pixels=96 * 128 - 1)).reason == \
            "too_many_pixels"
        assert process(data, PackOptions(resize=0, max_pixels=96 * 128)).width == 128

    def test_warnings_do_not_leak_or_stick(self, capfd):
        process(ic.jpeg(ic.photo()), FULL)
        with pytest.raises(ImageRejected):
            process(ic.corrupt_jpeg(ic.jpeg(ic.photo())), FULL)
        os.write(2, b"after\n")
        err = capfd.readouterr().err
        assert "Corrupt JPEG" not in err  # captured, turned into the rejection
        assert err.endswith("after\n")  # fd 2 is back where it was


class TestImageKinds:
    def test_trailing_bytes_after_eoi_are_fine(self):
        data = ic.jpeg(ic.photo()) + b"camera maker junk" * 10
        assert process(data, FULL).height == 96

    def test_grayscale_to_colour_and_gray(self):
        gray = cv2.cvtColor(ic.photo(), cv2.COLOR_BGR2GRAY)
        data = ic.jpeg(gray)
        assert process(data, FULL).channels == 3
        assert process(data, PackOptions(resize=0, color=0)).channels == 1

    def test_alpha_dropped_for_colour_kept_for_unchanged_png(self):
        data = ic.rgba_png(ic.photo())
        assert process(data, FULL).channels == 3
        keep = process(data, PackOptions(resize=0, color=-1, encoding=".png"))
        assert keep.channels == 4
        assert cv2.imdecode(np.frombuffer(keep.data, np.uint8), -1).shape[2] == 4
        assert process(data, PackOptions(resize=0, color=-1)).channels == 3  # JPEG: no alpha

    def test_16bit_png(self):
        img = ic.photo()
        data = ic.png16(img)
        as8 = decode(data, FULL)
        assert as8.dtype == np.uint8 and np.abs(as8.astype(int) - img).max() <= 1
        kept = decode(data, PackOptions(resize=0, color=-1, encoding=".png"))
        assert kept.dtype == np.uint16
        # OpenCV's own JPEG fallback saturates 16-bit to 255 (white); we scale.
        scaled = decode(data, PackOptions(resize=0, color=-1, encoding=".jpg"))
        assert scaled.dtype == np.uint8 and np.abs(scaled.astype(int) - img).max() <= 1

    def test_cmyk_jpeg(self):
        img = ic.photo()
        out = decode(ic.cmyk_jpeg(img), FULL)
        assert out.shape == img.shape and psnr(out, img) > 30

    def test_palette_png(self):
        assert decode(ic.palette_png(ic.photo()), FULL).shape == (96, 128, 3)

    @pytest.mark.parametrize("resize", [0, 40], ids=["full", "reduced"])
    def test_exif_orientation_applied_for_colour(self, resize):
        img = ic.photo(320, 480)
        data = ic.exif_jpeg(img, 6)  # "rotate 90 CW to display"
        opts = PackOptions(resize=resize, rounding="floor", upscale=True)
        out = load(data, opts)
        expect = cv2.rotate(img, cv2.ROTATE_90_CLOCKWISE)
        if resize:
            assert choose_scale(320, 480, opts) == 8
            expect = cv2.resize(expect, (40, 60), interpolation=cv2.INTER_AREA)
        assert out.shape == expect.shape
        assert psnr(out, expect) > 28

    def test_exif_orientation_not_applied_for_unchanged(self):
        data = ic.exif_jpeg(ic.photo(96, 128), 6)
        assert decode(data, PackOptions(resize=0, color=-1)).shape[:2] == (96, 128)

    def test_progressive_jpeg_reduced_decode(self):
        img = ic.photo(512, 512)
        a = load(ic.jpeg(img, progressive=True), IM2REC)
        b = load(ic.jpeg(img), IM2REC)
        assert a.shape == b.shape == (64, 64, 3) and psnr(a, b) > 40


class TestGeometry:
    @pytest.mark.parametrize("h,w,expect", [
        (375, 500, (64, 85)), (500, 375, (85, 64)), (64, 64, (64, 64)), (30, 40, (64, 85)),
        (1000, 3, (21333, 64))])
    def test_im2rec_sizes(self, h, w, expect):
        assert output_size(h, w, IM2REC) == expect

    def test_pipeline_sizes_round_and_never_upscale(self):
        opts = PackOptions(resize=64)
        assert output_size(375, 500, opts) == (64, 85)
        assert output_size(30, 40, opts) == (30, 40)

    @pytest.mark.parametrize("h,w,scale", [(512, 512, 8), (511, 600, 8), (300, 500, 8),
                                           (511, 512, 1), (256, 384, 8), (255, 384, 4),
                                           (100, 100, 2), (60, 100, 1), (1200, 1600, 8),
                                           (697, 1115, 8), (777, 1036, 8), (255, 257, 4)])
    def test_reduced_scale_whenever_at_least_the_target(self, h, w, scale):
        # any size: the largest scale whose reduced image is still >= the target, except
        # where the reduced shape could not tell a transposing EXIF orientation (511x512)
        assert choose_scale(h, w, PackOptions(resize=32, rounding="floor")) == scale

    def test_no_reduction_without_resize_or_for_png(self):
        assert choose_scale(4000, 4000, FULL) == 1

    @pytest.mark.parametrize("h,w,crop", [(400, 600, False), (400, 600, True),
                                          (600, 400, True)])
    def test_reduced_decode_matches_full_decode(self, h, w, crop):
        img = ic.photo(h, w, seed=3)
        data = ic.jpeg(img, quality=95)
        fast = PackOptions(resize=48, rounding="floor", upscale=True, center_crop=crop,
                           interpolation="area")
        slow = PackOptions(resize=48, rounding="floor", upscale=True, center_crop=crop,
                           interpolation="area", reduced_decode=False)
        a, b = load(data, fast), load(data, slow)
        assert a.shape == b.shape
        # Same geometry: on this photo a quarter-pixel shift scores below 27 dB.
        assert psnr(a, b) > 28

    def test_center_crop_square(self):
        out = load(ic.jpeg(ic.photo(100, 160)), PackOptions(resize=0, center_crop=True))
        assert out.shape == (100, 100, 3)


class TestOptions:
    def test_bad_options_are_named(self):
        with pytest.raises(ValueError, match="interpolation 'bilinear'"):
            PackOptions(interpolation="bilinear")
        with pytest.raises(ValueError, match="encoding '.webp'"):
            PackOptions(encoding=".webp")

    def test_deterministic(self):
        data = ic.jpeg(ic.photo(300, 500))
        assert process(data, IM2REC) == process(data, IM2REC)

    def test_verify_reads_whole_jpeg_cheaply(self):
        good = ic.jpeg(ic.photo(512, 512))
        assert verify(good, FULL).width == 512
        with pytest.raises(ImageRejected, match="corrupt"):
            verify(ic.corrupt_jpeg(good), FULL)
        with pytest.raises(ImageRejected, match="truncated"):
            verify(ic.truncated(good), FULL)
