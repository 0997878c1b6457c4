"""The stage table's order for the DAG: each stage waits for the one before it, and a stage
``beside`` another shares that one's upstream while the next stage waits for both."""

from __future__ import annotations

import pytest

from recforge import stages


def test_the_benchmark_runs_beside_validate_and_the_checklist_waits_for_both():
    waits = stages.upstream("classification")
    assert waits == {
        "ingest": set(), "flatten": {"ingest"}, "remap_labels": {"flatten"},
        "split": {"remap_labels"}, "pack": {"split"}, "merge": {"pack"},
        "validate": {"merge"}, "benchmark": {"merge"},
        "quality_gate": {"validate", "benchmark"}, "publish": {"quality_gate"}}


def test_segmentation_converts_masks_between_split_and_pack():
    waits = stages.upstream("segmentation")
    assert waits["convert_masks"] == {"split"}
    assert waits["pack"] == {"convert_masks"}
    assert waits["quality_gate"] == {"validate", "benchmark"}


@pytest.mark.parametrize("kind", stages.TASK_KINDS)
def test_every_stage_of_a_kind_waits_only_for_stages_of_that_kind(kind):
    waits = stages.upstream(kind)
    ran = [s.task_id for s in stages.stages_for(kind)]
    assert list(waits) == ran
    for task_id, needs in waits.items():
        assert needs <= set(ran[:ran.index(task_id)]), task_id
    assert [t for t, needs in waits.items() if not needs] == ["ingest"]


def test_a_stage_beside_another_names_one_that_comes_before_it():
    order = [s.task_id for s in stages.STAGES]
    for s in stages.STAGES:
        if s.beside is not None:
            assert order.index(s.beside) < order.index(s.task_id), s.task_id
            assert stages.stage(s.beside).beside is None, s.task_id
