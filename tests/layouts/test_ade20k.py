"""ADE20K's scene-parsing release as shipped (ADEChallengeData2016, docs/datasets.md):
training → train and validation → val, id masks packed by the documented id map (0 other →
ignore, k → k - 1), the class lists at the root set aside as not used."""

from __future__ import annotations

import numpy as np
import pytest

from recforge import quarantine, run_state, storage
from recforge.format import names
from recforge.segmentation.pairs import PairRule, pair_by_rule
from recforge.spec.dataset import SplitSpec
from tests.common import mini_cityscapes as mini
from tests.common.datasets_doc import spec_from_doc


def test_ade20k_as_shipped_keeps_its_official_splits_and_exact_masks(bucket):
    objects, truth = mini.ade20k()
    spec = spec_from_doc("ADE20K", bucket)
    assert spec.segmentation.id_map == {0: 255, **{k: k - 1 for k in range(1, 151)}}
    mini.upload(spec.source.uri, objects)
    run = mini.build(spec, "ade")  # validate passed: it raises on a failure

    summary = storage.read_json(storage.join(run_state.out(run), names.SUMMARY))
    assert summary["listed"] == len(objects) == 12
    assert summary["listed"] == summary["packed"] + summary["quarantined"] + \
        summary.get("not_used", 0)
    assert summary["quarantined"] == 0
    assert quarantine.loads(storage.get_bytes(run_state.output(run, "quarantine.jsonl"))) == []
    assert summary["splits"] == {"train": 3, "val": 2}
    assert summary["not_used_by_reason"] == {"documentation": 2}
    assert {r["key"]: r["reason"] for r in
            storage.iter_jsonl(storage.join(run_state.out(run), names.NOT_USED))} == {
        "objectInfo150.txt": "documentation", "sceneCategories.txt": "documentation"}

    records = list(storage.iter_jsonl(storage.join(run_state.out(run), names.RECORDS)))
    official = {"training": "train", "validation": "val"}
    assert {r["source_key"]: r["split"] for r in records} == {
        key: official[key.split("/")[1]] for key in truth}
    for split in ("train", "val"):
        masks = mini.packed_masks(run_state.out(run), split)
        assert len(masks) == summary["splits"][split]
        for key, mask in masks.items():
            expected = mini.ade20k_train_ids(truth[key])
            np.testing.assert_array_equal(mask, expected)
            assert set(np.unique(expected)) == {255, 0, 1, 2, 149}
    classes = storage.read_json(storage.join(run_state.out(run), names.CLASSES))
    assert classes["num_classes"] == 150 and classes["ignore_index"] == 255
    assert classes["classes"][0] == "id_1" and classes["classes"][-1] == "id_150"


def test_training_and_validation_pair_by_name_without_suffixes():
    rows = [{"key": k, "size": 10, "etag": "e"} for k in (
        "images/training/ADE_train_00000001.jpg", "annotations/training/ADE_train_00000001.png",
        "images/validation/ADE_val_00000001.jpg", "annotations/validation/ADE_val_00000001.png",
        "images/training/ADE_train_00000002.jpg",  # its annotation is missing
        "annotations/validation/ADE_train_00000002.png",  # filed under the other split
        "objectInfo150.txt", "sceneCategories.txt")]
    out = pair_by_rule(rows, PairRule("images", "annotations"),
                       SplitSpec.model_validate({"from": "source"}))
    assert [(i["source_key"], i["split"]) for i in out.items] == [
        ("images/training/ADE_train_00000001.jpg", "train"),
        ("images/validation/ADE_val_00000001.jpg", "val")]
    assert sorted((e.source_key, e.reason) for e in out.refused) == [
        ("annotations/validation/ADE_train_00000002.png", "split_mismatch"),
        ("images/training/ADE_train_00000002.jpg", "split_mismatch")]
    assert [(k, r) for k, r, _ in out.not_used] == [
        ("objectInfo150.txt", "documentation"), ("sceneCategories.txt", "documentation")]


def test_an_annotation_missing_is_quarantined_not_set_aside():
    rows = [{"key": "images/training/ADE_train_00000009.jpg", "size": 10, "etag": "e"}]
    out = pair_by_rule(rows, PairRule("images", "annotations"),
                       SplitSpec.model_validate({"from": "source"}))
    assert [(e.source_key, e.reason) for e in out.refused] == [
        ("images/training/ADE_train_00000009.jpg", "mask_missing")]
    assert out.not_used == []


@pytest.mark.parametrize("text_file", ["objectInfo150.txt", "annotations/training/x.txt"])
def test_text_files_are_never_masks(text_file):
    """With no mask_suffix any extension would pair; a text file never does."""
    rows = [{"key": k, "size": 10, "etag": "e"} for k in (
        "images/training/x.jpg", "annotations/training/x.png", text_file)]
    out = pair_by_rule(rows, PairRule("images", "annotations"),
                       SplitSpec.model_validate({"from": "source"}))
    assert [i["mask_key"] for i in out.items] == ["annotations/training/x.png"]
    assert out.refused == []
    assert [r for _k, r, _ in out.not_used] == [
        "documentation" if "/" not in text_file else "not_selected"]


def test_an_id_outside_the_documented_map_fails_naming_the_mask():
    from recforge.segmentation.masks import MaskConverter, UnknownMaskValues
    from tests.common.segdata import png

    seg = spec_from_doc("ADE20K", "raw-data").segmentation
    converter = MaskConverter.from_config(seg.colormap, target=seg.target, id_map=seg.id_map,
                                          ignore_index=seg.ignore_index,
                                          on_unknown=seg.on_unknown)
    ids = np.array([[0, 1], [150, 151]], np.uint8)  # 151: no class of the 150-class release
    with pytest.raises(UnknownMaskValues, match=r"ADE_train_00000001\.png.*151"):
        converter.convert(png(ids), "annotations/training/ADE_train_00000001.png")
    np.testing.assert_array_equal(converter.convert(png(ids[:, :1]), "m.png").mask,
                                  [[255], [149]])
