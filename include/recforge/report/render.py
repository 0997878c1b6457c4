"""One record drawn as a PNG (``recforge show``): its image as stored, with what its task kind
labels drawn on it (:data:`DRAWN`): the mask blended over it, or its boxes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from recforge.report.images import box_colors, draw_boxes, overlay, palette
from recforge.report.inputs import Record, ReportInputs, load
from recforge.report.objects import label_objects
from recforge.report.records import Records


def box_colors_of(inp: ReportInputs) -> np.ndarray:
    """The colour of each class's boxes: the same here and on the page."""
    return box_colors(max(len(inp.class_names), 1), inp.classes.get("colors"))


def _as_stored(img: np.ndarray, r: Record, inp: ReportInputs, reader: Records) -> np.ndarray:
    return img


def _with_mask(img: np.ndarray, r: Record, inp: ReportInputs, reader: Records) -> np.ndarray:
    mask = reader.mask(r)
    if mask is None:
        return img
    colors = palette(len(inp.class_names), inp.classes.get("colors"))
    return overlay(img, mask, colors, inp.classes.get("ignore_index"))


def _with_boxes(img: np.ndarray, r: Record, inp: ReportInputs, reader: Records) -> np.ndarray:
    """Its boxes, at the stored size; difficult ones dashed."""
    return draw_boxes(img, label_objects(r.get("label")), box_colors_of(inp), inp.class_names,
                      px=None)


# task kind → what is drawn on a record's image
DRAWN: dict[str, Callable[[np.ndarray, Record, ReportInputs, Records], np.ndarray]] = {
    "classification": _as_stored,
    "segmentation": _with_mask,
    "detection": _with_boxes,
}


def _record(inp: ReportInputs, prefix: str, key: int, split: str | None) -> Record:
    rows = [r for r in inp.records if r["key"] == key and (split is None or r["split"] == split)]
    if not rows:
        raise KeyError(f"no record with key {key}" + (f" in split {split}" if split else "")
                       + f" in {prefix}/records.jsonl (its `key` column; the report shows a "
                       "thumbnail's key on hover)")
    if len(rows) > 1:
        raise KeyError(f"key {key} exists in splits {[r['split'] for r in rows]}; give --split")
    return rows[0]


def render_record(prefix: str, key: int, out_png: str | Path,
                  split: str | None = None) -> tuple[Path, Record]:
    """One record as a PNG (segmentation: with its mask blended over it; detection: with its
    boxes drawn, difficult ones dashed); returns the PNG and the record's row of
    ``records.jsonl`` (its ``split``, ``class_name``, ``source_key``)."""
    import cv2

    inp = load(prefix)
    r = _record(inp, prefix, key, split)
    reader = Records(inp)
    img = reader.image(r)
    if img is None:
        raise ValueError(f"record {r['split']}/{key} does not decode")
    img = DRAWN[inp.kind.name](img, r, inp, reader)
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(out), img):
        raise OSError(f"could not write {out}")
    return out, r
