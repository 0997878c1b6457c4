"""The Samples section of a dataset whose records pair with masks: a sheet of random records
(an image has no one class to group by), each badged with its split."""

from __future__ import annotations

import random

from recforge.report.images import data_uri
from recforge.report.sections.context import Context
from recforge.report.sections.markup import figure

MASK_SAMPLES = 8  # records shown here, and (another draw) under Masks


def render(ctx: Context) -> str:
    inp = ctx.inp
    rng = random.Random(ctx.seed)
    pick = rng.sample(inp.records, min(MASK_SAMPLES, len(inp.records)))
    figs = []
    for r in pick:
        img = ctx.reader.image(r)
        figs.append(figure(data_uri(img) if img is not None else None, r, split=True))
    return f'<div class="sheet">{"".join(figs)}</div>'
