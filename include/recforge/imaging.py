"""Decode, check, resize and re-encode one image for a record; refuse bad input by name.

Every refusal is an ``ImageRejected`` with a quarantine reason (a key of
``quarantine.FIXES``): the caller records it and carries on, so one bad file never costs
the rest of the run, and no damaged image is packed in silence.

Why the decode path looks the way it does:

* **Header first.** JPEG, PNG, BMP, GIF, WebP and TIFF headers are parsed in Python (no
  pixels decoded; Pillow reads the header of anything else) to learn the size, so the
  decompression-bomb guard (``max_pixels``) runs before any allocation, and so the output
  size is computed from the true source size.
* **Reduced-size JPEG decode.** libjpeg can decode at 1/2, 1/4 or 1/8 scale in the DCT
  domain (``cv2.IMREAD_REDUCED_*``), which skips most of the inverse DCT, colour conversion
  and memory traffic, and averages like a box filter, so the result is *less* aliased than
  a full decode followed by bilinear resize. It is used for every JPEG at least 2x the
  target, whatever its size: reduced pixel ``k`` of an ``L``-pixel axis covers source
  ``[k*s, (k+1)*s)`` (``ceil(L/s)`` pixels, the last block padded), so each output pixel
  centre is mapped into source coordinates exactly as im2rec's resize of the full image
  maps it, then into reduced coordinates (``_resample``). Output size and geometry are
  im2rec's for any size, crop and EXIF orientation (a flip moves the padded block to the
  other edge: the EXIF orientation is parsed from the header to know which axes flip).
* **Cheap anti-aliasing after a full decode** (PNG, ``--color -1``, ``--no-reduced-decode``):
  2 x 2 box averages while >= 2x is left (OpenCV's fast integer ``INTER_AREA`` path) then
  a cubic finish on the exact grid, instead of ``INTER_AREA`` at a non-integer factor
  (~5 ms per 1.3 MP photo against ~1.3 ms; PSNR and time in docs/im2rec.md).
* **libjpeg warnings are errors.** A corrupt JPEG decodes "successfully" with grey or
  smeared blocks; libjpeg only prints ``Corrupt JPEG data: ...`` on stderr. We capture the
  decoder's stderr around each decode (a memfd swapped onto fd 2) and refuse the image.
  A truncated JPEG makes ``cv2.imdecode`` return ``None`` (``cv2.imread`` would instead
  pack it with a grey bottom); the header parse tells "truncated" from "corrupt".
* **Every image kind on purpose.** Grayscale → 3 identical channels for ``color=1``;
  alpha is dropped for ``color=1`` and for JPEG output (JPEG has no alpha); 16-bit PNG is
  scaled to 8 bit by OpenCV for ``color`` 0/1, kept 16 bit for ``color=-1`` + PNG output
  and scaled (not saturated, as OpenCV would) for ``color=-1`` + JPEG; CMYK and
  progressive JPEG decode through libjpeg; EXIF orientation is applied for ``color`` 0/1
  (as OpenCV and im2rec do) and not for ``color=-1`` ("as stored", again as OpenCV does).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import re
import threading
import warnings
from dataclasses import dataclass

import cv2
import numpy as np

from recforge import allocator, phash

log = logging.getLogger(__name__)

INTERPOLATIONS = {
    "area": cv2.INTER_AREA,
    "linear": cv2.INTER_LINEAR,
    "cubic": cv2.INTER_CUBIC,
    "lanczos": cv2.INTER_LANCZOS4,
    "nearest": cv2.INTER_NEAREST,
}
# "auto": see choose_interpolation (measured in docs/im2rec.md).
INTERPOLATION_CHOICES = ("auto", *INTERPOLATIONS)

DEFAULT_MAX_PIXELS = 178_956_970  # Pillow's hard decompression-bomb limit (2 x 89.5 MP)
JPEG_MAX_SIDE = 65_500  # libjpeg's JPEG_MAX_DIMENSION: no JPEG side may be longer

_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_JPEG_PROGRESSIVE = {0xC2, 0xC6, 0xCA, 0xCE}
_PNG_SIG = b"\x89PNG\r\n\x1a\n"
# libjpeg warnings that mean the pixels are wrong (libjpeg carries on and fills in grey).
# "extraneous bytes before marker 0xd9" is junk after the last scan and "bad ICC marker"
# is metadata: the pixels are complete, so those two are only logged.
_JPEG_BENIGN = re.compile(r"extraneous bytes before marker 0xd9|bad ICC marker", re.I)
_JPEG_FATAL = re.compile(
    r"^(Corrupt JPEG data|Premature end of JPEG file|Inconsistent progression sequence)", re.M)


class ImageRejected(Exception):
    """This image cannot be packed; ``reason`` is a quarantine reason, ``detail`` says why."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class PackOptions:
    """How to turn a source image into a record image.

    ``rounding`` picks the output-size rule: ``"round"`` (the pipeline: short side exactly
    ``resize``, long side rounded) or ``"floor"`` (im2rec: long side ``long*resize//short``).
    ``center_crop`` crops the long side to a centred square first (im2rec's option).
    """

    resize: int = 256
    upscale: bool = False
    quality: int = 95
    encoding: str = ".jpg"
    color: int = 1
    interpolation: str = "area"
    max_pixels: int = DEFAULT_MAX_PIXELS
    center_crop: bool = False
    reduced_decode: bool = True
    rounding: str = "round"

    def __post_init__(self):
        if self.interpolation not in INTERPOLATION_CHOICES:
            raise ValueError(f"interpolation {self.interpolation!r} is not one of "
                             f"{', '.join(INTERPOLATION_CHOICES)}")
        if self.encoding not in (".jpg", ".png"):
            raise ValueError(f"encoding {self.encoding!r} must be '.jpg' or '.png'")
        if self.color not in (-1, 0, 1):
            raise ValueError(f"color {self.color!r} must be 1 (colour), 0 (gray) or -1 "
                             "(unchanged)")
        if self.rounding not in ("round", "floor"):
            raise ValueError(f"rounding {self.rounding!r} must be 'round' or 'floor'")
        if self.resize < 0 or self.max_pixels < 1:
            raise ValueError(f"resize ({self.resize}) must be >= 0 and max_pixels "
                             f"({self.max_pixels}) >= 1")

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
    phash: str | None = None  # the record pixels' dHash, where it was taken (process_hashed)


