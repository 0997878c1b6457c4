"""Checklist item 3, ``labels``: labels are integers in [0, N) and agree with ``classes.json``
and the record headers; a segmentation mask's values are in 0..N-1 or the ignore label; a
detection record's label array has recforge's layout (``recforge.format.detection_label``)
and each of its objects a known class and a box inside [0, 1] with xmin < xmax and
ymin < ymax (on the ``objects`` frame)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import CheckDef, Plan

if TYPE_CHECKING:
    import pandas as pd

    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def plan(p: Plan) -> None:
    import great_expectations.expectations as gxe

    rec = p.frames["records"]
    if "objects" in p.frames:
        _plan_boxes(p, rec)
    else:
        p.add("records", "label present", gxe.ExpectColumnValuesToNotBeNull, column="label")
        p.add("records", "label is an integer", gxe.ExpectColumnValuesToBeInSet,
              column="label_is_integer", value_set=[True])
        if p.num_classes:
            p.add("records", f"label in [0, {p.num_classes})",
                  gxe.ExpectColumnValuesToBeBetween, column="label", min_value=0,
                  max_value=p.num_classes - 1)
        else:
            p.skip("no classes.json: integer check only, range not checked")
    if "expected_class_name" in rec.columns:
        p.add("records", "class_name is classes.json's name for the label",
              gxe.ExpectColumnPairValuesToBeEqual, column_A="class_name",
              column_B="expected_class_name")
    if rec["rec_label_ok"].notna().any():
        p.add("records", "record header label equals the manifest label",
              gxe.ExpectColumnValuesToBeInSet, column="rec_label_ok", value_set=[True])
    if "mask_values_ok" in rec.columns:
        p.add("records", "mask values within 0..N-1 or the ignore label",
              gxe.ExpectColumnValuesToBeInSet, column="mask_values_ok", value_set=[True])


def _plan_boxes(p: Plan, rec: pd.DataFrame) -> None:
    """The detection half: each record's label array, then each object's class and box."""
    import great_expectations.expectations as gxe

    from recforge.format import detection_label as dl

    hw, ow = dl.HEADER_WIDTH, dl.OBJECT_WIDTH
    p.add("records", "label present", gxe.ExpectColumnValuesToNotBeNull, column="label_values")
    p.add("records", f"label header A = {hw}", gxe.ExpectColumnValuesToBeInSet,
          column="label_a", value_set=[hw])
    p.add("records", f"label header B = {ow}", gxe.ExpectColumnValuesToBeInSet,
          column="label_b", value_set=[ow])
    p.add("records", f"label is the header and whole objects ({hw} + {ow}k values, "
          "k >= 1)", gxe.ExpectColumnValuesToBeInSet, column="label_whole", value_set=[True])
    p.add("records", "label values finite", gxe.ExpectColumnValuesToBeInSet,
          column="label_finite", value_set=[True])
    p.add("records", "label width equals the record's width",
          gxe.ExpectColumnPairValuesToBeEqual, column_A="label_width", column_B="width",
          ignore_row_if="either_value_is_missing")
    p.add("records", "label height equals the record's height",
          gxe.ExpectColumnPairValuesToBeEqual, column_A="label_height", column_B="height",
          ignore_row_if="either_value_is_missing")
    p.add("records", "a padding row of -1s only in an image without objects",
          gxe.ExpectColumnValuesToBeInSet, column="label_padding_ok", value_set=[True])
    if "num_objects" in rec.columns:
        p.add("records", "num_objects equals the objects in the label",
              gxe.ExpectColumnPairValuesToBeEqual, column_A="num_objects",
              column_B="label_objects", ignore_row_if="either_value_is_missing")
    p.add("objects", "class id is an integer", gxe.ExpectColumnValuesToBeInSet,
          column="class_id_is_integer", value_set=[True])
    if p.num_classes:
        p.add("objects", f"class id in [0, {p.num_classes})",
              gxe.ExpectColumnValuesToBeBetween, column="class_id", min_value=0,
              max_value=p.num_classes - 1)
    else:
        p.add("objects", "class id >= 0", gxe.ExpectColumnValuesToBeBetween,
              column="class_id", min_value=0)
        p.skip("no classes.json: class ids >= 0 only, range not checked")
    for col in ("xmin", "ymin", "xmax", "ymax"):
        p.add("objects", f"{col} in [0, 1]", gxe.ExpectColumnValuesToBeBetween,
              column=col, min_value=0, max_value=1)
    p.add("objects", "xmax > xmin", gxe.ExpectColumnPairValuesAToBeGreaterThanB,
          column_A="xmax", column_B="xmin", or_equal=False)
    p.add("objects", "ymax > ymin", gxe.ExpectColumnPairValuesAToBeGreaterThanB,
          column_A="ymax", column_B="ymin", or_equal=False)
    p.add("objects", "difficult is 0 or 1", gxe.ExpectColumnValuesToBeInSet,
          column="difficult", value_set=[0, 1])


def observed(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    rec = frames["records"]
    if "objects" in frames:
        return _observed_boxes(rec, frames["objects"], num_classes)
    import pandas as pd

    lab = pd.to_numeric(rec["label"], errors="coerce")
    bad = int((~rec["label_is_integer"]).sum())
    if num_classes:
        bad += int(((lab < 0) | (lab >= num_classes)).sum())
    wrong = int((rec["class_name"] != rec["expected_class_name"]).sum()) \
        if "expected_class_name" in rec else 0
    return (f"{bad} labels outside the integers [0, {num_classes}); {wrong} class names "
            "disagree with classes.json")


def _observed_boxes(rec: pd.DataFrame, obj: pd.DataFrame, num_classes: int | None) -> str:
    """The detection line: records whose label array is malformed, objects whose class or
    box is not valid."""
    import numpy as np

    layout = (rec["label_values"].notna() & rec["label_objects"].isna()) \
        | ~rec["label_padding_ok"].astype(bool)
    size = (rec["label_width"] != rec["width"]) | (rec["label_height"] != rec["height"])
    bad_layout = int(layout.sum())
    bad_size = int((size & rec["label_objects"].notna()).sum())
    cls = obj["class_id"].to_numpy(np.float32)
    bad_cls = ~(cls == np.floor(cls)) | (cls < 0)
    if num_classes:
        bad_cls |= cls >= num_classes
    bad_box = int(obj["box_min_side_px"].isna().sum())
    return (f"{bad_layout} of {len(rec)} label arrays malformed, {bad_size} with another image "
            f"size; {int(bad_cls.sum())} of {len(obj)} objects with a class id outside "
            f"[0, {num_classes}), {bad_box} with a box not inside [0, 1] with xmin < xmax "
            "and ymin < ymax")


CHECK = CheckDef(
    "labels", plan, observed,
    advice=("a label is outside [0, N) or disagrees with classes.json (detection: a label "
            "array out of layout, or a box outside [0, 1] or inverted), so the loss would "
            "index past the classifier or train on boxes that cover nothing",
            "fix the class folders, the annotations or classes.json and rebuild"))
