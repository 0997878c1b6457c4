"""Checklist item 15, ``box_size`` (detection): boxes under ``quality.min_box_side_px`` wide or
high, and boxes whose aspect ratio lies beyond ``quality.max_box_aspect``, each at most
``quality.max_tiny_box_share`` of all (on the ``objects`` frame)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import CheckDef, Plan, share

if TYPE_CHECKING:
    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def plan(p: Plan) -> None:
    import great_expectations.expectations as gxe

    q = p.quality
    px, tiny, aspect = q.min_box_side_px, q.max_tiny_box_share, q.max_box_aspect
    p.add("objects", f"boxes under {px:g} px wide or high <= {tiny:g} of all",
          gxe.ExpectColumnValuesToBeBetween, column="box_min_side_px", min_value=px,
          mostly=share(tiny))
    p.add("objects", f"box aspect (w/h) beyond [1/{aspect:g}, {aspect:g}] <= {tiny:g} of all",
          gxe.ExpectColumnValuesToBeBetween, column="aspect", min_value=1 / aspect,
          max_value=aspect, mostly=share(tiny))


def observed(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    obj = frames["objects"]
    side, aspect = obj["box_min_side_px"].dropna(), obj["aspect"].dropna()
    if side.empty:
        return "no valid boxes"
    a = quality.max_box_aspect
    tiny = int((side < quality.min_box_side_px).sum())
    wide = int(((aspect < 1 / a) | (aspect > a)).sum())
    return (f"{tiny} of {len(side)} boxes under {quality.min_box_side_px:g} px "
            f"({tiny / len(side):.1%}), {wide} with aspect beyond {a:g} "
            f"({wide / len(side):.1%}); at most {quality.max_tiny_box_share:.1%} each; "
            f"smallest side {side.min():.3g} px")


CHECK = CheckDef(
    "box_size", plan, observed,
    advice=("many boxes are a few pixels wide or extremely thin, which anchors and losses "
            "handle badly",
            "raise pack.resize or detection.min_box_pixels, relabel the boxes named in the "
            "evidence, or relax quality.min_box_side_px"))
