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


# ---- detection: boxes drawn over the image -------------------------------------------------

REFUSED_RGB = (255, 0, 170)  # a box the pipeline refused (the quarantine's thumbnails)
PAD_GREY = 200  # canvas around an image where a refused box reaches outside it


def box_colors(n: int, colors: list | None = None) -> np.ndarray:
    """``n`` RGB colours, one per class: the label definition's where it has them, else hues
    spread by the golden ratio at full brightness (distinct neighbours, visible on photos)."""
    import colorsys

    out = np.zeros((max(n, 1), 3), np.uint8)
    for i in range(len(out)):
        r, g, b = colorsys.hsv_to_rgb((i * 0.618034) % 1.0, 0.9, 1.0)
        out[i] = (round(r * 255), round(g * 255), round(b * 255))
    for i, color in enumerate((colors or [])[:n]):
        if color:
            out[i] = color
    return out


def _uint8(img: np.ndarray) -> np.ndarray:
    if img.dtype == np.uint16:
        return (img >> 8).astype(np.uint8)
    return img if img.dtype == np.uint8 else np.clip(img, 0, 255).astype(np.uint8)


def _bgr(rgb) -> tuple[int, int, int]:
    return int(rgb[2]), int(rgb[1]), int(rgb[0])


def _dashed_rect(img: np.ndarray, p0: tuple[int, int], p1: tuple[int, int], color,
                 thickness: int, dash: int, gap: int) -> None:
    import cv2

    (x0, y0), (x1, y1) = p0, p1
    for a, b in (((x0, y0), (x1, y0)), ((x1, y0), (x1, y1)), ((x1, y1), (x0, y1)),
                 ((x0, y1), (x0, y0))):
        length = max(abs(b[0] - a[0]), abs(b[1] - a[1]))
        for s in range(0, max(length, 1), dash + gap):
            e = min(s + dash, length)
            t0, t1 = s / max(length, 1), e / max(length, 1)
            cv2.line(img, (round(a[0] + (b[0] - a[0]) * t0), round(a[1] + (b[1] - a[1]) * t0)),
                     (round(a[0] + (b[0] - a[0]) * t1), round(a[1] + (b[1] - a[1]) * t1)),
                     color, thickness, cv2.LINE_AA)


def _tag(img: np.ndarray, text: str, x: int, y: int, rgb, scale: float) -> None:
    """``text`` on a patch of the box's colour at the box's top-left corner (inside the image)."""
    import cv2

    font = cv2.FONT_HERSHEY_SIMPLEX
    (tw, th), base = cv2.getTextSize(text, font, scale, 1)
    h, w = img.shape[:2]
    x = min(max(x, 0), max(w - tw - 2, 0))
    y = y - th - base - 2 if y - th - base - 2 >= 0 else min(y, max(h - th - base - 2, 0))
    cv2.rectangle(img, (x, y), (x + tw + 2, y + th + base + 2), _bgr(rgb), -1)
    dark = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] > 140
    cv2.putText(img, text, (x + 1, y + th + 1), font, scale,
                (0, 0, 0) if dark else (255, 255, 255), 1, cv2.LINE_AA)


def draw_boxes(image: np.ndarray, objects: np.ndarray, colors: np.ndarray,
               class_names: list[str], px: int | None = THUMB_PX) -> np.ndarray:
    """The (BGR) image shrunk to ``px`` (None: as stored), each object's box drawn in its
    class's colour with the class name at its corner; ``difficult`` boxes dashed. ``objects``
    is ``format.detection_label``'s (N, 6) rows, boxes normalised, so they are scaled by the
    image's own width and height (the label's, once the record is valid)."""
    import cv2

    img = _as_bgr(_uint8(image))
    img = np.ascontiguousarray(shrink(img, px) if px else img.copy())
    h, w = img.shape[:2]
    side = min(h, w)
    thick = 2 if px else max(2, round(side / 250))
    scale = 0.35 if px else max(0.4, side / 900)
    tags = []
    for cls, x0, y0, x1, y1, difficult in objects:
        c = int(cls)
        rgb = colors[c % len(colors)] if c >= 0 else (255, 255, 255)
        p0 = (round(float(x0) * w), round(float(y0) * h))
        p1 = (min(round(float(x1) * w), w - 1), min(round(float(y1) * h), h - 1))
        if difficult > 0:
            _dashed_rect(img, p0, p1, _bgr(rgb), thick, 3 * thick, 2 * thick)
        else:
            cv2.rectangle(img, p0, p1, _bgr(rgb), thick, cv2.LINE_AA)
        name = class_names[c] if 0 <= c < len(class_names) else str(c)
        tags.append((name + (" (difficult)" if difficult > 0 and not px else ""), p0, rgb))
    for text, (x, y), rgb in tags:  # names last: no box is drawn over one
        _tag(img, text, x, y, rgb, scale)
    return img


def box_thumbnail(image: np.ndarray, box: tuple[float, float, float, float] | None,
                  px: int = THUMB_PX, rgb=REFUSED_RGB) -> np.ndarray:
    """A thumbnail (BGR, at most ``px``) of a source image with one box drawn, given in its
    pixels ``[xmin, ymin, xmax, ymax]``. A box reaching outside the image shows whole on a
    grey margin (at most the image's size each side); an inverted one is drawn by its
    corners; a degenerate one as a line."""
    import cv2

    img = _as_bgr(_uint8(image))
    h, w = img.shape[:2]
    small = np.ascontiguousarray(shrink(img, px))
    if box is None:
        return small
    s = small.shape[1] / w
    x0, x1 = sorted((float(box[0]), float(box[2])))
    y0, y1 = sorted((float(box[1]), float(box[3])))
    left = min(w, max(0.0, -x0)) * s
    top = min(h, max(0.0, -y0)) * s
    right = min(w, max(0.0, x1 - w)) * s
    bottom = min(h, max(0.0, y1 - h)) * s
    pads = [int(np.ceil(v)) + (2 if v else 0) for v in (top, bottom, left, right)]
    if any(pads):
        small = cv2.copyMakeBorder(small, *pads, cv2.BORDER_CONSTANT,
                                   value=(PAD_GREY, PAD_GREY, PAD_GREY))
    ox, oy = pads[2], pads[0]
    big_h, big_w = small.shape[:2]

    def at(x: float, y: float) -> tuple[int, int]:
        return (min(max(round(ox + x * s), 0), big_w - 1),
                min(max(round(oy + y * s), 0), big_h - 1))

    cv2.rectangle(small, at(x0, y0), at(x1, y1), _bgr(rgb), 2, cv2.LINE_AA)
    if max(big_h, big_w) > px:  # the margin made it larger than a thumbnail
        small = shrink(small, px)
    return small
