"""The Samples section of a dataset whose labels are boxes: per class a few records holding
one of its objects, every box of the record drawn in its class's colour, then a few
negatives."""

from __future__ import annotations

import random
from collections import Counter
from html import escape

import numpy as np

from recforge.report.diff import SHOWN
from recforge.report.images import data_uri, draw_boxes
from recforge.report.objects import sample
from recforge.report.render import box_colors_of
from recforge.report.sections.context import Context
from recforge.report.sections.markup import MAX_CLASSES_SHOWN, figure

# per class this many records with their boxes, at this size (the page shows them two
# abreast), and this many negatives
BOX_SAMPLES_PER_CLASS = 4
BOX_THUMB_PX = 192
NEGATIVE_SAMPLES = 4


def _objects_note(objects: np.ndarray, class_names: list[str]) -> str:
    """What a sample holds, for its hover text: ``3 objects: dog 2, person 1 (1 difficult)``."""
    if not len(objects):
        return "no object (a negative)"
    ids = Counter(int(c) for c in objects[:, 0])
    named = ", ".join(f"{class_names[c] if c < len(class_names) else c} {k}"
                      for c, k in sorted(ids.items()))
    hard = int((objects[:, 5] > 0).sum())
    return (f"{len(objects)} object{'s' if len(objects) != 1 else ''}: {named}"
            + (f" ({hard} difficult)" if hard else ""))


def _notes(order: list[int], shown: list[int], absent: list[str]) -> str:
    notes = []
    if len(order) > len(shown):
        notes.append(f"{len(order) - len(shown)} more classes not shown.")
    if absent:
        notes.append("No object of " + ", ".join(absent[:SHOWN])
                     + (f" and {len(absent) - SHOWN} more" if len(absent) > SHOWN else "")
                     + " in any record.")
    return "".join(f'<p class="muted">{escape(t)}</p>' for t in notes)


def render(ctx: Context) -> str:
    inp, reader = ctx.inp, ctx.reader
    objs = inp.objects
    names_ = inp.class_names
    colors = box_colors_of(inp)
    rng = random.Random(ctx.seed)
    ids = objs.class_ids
    present = {int(c) for c in np.unique(ids)}
    order = [c for c in range(len(names_)) if c in present] + \
        sorted(c for c in present if c >= len(names_))
    shown = order[:MAX_CLASSES_SHOWN]
    holding = {c: objs.records_of_class(c) for c in shown}
    per_class = np.bincount(ids, minlength=max(present, default=0) + 1) if len(ids) else []
    picks = {c: sample(holding[c], BOX_SAMPLES_PER_CLASS, rng) for c in shown}
    negatives = sample(objs.negatives(), NEGATIVE_SAMPLES, rng)
    reader.prefetch([inp.records[i] for rows in picks.values() for i in rows]
                    + [inp.records[i] for i in negatives])

    def fig(i: int) -> str:
        r = inp.records[i]
        img = reader.image(r)
        boxes = objs.of_record(i)
        uri = data_uri(draw_boxes(img, boxes, colors, names_, BOX_THUMB_PX), BOX_THUMB_PX) \
            if img is not None else None
        return figure(uri, r, split=r.get("split") != "train", cls="box",
                      note=_objects_note(boxes, names_))

    def name(c: int) -> str:
        return names_[c] if c < len(names_) else f"class id {c}"

    blocks = []
    for c in shown:
        blocks.append(f'<div class="cls"><h3><i class="swatch" style="background:rgb'
                      f'{tuple(int(x) for x in colors[c % len(colors)])}"></i>'
                      f'{escape(name(c))} <span class="muted">({int(per_class[c]):,} objects in '
                      f'{len(holding[c]):,} images)</span></h3><div class="figs">'
                      f'{"".join(fig(i) for i in picks[c])}</div></div>')
    if negatives:
        blocks.append(f'<div class="cls"><h3>no object <span class="muted">'
                      f'({len(objs.negatives()):,} negatives)</span></h3><div class="figs">'
                      f'{"".join(fig(i) for i in negatives)}</div></div>')
    absent = [n for i, n in enumerate(names_) if i not in present]
    legend = "".join(
        f'<span><i style="background:rgb{tuple(int(x) for x in colors[c % len(colors)])}"></i>'
        f"{escape(name(c))}</span>" for c in order)
    return ('<p class="muted">Random records holding an object of each class, with every box '
            "of the record drawn in its class's colour and named at its corner; difficult "
            "boxes are dashed. Captions are the source images; a badge marks records not in "
            "train, and hovering shows the split, record key and objects.</p>"
            f'<div class="legend">{legend}</div>'
            f'<div class="sheet classes boxes">{"".join(blocks)}</div>'
            f"{_notes(order, shown, absent)}")
