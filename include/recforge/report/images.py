"""Thumbnails for the report, read with ranged GETs: a sample never downloads a ``.rec``."""

from __future__ import annotations

import base64
import io

import numpy as np

from recforge import storage
from recforge.format import recordio

THUMB_PX = 112  # longest side of a thumbnail
JPEG_QUALITY = 72


GUESSED_SPLITS = 16  # magic splits a first read of a record has room for; rarer: re-read


def span_of(offset: int, length: int, next_offset: int | None = None) -> int:
    """Bytes to read for the record at ``offset``: up to the next record, else a guess."""
    return (next_offset - offset) if next_offset and next_offset > offset \
        else recordio.framed_size(length, splits=GUESSED_SPLITS)


def payload_of(framed: bytes) -> bytes | None:
    """The image bytes of a record read whole (header stripped); None if ``framed`` does not
    hold the whole record (more magic splits than guessed)."""
    try:
        got = recordio.read_record_at(io.BytesIO(framed), 0)
    except recordio.RecordIOError:
        return None
    return None if got is None else recordio.unpack_image_record(got[0])[1]


def read_payload(rec_uri: str, offset: int, length: int, next_offset: int | None = None
                 ) -> bytes:
    """The image bytes of the record at ``offset`` (header stripped), by one ranged read."""
    span = span_of(offset, length, next_offset)
    try:
        got = recordio.read_record_at(io.BytesIO(storage.get_range(rec_uri, offset, span)), 0)
    except recordio.RecordIOError:  # more splits than guessed: the worst case, once
        got = recordio.read_record_at(io.BytesIO(
            storage.get_range(rec_uri, offset, 16 + 2 * length)), 0)
    if got is None:
        raise recordio.RecordIOError(f"{rec_uri}: no record at byte {offset}")
    return recordio.unpack_image_record(got[0])[1]


def decode(data: bytes, flags: int | None = None) -> np.ndarray | None:
    import cv2

    arr = np.frombuffer(data, np.uint8)
    return cv2.imdecode(arr, cv2.IMREAD_UNCHANGED if flags is None else flags)


def _as_bgr(img: np.ndarray) -> np.ndarray:
    import cv2

    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    if img.shape[2] == 4:
        return cv2.cvtColor(img, cv2.COLOR_BGRA2BGR)
    return img


def shrink(img: np.ndarray, px: int = THUMB_PX) -> np.ndarray:
    import cv2

    h, w = img.shape[:2]
    scale = px / max(h, w)
    if scale >= 1:
        return img
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(img, size, interpolation=cv2.INTER_AREA)


def data_uri(img: np.ndarray, px: int = THUMB_PX, fmt: str = ".jpg") -> str:
    import cv2

    small = shrink(_as_bgr(img) if fmt == ".jpg" else img, px)
    params = [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY] if fmt == ".jpg" else []
    ok, buf = cv2.imencode(fmt, small, params)
    if not ok:
        raise ValueError("could not encode a thumbnail")
    mime = "image/jpeg" if fmt == ".jpg" else "image/png"
    return f"data:{mime};base64,{base64.b64encode(buf.tobytes()).decode('ascii')}"


def palette(n: int, colors: list | None = None) -> np.ndarray:
    """``n`` RGB colours: the label definition's where it has them, else a fixed palette
    (PASCAL VOC's bit-interleaved one), so a legend and an overlay always agree."""
    out = np.zeros((256, 3), np.uint8)
    for i in range(256):
        r = g = b = 0
        c = i
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        out[i] = (r, g, b)
    for i, color in enumerate((colors or [])[:n]):
        if color:
            out[i] = color
    return out


def overlay(image: np.ndarray, mask: np.ndarray, colors: np.ndarray, ignore: int | None,
            alpha: float = 0.5) -> np.ndarray:
    """The image with its class mask blended over it (ignored pixels left as they are)."""
    import cv2

    img = _as_bgr(image).astype(np.float32)
    if mask.shape[:2] != img.shape[:2]:
        mask = cv2.resize(mask, (img.shape[1], img.shape[0]), interpolation=cv2.INTER_NEAREST)
    rgb = colors[mask]
    bgr = rgb[..., ::-1].astype(np.float32)
    blend = np.where((mask != ignore)[..., None] if ignore is not None else True,
                     (1 - alpha) * img + alpha * bgr, img)
    return np.clip(blend, 0, 255).astype(np.uint8)
