"""Aligned image/mask RecordIO: ``<name>.rec`` (images) and ``<name>_mask.rec`` (masks).

im2rec cannot pack masks (it JPEG-encodes and bilinearly resizes them); MXNet's maintainers
suggest two aligned ``.rec`` files read in lockstep, which is what this writes: the same key
for a pair in both files, the same order, each with its ``.idx``. Masks are single-channel
lossless PNG and are resized with nearest-neighbour (``INTER_NEAREST_EXACT``: pixel-centre
sampling, the same geometry as the image's area/linear resize, so edges stay aligned).
Both files are ordinary image records (``IRHeader`` + encoded image): ``mx.recordio`` and
``ImageRecordIter`` read either one.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recforge import phash, quarantine, recordio, storage
from recforge.imaging import ImageRejected, PackOptions, decode, encode, resize_short_side
from recforge.masks import (
    MaskConverter,
    check_same_size,
    decode_class_mask,
    encode_mask,
    pair_refusal,
)

log = logging.getLogger(__name__)

MASK_SUFFIX = "_mask"
SEG_SHARD_FILES = ("part.rec", "part.idx", "part_mask.rec", "part_mask.idx", "part.lst",
                   "records.jsonl", "quarantine.jsonl")
MAX_REPORTED = 20


@dataclass(frozen=True)
class SegPackOptions:
    """Image options (as for classification; ``resize`` is the short side, 0 keeps the size)
    plus the mask PNG compression level (lossless at every level)."""

    image: PackOptions = field(default_factory=lambda: PackOptions(resize=0))
    mask_compression: int = 1

    @classmethod
    def from_spec(cls, pack, mask_compression: int = 1) -> SegPackOptions:
        return cls(PackOptions.from_spec(pack), mask_compression)


@dataclass(frozen=True)
class SegPair:
    """One pair to pack. ``image``/``mask`` are bytes (or the exception that fetching raised);
    ``mask`` may also be an HxW uint8 array of class values. ``row`` goes to the manifest and
    must hold ``source_key`` (and ``mask_key``) for the quarantine report."""

    key: int
    name: str
    image: bytes | Exception
    mask: bytes | np.ndarray | Exception
    row: dict = field(default_factory=dict)


def resize_mask_like(mask: np.ndarray, width: int, height: int) -> np.ndarray:
    """Nearest-neighbour (pixel-centre) resize; never invents class values."""
    import cv2

    if mask.shape[:2] == (height, width):
        return mask
    return cv2.resize(mask, (width, height), interpolation=cv2.INTER_NEAREST_EXACT)


def _fetch_error(exc: Exception) -> tuple[str, str]:
    missing = isinstance(exc, FileNotFoundError) or "NoSuchKey" in repr(exc)
    return ("missing" if missing else "read_error"), repr(exc)[:300]


def _mask_array(pair: SegPair, converter: MaskConverter | None) -> np.ndarray:
    if isinstance(pair.mask, np.ndarray):
        if pair.mask.ndim != 2 or pair.mask.dtype != np.uint8:
            raise ValueError(f"pair {pair.name}: mask array must be HxW uint8, got "
                             f"{pair.mask.shape} {pair.mask.dtype}")
        return pair.mask
    if converter is not None:
        return converter.convert(pair.mask, pair.row.get("mask_key", pair.name)).mask
    return decode_class_mask(pair.mask, pair.row.get("mask_key", pair.name))


def pack_pairs(pairs: Iterable[SegPair], workdir: str | Path, opts: SegPackOptions, *,
               name: str = "part", converter: MaskConverter | None = None,
               stage: str = "pack") -> dict:
    """Write ``workdir/<name>.rec/.idx``, ``<name>_mask.rec/.idx``, ``<name>.lst``,
    ``records.jsonl`` and ``quarantine.jsonl``. Returns ``{"packed", "quarantined"}``.

    Pairs are written in the order given, each under its key in both files. A pair whose
    image or mask cannot be read, or whose sizes differ, is quarantined (both objects).
    Masks are converted with ``converter`` when given, else must already be class ids;
    unknown colours raise ``UnknownMaskValues`` (the run fails, as the spec asks).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    refused, manifest = [], []
    started = time.monotonic()
    with recordio.RecordWriter(workdir / f"{name}.rec", workdir / f"{name}.idx") as iw, \
            recordio.RecordWriter(workdir / f"{name}{MASK_SUFFIX}.rec",
                                  workdir / f"{name}{MASK_SUFFIX}.idx") as mw, \
            open(workdir / f"{name}.lst", "w", encoding="utf-8") as lst:
        for n, pair in enumerate(pairs, 1):
            row = {"source_key": pair.name, **pair.row}
            try:
                for part, what in ((pair.image, "image"), (pair.mask, "mask")):
                    if isinstance(part, Exception):
                        reason, detail = _fetch_error(part)
                        raise ImageRejected(reason, f"{what}: {detail}")
                img = decode(pair.image, opts.image)
                mask = _mask_array(pair, converter)
                check_same_size((img.shape[1], img.shape[0]), (mask.shape[1], mask.shape[0]),
                                pair.name)
                img = resize_short_side(img, opts.image)
                h, w = img.shape[:2]
                mask = resize_mask_like(mask, w, h)
                img_bytes = encode(img, opts.image)
                mask_bytes = encode_mask(mask, opts.mask_compression)
            except ImageRejected as exc:
                refused += pair_refusal(row, stage, exc.reason, exc.detail)
                log.warning("quarantined pair %s: %s (%s)", pair.name, exc.reason, exc.detail)
                continue
            ipayload = recordio.pack_image_record(0.0, pair.key, img_bytes)
            mpayload = recordio.pack_image_record(0.0, pair.key, mask_bytes)
            ioff = iw.write(pair.key, ipayload)
            moff = mw.write(pair.key, mpayload)
            lst.write(f"{pair.key}\t{0.0:f}\t{pair.name}\n")
            counts = np.bincount(mask.reshape(-1), minlength=256)
            manifest.append({
                **row, "key": pair.key, "name": pair.name, "offset": ioff,
                "length": len(ipayload), "mask_offset": moff, "mask_length": len(mpayload),
                "height": h, "width": w, "channels": 1 if img.ndim == 2 else img.shape[2],
                "label": 0, "pixels_by_value": {str(v): int(counts[v])
                                                for v in np.flatnonzero(counts)},
                "source_sha256": hashlib.sha256(pair.image).hexdigest(),
                "mask_sha256": hashlib.sha256(mask_bytes).hexdigest(), "decode_status": "ok",
                # for the quality gate: the mask record and what it holds
                "mask_record_key": pair.key, "mask_height": int(mask.shape[0]),
                "mask_width": int(mask.shape[1]),
                "mask_values": [int(v) for v in np.flatnonzero(counts)],
                "class_pixels": {str(v): int(counts[v]) for v in np.flatnonzero(counts)},
                "phash": phash.dhash(img),
            })
            if n % 200 == 0:
                log.info("packed %d pairs (%.1f pairs/s)", n,
                         n / max(time.monotonic() - started, 1e-9))
    storage.write_jsonl(str(workdir / "records.jsonl"), manifest)
    (workdir / "quarantine.jsonl").write_bytes(quarantine.dumps(refused))
    return {"packed": len(manifest), "quarantined": len(refused)}


