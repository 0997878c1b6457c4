"""Boxes from an annotation's pixels to the record's normalised label rows.

An annotation's object travels from flatten to pack as ``[name, xmin, ymin, xmax, ymax,
difficult, part]``: the box in continuous pixel coordinates of the annotation's frame
(``xmin`` the left edge of the leftmost pixel, ``xmax`` the right edge of the rightmost),
``part`` what names it in the quarantine (``object 3``). VOC's 1-based inclusive pixel
indices become ``[xmin - origin, ymin - origin, xmax - origin + 1, ymax - origin + 1]``
(``detection.voc_pixel_origin``), COCO's ``[x, y, w, h]`` is ``[x, y, x + w, y + h]``.

At pack the boxes are normalised by the annotated image's size (fractions of width and
height do not move when the image is resized), turned by the image's EXIF orientation when
the pixels are (``box_frame: stored``), checked (inside the image, not degenerate) and
written as ``format.detection_label`` rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recforge.quarantine import QuarantineEntry

# a box may reach this far outside the image and be clipped (float noise of tools that
# write 0.5-pixel or rounded coordinates); farther is a box outside the image
EDGE_TOLERANCE_PX = 0.5


def voc_box(xmin: float, ymin: float, xmax: float, ymax: float, origin: int
            ) -> tuple[float, float, float, float]:
    """VOC ``bndbox`` (inclusive pixel indices from ``origin``) → continuous pixel edges."""
    return (xmin - origin, ymin - origin, xmax - origin + 1, ymax - origin + 1)


def coco_box(x: float, y: float, w: float, h: float) -> tuple[float, float, float, float]:
    """COCO ``bbox`` ``[x, y, width, height]`` (continuous) → ``[xmin, ymin, xmax, ymax]``."""
    return (x, y, x + w, y + h)


def orient(box: Sequence[float], orientation: int) -> tuple[float, float, float, float]:
    """A normalised box of the stored image → the same pixels after EXIF ``orientation``
    (1-8) is applied, as OpenCV applies it to the pixels."""
    x0, y0, x1, y1 = box
    if orientation == 2:  # mirrored left-right
        return (1 - x1, y0, 1 - x0, y1)
    if orientation == 3:  # rotated 180
        return (1 - x1, 1 - y1, 1 - x0, 1 - y0)
    if orientation == 4:  # mirrored top-bottom
        return (x0, 1 - y1, x1, 1 - y0)
    if orientation == 5:  # transposed
        return (y0, x0, y1, x1)
    if orientation == 6:  # rotated 90 clockwise to display
        return (1 - y1, x0, 1 - y0, x1)
    if orientation == 7:  # transverse
        return (1 - y1, 1 - x1, 1 - y0, 1 - x0)
    if orientation == 8:  # rotated 90 counter-clockwise to display
        return (y0, 1 - x1, y1, 1 - x0)
    return (x0, y0, x1, y1)


def transposes(orientation: int) -> bool:
    """Whether EXIF ``orientation`` swaps width and height."""
    return orientation >= 5


@dataclass(frozen=True)
class Checked:
    """The label rows of one image's usable objects and the entries of the refused ones."""

    rows: list[tuple[float, ...]]
    refused: list[QuarantineEntry]


def check_objects(objects: Sequence[Sequence], ids: dict[str, int], size: tuple[int, int],
                  orientation: int, min_box_pixels: float, *, source_key: str,
                  stage: str = "pack") -> Checked:
    """Normalise and check each object of an image annotated at ``size`` (width, height,
    in the boxes' frame); ``orientation`` is the EXIF orientation to turn them by (1: none).
    A box more than ``EDGE_TOLERANCE_PX`` outside the image, or with a side shorter than
    ``min_box_pixels``, is refused (``box_outside_image``, ``degenerate_box``) and named by
    its part; a box within the tolerance is clipped to the image."""
    width, height = size
    rows, refused = [], []
    for name, x0, y0, x1, y1, difficult, part in objects:
        box = (x0, y0, x1, y1)
        why = None
        if not (x0 < x1 and y0 < y1):
            why = ("degenerate_box", f"xmin {x0:g} >= xmax {x1:g}" if x0 >= x1 else
                   f"ymin {y0:g} >= ymax {y1:g}")
        elif (x0 < -EDGE_TOLERANCE_PX or y0 < -EDGE_TOLERANCE_PX
              or x1 > width + EDGE_TOLERANCE_PX or y1 > height + EDGE_TOLERANCE_PX):
            why = ("box_outside_image", f"box [{x0:g}, {y0:g}, {x1:g}, {y1:g}] reaches "
                   f"outside the {width} x {height} image")
        else:
            x0, y0, x1, y1 = max(x0, 0.0), max(y0, 0.0), min(x1, float(width)), \
                min(y1, float(height))
            if min(x1 - x0, y1 - y0) < max(min_box_pixels, 1e-9):
                why = ("degenerate_box", f"box of {x1 - x0:g} x {y1 - y0:g} pixels is below "
                       f"detection.min_box_pixels {min_box_pixels:g}")
        if why:
            refused.append(QuarantineEntry(source_key, stage, why[0], f"{part} ({name}): "
                                           f"{why[1]}", part=part, box=tuple(map(float, box))))
            continue
        norm = orient((x0 / width, y0 / height, x1 / width, y1 / height), orientation)
        rows.append((float(ids[name]), *norm, 1.0 if difficult else 0.0))
    return Checked(rows, refused)
