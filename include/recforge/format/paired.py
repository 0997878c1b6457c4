"""Paired image/mask RecordIO: ``<name>.rec`` (images) and ``<name>_mask.rec`` (masks).

im2rec cannot pack masks (it JPEG-encodes and bilinearly resizes them); MXNet's maintainers
suggest two aligned ``.rec`` files read in lockstep, which is what this writes: the same key
for a pair in both files, the same order, each with its ``.idx``. Both are ordinary image
records (``IRHeader`` + encoded image), so ``mx.recordio`` and ``ImageRecordIter`` read
either one. :func:`validate_mask_split` checks that alignment on a packed split.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from recforge.format import names, recordio

MAX_REPORTED = 20
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class PairedWriter:
    """Writes ``<name>.rec/.idx`` and ``<name>_mask.rec/.idx`` in lockstep (a context
    manager); ``write(key, image_payload, mask_payload)`` returns both byte offsets."""

    def __init__(self, workdir: str | Path, name: str):
        workdir = Path(workdir)
        self.images = recordio.RecordWriter(workdir / names.rec(name), workdir / names.idx(name))
        self.masks = recordio.RecordWriter(workdir / names.rec(name, mask=True),
                                           workdir / names.idx(name, mask=True))

    def write(self, key: int, image_payload: bytes, mask_payload: bytes) -> tuple[int, int]:
        return self.images.write(key, image_payload), self.masks.write(key, mask_payload)

    def close(self) -> None:
        self.images.close()
        self.masks.close()

    def __enter__(self) -> PairedWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the encoded image's header, without decoding the pixels."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except Exception:
        return None


def validate_mask_split(root: str | Path, split: str, num_classes: int | None = None,
                        ignore_index: int = 255, check_pixels: bool = True,
                        decode: bool = True) -> list[str]:
    """Failures of ``<split>_mask.rec`` against ``<split>.rec`` (empty list: aligned).

    Checks: both files and indexes exist; identical keys in identical order; every mask
    record is a single-channel PNG whose header id is its key, whose size equals its image's,
    and (``check_pixels``) whose values are in [0, num_classes) or the ignore index.
    ``decode=False`` stops at the header ids (the framing and keys): all that a ``.rec`` read
    by its headers alone (``format.ranged``) can answer.
    """
    root = Path(root)
    fails: list[str] = []

    def fail(msg):
        if len(fails) < MAX_REPORTED:
            fails.append(msg)

    files = {".rec": root / names.rec(split), ".idx": root / names.idx(split),
             "_mask.rec": root / names.rec(split, mask=True),
             "_mask.idx": root / names.idx(split, mask=True)}
    mask_rec = files["_mask.rec"].name
    missing = [p.name for p in files.values() if not p.exists()]
    if missing:
        return [f"{', '.join(missing)} missing"]
    try:
        ient = recordio.read_idx(files[".idx"])
        ment = recordio.read_idx(files["_mask.idx"])
    except recordio.RecordIOError as exc:
        return [str(exc)]
    ikeys, mkeys = [k for k, _ in ient], [k for k, _ in ment]
    if ikeys != mkeys:
        first = next((i for i, (a, b) in enumerate(zip(ikeys, mkeys, strict=False)) if a != b),
                     min(len(ikeys), len(mkeys)))
        fail(f"{files['_mask.idx'].name} is not aligned with {split}.idx: {len(mkeys)} vs "
             f"{len(ikeys)} keys, first difference at position {first}")
        return fails
    allowed = None if num_classes is None else np.zeros(256, bool)
    if allowed is not None:
        allowed[:num_classes] = True
        allowed[ignore_index] = True
    with open(files[".rec"], "rb") as irec, open(files["_mask.rec"], "rb") as mrec:
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
                fail(f"{mask_rec}: key {key}: header id is {mhead.id}")
            values = f"[0, {num_classes}) and ignore {ignore_index}"
            for msg in _decoded_problems(mask_rec, key, idata, mdata, allowed if check_pixels
                                         else None, values) if decode else ():
                fail(msg)
    return fails


def _decoded_problems(mask_rec: str, key: int, image: bytes, mask: bytes,
                      allowed: np.ndarray | None, values: str) -> list[str]:
    """What decoding one mask finds: not a PNG, undecodable, not single-channel, not its
    image's size, or (``allowed``: a 256-entry table of the ``values`` allowed) values
    outside them."""
    from PIL import Image

    where = f"{mask_rec}: key {key}"
    if mask[:8] != PNG_SIGNATURE:
        return [f"{where}: mask is not a PNG (lossy masks corrupt class ids)"]
    try:
        with Image.open(io.BytesIO(mask)) as im:
            mode, msize = im.mode, im.size
            arr = np.asarray(im) if allowed is not None else None
    except Exception as exc:
        return [f"{where}: undecodable mask ({exc})"]
    out = [f"{where}: mask mode {mode}, expected single-channel L"] if mode != "L" else []
    isize = _image_size(image)
    if isize != msize:
        out.append(f"key {key}: image is {isize} but mask is {msize} (WxH)")
    if arr is not None and mode == "L":
        present = np.flatnonzero(np.bincount(arr.reshape(-1), minlength=256))
        bad = [int(v) for v in present if not allowed[v]]
        if bad:
            out.append(f"{where}: mask values {bad[:8]} outside {values}")
    return out