def pack_pair_rows(rows: list[dict], image_base_uri: str, workdir: str | Path,
                   opts: SegPackOptions, *, mask_base_uri: str | None = None,
                   converter: MaskConverter | None = None, fetch_threads: int = 8,
                   name: str = "part", stage: str = "pack") -> dict:
    """Fetch and pack planned pair rows: ``record_key``, ``name``, ``source_key`` (image,
    relative to ``image_base_uri``) and either ``mask_uri`` (a converted mask in staging)
    or ``mask_key`` (relative to ``mask_base_uri``, default ``image_base_uri``)."""
    mask_base_uri = mask_base_uri or image_base_uri

    def fetch(uri):
        try:
            return storage.get_bytes(uri)
        except Exception as exc:  # reported per pair by pack_pairs
            return exc

    def fetch_pair(r):
        mask_uri = r.get("mask_uri") or storage.join(mask_base_uri, r["mask_key"])
        return fetch(storage.join(image_base_uri, r["source_key"])), fetch(mask_uri)

    def pairs(pool):
        # a bounded window of fetches ahead of the packer: large images stay out of memory
        window = max(2, 4 * fetch_threads)
        pending = deque()
        for r in rows:
            pending.append((r, pool.submit(fetch_pair, r)))
            if len(pending) >= window:
                yield _pair(*pending.popleft())
        while pending:
            yield _pair(*pending.popleft())

    def _pair(r, fut):
        image, mask = fut.result()
        return SegPair(r["record_key"], r.get("name", r["source_key"]), image, mask, r)

    with ThreadPoolExecutor(fetch_threads) as pool:
        return pack_pairs(pairs(pool), workdir, opts, name=name, converter=converter,
                          stage=stage)