@dataclass(frozen=True)
class ImageInfo:
    """What the header says, before any pixel is decoded.

    ``complete`` is False when the end marker (JPEG EOI / PNG IEND) is missing, i.e. the
    file was cut short. ``width``/``height`` are as stored (before EXIF orientation);
    0 when the header does not say (``sized`` False) or says 0 (``sized`` True).
    """

    format: str
    width: int
    height: int
    components: int = 0
    precision: int = 8
    progressive: bool = False
    complete: bool = True
    orientation: int = 1  # EXIF orientation (1-8) from the JPEG's APP1, 1 if none
    sized: bool = True  # the header's size fields were found (JPEG SOF, PNG IHDR, ...)

    @property
    def pixels(self) -> int:
        return self.width * self.height


# ---------------------------------------------------------------- header parsing


def _probe_jpeg(data: bytes) -> ImageInfo:
    n, i = len(data), 2
    info = None
    orientation = None
    sos = -1
    while i + 4 <= n:
        if data[i] != 0xFF:
            break  # not a marker where one must be: leave it to the decoder
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        seg = int.from_bytes(data[i + 2:i + 4], "big")
        if marker in _JPEG_SOF and i + 10 <= n:
            info = dict(precision=data[i + 4], height=int.from_bytes(data[i + 5:i + 7], "big"),
                        width=int.from_bytes(data[i + 7:i + 9], "big"), components=data[i + 9],
                        progressive=marker in _JPEG_PROGRESSIVE)
        if marker == 0xE1 and orientation is None and data[i + 4:i + 10] == b"Exif\0\0":
            orientation = _exif_orientation(data[i + 10:i + 2 + seg])
        if marker == 0xDA:
            sos = i
            break
        if marker == 0xD9:
            break
        i += 2 + seg
    # FF D9 cannot occur inside entropy-coded data (FF is always stuffed), so an EOI
    # after the first scan header means the file reaches its end.
    complete = sos >= 0 and data.rfind(b"\xff\xd9") > sos
    if info is None:
        return ImageInfo("jpeg", 0, 0, complete=complete, sized=False)
    return ImageInfo("jpeg", complete=complete, orientation=orientation or 1, **info)


def _exif_orientation(tiff: bytes) -> int:
    """Tag 0x0112 of IFD0 in an EXIF TIFF block; 1 if absent or unreadable."""
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return 1
    order = "little" if tiff[:2] == b"II" else "big"
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return 1
    for k in range(int.from_bytes(tiff[ifd:ifd + 2], order)):
        e = ifd + 2 + 12 * k
        if e + 12 > len(tiff):
            break
        if int.from_bytes(tiff[e:e + 2], order) == 0x0112:
            value = int.from_bytes(tiff[e + 8:e + 10], order)
            return value if 1 <= value <= 8 else 1
    return 1


