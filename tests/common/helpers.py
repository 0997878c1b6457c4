"""Small builders shared by tests: encoded images and packed datasets made in code."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from recforge.format import recordio


def jpeg(h: int = 48, w: int = 64, seed: int = 0, quality: int = 90) -> bytes:
    rng = np.random.default_rng(seed)
    img = cv2.GaussianBlur(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), (5, 5), 0)
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes()


def png(h: int = 48, w: int = 64, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return cv2.imencode(".png", rng.integers(0, 256, (h, w, 3), dtype=np.uint8))[1].tobytes()


def write_split(root: Path, split: str, labels: list[float], size: int = 40,
                keys: list[int] | None = None) -> None:
    """A valid ``<split>.rec/.idx/.lst`` with one image per label (keys 0..n-1, or ``keys``)."""
    root.mkdir(parents=True, exist_ok=True)
    with recordio.RecordWriter(root / f"{split}.rec", root / f"{split}.idx") as w, \
            open(root / f"{split}.lst", "w") as lst:
        for i, lab in enumerate(labels):
            key = keys[i] if keys else i
            w.write(key, recordio.pack_image_record(lab, key, jpeg(size, size, seed=i)))
            lst.write(f"{key}\t{float(lab):f}\timg_{i}.jpg\n")
