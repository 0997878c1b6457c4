"""Checklist item 14, ``objects_per_image`` (detection): objects per image within
``quality.min/max_objects_per_image``, and images without an object (negatives) at most
``quality.max_empty_share`` of all."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import CheckDef, Plan, share

if TYPE_CHECKING:
    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def plan(p: Plan) -> None:
    import great_expectations.expectations as gxe

    lo, hi = p.quality.min_objects_per_image, p.quality.max_objects_per_image
    p.add("records", f"objects per image in [{lo}, {hi}]", gxe.ExpectColumnValuesToBeBetween,
          column="label_objects", min_value=lo, max_value=hi)
    empty = p.quality.max_empty_share
    p.add("records", f"images without an object <= {empty:g} of all",
          gxe.ExpectColumnValuesToBeBetween, column="label_objects", min_value=1,
          mostly=share(empty))


def observed(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    n = frames["records"]["label_objects"].dropna()
    if n.empty:
        return "no records with a readable label"
    empty = int((n == 0).sum())
    return (f"objects per image {n.min():g}..{n.max():g} (mean {n.mean():.2f}); {empty} of "
            f"{len(n)} images without an object ({empty / len(n):.1%}, at most "
            f"{quality.max_empty_share:.1%})")


CHECK = CheckDef(
    "objects_per_image", plan, observed,
    advice=("images hold more objects than quality.max_objects_per_image, or too many hold "
            "none, so batches pad or train on empty images",
            "check the annotations named in the evidence; raise the limits if the dataset "
            "really is like that"))
