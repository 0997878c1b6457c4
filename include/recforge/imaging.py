"""Decode, check, resize and re-encode one image for a record; refuse bad input by name.

Every refusal is an ``ImageRejected`` with a quarantine reason (see ``quarantine.FIXES``):
the caller records it and carries on with the next image, so one bad file never costs
the rest of the run.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import cv2
import numpy as np

INTERPOLATIONS = {
    "area": cv2.INTER_AREA,
    "linear": cv2.INTER_LINEAR,
    "cubic": cv2.INTER_CUBIC,
    "lanczos": cv2.INTER_LANCZOS4,
    "nearest": cv2.INTER_NEAREST,
}


class ImageRejected(Exception):
    """This image cannot be packed; ``reason`` is a quarantine reason, ``detail`` says why."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class PackOptions:
    resize: int = 256
    upscale: bool = False
    quality: int = 95
    encoding: str = ".jpg"
    color: int = 1
    interpolation: str = "area"
    max_pixels: int = 178_956_970

    @classmethod
    def from_spec(cls, pack) -> PackOptions:
        return cls(pack.resize, pack.upscale, pack.quality, pack.encoding, pack.color,
                   pack.interpolation, pack.max_pixels)


@dataclass(frozen=True)
class EncodedImage:
    data: bytes
    height: int
    width: int
    channels: int


def probe_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the image header without decoding pixels; None if unknown."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as im:
                return im.size
    except Exception:
        return None


def check_complete(data: bytes) -> None:
    """Refuse JPEG/PNG data that ends early: libjpeg fills the missing part with grey and
    only warns on stderr, so ``cv2.imdecode`` alone would pack a damaged image."""
    if data[:3] == b"\xff\xd8\xff":
        tail = data.rstrip(b"\x00")[-2:]
        if tail != b"\xff\xd9":
            raise ImageRejected("truncated", "JPEG data has no end-of-image marker (FFD9)")
    elif data[:8] == b"\x89PNG\r\n\x1a\n":
        if b"IEND" not in data[-16:]:
            raise ImageRejected("truncated", "PNG data has no IEND chunk")


def decode(data: bytes, opts: PackOptions) -> np.ndarray:
    """Decode to a uint8 array (BGR or gray), refusing empty, bomb-sized and broken images."""
    if not data:
        raise ImageRejected("zero_bytes", "object has 0 bytes")
    size = probe_size(data)
    if size is not None and size[0] * size[1] > opts.max_pixels:
        raise ImageRejected(
            "too_many_pixels",
            f"{size[0]}x{size[1]} = {size[0] * size[1]} pixels > max_pixels {opts.max_pixels}",
        )
    check_complete(data)
    flag = {1: cv2.IMREAD_COLOR, 0: cv2.IMREAD_GRAYSCALE, -1: cv2.IMREAD_UNCHANGED}[opts.color]
    img = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
    if img is None:
        raise ImageRejected("undecodable", "OpenCV could not decode the bytes as an image")
    if img.dtype != np.uint8:  # 16-bit PNG/TIFF: scale to 8 bit, not truncate
        img = (img / 257.0 if img.dtype == np.uint16 else np.clip(img, 0, 255)).astype(np.uint8)
    return img


def resize_short_side(img: np.ndarray, opts: PackOptions) -> np.ndarray:
    if opts.resize <= 0:
        return img
    h, w = img.shape[:2]
    short = min(h, w)
    if short == opts.resize or (short < opts.resize and not opts.upscale):
        return img
    if h <= w:
        nh, nw = opts.resize, max(1, round(w * opts.resize / h))
    else:
        nw, nh = opts.resize, max(1, round(h * opts.resize / w))
    interp = INTERPOLATIONS[opts.interpolation]
    if short < opts.resize and interp == cv2.INTER_AREA:
        interp = cv2.INTER_CUBIC  # INTER_AREA is for shrinking
    return cv2.resize(img, (nw, nh), interpolation=interp)


def encode(img: np.ndarray, opts: PackOptions) -> bytes:
    if opts.encoding == ".jpg":
        params = [cv2.IMWRITE_JPEG_QUALITY, opts.quality]
    else:
        params = [cv2.IMWRITE_PNG_COMPRESSION, min(opts.quality, 9)]
    ok, buf = cv2.imencode(opts.encoding, img, params)
    if not ok:
        raise ImageRejected("undecodable", f"OpenCV could not encode the image as {opts.encoding}")
    return buf.tobytes()


def process(data: bytes, opts: PackOptions) -> EncodedImage:
    """Source bytes → record-ready encoded image with its final shape."""
    img = resize_short_side(decode(data, opts), opts)
    h, w = img.shape[:2]
    c = 1 if img.ndim == 2 else img.shape[2]
    return EncodedImage(encode(img, opts), h, w, c)