def _probe_png(data: bytes) -> ImageInfo:
    if len(data) < 33 or data[12:16] != b"IHDR":
        return ImageInfo("png", 0, 0, complete=False, sized=False)
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    depth, ctype = data[24], data[25]
    comps = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(ctype, 0)
    return ImageInfo("png", w, h, comps, depth, complete=data.rfind(b"IEND") > 33)


_BMP_INFO_SIZES = {16, 40, 52, 56, 64, 108, 124}  # BITMAPINFOHEADER and its extensions, OS/2 2.x


def _probe_bmp(data: bytes) -> ImageInfo | None:
    """BMP: the DIB header after the 14-byte file header. BITMAPCOREHEADER (12 bytes) holds
    unsigned 16-bit sides; every later header signed 32-bit ones, a negative height meaning
    rows stored top-down (the image is ``abs(height)`` rows either way)."""
    dib = int.from_bytes(data[14:18], "little")
    if dib == 12 and len(data) >= 26:
        w, h = int.from_bytes(data[18:20], "little"), int.from_bytes(data[20:22], "little")
        bits = int.from_bytes(data[24:26], "little")
    elif dib in _BMP_INFO_SIZES and len(data) >= 30:
        w = int.from_bytes(data[18:22], "little", signed=True)
        h = abs(int.from_bytes(data[22:26], "little", signed=True))
        bits = int.from_bytes(data[28:30], "little")
        if w < 0:  # no BMP stores a negative width: leave the refusal to the decoder
            return ImageInfo("bmp", 0, 0, sized=False)
    else:
        return None  # "BM" but no DIB header we know: not (provably) a BMP
    return ImageInfo("bmp", w, h, {24: 3, 32: 4}.get(bits, 0), 8)


def _probe_gif(data: bytes) -> ImageInfo:
    """GIF: the logical screen descriptor (unsigned 16-bit width, height)."""
    if len(data) < 10:
        return ImageInfo("gif", 0, 0, complete=False, sized=False)
    w, h = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    if not w or not h:  # a 0 screen size is read by decoders as "the first frame's size"
        return ImageInfo("gif", 0, 0, sized=False)
    return ImageInfo("gif", w, h)


def _probe_webp(data: bytes) -> ImageInfo:
    """WebP: the canvas of ``VP8X``, or the frame header of a simple lossy (``VP8 ``) or
    lossless (``VP8L``) file."""
    kind = data[12:16]
    if kind == b"VP8X" and len(data) >= 30:
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
    elif kind == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        w = int.from_bytes(data[26:28], "little") & 0x3FFF
        h = int.from_bytes(data[28:30], "little") & 0x3FFF
    elif kind == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        w, h = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    else:
        return ImageInfo("webp", 0, 0, sized=False)
    return ImageInfo("webp", w, h)


def _probe_tiff(data: bytes) -> ImageInfo | None:
    """TIFF: ImageWidth (256) and ImageLength (257) of the first IFD, SHORT or LONG; None
    when they are not there (BigTIFF, a damaged IFD), which Pillow then gets to try."""
    order = "little" if data[:2] == b"II" else "big"
    ifd = int.from_bytes(data[4:8], order)
    if ifd < 8 or ifd + 2 > len(data):
        return None
    size: dict[int, int] = {}
    for k in range(int.from_bytes(data[ifd:ifd + 2], order)):
        e = ifd + 2 + 12 * k
        if e + 12 > len(data):
            break
        tag, kind = int.from_bytes(data[e:e + 2], order), int.from_bytes(data[e + 2:e + 4], order)
        if tag in (256, 257) and kind in (3, 4):
            size[tag] = int.from_bytes(data[e + 8:e + (10 if kind == 3 else 12)], order)
    if len(size) < 2:
        return None
    return ImageInfo("tiff", size[256], size[257])


def _probe_other(data: bytes) -> ImageInfo | None:
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as im:
                return ImageInfo((im.format or "unknown").lower(), im.size[0], im.size[1])
    except Image.DecompressionBombError:  # Pillow refuses before we can ask the size
        return _probe_unchecked(data)
    except Exception:
        return None


def _probe_unchecked(data: bytes) -> ImageInfo | None:
    """Format and size of an image ``Image.open`` refused as a decompression bomb: the same
    Pillow plugin reads the header, without Pillow's pixel check (``check_pixels`` applies
    ``max_pixels``). None if no plugin reads it."""
    from PIL import Image

    Image.init()
    for fmt in Image.ID:
        factory, accept = Image.OPEN[fmt]
        accepted = accept is None or accept(data[:16])
        if not accepted or isinstance(accepted, str):  # a str is Pillow's warning, not a yes
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                im = factory(io.BytesIO(data), "")
        except Exception:
            continue
        try:
            return ImageInfo((im.format or fmt).lower(), im.size[0], im.size[1])
        finally:
            im.close()
    return None