# ---- merge --------------------------------------------------------------------------------
def merge_mask_parts(shard_dirs: list[Path], out: Path, split: str) -> int:
    """Concatenate shards' ``part_mask.rec/.idx`` into ``out/<split>_mask.rec/.idx`` (offsets
    shifted), in the same shard order as the images; returns the record count."""
    n = 0
    base = 0
    import shutil

    with open(out / f"{split}{MASK_SUFFIX}.rec", "wb") as rec, \
            open(out / f"{split}{MASK_SUFFIX}.idx", "w") as idx:
        for d in shard_dirs:
            with open(d / f"part{MASK_SUFFIX}.rec", "rb") as part:
                shutil.copyfileobj(part, rec, 1 << 20)
            for line in (d / f"part{MASK_SUFFIX}.idx").read_text().splitlines():
                key, off = line.split("\t")
                idx.write(f"{key}\t{int(off) + base}\n")
                n += 1
            base = rec.tell()
    return n


# ---- validation ---------------------------------------------------------------------------
def validate_mask_split(root: str | Path, split: str, num_classes: int | None = None,
                        ignore_index: int = 255, check_pixels: bool = True) -> list[str]:
    """Failures of ``<split>_mask.rec`` against ``<split>.rec`` (empty list: aligned).

    Checks: both files and indexes exist; identical keys in identical order; every mask
    record is a single-channel PNG whose header id is its key, whose size equals its image's,
    and (``check_pixels``) whose values are in [0, num_classes) or the ignore index.
    """
    from PIL import Image

    from recforge.imaging import probe_size

    root = Path(root)
    fails: list[str] = []

    def fail(msg):
        if len(fails) < MAX_REPORTED:
            fails.append(msg)

    names = {p: root / f"{split}{p}" for p in (".rec", ".idx", f"{MASK_SUFFIX}.rec",
                                               f"{MASK_SUFFIX}.idx")}
    missing = [p.name for p in names.values() if not p.exists()]
    if missing:
        return [f"{', '.join(missing)} missing"]
    try:
        ient = recordio.read_idx(names[".idx"])
        ment = recordio.read_idx(names[f"{MASK_SUFFIX}.idx"])
    except recordio.RecordIOError as exc:
        return [str(exc)]
    ikeys, mkeys = [k for k, _ in ient], [k for k, _ in ment]
    if ikeys != mkeys:
        first = next((i for i, (a, b) in enumerate(zip(ikeys, mkeys, strict=False)) if a != b),
                     min(len(ikeys), len(mkeys)))
        fail(f"{split}{MASK_SUFFIX}.idx is not aligned with {split}.idx: {len(mkeys)} vs "
             f"{len(ikeys)} keys, first difference at position {first}")
        return fails
    allowed = None if num_classes is None else np.zeros(256, bool)
    if allowed is not None:
        allowed[:num_classes] = True
        allowed[ignore_index] = True
    import io

    with open(names[".rec"], "rb") as irec, open(names[f"{MASK_SUFFIX}.rec"], "rb") as mrec:
        for (key, ioff), (_, moff) in zip(ient, ment, strict=True):
            try:
                ipay = recordio.read_record_at(irec, ioff)
                mpay = recordio.read_record_at(mrec, moff)
                if ipay is None or mpay is None:
                    fail(f"key {key}: offset past the end of a .rec")
                    continue
                ihead, idata = recordio.unpack_image_record(ipay[0])
                mhead, mdata = recordio.unpack_image_record(mpay[0])
            except recordio.RecordIOError as exc:
                fail(f"key {key}: {exc}")
                continue
            if mhead.id != key:
                fail(f"{split}{MASK_SUFFIX}.rec: key {key}: header id is {mhead.id}")
            if mdata[:8] != b"\x89PNG\r\n\x1a\n":
                fail(f"{split}{MASK_SUFFIX}.rec: key {key}: mask is not a PNG (lossy masks "
                     "corrupt class ids)")
                continue
            try:
                with Image.open(io.BytesIO(mdata)) as im:
                    mode, msize = im.mode, im.size
                    arr = np.asarray(im) if check_pixels and allowed is not None else None
            except Exception as exc:
                fail(f"{split}{MASK_SUFFIX}.rec: key {key}: undecodable mask ({exc})")
                continue
            if mode != "L":
                fail(f"{split}{MASK_SUFFIX}.rec: key {key}: mask mode {mode}, expected "
                     "single-channel L")
            isize = probe_size(idata)
            if isize != msize:
                fail(f"key {key}: image is {isize} but mask is {msize} (WxH)")
            if arr is not None and mode == "L":
                present = np.flatnonzero(np.bincount(arr.reshape(-1), minlength=256))
                bad = [int(v) for v in present if not allowed[v]]
                if bad:
                    fail(f"{split}{MASK_SUFFIX}.rec: key {key}: mask values {bad[:8]} outside "
                         f"[0, {num_classes}) and ignore {ignore_index}")
    return fails
