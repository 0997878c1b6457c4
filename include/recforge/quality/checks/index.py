"""Checklist item 2, ``index``: unique keys, increasing offsets, and the ``.idx`` files, the
manifest and ``summary.json`` agree (per record on the ``records`` frame, per split on
``splits``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import CheckDef, Plan

if TYPE_CHECKING:
    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def plan(p: Plan) -> None:
    import great_expectations.expectations as gxe

    rec = p.frames["records"]
    p.add("records", "(split, key) unique", gxe.ExpectCompoundColumnsToBeUnique,
          column_list=["split", "key"])
    p.add("records", "offsets increase, each record after the previous one's end",
          gxe.ExpectColumnValuesToBeBetween, column="offset_gap", min_value=0)
    p.add("records", "offset present", gxe.ExpectColumnValuesToNotBeNull, column="offset")
    if "idx_offset" in rec.columns:
        p.add("records", ".idx offset equals the manifest offset",
              gxe.ExpectColumnPairValuesToBeEqual, column_A="offset", column_B="idx_offset",
              ignore_row_if="neither")
        p.add("splits", ".idx entries equal manifest records",
              gxe.ExpectColumnPairValuesToBeEqual, column_A="manifest_records",
              column_B="idx_entries", ignore_row_if="neither")
    if rec["rec_id_ok"].notna().any():
        p.add("records", "record at the offset has the manifest's key as header id",
              gxe.ExpectColumnValuesToBeInSet, column="rec_id_ok", value_set=[True])
    if p.frames["splits"]["summary_records"].notna().any():
        p.add("splits", "summary.json counts equal manifest records",
              gxe.ExpectColumnPairValuesToBeEqual, column_A="manifest_records",
              column_B="summary_records", ignore_row_if="neither")


def observed(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    rec = frames["records"]
    dup = int(rec.duplicated(["split", "key"]).sum())
    order = int((rec["offset_gap"] < 0).sum())
    mism = int((rec["offset"] != rec["idx_offset"]).sum()) if "idx_offset" in rec else "n/a"
    s = frames["splits"]
    counts = "; ".join(f"{r.split} {r.manifest_records:g}/{r.idx_entries:g}/"
                       f"{r.summary_records:g}" for r in s.itertuples())
    return (f"{dup} duplicate keys, {order} offsets out of order, {mism} .idx mismatches; "
            f"manifest/idx/summary: {counts}")


CHECK = CheckDef(
    "index", plan, observed,
    advice=("the .idx, records.jsonl and summary.json disagree, so a reader would seek to "
            "the wrong records",
            "rebuild the version (re-run merge); recforge verify names the bad file"))
