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


# cityscapesScripts helpers/labels.py, (name, id, trainId, colour), ids 0-33 + license plate
CITYSCAPES_TRAIN = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9, 23: 10,
                    24: 11, 25: 12, 26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}


def cityscapes_color(ids: np.ndarray) -> np.ndarray:
    """Render label ids with each label's own colour from the real table (id -1: plate)."""
    from recforge.segmentation.colormaps import load_colormap

    cm = load_colormap("cityscapes")
    lut = np.zeros((256, 3), np.uint8)
    for lab in cm.labels:
        lut[lab.id % 256] = lab.color  # license plate (-1) lands on 255
    return lut[ids]


def expected_train_ids(ids: np.ndarray) -> np.ndarray:
    """What the documented rule gives for *colour* masks: shared colours take the lowest
    non-negative id, so polegroup pixels become pole (5) and plate pixels become car (13)."""
    table = np.full(256, 255, np.uint8)
    for i, t in CITYSCAPES_TRAIN.items():
        table[i] = t
    table[18] = 5     # polegroup drawn (153,153,153) = pole's colour
    table[255] = 13   # license plate drawn (0,0,142) = car's colour
    return table[ids]


def write_city_pairs(src, n: int, seed: int = 0, w: int = 32, h: int = 24) -> list[dict]:
    """``n`` random photos ``src/img/a/<i>.png`` with Cityscapes colour masks
    ``src/lbl/a/<i>_color.png`` (the ``images: img, masks: lbl, mask_suffix: _color.png``
    layout); returns pack-stage rows for them (record key, name, source and mask keys)."""
    rows = []
    for i in range(n):
        ids = block_ids(w, h, [*range(34), 255], block=4, seed=seed + i)
        img, mask = src / "img" / f"a/{i}.png", src / "lbl" / f"a/{i}_color.png"
        img.parent.mkdir(parents=True, exist_ok=True)
        mask.parent.mkdir(parents=True, exist_ok=True)
        pixels = np.random.default_rng(seed + 1000 + i).integers(0, 256, (h, w, 3), np.uint8)
        img.write_bytes(png(pixels))
        mask.write_bytes(png(cityscapes_color(ids)))
        rows.append({"record_key": i + 1, "name": f"a/{i}", "source_key": f"img/a/{i}.png",
                     "mask_key": f"lbl/a/{i}_color.png"})
    return rows


def city_spec_doc(src, publish, **extra) -> dict:
    """A segmentation spec over :func:`write_city_pairs`' layout (Cityscapes colours, PNG
    records at their own size, two pairs a shard), publishing to ``publish``."""
    return {
        "name": "city", "task": "segmentation",
        "source": {"uri": str(src), "pairs": {"images": "img", "masks": "lbl",
                                               "mask_suffix": "_color.png"}},
        "segmentation": {"colormap": "cityscapes"},
        "splits": {"val_ratio": 0.3, "seed": 2},
        "pack": {"resize": 0, "encoding": ".png", "shard_size": 2},
        "publish": {"uri": str(publish)}, **extra,
    }
