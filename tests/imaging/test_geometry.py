"""Reduced JPEG decode at any size, and the cheap shrink after a full decode: output size
and geometry are im2rec's, pixels agree with an anti-aliased full-decode reference.

The reference is what im2rec would do with an anti-aliasing filter: full decode (OpenCV
applies the EXIF orientation), im2rec's centre crop and output size, then ``INTER_AREA``
in float. The test photos have native-resolution detail (the astronaut tiled, not
upscaled), so a grid error of a fraction of a pixel costs many dB (checked below).
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from recforge import imaging as im
from recforge.imaging import PackOptions, load, probe
from tests.common import image_corpus as ic

R = 64
BOUND_DB = 27.0  # exact geometry scores 28.5-36 dB here; half a pixel off, or a flip
# ignoring libjpeg's padded block, scores 18-23


def detailed(h: int, w: int, seed: int = 0) -> np.ndarray:
    """h x w BGR with native-resolution photo detail (mirrored tiles of a real photo)."""
    base = ic._astronaut()
    tile = np.concatenate([base, base[:, ::-1]], 1)
    tile = np.concatenate([tile, tile[::-1]], 0)
    y, x = np.random.default_rng(seed).integers(0, 512, 2)
    big = np.tile(tile, ((h + y) // 1024 + 1, (w + x) // 1024 + 1, 1))
    return np.ascontiguousarray(big[y:y + h, x:x + w])


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def im2rec_crop_and_size(img: np.ndarray, crop: bool) -> tuple[np.ndarray, tuple[int, int]]:
    """MXNet 1.9.1 tools/im2rec.py's centre crop and resize size, verbatim."""
    if crop:
        if img.shape[0] > img.shape[1]:
            margin = (img.shape[0] - img.shape[1]) // 2
            img = img[margin:margin + img.shape[1], :]
        else:
            margin = (img.shape[1] - img.shape[0]) // 2
            img = img[:, margin:margin + img.shape[0]]
    if img.shape[0] > img.shape[1]:
        newsize = (R, img.shape[0] * R // img.shape[1])
    else:
        newsize = (img.shape[1] * R // img.shape[0], R)
    return img, newsize


def reference(data: bytes, crop: bool, flag: int = cv2.IMREAD_COLOR) -> np.ndarray:
    full = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
    full, size = im2rec_crop_and_size(full, crop)
    return cv2.resize(full.astype(np.float32), size, interpolation=cv2.INTER_AREA)


def opts(crop: bool, **kw) -> PackOptions:
    return PackOptions(resize=R, upscale=True, rounding="floor", center_crop=crop,
                       interpolation="auto", **kw)


# Arbitrary sizes, none a multiple of 8, >= 2x the target: the old grid-drift rule
# refused a reduced decode for most of them.
SIZES = [(697, 1115), (777, 1036), (1058, 1411), (916, 1221), (333, 517), (389, 517),
         (261, 390), (517, 333), (1001, 761), (131, 203), (255, 257), (643, 643)]


@pytest.fixture
def decoded_flags(monkeypatch) -> list[int]:
    flags: list[int] = []
    real = im.decode_raw

    def spy(data, info, flag):
        flags.append(flag)
        return real(data, info, flag)

    monkeypatch.setattr(im, "decode_raw", spy)
    return flags


class TestExifOrientation:
    @pytest.mark.parametrize("orientation", range(1, 9))
    def test_probe_reads_it(self, orientation):
        assert probe(ic.exif_jpeg(ic.photo(40, 60), orientation)).orientation == orientation

    def test_big_endian_and_absent(self):
        tiff = b"MM\x00\x2a\x00\x00\x00\x08\x00\x01" + b"\x01\x12\x00\x03\x00\x00\x00\x01" \
            + b"\x00\x06\x00\x00" + b"\x00\x00\x00\x00"
        app1 = b"\xff\xe1" + (len(tiff) + 8).to_bytes(2, "big") + b"Exif\x00\x00" + tiff
        plain = ic.jpeg(ic.photo(40, 60))
        assert probe(plain).orientation == 1
        assert probe(plain[:2] + app1 + plain[2:]).orientation == 6


class TestReducedDecodeAnySize:
    @pytest.mark.parametrize("h,w", SIZES)
    def test_reduced_decode_used_at_2x_the_target(self, h, w, decoded_flags):
        load(ic.jpeg(detailed(h, w)), opts(False))
        # the largest scale still >= the target, unless the reduced shape could not show
        # a transposing EXIF orientation (then the next one down)
        scale = max(s for s in (2, 4, 8) if min(h, w) >= s * R
                    and (h == w or -(-h // s) != -(-w // s)))
        assert decoded_flags == [im._reduced_flag(scale, 1)]

    def test_full_decode_below_2x(self, decoded_flags):
        load(ic.jpeg(detailed(100, 150)), opts(False))
        assert decoded_flags == [cv2.IMREAD_COLOR]

    @pytest.mark.parametrize("crop", [False, True], ids=["resize", "center-crop"])
    @pytest.mark.parametrize("h,w", SIZES[:6] + SIZES[7:])
    def test_size_and_pixels_match_reference(self, h, w, crop):
        data = ic.jpeg(detailed(h, w, seed=h), quality=95)
        ref = reference(data, crop)
        out = load(data, opts(crop))
        assert out.shape == ref.shape  # im2rec's output size, exactly
        assert psnr(out, ref) > BOUND_DB

    @pytest.mark.parametrize("orientation", range(1, 9))
    @pytest.mark.parametrize("crop", [False, True], ids=["resize", "center-crop"])
    @pytest.mark.parametrize("h,w", [(697, 1115), (389, 517)])
    def test_every_exif_orientation(self, h, w, crop, orientation, decoded_flags):
        data = ic.exif_jpeg(detailed(h, w, seed=orientation), orientation)
        ref = reference(data, crop)  # OpenCV applies the orientation, as im2rec's imread
        out = load(data, opts(crop))
        assert decoded_flags[0] != cv2.IMREAD_COLOR  # the reduced path was taken
        assert out.shape == ref.shape
        # a flip puts libjpeg's padded block on the other side; ignoring that scores ~20 dB
        assert psnr(out, ref) > BOUND_DB

    def test_bound_catches_half_a_pixel(self):
        data = ic.jpeg(detailed(697, 1115), quality=95)
        ref = reference(data, False)
        shifted = cv2.warpAffine(ref, np.float32([[1, 0, 0.5], [0, 1, 0]]),
                                 (ref.shape[1], ref.shape[0]), borderMode=cv2.BORDER_REPLICATE)
        assert psnr(load(data, opts(False)), ref) > BOUND_DB > psnr(shifted, ref) + 3

    def test_beats_im2rec_bilinear_against_the_reference(self):
        data = ic.jpeg(detailed(777, 1036), quality=95)
        ref = reference(data, False)
        full = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        bilinear = cv2.resize(full, (ref.shape[1], ref.shape[0]))  # im2rec's pixels
        assert psnr(load(data, opts(False)), ref) > psnr(bilinear, ref) + 5

    def test_gray(self):
        data = ic.jpeg(detailed(697, 1115))
        ref = reference(data, False, cv2.IMREAD_GRAYSCALE)
        out = load(data, opts(False, color=0))
        assert out.shape == ref.shape and psnr(out, ref) > BOUND_DB


class TestResample:
    def test_resize_and_warp_paths_agree(self):
        img = detailed(120, 170)
        crop, out = (0, 239, 0, 339), (64, 91)  # a 2x grid, edge-aligned: the resize path
        fast = im._resample(img, ((2, 0), (2, 0)), crop, out, cv2.INTER_CUBIC)
        sx, sy = 339 / (91 * 2), 239 / (64 * 2)
        m = np.array([[sx, 0, 0.5 * sx - 0.5], [0, sy, 0.5 * sy - 0.5]])
        warp = cv2.warpAffine(img, m, (91, 64), flags=cv2.INTER_CUBIC | cv2.WARP_INVERSE_MAP,
                              borderMode=cv2.BORDER_REPLICATE)
        assert fast.shape == warp.shape == (64, 91, 3)
        assert psnr(fast, warp) > 40

    def test_identity(self):
        img = detailed(64, 80)
        out = im._resample(img, ((1, 0), (1, 0)), (0, 64, 0, 80), (64, 80), cv2.INTER_CUBIC)
        assert np.array_equal(out, img)


class TestCheapShrink:
    @pytest.mark.parametrize("h,w", [(697, 1115), (1001, 761), (261, 390), (333, 517)])
    def test_png_close_to_area(self, h, w):
        data = ic.png(detailed(h, w, seed=w))
        ref = reference(data, False)
        out = load(data, opts(False))
        assert out.shape == ref.shape
        assert psnr(out, ref) > BOUND_DB
        # control: bilinear without the box step aliases and scores 5-9 dB lower
        full = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert psnr(out, ref) > psnr(cv2.resize(full, (ref.shape[1], ref.shape[0])), ref) + 4

    def test_jpeg_without_reduced_decode(self):
        data = ic.jpeg(detailed(777, 1036), quality=95)
        ref = reference(data, True)
        out = load(data, opts(True, reduced_decode=False))
        assert out.shape == ref.shape and psnr(out, ref) > BOUND_DB