def probe(data: bytes) -> ImageInfo | None:
    """Format, size and completeness from the header bytes alone; None if not recognised."""
    if data[:3] == b"\xff\xd8\xff":
        return _probe_jpeg(data)
    if data[:8] == _PNG_SIG:
        return _probe_png(data)
    info = None
    if data[:2] == b"BM":
        info = _probe_bmp(data)
    elif data[:6] in (b"GIF87a", b"GIF89a"):
        info = _probe_gif(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        info = _probe_webp(data)
    elif data[:4] in (b"II*\0", b"MM\0*"):
        info = _probe_tiff(data)
    return info if info is not None else _probe_other(data)


def probe_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header without decoding pixels; None if unknown."""
    info = probe(data)
    return (info.width, info.height) if info and info.pixels else None


# ---------------------------------------------------------------- decoding


class _DecoderMessages:
    """Collect what the C decoders print on stderr during one decode.

    libjpeg reports corrupt data only as a warning printed to stderr (through
    ``fprintf``), never to the caller, so we point fd 2 at a memory file for the duration
    of the call. Lines that are not decoder messages (another thread's output) are passed
    on to the real stderr.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._pid = -1
        self._mem = -1

    def _ensure(self) -> None:
        if self._pid != os.getpid():  # after fork, each process needs its own file
            self._mem = os.memfd_create("recforge-decoder-stderr", os.MFD_CLOEXEC)
            self._pid = os.getpid()

    def decode(self, buf: np.ndarray, flag: int) -> tuple[np.ndarray | None, str]:
        with self._lock:
            self._ensure()
            saved = os.dup(2)
            os.dup2(self._mem, 2)
            try:
                img = cv2.imdecode(buf, flag)
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            size = os.lseek(self._mem, 0, os.SEEK_CUR)
            if not size:
                return img, ""
            text = os.pread(self._mem, size, 0).decode("utf-8", "replace")
            os.ftruncate(self._mem, 0)
            os.lseek(self._mem, 0, os.SEEK_SET)
        decoder, other = [], []
        for line in text.splitlines():
            is_decoder = (line.startswith(("Corrupt JPEG", "Premature end", "libpng", "Warning:",
                                           "Inconsistent progression", "Invalid SOS"))
                          or "JPEG" in line)
            (decoder if is_decoder else other).append(line)
        if other:
            os.write(2, ("\n".join(other) + "\n").encode())
        return img, "\n".join(decoder)


_messages = _DecoderMessages()


def _reduced_flag(scale: int, color: int) -> int:
    if scale == 1:
        return {1: cv2.IMREAD_COLOR, 0: cv2.IMREAD_GRAYSCALE, -1: cv2.IMREAD_UNCHANGED}[color]
    kind = "COLOR" if color == 1 else "GRAYSCALE"
    return getattr(cv2, f"IMREAD_REDUCED_{kind}_{scale}")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def decode_raw(data: bytes, info: ImageInfo | None, flag: int) -> np.ndarray:
    """``cv2.imdecode`` that refuses instead of returning damaged or missing pixels."""
    img, msgs = _messages.decode(np.frombuffer(data, np.uint8), flag)
    fatal = [m for m in msgs.splitlines() if _JPEG_FATAL.match(m) and not _JPEG_BENIGN.search(m)]
    if msgs and not fatal:
        log.debug("decoder warnings (image kept): %s", msgs)
    if info is not None and info.format == "jpeg":
        if not info.complete:
            raise ImageRejected("truncated", "JPEG data ends before its end-of-image marker "
                                f"(FFD9) after {len(data)} bytes")
        if fatal:
            first = fatal[0]
            reason = "truncated" if first.startswith("Premature end") else "corrupt"
            raise ImageRejected(reason, f"libjpeg: {first}")
        if img is None:
            if info.pixels == 0:
                raise ImageRejected("undecodable", "JPEG signature but no frame header (SOF)")
            if info.precision != 8:
                raise ImageRejected("undecodable", f"{info.precision}-bit JPEG is not supported")
            raise ImageRejected("corrupt", "libjpeg could not decode the JPEG data"
                                + (f": {msgs.splitlines()[0]}" if msgs else ""))
    if img is None:
        if info is not None and info.format == "png":
            if info.pixels == 0:
                raise ImageRejected("undecodable", "PNG signature but no IHDR chunk")
            if not info.complete or "incomplete" in msgs:
                raise ImageRejected("truncated", f"PNG data ends before its IEND chunk "
                                    f"after {len(data)} bytes")
            first = msgs.splitlines()[0] if msgs else "could not decode the PNG data"
            raise ImageRejected("corrupt", "libpng: " + first.removeprefix("libpng error: "))
        what = f"a {info.format.upper()} header" if info else "no known image signature"
        raise ImageRejected("undecodable", f"{what} ({data[:8].hex()}...), and OpenCV could "
                            "not decode the bytes as an image")
    return img


def check_pixels(info: ImageInfo | None, opts: PackOptions) -> None:
    """Refuse by the header alone: a zero-size image, or more pixels than ``max_pixels``."""
    if info is not None and info.sized and not info.pixels:
        raise ImageRejected("zero_size", f"the {info.format.upper()} header says "
                            f"{info.width}x{info.height}: a zero-size image has no pixels")
    if info is not None and info.pixels > opts.max_pixels:
        raise ImageRejected(
            "too_many_pixels", f"{info.width}x{info.height} = {info.pixels} pixels > "
            f"max_pixels {opts.max_pixels}")


def check_output(h: int, w: int, opts: PackOptions) -> None:
    """Refuse an output size the encoder cannot write (a JPEG side over libjpeg's 65,500
    pixels) or that would hold more than ``max_pixels`` (an extreme aspect ratio enlarged
    to the short side): before any resize allocates it."""
    if opts.encoding == ".jpg" and max(h, w) > JPEG_MAX_SIDE:
        raise ImageRejected(
            "jpeg_size_limit", f"the record image would be {w}x{h}, and JPEG allows at most "
            f"{JPEG_MAX_SIDE:,} pixels a side (libjpeg's JPEG_MAX_DIMENSION)")
    if h * w > opts.max_pixels:
        raise ImageRejected("too_many_pixels", f"the record image would be {w}x{h} = "
                            f"{h * w} pixels > max_pixels {opts.max_pixels}")


def verify(data: bytes, opts: PackOptions) -> ImageInfo:
    """Prove the bytes decode cleanly without keeping the pixels (for ``--pass-through``).

    JPEG is decoded at 1/8 scale in gray: every entropy-coded bit is still read, so
    truncation and corrupt data are caught at a fraction of the cost of a full decode.
    """
    if not data:
        raise ImageRejected("zero_bytes", "file has 0 bytes")
    info = probe(data)
    check_pixels(info, opts)
    jpeg = info is not None and info.format == "jpeg"
    img = decode_raw(data, info, cv2.IMREAD_REDUCED_GRAYSCALE_8 if jpeg else cv2.IMREAD_UNCHANGED)
    if info is None or not info.pixels:
        info = ImageInfo("unknown", img.shape[1], img.shape[0])
    return info


# ---------------------------------------------------------------- geometry


def output_size(h: int, w: int, opts: PackOptions) -> tuple[int, int]:
    """(out_h, out_w) for a (cropped, oriented) source of h x w under ``opts``."""
    if opts.resize <= 0:
        return h, w
    short = min(h, w)
    if short < opts.resize and not opts.upscale:
        return h, w
    if opts.rounding == "floor":  # im2rec: cv2.resize(img, (w*R//h, R)) or (R, h*R//w)
        if h > w:
            return h * opts.resize // w, opts.resize
        return opts.resize, w * opts.resize // h
    if h <= w:
        return opts.resize, max(1, round(w * opts.resize / h))
    return max(1, round(h * opts.resize / w)), opts.resize


def crop_box(h: int, w: int, center_crop: bool) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1): im2rec's centred square crop of the long side, or the whole image."""
    if not center_crop or h == w:
        return 0, h, 0, w
    if h > w:
        m = (h - w) // 2
        return m, m + w, 0, w
    m = (w - h) // 2
    return 0, h, m, m + h


def choose_scale(h: int, w: int, opts: PackOptions) -> int:
    """Largest DCT scale (8, 4, 2) whose reduced decode is still >= the target size on both
    axes (crop included); else 1. Any size: ``_resample`` maps the grids exactly."""
    if opts.resize <= 0:
        return 1
    y0, y1, x0, x1 = crop_box(h, w, opts.center_crop)
    ch, cw = y1 - y0, x1 - x0
    oh, ow = output_size(ch, cw, opts)
    for scale in (8, 4, 2):
        if min(ch, cw) < scale * opts.resize or oh * scale > ch or ow * scale > cw:
            continue
        if h != w and _ceil_div(h, scale) == _ceil_div(w, scale):
            continue  # a transposing EXIF orientation could not be told from the shape
        return scale
    return 1


# EXIF orientation -> (rows reversed, columns reversed) relative to the stored image, once
# OpenCV has applied it (5-8 also transpose). A reversed axis puts libjpeg's padded last
# block at the start, which shifts the reduced grid by the padding.
_REVERSED = {1: (False, False), 2: (False, True), 3: (True, True), 4: (True, False),
             5: (False, False), 6: (False, True), 7: (True, True), 8: (True, False)}


def _resample(img: np.ndarray, maps: tuple[tuple[float, float], tuple[float, float]],
              crop: tuple[int, int, int, int], out: tuple[int, int], interp: int) -> np.ndarray:
    """Resize the source crop ``crop`` (y0, y1, x0, x1) to ``out`` (h, w), reading from
    ``img``, whose continuous coordinate ``u`` is source coordinate ``a*u + b`` per axis
    (``maps`` = ((a_y, b_y), (a_x, b_x))).

    Output pixel ``j``'s centre goes to source ``x0 + (j + 0.5) * cw / ow`` (what
    ``cv2.resize`` of the full-size crop does), then to ``img``. When the crop starts on an
    ``img`` pixel edge this is one ``cv2.resize`` with exact ``fx``/``fy`` (OpenCV keeps
    the given factors when no size is passed) trimmed to ``out``; otherwise a
    ``cv2.warpAffine`` with the same mapping (area becomes linear there).
    """
    (ay, by), (ax, bx) = maps
    y0, y1, x0, x1 = crop
    oh, ow = out
    sy, sx = (y1 - y0) / (oh * ay), (x1 - x0) / (ow * ax)  # img pixels per output pixel
    oy, ox = (y0 - by) / ay, (x0 - bx) / ax  # img coordinate of the crop's corner
    ky, kx = round(oy), round(ox)
    if abs(oy - ky) < 1e-9 and abs(ox - kx) < 1e-9 and ky >= 0 and kx >= 0:
        # img rows/columns the crop needs (plus one neighbour for the filter's tail)
        ny = min(img.shape[0] - ky, _ceil_div(y1 - y0, ay) + 1)
        nx = min(img.shape[1] - kx, _ceil_div(x1 - x0, ax) + 1)
        sub = img[ky:ky + ny, kx:kx + nx]
        if sy == sx == 1 and sub.shape[:2] >= (oh, ow):
            return np.ascontiguousarray(sub[:oh, :ow])
        res = cv2.resize(sub, None, fx=1 / sx, fy=1 / sy, interpolation=interp)
        if res.shape[0] >= oh and res.shape[1] >= ow:
            return np.ascontiguousarray(res[:oh, :ow])
    m = np.array([[sx, 0.0, ox + 0.5 * sx - 0.5], [0.0, sy, oy + 0.5 * sy - 0.5]])
    if interp == cv2.INTER_AREA:
        interp = cv2.INTER_LINEAR
    return cv2.warpAffine(img, m, (ow, oh), flags=interp | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_REPLICATE)


def _shrink(img: np.ndarray, maps: tuple[tuple[float, float], tuple[float, float]],
            crop: tuple[int, int, int, int], out: tuple[int, int], finish: int,
            boxed_finish: int | None = None) -> np.ndarray:
    """``_resample`` with cheap anti-aliasing when ``img`` must still shrink >= 2x: first
    box averages over 2 x 2 blocks, repeated while the factor left is >= 2 (OpenCV's fast
    integer ``INTER_AREA`` path: ~0.6 ms per 1.3 MP, against ~5 ms for area at a
    non-integer factor, and 2 ms for a 3 x 3 box), aligned on an ``img`` pixel; then
    ``boxed_finish`` (default ``SHRINK_FINISH``; factor left < 2) on the exact grid.
    Without a box step (factor < 2 already), ``finish``. Measured in docs/im2rec.md."""
    (ay, by), (ax, bx) = maps
    y0, y1, x0, x1 = crop
    oh, ow = out
    uy0, uy1 = (y0 - by) / ay, (y1 - by) / ay  # the crop in img coordinates
    ux0, ux1 = (x0 - bx) / ax, (x1 - bx) / ax
    factor = min((uy1 - uy0) / oh, (ux1 - ux0) / ow)
    if factor < 2:
        return _resample(img, maps, crop, out, finish)
    ky, kx = max(0, math.floor(uy0)), max(0, math.floor(ux0))
    img = img[ky:min(img.shape[0], math.ceil(uy1) + 1), kx:min(img.shape[1], math.ceil(ux1) + 1)]
    by, bx = by + ay * ky, bx + ax * kx
    while factor >= 2 and min(img.shape[:2]) >= 2:
        ny, nx = img.shape[0] // 2, img.shape[1] // 2
        img = cv2.resize(img[:2 * ny, :2 * nx], (nx, ny), interpolation=cv2.INTER_AREA)
        ay, ax, factor = ay * 2, ax * 2, factor / 2
    return _resample(img, ((ay, by), (ax, bx)), crop, out,
                     SHRINK_FINISH if boxed_finish is None else boxed_finish)


SHRINK_FINISH = cv2.INTER_CUBIC  # after the box step (docs/im2rec.md: PSNR and time)
REDUCED_FINISH = cv2.INTER_LINEAR  # after a reduced decode, remaining factor < 2


def choose_interpolation(src: tuple[int, int], dst: tuple[int, int], scale: int,
                         opts: PackOptions) -> int:
    """The OpenCV interpolation for one resize.

    ``auto``: cubic when enlarging; after a reduced decode (already low-passed by the DCT
    scaling, remaining factor < 2) ``REDUCED_FINISH`` (bilinear; ``load`` puts 2 x 2 box
    steps first if the factor left is still >= 2); area when a full decode must shrink
    2x or more (``load`` does that as ``_shrink``: 2 x 2 box steps, then cubic); linear
    below 2x, where bilinear still reads every source pixel.
    """
    enlarge = dst[0] > src[0] or dst[1] > src[1]
    if opts.interpolation != "auto":
        interp = INTERPOLATIONS[opts.interpolation]
        return cv2.INTER_CUBIC if enlarge and interp == cv2.INTER_AREA else interp
    if enlarge:
        return cv2.INTER_CUBIC
    if scale > 1:
        return REDUCED_FINISH
    if src[0] >= 2 * dst[0] or src[1] >= 2 * dst[1]:
        return cv2.INTER_AREA
    return cv2.INTER_LINEAR


# ---------------------------------------------------------------- OpenCV's threads

_forked = False  # this process is a fork of one that had imported this module


def _after_fork_in_child() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def one_opencv_thread():
    """OpenCV on the calling thread alone while the block runs; its thread count restored
    after.

    Packing takes one image at a time per process and gets its parallelism from shards
    (pool processes, Airflow tasks), one per core. OpenCV's own pool (a thread per core)
    only adds CPU there: its workers wait busily between the short parallel steps of a
    decode, resize and encode. On the benchmark photos one process spent 3.3-3.5 ms of CPU
    an image with one thread against 3.8-4.1 ms with two, at the same wall time.

    Entered before a pool forks, the children start with one thread. A fork of a process
    that had imported this module keeps the count it inherited: ``cv2.setNumThreads`` in a
    fork of a process whose pool was at work waits for threads only the parent has (5 of 6
    forks hung, OpenCV 4.14), while leaving the count alone is safe there, only slower."""
    before = cv2.getNumThreads()
    if before == 1 or _forked:
        yield
        return
    cv2.setNumThreads(1)
    try:
        yield
    finally:
        cv2.setNumThreads(before)


@contextlib.contextmanager
def packing_process():
    """What a process that packs image after image runs under (pack, convert_masks): the
    memory one image frees kept for the next (``allocator.keep_freed_memory``) and OpenCV
    on this thread alone (:func:`one_opencv_thread`)."""
    allocator.keep_freed_memory()
    with one_opencv_thread():
        yield


# ---------------------------------------------------------------- the whole path


def _to_depth8(img: np.ndarray) -> np.ndarray:
    if img.dtype == np.uint8:
        return img
    if img.dtype == np.uint16:  # scale, not saturate as OpenCV's imencode fallback would
        return ((img.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    return np.clip(img, 0, 255).astype(np.uint8)


def decode(data: bytes, opts: PackOptions) -> np.ndarray:
    """Decode to a full-size array (BGR, gray or as stored), refusing broken images."""
    if not data:
        raise ImageRejected("zero_bytes", "file has 0 bytes")
    info = probe(data)
    check_pixels(info, opts)
    img = decode_raw(data, info, _reduced_flag(1, opts.color))
    return img if opts.color == -1 and opts.encoding == ".png" else _to_depth8(img)


def load(data: bytes, opts: PackOptions) -> np.ndarray:
    """Decode, orient, crop and resize: the final pixels of the record image."""
    if not data:
        raise ImageRejected("zero_bytes", "file has 0 bytes")
    info = probe(data)
    check_pixels(info, opts)
    scale = 1
    if (opts.reduced_decode and opts.color in (0, 1) and info is not None
            and info.format == "jpeg" and info.pixels):
        scale = choose_scale(info.height, info.width, opts)
    img = decode_raw(data, info, _reduced_flag(scale, opts.color))
    if scale > 1:
        rh, rw = _ceil_div(info.height, scale), _ceil_div(info.width, scale)
        transposed = info.orientation >= 5
        if img.shape[:2] == (rh, rw) and (rh == rw or not transposed):
            h, w = info.height, info.width
        elif img.shape[:2] == (rw, rh) and (rh == rw or transposed):  # EXIF transposed it
            h, w = info.width, info.height
        else:  # the header lied (size or orientation); do it the slow, sure way
            scale = 1
            img = decode_raw(data, info, _reduced_flag(1, opts.color))
    if scale == 1:
        h, w = img.shape[:2]
    if not (opts.color == -1 and opts.encoding == ".png"):
        img = _to_depth8(img)
    crop = crop_box(h, w, opts.center_crop)
    y0, y1, x0, x1 = crop
    oh, ow = output_size(y1 - y0, x1 - x0, opts)
    check_output(oh, ow, opts)
    if scale > 1:
        rev_y, rev_x = _REVERSED[info.orientation]
        pad_y = _ceil_div(h, scale) * scale - h if rev_y else 0
        pad_x = _ceil_div(w, scale) * scale - w if rev_x else 0
        interp = choose_interpolation((_ceil_div(y1 - y0, scale), _ceil_div(x1 - x0, scale)),
                                      (oh, ow), scale, opts)
        maps = ((scale, -pad_y), (scale, -pad_x))
        if opts.interpolation == "auto" and interp == REDUCED_FINISH:
            return _shrink(img, maps, crop, (oh, ow), interp)  # box first if still >= 2x
        return _resample(img, maps, crop, (oh, ow), interp)
    img = img[y0:y1, x0:x1]
    if img.shape[:2] == (oh, ow):
        return img
    interp = choose_interpolation(img.shape[:2], (oh, ow), 1, opts)
    if opts.interpolation == "auto" and interp == cv2.INTER_AREA:
        return _shrink(img, ((1, 0), (1, 0)), (0, y1 - y0, 0, x1 - x0), (oh, ow),
                       SHRINK_FINISH)
    return cv2.resize(img, (ow, oh), interpolation=interp)


def resize_short_side(img: np.ndarray, opts: PackOptions) -> np.ndarray:
    """Resize a fully decoded array to the output size (the segmentation packer decodes in
    full first, because the mask must be checked against the image's real size)."""
    h, w = img.shape[:2]
    oh, ow = output_size(h, w, opts)
    check_output(oh, ow, opts)
    if (oh, ow) == (h, w):
        return img
    return cv2.resize(img, (ow, oh), interpolation=choose_interpolation((h, w), (oh, ow), 1, opts))


def encode(img: np.ndarray, opts: PackOptions) -> bytes:
    """Encode exactly as ``mx.recordio.pack_img`` does (same OpenCV parameters)."""
    if opts.encoding == ".jpg":
        params = [cv2.IMWRITE_JPEG_QUALITY, opts.quality]
        if img.ndim == 3 and img.shape[2] == 4:  # JPEG has no alpha: drop it explicitly
            img = img[:, :, :3]
    else:
        params = [cv2.IMWRITE_PNG_COMPRESSION, opts.quality]
    ok, buf = cv2.imencode(opts.encoding, img, params)
    if not ok:
        raise ImageRejected("undecodable", f"OpenCV could not encode a {img.shape} "
                            f"{img.dtype} image as {opts.encoding}")
    return buf.tobytes()


def process(data: bytes, opts: PackOptions, hashed: bool = False) -> EncodedImage:
    """Source bytes → record-ready encoded image with its final shape; ``hashed``: with the
    dHash of its pixels too (:func:`process_hashed`)."""
    img = load(data, opts)
    h, w = img.shape[:2]
    c = 1 if img.ndim == 2 else img.shape[2]
    if opts.encoding == ".jpg" and c == 4:
        c = 3
    encoded = encode(img, opts)
    if not hashed:
        return EncodedImage(encoded, h, w, c)
    # the pixels are in memory here; hashing the record instead would decode it again
    # (0.64 ms an image on a 256-px photo, against 0.28 ms). A lossy encoding moves the
    # hash of what a reader decodes by a bit or two at most, far inside the near-duplicate
    # check's distance; 16-bit pixels (PNG as stored) hash as the record decodes to 8 bits.
    digest = phash.dhash(img) if img.dtype == np.uint8 else phash.dhash_encoded(encoded)
    return EncodedImage(encoded, h, w, c, digest)


def process_hashed(data: bytes, opts: PackOptions) -> EncodedImage:
    """:func:`process` with ``phash``, the dHash of the record's pixels: what pack runs (a
    module-level function, so a child process can run it by name)."""
    return process(data, opts, hashed=True)
