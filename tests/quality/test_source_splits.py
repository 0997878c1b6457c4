"""The checklist on datasets as they ship: class names that differ only by case (item 16),
leakage across the source's own splits (``splits.from: source``: reported, not blocking),
and class balance checked in each split on its own (``class_balance_split: each``).

In-memory inputs (``GateInputs``) as in ``test_quality``; the quality section comes from a
whole dataset spec where the spec decides the severities.
"""

from __future__ import annotations

import pytest

from recforge import quality as q
from recforge.quality.frames import case_twins
from recforge.spec import parse_spec
from recforge.spec.quality import CHECK_BY_NAME, CHECKS, QualitySpec
from tests.quality.test_quality import CLASSES, PACK, clean_inputs


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    return tmp_path_factory.mktemp("docs")


def run(inputs, docs, quality=None):
    return q.run_checks(inputs, quality or QualitySpec(), docs_dir=docs, pack=PACK,
                        run_name="test")


def quality_of(splits: dict, **quality) -> QualitySpec:
    """The quality section as a whole spec with these ``splits`` makes it."""
    spec = parse_spec({"name": "pets", "source": {"uri": "s3://raw-data/pets"},
                       "publish": {"uri": "s3://datasets"}, "splits": splits,
                       **({"quality": quality} if quality else {})})
    return spec.quality


def renamed(inputs, names: list[str]):
    """``inputs`` whose classes.json (and records) spell the classes as ``names``."""
    inputs.classes = {"num_classes": len(names), "classes": names}
    for r in inputs.records:
        r["class_name"] = names[r["label"]]
    return inputs


# ---- item 16: class names that differ only by case ---------------------------------------

def test_the_case_check_is_an_item_that_warns_by_default():
    check = CHECK_BY_NAME["class_name_case"]
    assert (check.item, check.default) == ("16", "warn")
    assert [c.name for c in CHECKS].count("class_name_case") == 1


def test_names_that_differ_only_by_case_warn_naming_them_and_the_fix(docs):
    result = run(renamed(clean_inputs(), ["Dog", "cat", "dog"]), docs)
    assert result["ok"] and result["warned"] == ["class_name_case"], q.format_table(result)
    check = result["checks"]["class_name_case"]
    assert check["status"] == "warning"
    assert check["observed"] == ("1 group(s) of class names that differ only by case: "
                                 "Dog / dog")
    assert check["evidence"][0] == ("Dog / dog: one class each, differing only by case; "
                                    "labels.case: lower makes them one class")
    # Data Docs name both rows of the table that holds classes.json's names
    assert any("2 of 3 unexpected" in e and "Dog" in e and "dog" in e
               for e in check["evidence"]), check["evidence"]


def test_three_spellings_are_one_group(docs):
    result = run(renamed(clean_inputs(), ["Dog", "DOG", "dog"]), docs)
    check = result["checks"]["class_name_case"]
    assert check["status"] == "warning"
    assert check["observed"].endswith(": Dog / DOG / dog")


def test_distinct_names_pass_and_fail_severity_blocks(docs):
    passed = run(clean_inputs(), docs)["checks"]["class_name_case"]
    assert passed["status"] == "passed"
    assert passed["observed"] == f"{len(CLASSES)} class names, none equal to another but for case"
    blocked = run(renamed(clean_inputs(), ["owl", "OWL", "cat"]), docs,
                  QualitySpec(severity={"class_name_case": "fail"}))
    assert not blocked["ok"] and blocked["failed"] == ["class_name_case"]


def test_without_classes_json_the_case_check_is_not_run(docs):
    inputs = clean_inputs()
    inputs.classes = None
    check = run(inputs, docs)["checks"]["class_name_case"]
    assert (check["status"], check["observed"]) == ("not run", "no classes.json")


def test_case_twins_keeps_the_order_of_classes_json():
    assert case_twins(["b", "A", "a", "B", "c"]) == [["b", "B"], ["A", "a"]]
    assert case_twins(["cat", "dog"]) == []


# ---- item 12 under splits.from: source ----------------------------------------------------

def _same_image_in_train_and_val(inputs):
    val = next(r for r in inputs.records if r["split"] == "val")
    train = inputs.records[0]
    val["source_sha256"] = train["source_sha256"]  # the same bytes under another key
    return train["source_key"], val["source_key"]


