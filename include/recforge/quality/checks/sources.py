"""Checklist item 5, ``sources``: every listed source object is packed or quarantined, exactly
once, under its listed ETag (per object from the source manifest; from ``summary.json``'s
totals alone when there is none)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import CheckDef, Plan

if TYPE_CHECKING:
    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def plan(p: Plan) -> None:
    import great_expectations.expectations as gxe

    src = p.frames["sources"]
    if src.empty:
        p.skip("no source manifest and no summary.json")
        return
    if "listed_total" in src:
        p.skip("totals from summary.json only; pass the source manifest for per-object "
               "accounting")
    p.add("sources", "packed + quarantined == 1 per listed object",
          gxe.ExpectColumnValuesToBeInSet, column="accounted", value_set=[1])
    p.add("sources", "every packed or quarantined key was listed",
          gxe.ExpectColumnValuesToBeInSet, column="listed", value_set=[True])
    p.add("sources", "packed ETag equals the listed ETag",
          gxe.ExpectColumnValuesToBeInSet, column="etag_matches", value_set=[True])


def observed(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    src = frames["sources"]
    if src.empty:
        return "no source manifest and no summary.json"
    if "listed_total" in src:
        r = src.iloc[0]
        return (f"listed {r['listed_total']} (summary.json) vs packed {r['packed']} + "
                f"quarantined {r['quarantined']} + used or not used {r['used']}")
    lost = int((src["accounted"] == 0).sum())
    twice = int((src["accounted"] > 1).sum())
    unlisted = int((~src["listed"]).sum())
    used = int(src["used"].sum()) if "used" in src else 0
    not_used = int(src["not_used"].sum()) if "not_used" in src else 0
    return (f"listed {int(src['listed'].sum())}, packed {int(src['packed'].sum())}, "
            f"quarantined {int(src['quarantined'].sum())}"
            + (f", {used} annotation files used" if used else "")
            + (f", {not_used} not used (set aside, not bad data)" if not_used else "")
            + f"; {lost} unaccounted, {twice} counted twice, {unlisted} not listed")


CHECK = CheckDef(
    "sources", plan, observed,
    advice=("a listed source object is neither packed nor quarantined, or is counted "
            "twice: images were silently lost or duplicated",
            "re-run the build; if it repeats, report it with the evidence"))
