"""Small images of every kind the packer must handle, built in code (no downloads).

``photo()`` is a real photo (scikit-image's astronaut) so JPEG statistics are realistic;
the broken files are damaged the ways real files get damaged.
"""

from __future__ import annotations

import io
import struct
import zlib
from functools import cache

import cv2
import numpy as np
from PIL import Image


@cache
def _astronaut() -> np.ndarray:
    import skimage.data

    return np.ascontiguousarray(skimage.data.astronaut()[..., ::-1])  # BGR


def photo(h: int = 96, w: int = 128, seed: int = 0) -> np.ndarray:
    """A BGR uint8 crop of a real photo, resized to h x w (seed picks the crop)."""
    base = _astronaut()
    rng = np.random.default_rng(seed)
    ch, cw = int(rng.integers(256, 512)), int(rng.integers(256, 512))
    y, x = int(rng.integers(0, 512 - ch + 1)), int(rng.integers(0, 512 - cw + 1))
    return cv2.resize(base[y:y + ch, x:x + cw], (w, h), interpolation=cv2.INTER_AREA)


def jpeg(img: np.ndarray, quality: int = 90, progressive: bool = False) -> bytes:
    params = [cv2.IMWRITE_JPEG_QUALITY, quality]
    if progressive:
        params += [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]
    return cv2.imencode(".jpg", img, params)[1].tobytes()


def png(img: np.ndarray) -> bytes:
    return cv2.imencode(".png", img)[1].tobytes()


def pil_bytes(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def cmyk_jpeg(img: np.ndarray) -> bytes:
    return pil_bytes(Image.fromarray(img[..., ::-1]).convert("CMYK"), "JPEG", quality=95)


def exif_jpeg(img: np.ndarray, orientation: int) -> bytes:
    im = Image.fromarray(img[..., ::-1])
    exif = im.getexif()
    exif[0x0112] = orientation
    return pil_bytes(im, "JPEG", quality=95, exif=exif.tobytes())


def rgba_png(img: np.ndarray) -> bytes:
    alpha = np.tile(np.linspace(0, 255, img.shape[1], dtype=np.uint8), (img.shape[0], 1))
    return png(np.dstack([img, alpha]))


def png16(img: np.ndarray, gray: bool = False) -> bytes:
    src = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY) if gray else img
    return png(src.astype(np.uint16) * 257)


def palette_png(img: np.ndarray) -> bytes:
    return pil_bytes(Image.fromarray(img[..., ::-1]).convert("P"), "PNG")


def truncated(data: bytes, keep: float = 0.5) -> bytes:
    return data[:int(len(data) * keep)]


def corrupt_jpeg(data: bytes) -> bytes:
    """A stray restart marker in the middle of the entropy-coded data (what a flipped
    bit or a bad splice produces); libjpeg warns and fills the rest with grey."""
    sos, end = data.find(b"\xff\xda"), len(data) - 2
    mid = (sos + end) // 2
    return data[:mid] + b"\xff\xd3" + data[mid + 2:]


def crc_broken_png(data: bytes) -> bytes:
    i = data.find(b"IDAT") + 8
    return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims width x height, with a token IDAT: a decompression bomb's
    header without the bomb."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0"))
            + chunk(b"IEND", b""))


def jpeg_claiming(width: int, height: int) -> bytes:
    """A real JPEG whose frame header is rewritten to claim width x height."""
    data = bytearray(jpeg(photo(16, 16)))
    sof = data.find(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def jpeg_with_magic(img: np.ndarray, header_bytes: int = 24) -> bytes:
    """A valid JPEG with RecordIO's magic number in a comment at 4-byte-aligned payload
    offsets, which forces dmlc's record splitting (cflag 1/2/3) when packed as is."""
    data = jpeg(img)
    magic = struct.pack("<I", 0xCED7230A)
    # COM segment right after SOI: FF FE len(2) body; align the body start.
    pad = (-(header_bytes + 2 + 4)) % 4
    body = b"x" * pad + magic * 3 + b"tail"
    com = b"\xff\xfe" + struct.pack(">H", len(body) + 2) + body
    return data[:2] + com + data[2:]
