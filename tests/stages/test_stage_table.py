"""The stage table's order for the DAG: each stage waits for the one before it, and a stage
``beside`` another shares that one's upstream while the next stage waits for both."""

from __future__ import annotations

import pytest

from recforge import stages


def test_the_benchmark_runs_beside_validate_and_the_checklist_and_publish_waits_for_all():
    waits = stages.upstream("classification")
    assert waits == {
        "ingest": set(), "flatten": {"ingest"}, "remap_labels": {"flatten"},
        "split": {"remap_labels"}, "pack": {"split"}, "merge": {"pack"},
        "validate": {"merge"}, "benchmark": {"merge"},
        "quality_gate": {"validate"}, "publish": {"quality_gate", "benchmark"}}


def test_segmentation_converts_masks_between_split_and_pack():
    waits = stages.upstream("segmentation")
    assert waits["convert_masks"] == {"split"}
    assert waits["pack"] == {"convert_masks"}
    assert waits["quality_gate"] == {"validate"}
    assert waits["publish"] == {"quality_gate", "benchmark"}


@pytest.mark.parametrize("kind", stages.TASK_KINDS)
def test_every_stage_of_a_kind_waits_only_for_stages_of_that_kind(kind):
    waits = stages.upstream(kind)
    ran = [s.task_id for s in stages.stages_for(kind)]
    assert list(waits) == ran
    for task_id, needs in waits.items():
        assert needs <= set(ran[:ran.index(task_id)]), task_id
    assert [t for t, needs in waits.items() if not needs] == ["ingest"]


def test_a_stage_beside_others_names_consecutive_stages_the_first_before_it():
    order = [s.task_id for s in stages.STAGES if not s.beside]
    listed = [s.task_id for s in stages.STAGES]
    for s in stages.STAGES:
        if s.beside:
            assert listed.index(s.beside[0]) < listed.index(s.task_id), s.task_id
            first = order.index(s.beside[0])
            assert list(s.beside) == order[first:first + len(s.beside)], s.task_id

