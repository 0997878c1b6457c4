"""Segmentation masks → single-channel class masks, by lookup table (CLI: ``recforge.cli.masks``).

Three kinds of input, decided by the PNG's own mode (read with PIL, header only):

* RGB colour masks (Cityscapes ``*_color.png``, CamVid, labelling tools): every pixel's
  colour is packed into a 24-bit key (``R<<16 | G<<8 | B``) and looked up in a 16 M-entry
  table with ``np.take``; ~100x faster than a loop over classes doing ``(img == c).all(-1)``.
* Palette masks (mode ``P``, PASCAL VOC): the pixel *indices* are read with PIL, never through
  OpenCV, which expands palettes to BGR (and ``IMREAD_GRAYSCALE`` gives luminance). With an
  indexed map (VOC) indices are ids; otherwise each palette entry's colour is looked up.
* Single-channel id masks (mode ``L``, Cityscapes ``*_labelIds.png``): remapped through a
  256-entry table (id → trainId).

Values the label definition does not know fail the conversion with the file, the value, its
pixel count and the first location — or, with ``on_unknown="ignore"``, become the ignore
index and are counted. JPEG masks are refused: lossy compression invents colours.
"""

from __future__ import annotations

import io
import logging
import posixpath
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recforge import quarantine, storage
from recforge.errors import RecforgeFailure
from recforge.imaging import ImageRejected
from recforge.progress import Progress
from recforge.segmentation.colormaps import (
    BUILTIN,
    ColorMap,
    ColorMapError,
    classes_document,
    colormap_from_id_map,
    load_colormap,
)

log = logging.getLogger(__name__)

ON_UNKNOWN = ("error", "ignore")
MASK_EXTENSIONS = (".png", ".bmp", ".tif", ".tiff", ".gif", ".webp")
MAX_REPORTED_VALUES = 5
DEFAULT_MAX_PIXELS = 178_956_970
BUILTIN_NAMES = tuple(BUILTIN)
_LITTLE = sys.byteorder == "little"


class MaskRejected(ImageRejected):
    """This mask (or pair) cannot be packed; ``reason`` is a quarantine reason."""


class UnknownMaskValues(RecforgeFailure, ValueError):
    """A mask holds colours/ids the label definition does not know (``on_unknown="error"``)."""

    def __init__(self, name: str, colormap: str, values: list[UnknownValue], total: int):
        self.name, self.colormap, self.values, self.total = name, colormap, values, total
        first = values[0]
        more = "".join(f"; {v.what} × {v.pixels} px (first at x={v.x}, y={v.y})"
                       for v in values[1:])
        super().__init__(
            f"mask {name!r}: {first.pixels} pixels have {first.what}, which colour map "
            f"{colormap!r} does not define (first at x={first.x}, y={first.y}){more}; "
            f"{total} unknown pixels in all. Fix: add the value(s) to the colour map "
            "(docs/segmentation.md) or set on_unknown: ignore (--on-unknown ignore) to map "
            "them to the ignore index and count them")

    def __reduce__(self):  # rebuilt from its fields (a decode in a child process raises it)
        return type(self), (self.name, self.colormap, self.values, self.total)


@dataclass(frozen=True)
class UnknownValue:
    """One unknown colour/id in one mask: what it is, how many pixels, where it first occurs."""

    what: str  # "colour (12, 34, 56)", "id 77", "palette index 3 = colour (..)"
    pixels: int
    x: int
    y: int


@dataclass(frozen=True)
class DecodedMask:
    """A decoded mask before lookup. ``kind``: ``bgr`` (HxWx3), ``index`` (palette indices,
    with ``palette`` as 256x3 RGB) or ``ids`` (HxW)."""

    array: np.ndarray
    kind: str
    palette: np.ndarray | None = None

    @property
    def size(self) -> tuple[int, int]:
        """(width, height)."""
        return self.array.shape[1], self.array.shape[0]


