"""The Charts section's class balance, per task kind: records per class and split
(classification), pixels per class (segmentation), objects per class and split with objects
per image and box sizes (detection)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from recforge.format import names
from recforge.report.charts import grouped_bars, histogram
from recforge.report.inputs import ReportInputs
from recforge.report.objects import LARGE_PX, SMALL_PX
from recforge.report.sections.markup import MAX_CLASSES_SHOWN, class_counts_table


def records_per_class(inp: ReportInputs, splits: list[str]) -> str:
    """Records per class and split, as bars and as a table."""
    names_ = inp.class_names
    per = {s: Counter(r.get("class_name") for r in inp.records if r.get("split") == s)
           for s in splits}
    cats = names_ or sorted({r.get("class_name") for r in inp.records})
    shown = cats[:MAX_CLASSES_SHOWN * 5]
    return grouped_bars(
        "records per class and split" + (f" (first {len(shown)} of {len(cats)} classes)"
                                         if len(shown) < len(cats) else ""),
        shown, {s: [per[s].get(c, 0) for c in shown] for s in splits}) + \
        class_counts_table("records", cats, {s: [per[s].get(c, 0) for c in cats] for s in splits})


def pixels_per_class(inp: ReportInputs, splits: list[str]) -> str:
    """Mask pixels per class over all splits (the ignore index named so)."""
    names_ = inp.class_names
    pixels: Counter = Counter()
    for r in inp.records:
        for v, n in (r.get("class_pixels") or {}).items():
            pixels[int(v)] += n
    ignore = inp.classes.get("ignore_index")
    values = sorted(pixels)
    label = [names_[v] if v < len(names_) else ("ignore" if v == ignore else str(v))
             for v in values]
    return grouped_bars("pixels per class (all splits)", label,
                        {"pixels": [pixels[v] for v in values]})


def _objects_per_class(inp: ReportInputs, splits: list[str]) -> str:
    """Objects per class and split, as bars and as a table."""
    objs = inp.objects
    names_ = inp.class_names
    ids = objs.class_ids
    n = max(len(names_), int(ids.max()) + 1 if len(ids) else 0)
    cats = [names_[i] if i < len(names_) else str(i) for i in range(n)]
    split_of = np.asarray([names.SPLITS.index(r.get("split")) if r.get("split") in names.SPLITS
                           else len(names.SPLITS) for r in inp.records], np.int64)
    object_split = split_of[objs.record] if objs.count else np.zeros(0, np.int64)
    per = {}
    for sp in splits:
        code = names.SPLITS.index(sp) if sp in names.SPLITS else len(names.SPLITS)
        per[sp] = np.bincount(ids[object_split == code], minlength=n)[:n].tolist()
    shown = cats[:MAX_CLASSES_SHOWN * 5]
    if not n:
        return '<p class="muted">No object in any record.</p>'
    return grouped_bars(
        "objects per class and split" + (f" (first {len(shown)} of {len(cats)} classes)"
                                         if len(shown) < len(cats) else ""),
        shown, {sp: per[sp][:len(shown)] for sp in splits}) + \
        class_counts_table("objects", cats, per)


def objects(inp: ReportInputs, splits: list[str]) -> str:
    """Detection: objects per class and split (class balance by objects), objects per
    image, and box sizes in stored pixels and relative to the image."""
    objs = inp.objects
    bars = _objects_per_class(inp, splits)
    side = objs.side_px()
    most = int(objs.per_record.max()) if len(objs.per_record) else 0
    readable = objs.size[:, 0] > 0
    row = [histogram("objects per image", objs.per_record[readable], bins=min(20, most + 1),
                     x_label="objects in the image (0: a negative)"),
           histogram("box size (stored pixels)", side, unit=" px", y_label="objects",
                     x_label="√(box area) in pixels of the stored image"),
           histogram("box size (relative)", objs.relative_side(), y_label="objects",
                     x_label="√(box area / image area)")]
    sizes = ""
    if objs.count:
        small, large = int((side < SMALL_PX).sum()), int((side > LARGE_PX).sum())
        sizes = (f'<p>Boxes by COCO\'s size classes (area in stored pixels): small '
                 f'(&lt; {SMALL_PX}²) <b>{small:,}</b>, medium <b>{objs.count - small - large:,}'
                 f'</b>, large (&gt; {LARGE_PX}²) <b>{large:,}</b>; median √area '
                 f'{float(np.median(side)):,.0f} px.</p>')
    return bars + sizes + '<div class="charts">' + "".join(row) + "</div>"
