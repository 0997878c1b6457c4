"""The Samples section of a dataset whose labels are image classes: a contact sheet of a few
random records per class."""

from __future__ import annotations

import random
from collections import defaultdict
from html import escape

from recforge.report.images import data_uri
from recforge.report.sections.context import Context
from recforge.report.sections.markup import MAX_CLASSES_SHOWN, figure

SAMPLES_PER_CLASS = 4


def render(ctx: Context) -> str:
    inp, reader = ctx.inp, ctx.reader
    rng = random.Random(ctx.seed)
    by_class: dict[str, list[dict]] = defaultdict(list)
    for r in inp.records:
        by_class[r.get("class_name") or str(r.get("label"))].append(r)
    order = [c for c in inp.class_names if c in by_class] or sorted(by_class)
    shown = order[:MAX_CLASSES_SHOWN]
    picks = {c: rng.sample(by_class[c], min(SAMPLES_PER_CLASS, len(by_class[c])))
             for c in shown}  # the same draws as one class at a time
    reader.prefetch([r for rows in picks.values() for r in rows])
    blocks = []
    for c in shown:
        rows = by_class[c]
        figs = []
        for r in picks[c]:
            img = reader.image(r)
            figs.append(figure(data_uri(img) if img is not None else None, r,
                               split=r.get("split") != "train"))
        blocks.append(f'<div class="cls"><h3>{escape(c)} <span class="muted">'
                      f'({len(rows):,} records)</span></h3><div class="figs">{"".join(figs)}'
                      "</div></div>")
    more = (f'<p class="muted">{len(order) - len(shown)} more classes not shown.</p>'
            if len(order) > len(shown) else "")
    return ('<p class="muted">Random records of each class, captioned with their source file; '
            "a badge marks those not in train, and hovering shows the split and record key.</p>"
            f'<div class="sheet classes">{"".join(blocks)}</div>{more}')