@dataclass
class MaskResult:
    mask: np.ndarray  # HxW uint8 target values
    unknown: list[UnknownValue] = field(default_factory=list)
    unknown_pixels: int = 0


# ---- decoding -----------------------------------------------------------------------------
def read_mask(data: bytes, name: str = "<mask>",
              max_pixels: int = DEFAULT_MAX_PIXELS) -> DecodedMask:
    """Decode mask bytes by their PNG mode; palette masks stay indices (PIL), colour masks are
    decoded by OpenCV as BGR. Raises ``MaskRejected`` for empty, lossy, huge or broken data."""
    import cv2
    from PIL import Image

    if not data:
        raise MaskRejected("zero_bytes", f"mask {name!r} has 0 bytes")
    if data[:3] == b"\xff\xd8\xff":
        raise MaskRejected("mask_lossy", f"mask {name!r} is a JPEG: lossy compression changes "
                           "class colours/ids at every edge; export masks as PNG")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im = Image.open(io.BytesIO(data))
            mode, (w, h) = im.mode, im.size
    except Exception as exc:
        raise MaskRejected("undecodable", f"mask {name!r}: not an image PIL can read "
                           f"({type(exc).__name__})") from None
    if w * h > max_pixels:
        raise MaskRejected("too_many_pixels", f"mask {name!r} is {w}x{h} > {max_pixels} px")
    try:
        if mode in ("RGB", "RGBA") and data[:8] == b"\x89PNG\r\n\x1a\n":
            arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
            if arr is None:
                raise ValueError("OpenCV could not decode it")
            return DecodedMask(arr, "bgr")
        if mode in ("RGB", "RGBA"):
            rgb = np.asarray(im.convert("RGB"))
            return DecodedMask(np.ascontiguousarray(rgb[..., ::-1]), "bgr")
        if mode == "P":
            idx = np.asarray(im)
            pal = np.zeros((256, 3), np.uint8)
            raw = np.frombuffer(bytes(im.getpalette("RGB") or []), np.uint8).reshape(-1, 3)
            pal[: len(raw)] = raw[:256]
            return DecodedMask(idx, "index", pal)
        if mode in ("L", "1"):
            return DecodedMask(np.asarray(im).astype(np.uint8, copy=False), "ids")
        if mode in ("I;16", "I;16B", "I;16L", "I"):
            ids = np.asarray(im)
            if ids.size and int(ids.max()) > 255:
                raise MaskRejected(
                    "mask_values_out_of_range",
                    f"mask {name!r} is a {mode} image with values up to {int(ids.max())}; "
                    "class masks must be 8-bit (ids 0-255)")
            return DecodedMask(ids.astype(np.uint8), "ids")
    except MaskRejected:
        raise
    except Exception as exc:
        raise MaskRejected("truncated" if "truncat" in str(exc).lower() else "undecodable",
                           f"mask {name!r}: {type(exc).__name__}: {exc}"[:300]) from None
    raise MaskRejected("mask_mode_unsupported", f"mask {name!r} has PIL mode {mode!r}; save "
                       "masks as palette (P), grayscale ids (L) or RGB colour PNGs")


def bgr_keys(bgr: np.ndarray) -> np.ndarray:
    """HxWx3 BGR uint8 → HxW uint32 keys ``R<<16 | G<<8 | B`` (one cv2 pass + one AND)."""
    if _LITTLE:
        import cv2

        bgra = cv2.cvtColor(bgr, cv2.COLOR_BGR2BGRA)  # bytes B,G,R,255 = one LE uint32
        keys = bgra.view(np.uint32)[..., 0]
        np.bitwise_and(keys, 0xFFFFFF, out=keys)
        return keys
    b, g, r = (bgr[..., i].astype(np.uint32) for i in range(3))
    return (r << 16) | (g << 8) | b


def color_key(color) -> int:
    r, g, b = color
    return (int(r) << 16) | (int(g) << 8) | int(b)


