"""Checklist item 1, ``decode``: every record decodes (0 corrupt) — by the manifest's decode
status and, where the gate re-read a sample from the ``.rec``, by that re-read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import CheckDef, Plan

if TYPE_CHECKING:
    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def plan(p: Plan) -> None:
    import great_expectations.expectations as gxe

    p.add("records", "manifest decode_status is ok", gxe.ExpectColumnValuesToBeInSet,
          column="decode_status", value_set=["ok"])
    p.add("records", "manifest decode_status present", gxe.ExpectColumnValuesToNotBeNull,
          column="decode_status")
    if p.frames["records"]["rec_status"].notna().any():
        p.add("records", "record re-read from the .rec decodes",
              gxe.ExpectColumnValuesToBeInSet, column="rec_status", value_set=["ok"])


def observed(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    rec = frames["records"]
    bad = int((rec["decode_status"] != "ok").sum())
    checked = int(rec["rec_status"].notna().sum())
    bad_rec = int((rec["rec_status"].notna() & (rec["rec_status"] != "ok")).sum())
    return (f"{bad} of {len(rec)} not ok in the manifest; {bad_rec} of {checked} re-read "
            "from the .rec failed")


CHECK = CheckDef(
    "decode", plan, observed,
    advice=("some records do not decode, so training would crash or skip them",
            "re-export the images named in the evidence and rebuild"))
