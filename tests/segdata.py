"""Synthetic segmentation data for the tests: masks from the real label tables and images
whose pixels encode their own coordinates (R = x, G = y), so alignment is checkable."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

BLUE = 200  # image pixels have B = 200; padding (0 or the mean) is told apart by it


def png(arr: np.ndarray, palette: np.ndarray | None = None) -> bytes:
    im = Image.fromarray(arr)
    if palette is not None:  # an L image + putpalette = a mode P image with these indices
        im.putpalette(np.asarray(palette, np.uint8).reshape(-1).tolist())
        assert im.mode == "P"
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def coord_image(w: int, h: int) -> np.ndarray:
    """RGB uint8 with R = x, G = y, B = BLUE (w, h <= 256)."""
    assert w <= 256 and h <= 256
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x, y, np.full_like(x, BLUE)], -1).astype(np.uint8)


def coord_class(x, y):
    """The class a coordinate pair belongs to in the 'exact' masks (never 255)."""
    return (np.asarray(x, np.int64) * 7 + np.asarray(y, np.int64) * 13) % 251


def exact_mask(w: int, h: int) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    return coord_class(x, y).astype(np.uint8)


def block_ids(w: int, h: int, values, block: int = 8, seed: int = 0) -> np.ndarray:
    """An HxW mask of random square blocks drawn from ``values``; every value appears."""
    rng = np.random.default_rng(seed)
    values = np.asarray(list(values))
    bh, bw = -(-h // block), -(-w // block)
    grid = rng.choice(values, size=(bh, bw))
    grid.reshape(-1)[: len(values)] = values  # each value at least once
    return np.kron(grid, np.ones((block, block), np.int64))[:h, :w].astype(np.uint8)
