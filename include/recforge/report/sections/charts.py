"""The Charts section: the class balance as the task kind counts it (:data:`BALANCE`), image
short sides and aspect ratios, and the loader throughput."""

from __future__ import annotations

from collections.abc import Callable

from recforge.format import names
from recforge.report.charts import histogram
from recforge.report.inputs import ReportInputs
from recforge.report.sections import balance
from recforge.report.sections.context import Context
from recforge.report.sections.loader import loader

# task kind → its class balance charts (given the splits, in names.SPLITS order)
BALANCE: dict[str, Callable[[ReportInputs, list[str]], str]] = {
    "classification": balance.records_per_class,
    "segmentation": balance.pixels_per_class,
    "detection": balance.objects,
}


def render(ctx: Context) -> str:
    inp = ctx.inp
    splits = sorted({r.get("split") for r in inp.records}, key=lambda s: names.SPLITS.index(s)
                    if s in names.SPLITS else 9)
    short = [min(r["width"], r["height"]) for r in inp.records if "width" in r]
    aspect = [r["width"] / r["height"] for r in inp.records if r.get("height")]
    row = [histogram("image short side", short, unit=" px", x_label="short side (px)"),
           histogram("aspect ratio (W/H)", aspect, x_label="width / height")]
    return (BALANCE[ctx.kind.name](inp, splits)
            + '<div class="charts">' + "".join(row) + "</div>" + loader(inp))
