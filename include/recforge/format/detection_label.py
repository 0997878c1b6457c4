"""The label array of a detection record: what ``mx.image.ImageDetIter``,
``mx.io.ImageDetRecordIter`` and GluonCV's ``RecordFileDetection`` read from the header.

The record's ``IRHeader`` carries ``flag = len(label)`` float32 values::

    [A, B, width, height,  cls, xmin, ymin, xmax, ymax, difficult,  cls, xmin, ...]

``A`` = 4 is the header width (A and B themselves, then the stored image's width and
height in pixels), ``B`` = 6 the width of one object: the class id, the box as fractions
of the stored image's width and height (``0 <= xmin < xmax <= 1``; a resize never moves a
normalised box), and the ``difficult`` flag. An image kept as a negative carries one
padding row of -1s (MXNet's own padding value: its detection iterators and SSD's targets
skip class -1). This module is the one spelling of the layout: the packer writes it, and
validate, the checklist, the report and the loader read it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

HEADER_WIDTH = 4  # A, B, width, height
OBJECT_WIDTH = 6  # class id, xmin, ymin, xmax, ymax, difficult
PADDING = (-1.0,) * OBJECT_WIDTH
FIELDS = ("class_id", "xmin", "ymin", "xmax", "ymax", "difficult")


def encode(width: int, height: int, objects: Sequence[Sequence[float]]) -> list[float]:
    """The label list for a record image of ``width`` x ``height`` and its objects (each
    ``(class_id, xmin, ymin, xmax, ymax, difficult)``, normalised); no object → padding.
    Values are rounded to the 6 decimals a ``.lst`` holds (im2rec writes ``%f``), then to
    float32: the header says what the ``.lst`` says, and ``im2rec.py --pack-label`` of the
    ``.lst`` writes the same header (a 6th decimal is 1/1,000,000 of the image: far below
    a pixel)."""
    rows = [tuple(o) for o in objects] or [PADDING]
    flat = [float(HEADER_WIDTH), float(OBJECT_WIDTH), float(width), float(height)]
    for row in rows:
        if len(row) != OBJECT_WIDTH:
            raise ValueError(f"a detection object has {OBJECT_WIDTH} values, got {row!r}")
        flat.extend(row)
    return [float(x) for x in np.asarray(np.round(np.asarray(flat, np.float64), 6), np.float32)]


def decode(label: Sequence[float]) -> tuple[tuple[int, int], np.ndarray]:
    """``((width, height), objects)``: objects an (N, 6) float32 array without padding
    rows. Raises ``ValueError`` naming what is wrong with the layout."""
    why = layout_problem(label)
    if why:
        raise ValueError(why)
    arr = np.asarray(label, np.float32)
    a, b = int(arr[0]), int(arr[1])
    objects = arr[a:].reshape(-1, b)[:, :OBJECT_WIDTH]
    return (int(arr[2]), int(arr[3])), objects[objects[:, 0] >= 0]


def layout_problem(label: Sequence[float]) -> str | None:
    """Why ``label`` is not a detection label array, or None."""
    arr = np.asarray(label, np.float64)
    if arr.ndim != 1 or arr.size < HEADER_WIDTH + OBJECT_WIDTH:
        return (f"a detection label needs at least {HEADER_WIDTH + OBJECT_WIDTH} values "
                f"(header and one object), got {arr.size}")
    a, b = arr[0], arr[1]
    if a != HEADER_WIDTH or b != OBJECT_WIDTH:
        return f"header says A={a:g}, B={b:g}; recforge writes A={HEADER_WIDTH}, B={OBJECT_WIDTH}"
    if (arr.size - HEADER_WIDTH) % OBJECT_WIDTH:
        return (f"{arr.size - HEADER_WIDTH} object values are not a multiple of the object "
                f"width {OBJECT_WIDTH}")
    if not np.isfinite(arr).all():
        return "the label holds NaN or infinite values"
    if arr[2] < 1 or arr[3] < 1 or arr[2] != int(arr[2]) or arr[3] != int(arr[3]):
        return f"image size {arr[2]:g} x {arr[3]:g} is not a positive whole number of pixels"
    return None


def problem(label: Sequence[float], num_classes: int | None) -> str | None:
    """Why ``label`` is not a valid detection label (layout, class ids, boxes), or None."""
    why = layout_problem(label)
    if why:
        return why
    arr = np.asarray(label, np.float64)
    rows = arr[HEADER_WIDTH:].reshape(-1, OBJECT_WIDTH)
    pad = (rows == -1).all(axis=1)
    if pad.any() and len(rows) > 1:
        return "a padding row of -1s stands beside real objects"
    for row in rows[~pad]:
        cls, x0, y0, x1, y1, difficult = row
        if cls != int(cls) or cls < 0 or (num_classes is not None and cls >= num_classes):
            return f"class id {cls:g} outside the integers [0, {num_classes})"
        if not (0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1):
            return (f"box ({x0:.6g}, {y0:.6g}, {x1:.6g}, {y1:.6g}) is not inside [0, 1] with "
                    "xmin < xmax and ymin < ymax")
        if difficult not in (0, 1):
            return f"difficult flag {difficult:g} is not 0 or 1"
    return None
