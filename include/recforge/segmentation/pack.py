"""Packing image/mask pairs into aligned ``<name>.rec`` + ``<name>_mask.rec`` (the segmentation
side of the pack stage; the on-disk pairing is ``recforge.format.paired``).

Masks are single-channel lossless PNG and are resized with nearest-neighbour
(``INTER_NEAREST_EXACT``: pixel-centre sampling, the same geometry as the image's area/linear
resize, so edges stay aligned).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recforge import phash, quarantine, storage
from recforge.format import names, recordio
from recforge.format.paired import PairedWriter
from recforge.imaging import ImageRejected, PackOptions, decode, encode, resize_short_side
from recforge.progress import Progress
from recforge.segmentation.masks import (
    MaskConverter,
    check_same_size,
    decode_class_mask,
    encode_mask,
    pair_refusal,
)

log = logging.getLogger(__name__)



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
               stage: str = "pack", total: int | None = None, decode_image=None) -> dict:
    """Write ``workdir/<name>.rec/.idx``, ``<name>_mask.rec/.idx``, ``<name>.lst``,
    ``records.jsonl`` and ``quarantine.jsonl``. Returns ``{"packed", "quarantined"}``.

    Pairs are written in the order given, each under its key in both files. A pair whose
    image or mask cannot be read, or whose sizes differ, is quarantined (both objects).
    Masks are converted with ``converter`` when given, else must already be class ids;
    unknown colours raise ``UnknownMaskValues`` (the run fails, as the spec asks).
    ``decode_image`` (default: ``imaging.decode`` in this process) decodes an image's
    bytes; an ``IsolatedProcessor`` over ``imaging.decode`` runs it in a child process.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    refused, manifest = [], []
    progress = Progress(f"{stage} {workdir.name}", total, log, unit="pairs")
    with PairedWriter(workdir, name) as writer, \
            open(workdir / names.lst(name), "w", encoding="utf-8") as lst:
        for pair in pairs:
            progress.update()
            row = {"source_key": pair.name, **pair.row}
            try:
                for part, what in ((pair.image, "image"), (pair.mask, "mask")):
                    if isinstance(part, Exception):
                        reason, detail = quarantine.fetch_reason(part)
                        raise ImageRejected(reason, f"{what}: {detail}")
                img = (decode_image(pair.image) if decode_image is not None else
                       decode(pair.image, opts.image))
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
            ioff, moff = writer.write(pair.key, ipayload, mpayload)
            lst.write(names.lst_line(pair.key, 0.0, pair.name))
            counts = np.bincount(mask.reshape(-1), minlength=256)
            manifest.append({
                **row, "key": pair.key, "name": pair.name, "offset": ioff,
                "length": len(ipayload), "mask_offset": moff, "mask_length": len(mpayload),
                "height": h, "width": w, "channels": 1 if img.ndim == 2 else img.shape[2],
                "label": 0,
                "source_sha256": storage.sha256_hex(pair.image),
                "mask_sha256": hashlib.sha256(mask_bytes).hexdigest(), "decode_status": "ok",
                # for the quality gate: the mask record and what it holds
                "mask_record_key": pair.key, "mask_height": int(mask.shape[0]),
                "mask_width": int(mask.shape[1]),
                "mask_values": [int(v) for v in np.flatnonzero(counts)],
                "class_pixels": {str(v): int(counts[v]) for v in np.flatnonzero(counts)},  # pixels
                #                  per mask value: the class balance check and the report
                "phash": phash.dhash(img),
            })
    storage.write_jsonl(str(workdir / names.RECORDS), manifest)
    (workdir / names.QUARANTINE).write_bytes(quarantine.dumps(refused))
    return {"packed": len(manifest), "quarantined": len(refused)}


def pack_pair_rows(rows: list[dict], image_base_uri: str, workdir: str | Path,
                   opts: SegPackOptions, *, mask_base_uri: str | None = None,
                   converter: MaskConverter | None = None, fetch_threads: int = 8,
                   name: str = "part", stage: str = "pack", decode_image=None) -> dict:
    """Fetch and pack planned pair rows: ``record_key``, ``name``, ``source_key`` (image,
    relative to ``image_base_uri``) and either ``mask_uri`` (a converted mask in staging)
    or ``mask_key`` (relative to ``mask_base_uri``, default ``image_base_uri``)."""
    mask_base_uri = mask_base_uri or image_base_uri

    def uris():  # image then mask, per row: one ordered, bounded prefetch for both
        for r in rows:
            yield storage.join(image_base_uri, r["source_key"])
            yield r.get("mask_uri") or storage.join(mask_base_uri, r["mask_key"])

    def pairs():
        fetched = storage.prefetch(uris(), fetch_threads, ahead=max(2, 8 * fetch_threads))
        for r in rows:
            image, mask = next(fetched), next(fetched)
            yield SegPair(r["record_key"], r.get("name", r["source_key"]), image, mask, r)

    return pack_pairs(pairs(), workdir, opts, name=name, converter=converter, stage=stage,
                      total=len(rows), decode_image=decode_image)
