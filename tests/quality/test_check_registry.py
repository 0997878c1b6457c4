"""The checklist's table (``recforge.quality.checks``): one row per item of the spec, in the
spec's order, each filled in by its own module; planning, observing and advising walk it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from recforge import kinds
from recforge.quality import checks
from recforge.quality.checks import BY_NAME, CHECKS, Plan, frames_kind, not_for
from recforge.quality.frames import build_frames
from recforge.quality.suites import plan_expectations
from recforge.spec.quality import CHECKS as SPEC_CHECKS
from recforge.spec.quality import LOADER_CHECKS, QualitySpec
from tests.quality.test_quality import PACK, clean_inputs

FOLDER = Path(checks.__file__).parent


def test_the_table_is_the_specs_items_in_order():
    assert [c.name for c in CHECKS] == [c.name for c in SPEC_CHECKS]
    assert [c.spec for c in CHECKS] == list(SPEC_CHECKS)
    assert [c.name for c in checks.LOADER] == list(LOADER_CHECKS)
    assert [c.name for c in checks.DATASET] == [c.name for c in SPEC_CHECKS
                                                if c.name not in LOADER_CHECKS]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_every_check_has_a_plan_an_observed_line_and_advice(check):
    assert callable(check.plan) and callable(check.observed) and callable(check.evidence)
    for words in filter(None, (check.advice, check.source_split_advice)):
        means, todo = words  # the report writes "Means: {means}. To do: {todo}."
        assert means and todo and not means.endswith(".") and not todo.endswith(".")


def test_every_module_of_the_package_fills_in_rows_and_its_docstring_names_it():
    modules = {p.stem for p in FOLDER.glob("*.py") if p.name != "__init__.py"}
    owners = {c.plan.__module__.rsplit(".", 1)[1] for c in CHECKS}
    assert owners == modules - {"base"}
    for c in CHECKS:  # a check's functions live in one module
        assert {f.__module__ for f in (c.plan, c.observed)} == {c.plan.__module__}
    doc = ast.get_docstring(ast.parse((FOLDER / "__init__.py").read_text()))
    assert set(re.findall(r"``(\w+)\.py``", doc)) == modules


def test_kind_checks_come_from_the_kind_table():
    only_some = {n for k in kinds.KINDS.values() for n in k.checks}
    assert only_some == {"objects_per_image", "box_size"} and only_some <= set(BY_NAME)
    assert not_for("box_size", kinds.CLASSIFICATION) == "not a detection dataset"
    assert not_for("objects_per_image", kinds.SEGMENTATION) == "not a detection dataset"
    assert not_for("box_size", kinds.DETECTION) is None
    assert not_for("labels", kinds.CLASSIFICATION) is None
    assert frames_kind({"records": None}, "segmentation") is kinds.SEGMENTATION
    assert frames_kind({"objects": None}, "classification") is kinds.DETECTION
    assert frames_kind({"records": None}, "detection") is kinds.CLASSIFICATION


@pytest.fixture(scope="module")
def frames():
    quality = QualitySpec()
    return build_frames(clean_inputs(), quality), quality


@pytest.mark.parametrize("check", checks.DATASET, ids=lambda c: c.name)
def test_a_checks_plan_adds_only_its_own_expectations(frames, check):
    frames, quality = frames
    plans, not_run = [], {}
    if not_for(check.name, frames_kind(frames, "classification")):
        return  # a detection check: planned on detection frames (test_detection_checks)
    check.plan(Plan(check.name, frames, quality, plans, not_run, PACK, 3))
    assert {p.check for p in plans} | set(not_run) == {check.name}
    for p in plans:
        assert p.expectation.meta["check"] == check.name
        assert p.expectation.meta["item"] == check.spec.item


def test_planning_walks_the_table_and_each_planned_check_observes_a_line(frames):
    frames, quality = frames
    plans, not_run = plan_expectations(frames, quality, PACK, "classification", 3)
    planned = list(dict.fromkeys(p.check for p in plans))
    assert planned == [c.name for c in checks.DATASET if c.name in planned]
    assert set(planned) | set(not_run) == {c.name for c in checks.DATASET}
    assert not_run["box_size"] == not_run["objects_per_image"] == "not a detection dataset"
    for name in planned:
        line = BY_NAME[name].observed(frames, quality, 3)
        assert isinstance(line, str) and line
