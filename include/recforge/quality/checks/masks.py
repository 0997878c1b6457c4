"""Checklist item 13, ``masks``: every image of a segmentation dataset has its mask, under
the same key and at the same size (run where the records carry mask facts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import CheckDef, Plan

if TYPE_CHECKING:
    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def plan(p: Plan) -> None:
    import great_expectations.expectations as gxe

    if "mask_size_ok" not in p.frames["records"].columns:
        p.skip("not a segmentation dataset")
        return
    p.add("records", "mask present", gxe.ExpectColumnValuesToNotBeNull,
          column="mask_record_key")
    p.add("records", "mask key equals image key", gxe.ExpectColumnPairValuesToBeEqual,
          column_A="key", column_B="mask_record_key", ignore_row_if="either_value_is_missing")
    p.add("records", "mask size equals image size", gxe.ExpectColumnValuesToBeInSet,
          column="mask_size_ok", value_set=[True])


def observed(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    rec = frames["records"]
    missing = int(rec["mask_record_key"].isna().sum())
    size = int((rec["mask_size_ok"] == False).sum())  # noqa: E712  (None = no mask)
    key = int((rec["mask_record_key"].notna() & (rec["mask_record_key"] != rec["key"])).sum())
    return f"{missing} missing masks, {size} size mismatches, {key} key mismatches"


CHECK = CheckDef(
    "masks", plan, observed,
    advice=("an image has no mask, or its mask has another size",
            "add the missing masks (same key under the masks prefix) at the image's size"))
