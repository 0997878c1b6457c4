"""Checklist item 16, ``class_name_case``: no two names of ``classes.json`` that differ only by
case (Dog, dog): one kind of thing would be two classes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import MAX_EVIDENCE, CheckDef, Plan

if TYPE_CHECKING:
    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def plan(p: Plan) -> None:
    import great_expectations.expectations as gxe

    names = p.frames.get("class_names")
    if names is None or names.empty:
        p.skip("no classes.json")
        return
    p.add("class_names", "no other class name equal but for case",
          gxe.ExpectColumnValuesToBeInSet, column="same_but_case", value_set=[1])


def _groups(frames: Frames) -> list[list[str]]:
    from recforge.quality.frames import case_twins

    return case_twins(list(frames["class_names"]["class_name"]))


def observed(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    groups = _groups(frames)
    if not groups:
        return f"{len(frames['class_names'])} class names, none equal to another but for case"
    return (f"{len(groups)} group(s) of class names that differ only by case: "
            + "; ".join(" / ".join(g) for g in groups))


def evidence(frames: Frames) -> list[str]:
    return [" / ".join(group) + ": one class each, differing only by case; labels.case: "
            "lower makes them one class" for group in _groups(frames)[:MAX_EVIDENCE]]


CHECK = CheckDef(
    "class_name_case", plan, observed, evidence=evidence,
    advice=("two class names differ only by case (Dog, dog), so one kind of thing is two "
            "classes with two ids and the model is asked to tell them apart",
            "set labels.case: lower in the spec to number them as one class, or rename the "
            "folders (or list labels) so each class is written one way"))