def test_official_splits_with_an_identical_image_pass_with_a_warning_naming_both(docs):
    quality = quality_of({"from": "source"})
    assert quality.severity_of("split_content") == "warn"
    inputs = clean_inputs()
    train_key, val_key = _same_image_in_train_and_val(inputs)
    result = run(inputs, docs, quality)
    assert result["ok"] and result["failed"] == [], q.format_table(result)
    assert result["warned"] == ["split_content"]
    check = result["checks"]["split_content"]
    assert check["severity"] == "warn" and check["status"] == "warning"
    assert check["observed"] == "1 identical images (SHA-256) in more than one split"
    pair = check["evidence"][0]
    assert train_key in pair and val_key in pair and "train/0" in pair and "val/" in pair
    assert "sha256 " in pair
    # the table the task log prints shows the warning and its pair
    table = q.format_table(result)
    assert "warn" in table and train_key in table and val_key in table
    assert "quality gate passed with warnings: split_content" in table


def test_hash_splits_with_the_same_leak_fail(docs):
    quality = quality_of({"val_ratio": 0.2})
    assert quality.severity_of("split_content") == "fail"
    inputs = clean_inputs()
    _same_image_in_train_and_val(inputs)
    result = run(inputs, docs, quality)
    assert not result["ok"] and result["failed"] == ["split_content"]


def test_official_splits_still_fail_on_a_key_in_two_splits_and_on_request(docs):
    inputs = clean_inputs()
    val = next(r for r in inputs.records if r["split"] == "val")
    val["source_key"] = inputs.records[0]["source_key"]
    result = run(inputs, docs, quality_of({"from": "source"}))
    assert "split_keys" in result["failed"]
    inputs = clean_inputs()
    _same_image_in_train_and_val(inputs)
    strict = quality_of({"from": "source"}, severity={"split_content": "fail"})
    result = run(inputs, docs, strict)
    assert result["failed"] == ["split_content"]


# ---- item 11 per split --------------------------------------------------------------------

def _balanced_train_skewed_val(inputs):
    """train: 10 of each class; val: cat 1, dog 4, owl 4 (cat's ratio 0.25 in val)."""
    labels = {"train": [0, 1, 2] * 10, "val": [0] + [1] * 4 + [2] * 4}
    for split, want in labels.items():
        rows = [r for r in inputs.records if r["split"] == split]
        for r, label in zip(rows, want, strict=True):
            r["label"], r["class_name"] = label, CLASSES[label]
    return inputs


def test_each_split_on_its_own_reports_the_worst_split(docs):
    inputs = _balanced_train_skewed_val(clean_inputs())
    train_only = run(inputs, docs, QualitySpec(class_balance_min_ratio=0.5))
    assert train_only["checks"]["class_balance"]["status"] == "passed"
    assert train_only["checks"]["class_balance"]["observed"] == (
        "smallest/largest in train = 1.000 (cat 10 / cat 10 records)")
    each = QualitySpec(class_balance_min_ratio=0.5, class_balance_split="each")
    result = run(_balanced_train_skewed_val(clean_inputs()), docs, each)
    check = result["checks"]["class_balance"]
    assert result["ok"] and result["warned"] == ["class_balance"], q.format_table(result)
    assert check["observed"] == ("smallest/largest in val (the worst split) = 0.250 (cat 1 / "
                                 "dog 4 records); per split train 1.000, val 0.250")
    assert any("1 of 6 unexpected" in e and "val/cat" in e for e in check["evidence"]), \
        check["evidence"]


def test_all_splits_together_and_a_missing_split(docs):
    inputs = _balanced_train_skewed_val(clean_inputs())
    together = run(inputs, docs, QualitySpec(class_balance_split=None))
    assert together["checks"]["class_balance"]["observed"] == (
        "smallest/largest in all splits = 0.786 (cat 11 / dog 14 records)")
    inputs = _balanced_train_skewed_val(clean_inputs())
    absent = run(inputs, docs, QualitySpec(class_balance_split="test"))
    assert absent["checks"]["class_balance"]["observed"].endswith("in all splits = 0.786 "
                                                                    "(cat 11 / dog 14 records)")


def test_each_is_documented_in_the_spec_field():
    field = QualitySpec.model_fields["class_balance_split"]
    assert "each" in field.description
    assert QualitySpec(class_balance_split="each").class_balance_split == "each"
