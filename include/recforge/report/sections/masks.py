"""The Masks section: random records with their mask blended over them, and a legend of the
classes those masks hold (the ignore index left unpainted)."""

from __future__ import annotations

import random
from html import escape

import numpy as np

from recforge.report.images import data_uri, overlay, palette
from recforge.report.sections.context import Context
from recforge.report.sections.markup import figure
from recforge.report.sections.record_samples import MASK_SAMPLES


def render(ctx: Context) -> str:
    inp, reader = ctx.inp, ctx.reader
    names_ = inp.class_names
    colors = palette(len(names_), inp.classes.get("colors"))
    ignore = inp.classes.get("ignore_index")
    rng = random.Random(ctx.seed + 1)
    figs = []
    seen: set[int] = set()
    for r in rng.sample(inp.records, min(MASK_SAMPLES, len(inp.records))):
        img, mask = reader.image(r), reader.mask(r)
        if img is None or mask is None:
            figs.append(figure(None, r, big=True, split=True))
            continue
        seen |= {int(v) for v in np.unique(mask)}
        figs.append(figure(data_uri(overlay(img, mask, colors, ignore), 224), r, big=True,
                           split=True))
    legend = "".join(
        f'<span><i style="background:rgb{tuple(int(x) for x in colors[v])}"></i>'
        f'{escape(names_[v] if v < len(names_) else str(v))}</span>'
        for v in sorted(seen) if v != ignore)
    return (f'<div class="legend">{legend}</div><div class="sheet" style="grid-template-'
            f'columns:repeat(auto-fill,minmax(236px,1fr))">{"".join(figs)}</div>'
            f'<p class="muted">Ignored pixels ({ignore}) are left unpainted.</p>')
