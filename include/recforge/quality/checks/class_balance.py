"""Checklist item 11, ``class_balance``: the smallest class against the largest (records;
segmentation: pixels; detection: objects), in the split ``quality.class_balance_split``
names, each split on its own, or all splits together."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import CheckDef, Plan
from recforge.spec.quality import EACH_SPLIT

if TYPE_CHECKING:
    import pandas as pd

    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def plan(p: Plan) -> None:
    import great_expectations.expectations as gxe

    ratio = p.quality.class_balance_min_ratio
    p.add("classes", f"count / largest >= {ratio}", gxe.ExpectColumnValuesToBeBetween,
          column="ratio_to_largest", min_value=ratio)


def observed(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    """Smallest/largest class, of the worst split when each split is checked on its own
    (``class_balance_split: each``)."""
    cls = frames["classes"]
    if cls.empty:
        return "no classes"

    def line(part: pd.DataFrame, where: str) -> str:
        lo, hi = part.loc[part["count"].idxmin()], part.loc[part["count"].idxmax()]
        return (f"smallest/largest {where} = {part['ratio_to_largest'].min():.3f} "
                f"({lo['class_name']} {lo['count']:g} / {hi['class_name']} {hi['count']:g} "
                f"{lo['unit']})")

    if quality.class_balance_split != EACH_SPLIT:
        split = cls["split"].iloc[0]
        return line(cls, f"in {split}" if isinstance(split, str) else "in all splits")
    worst = cls.loc[cls["ratio_to_largest"].idxmin(), "split"]
    ratios = cls.groupby("split", sort=False)["ratio_to_largest"].min()
    return (line(cls[cls["split"] == worst], f"in {worst} (the worst split)") + "; per split "
            + ", ".join(f"{s} {r:.3f}" for s, r in ratios.items()))


CHECK = CheckDef(
    "class_balance", plan, observed,
    advice=("the smallest class has far fewer records than the largest, so a model sees it "
            "rarely and may learn to ignore it",
            "add images to the small classes or weight/oversample them in training; if the "
            "imbalance is real, lower quality.class_balance_min_ratio"))