def key_color(key: int) -> tuple[int, int, int]:
    return ((key >> 16) & 255, (key >> 8) & 255, key & 255)


# ---- conversion ---------------------------------------------------------------------------
class MaskConverter:
    """Colour/palette/id masks → ``target`` values (``trainId`` or ``id``) of a colour map.

    Lookup tables are built lazily, once per process, and are not pickled (a process pool
    rebuilds them: ~20 ms for the 16 M-entry colour table).
    """

    def __init__(self, colormap: ColorMap, target: str = "trainId", on_unknown: str = "error"):
        if on_unknown not in ON_UNKNOWN:
            raise ValueError(f"on_unknown {on_unknown!r} is not one of {ON_UNKNOWN}")
        self.colormap = colormap
        self.target = target
        self.on_unknown = on_unknown
        self.ignore_index = colormap.ignore_index
        self._colors = colormap.color_table(target) if colormap.has_colors else {}
        self._ids = colormap.id_table(target)
        used = set(self._colors.values()) | set(self._ids.values()) | {self.ignore_index}
        free = sorted(set(range(256)) - used)
        # an unused uint8 value marks "unknown" in the tables; all 256 used → uint16 tables
        self._sentinel = free[-1] if free else 256
        self._dtype = np.uint8 if free else np.uint16
        self._color_lut: np.ndarray | None = None
        self._id_lut: np.ndarray | None = None

    @classmethod
    def from_config(cls, colormap: str | None = None, *, target: str = "trainId",
                    id_map: dict | None = None, ignore_index: int | None = None,
                    on_unknown: str = "error", collision_rule: str | None = None,
                    resolve=None) -> MaskConverter:
        """The one call the spec needs: a built-in name or file path, and/or an id map."""
        if colormap is None and id_map is None:
            raise ColorMapError("a label definition needs a colormap, an id_map, or both")
        if colormap is None:
            cmap = colormap_from_id_map(id_map or {}, ignore_index=ignore_index or 255)
        else:
            cmap = load_colormap(colormap, collision_rule=collision_rule, resolve=resolve,
                                 ignore_index=ignore_index)
            if id_map is not None:
                cmap = cmap.with_train_ids(id_map)
        return cls(cmap, target=target, on_unknown=on_unknown)

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_color_lut"] = d["_id_lut"] = None
        return d

    def classes_document(self) -> dict:
        return classes_document(self.colormap, self.target)

    # tables
    def color_lut(self) -> np.ndarray:
        if self._color_lut is None:
            if not self._colors:
                raise ColorMapError(f"colour map {self.colormap.name!r} defines no colours, so "
                                    "it cannot convert RGB masks; add colours or give id masks")
            lut = np.full(1 << 24, self._sentinel, self._dtype)
            keys = np.fromiter((color_key(c) for c in self._colors), np.int64, len(self._colors))
            lut[keys] = np.fromiter(self._colors.values(), np.int64, len(self._colors))
            self._color_lut = lut
        return self._color_lut

    def id_lut(self) -> np.ndarray:
        if self._id_lut is None:
            lut = np.full(256, self._sentinel, self._dtype)
            for i, v in self._ids.items():
                lut[i] = v
            self._id_lut = lut
        return self._id_lut

    def palette_lut(self, palette: np.ndarray) -> np.ndarray:
        """256-entry index → value table of one palette mask."""
        if self.colormap.reads_palette_as_ids:
            return self.id_lut()
        keys = (palette[:, 0].astype(np.int64) << 16) | (palette[:, 1].astype(np.int64) << 8) \
            | palette[:, 2]
        return self.color_lut()[keys]

    # conversion
    def convert(self, data: bytes, name: str = "<mask>",
                max_pixels: int = DEFAULT_MAX_PIXELS) -> MaskResult:
        return self.convert_decoded(read_mask(data, name, max_pixels), name)

    def convert_decoded(self, dec: DecodedMask, name: str = "<mask>") -> MaskResult:
        if dec.kind == "bgr":
            keys = bgr_keys(dec.array)
            out = np.take(self.color_lut(), keys)
            return self._finish(out, name, keys, lambda k: f"colour {key_color(int(k))}")
        if dec.kind == "index":
            lut = self.palette_lut(dec.palette)
            out = np.take(lut, dec.array)
            pal = dec.palette
            return self._finish(out, name, dec.array, lambda i: (
                f"palette index {int(i)} = colour {tuple(int(c) for c in pal[int(i)])}"
                if not self.colormap.reads_palette_as_ids else f"palette index (id) {int(i)}"))
        if dec.kind == "ids":
            out = np.take(self.id_lut(), dec.array)
            return self._finish(out, name, dec.array, lambda i: f"id {int(i)}")
        raise ValueError(f"unknown mask kind {dec.kind!r}")

    def convert_rgb(self, rgb: np.ndarray, name: str = "<array>") -> MaskResult:
        """An HxWx3 RGB array (e.g. from PIL) → target values."""
        return self.convert_decoded(DecodedMask(np.ascontiguousarray(rgb[..., ::-1]), "bgr"),
                                    name)

    def _finish(self, out: np.ndarray, name: str, src: np.ndarray, describe) -> MaskResult:
        bad = out == self._sentinel
        if not bad.any():
            return MaskResult(out.astype(np.uint8, copy=False))
        vals, counts = np.unique(src[bad], return_counts=True)
        order = np.argsort(-counts, kind="stable")[:MAX_REPORTED_VALUES]
        flat, width = src.reshape(-1), src.shape[1]
        found = []
        for j in order:
            pos = int(np.argmax(flat == vals[j]))
            found.append(UnknownValue(describe(vals[j]), int(counts[j]), pos % width,
                                      pos // width))
        total = int(counts.sum())
        if self.on_unknown == "error":
            raise UnknownMaskValues(name, self.colormap.name, found, total)
        out[bad] = self.ignore_index
        log.debug("mask %s: %d unknown pixels mapped to %d", name, total, self.ignore_index)
        return MaskResult(out.astype(np.uint8, copy=False), found, total)


def check_same_size(image_size: tuple[int, int], mask_size: tuple[int, int],
                    name: str = "<pair>") -> None:
    """Refuse a pair whose mask is not the image's size (sizes are (width, height))."""
    if tuple(image_size) != tuple(mask_size):
        raise MaskRejected(
            "mask_size_mismatch",
            f"{name}: image is {image_size[0]}x{image_size[1]} but its mask is "
            f"{mask_size[0]}x{mask_size[1]} (WxH); re-export the mask at the image's size")


def encode_mask(mask: np.ndarray, compression: int = 1) -> bytes:
    """Single-channel 8-bit PNG (lossless at every level; 1 is fast, 9 is small)."""
    import cv2

    if mask.ndim != 2 or mask.dtype != np.uint8:
        raise ValueError(f"a class mask must be HxW uint8, got {mask.shape} {mask.dtype}")
    ok, buf = cv2.imencode(".png", mask, [cv2.IMWRITE_PNG_COMPRESSION, int(compression)])
    if not ok:
        raise MaskRejected("undecodable", "OpenCV could not encode the mask as PNG")
    return buf.tobytes()


def decode_class_mask(data: bytes, name: str = "<mask>") -> np.ndarray:
    """A converted (single-channel) class mask → HxW uint8; refuses anything else."""
    dec = read_mask(data, name)
    if dec.kind != "ids":
        raise MaskRejected("mask_not_converted",
                           f"mask {name!r} is a {dec.kind} mask, not single-channel class ids; "
                           "convert it first (recforge masks convert)")
    return dec.array


# ---- directory trees ----------------------------------------------------------------------
@dataclass
class TreeReport:
    files: int = 0
    pixels: int = 0
    seconds: float = 0.0
    unknown_pixels: int = 0
    unknown: Counter = field(default_factory=Counter)  # what → pixels
    files_with_unknown: list[str] = field(default_factory=list)  # the first 20
    files_with_unknown_count: int = 0
    histogram: np.ndarray = field(default_factory=lambda: np.zeros(256, np.int64))

    def add(self, name: str, res: MaskResult, histogram: bool) -> None:
        self.files += 1
        self.pixels += res.mask.size
        if res.unknown_pixels:
            self.unknown_pixels += res.unknown_pixels
            for u in res.unknown:
                self.unknown[u.what] += u.pixels
            self.files_with_unknown_count += 1
            if len(self.files_with_unknown) < 20:
                self.files_with_unknown.append(name)
        if histogram:
            self.histogram += np.bincount(res.mask.reshape(-1), minlength=256)[:256]

    def to_dict(self, converter: MaskConverter | None = None) -> dict:
        names = converter.colormap.classes(converter.target) if converter else []
        ignore = converter.ignore_index if converter else 255
        hist = {}
        for v in np.flatnonzero(self.histogram):
            label = "ignore" if v == ignore else (names[v] if v < len(names) else str(v))
            hist[f"{v}:{label}"] = int(self.histogram[v])
        return {"files": self.files, "pixels": self.pixels, "seconds": round(self.seconds, 3),
                "mpix_per_s": round(self.pixels / 1e6 / max(self.seconds, 1e-9), 1),
                "unknown_pixels": self.unknown_pixels, "unknown": dict(self.unknown),
                "files_with_unknown": self.files_with_unknown,
                "files_with_unknown_count": self.files_with_unknown_count,
                "pixels_by_value": hist}


def output_name(rel: str) -> str:
    """Converted masks are PNG: same relative path, extension ``.png``."""
    stem, _ = posixpath.splitext(rel)
    return stem + ".png"


def list_masks(src: Path, pattern: str = "*.png") -> list[str]:
    """Relative POSIX paths of mask files under ``src`` matching ``pattern``; hidden skipped."""
    out = []
    for p in src.rglob(pattern):
        rel = p.relative_to(src).as_posix()
        if p.is_file() and not any(part.startswith(".") for part in rel.split("/")):
            out.append(rel)
    return sorted(out)


def convert_file(src: Path, dst: Path, converter: MaskConverter, compression: int = 1,
                 name: str | None = None) -> MaskResult:
    res = converter.convert(Path(src).read_bytes(), name or str(src))
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".partial")
    tmp.write_bytes(encode_mask(res.mask, compression))
    tmp.replace(dst)
    return res


def _convert_one(args) -> tuple[str, MaskResult]:
    converter, src, dst, rel, compression = args
    return rel, convert_file(src / rel, dst / output_name(rel), converter, compression, rel)


def convert_tree(src: str | Path, dst: str | Path, converter: MaskConverter, *,
                 pattern: str = "*.png", compression: int = 1, workers: int = 1,
                 histogram: bool = True) -> TreeReport:
    """Convert every mask under ``src`` to a single-channel PNG under ``dst`` with the same
    relative name (extension ``.png``). Fails on the first unknown value in error mode."""
    src, dst = Path(src).resolve(), Path(dst).resolve()
    if not src.is_dir():
        raise FileNotFoundError(f"mask folder {src} does not exist")
    if dst == src or src in dst.parents:
        raise ValueError(f"DST {dst} is SRC or inside it: converted masks would overwrite or "
                         "mix with the originals; choose a separate folder")
    rels = list_masks(src, pattern)
    if not rels:
        raise FileNotFoundError(f"no files matching {pattern!r} under {src}")
    report = TreeReport()
    started = time.perf_counter()
    jobs = [(converter, src, dst, rel, compression) for rel in rels]
    if workers <= 1:
        results = map(_convert_one, jobs)
        pool = None
    else:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(workers)
        results = pool.map(_convert_one, jobs, chunksize=4)
    try:
        for n, (rel, res) in enumerate(results, 1):
            report.add(rel, res, histogram)
            if n % 500 == 0:
                log.info("converted %d/%d masks", n, len(rels))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    report.seconds = time.perf_counter() - started
    return report


# ---- the mask-conversion stage's core -----------------------------------------------------
@dataclass
class ConvertedRows:
    """What converting one shard's masks produced: the rows that now point at a class-id
    PNG (``mask_uri``), the quarantine entries of refused pairs, and the report."""

    converted: list[dict]
    refused: list
    report: dict


def convert_keyed(data_and_key: tuple[bytes, str], converter: MaskConverter) -> MaskResult:
    """``converter.convert(data, key)`` as a ``crash_isolation`` target (data, opts)."""
    return converter.convert(*data_and_key)


def convert_rows(rows: list[dict], source_uri: str, out_uri: str, converter: MaskConverter, *,
                 compression: int = 1, fetch_threads: int = 8,
                 stage: str = "masks", convert=None) -> ConvertedRows:
    """Convert the masks of planned pair rows (``mask_key`` relative to ``source_uri``) into
    ``out_uri/<mask_key stem>.png``; the caller stores the returned rows and reports.
    ``convert`` (default: ``converter.convert`` in this process) takes ``(data, key)``; an
    ``IsolatedProcessor`` over :func:`convert_keyed` runs it in a child process.

    Unknown values raise ``UnknownMaskValues`` (the run fails) unless the converter ignores
    them; masks that cannot be fetched or decoded are quarantined with their image.
    """
    refused, converted = [], []
    report = TreeReport()
    started = time.perf_counter()
    uris = (storage.join(source_uri, r["mask_key"]) for r in rows)
    progress = Progress(stage, len(rows), log, unit="masks")
    for row, data in zip(rows, storage.prefetch(uris, fetch_threads), strict=True):
        progress.update()
        mkey = row["mask_key"]
        try:
            if isinstance(data, Exception):
                raise MaskRejected(*quarantine.fetch_reason(data))
            res = convert((data, mkey)) if convert else converter.convert(data, mkey)
        except MaskRejected as exc:
            refused += pair_refusal(row, stage, exc.reason, exc.detail)
            log.warning("quarantined pair %s: %s (%s)", mkey, exc.reason, exc.detail)
            continue
        uri = storage.join(out_uri, output_name(mkey))
        storage.put_bytes(uri, encode_mask(res.mask, compression), "image/png")
        report.add(mkey, res, histogram=True)
        converted.append({**row, "mask_uri": uri, "unknown_pixels": res.unknown_pixels})
    report.seconds = time.perf_counter() - started
    summary = {**report.to_dict(converter), "converted": len(converted),
               "quarantined": len(refused)}
    return ConvertedRows(converted, refused, summary)


def pair_refusal(row: dict, stage: str, reason: str, detail: str
                 ) -> list[quarantine.QuarantineEntry]:
    """Quarantine entries for both objects of a refused pair, so counts still reconcile."""
    out = [quarantine.QuarantineEntry(row["source_key"], stage, reason, detail)]
    if row.get("mask_key"):
        out.append(quarantine.QuarantineEntry(row["mask_key"], stage, reason,
                                              f"mask of {row['source_key']}: {detail}"))
    return out


def converter_for(seg, specs_dir: Path) -> MaskConverter:
    """The spec's ``segmentation`` section as a converter; a relative colour-map path is
    resolved against the specs folder. Cheap to rebuild in every task."""
    colormap = seg.colormap
    if colormap and colormap not in BUILTIN_NAMES and not Path(colormap).is_absolute():
        colormap = str(specs_dir / colormap)
    return MaskConverter.from_config(
        colormap, target=seg.target, id_map=seg.id_map, ignore_index=seg.ignore_index,
        on_unknown=seg.on_unknown, collision_rule=seg.collision_rule,
        resolve=seg.resolve or None)
