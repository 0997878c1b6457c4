"""The kind table: one row per task kind the spec accepts, and what each row says."""

from typing import get_args

import pytest

from recforge import kinds
from recforge.spec import DatasetSpec
from recforge.spec.quality import CHECK_BY_NAME


def test_the_table_holds_exactly_the_spec_task_kinds_in_order():
    assert kinds.NAMES == get_args(DatasetSpec.model_fields["task"].annotation)


def test_kind_specific_checks_are_checklist_items():
    for k in kinds.KINDS.values():
        assert set(k.checks) <= set(CHECK_BY_NAME), k.name


@pytest.mark.parametrize("doc, expected", [
    ({"task": "detection"}, "detection"),
    ({}, "classification"),
    (None, "classification"),
])
def test_kind_of_a_published_document(doc, expected):
    assert kinds.kind_of(doc).name == expected


def test_kind_of_reads_the_first_document_that_names_a_task():
    assert kinds.kind_of({}, {"task": "segmentation"}).name == "segmentation"


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(KeyError, match="classification"):
        kinds.kind("keypoints")
