"""Cityscapes as shipped (leftImg8bit + gtFine, docs/datasets.md): every labelled pair in
exactly its official split with exact trainId masks, the unpaired siblings, the unlabelled
test split and the README set aside as not used, and each mismatch of image and mask
folders refused with its reason."""

from __future__ import annotations

import numpy as np
import pytest

from recforge import layouts, quarantine, run_state, storage
from recforge.errors import SpecError
from recforge.format import names
from recforge.segmentation.pairs import PairRule, pair_by_rule
from recforge.spec import parse_spec
from recforge.spec.dataset import SplitSpec
from tests.common import mini_cityscapes as mini
from tests.common.datasets_doc import spec_doc, spec_from_doc

RULE = PairRule("leftImg8bit", "gtFine", "_leftImg8bit.png", "_gtFine_labelIds.png")
SOURCE = SplitSpec.model_validate({"from": "source", "folders": {"train": ["train"],
                                                                 "val": ["val"]}})


def listing(*keys: str) -> list[dict]:
    return [{"key": k, "size": 10, "etag": f"e-{k}"} for k in keys]


def frame(split: str, city: str = "aachen", seq: int = 0, suffix: str = "labelIds.png",
          image: bool = False) -> str:
    stem = mini.cityscapes_stem(split, city, seq, 19)
    return f"leftImg8bit/{stem}_leftImg8bit.png" if image else f"gtFine/{stem}_gtFine_{suffix}"


def test_cityscapes_as_shipped_keeps_its_official_splits_and_exact_masks(bucket):
    objects, truth = mini.cityscapes()
    spec = spec_from_doc("Cityscapes", bucket)
    mini.upload(spec.source.uri, objects)
    run = mini.build(spec, "city")  # validate passed: it raises on a failure

    summary = storage.read_json(storage.join(run_state.out(run), names.SUMMARY))
    assert summary["listed"] == len(objects) == 37
    assert summary["listed"] == summary["packed"] + summary["quarantined"] + \
        summary.get("not_used", 0)
    assert summary["quarantined"] == 0
    assert quarantine.loads(storage.get_bytes(run_state.output(run, "quarantine.jsonl"))) == []
    assert summary["splits"] == {"train": 3, "val": 2}

    records = list(storage.iter_jsonl(storage.join(run_state.out(run), names.RECORDS)))
    assert {r["source_key"]: r["split"] for r in records} == {
        key: key.split("/")[1] for key in truth}  # leftImg8bit/<split>/…
    for split in ("train", "val"):
        masks = mini.packed_masks(run_state.out(run), split)
        assert sorted(masks) == sorted(k for k in truth if k.split("/")[1] == split)
        for key, mask in masks.items():
            np.testing.assert_array_equal(mask, mini.cityscapes_train_ids(truth[key]))

    not_used = {r["key"]: r["reason"] for r in
                storage.iter_jsonl(storage.join(run_state.out(run), names.NOT_USED))}
    expected = {"README": "documentation", "license.txt": "documentation"}
    for key in objects:
        if key.startswith(("leftImg8bit/test/", "gtFine/test/")):
            expected[key] = "split_not_mapped"  # unlabelled: dummy masks
        elif key.startswith("gtFine/") and not key.endswith("_gtFine_labelIds.png"):
            expected[key] = "not_selected"  # colour, instanceIds, polygons
    assert not_used == expected
    assert summary["not_used_by_reason"] == {"documentation": 2, "split_not_mapped": 10,
                                             "not_selected": 15}


def test_each_pair_takes_the_split_of_its_folder():
    out = pair_by_rule(listing(frame("train", image=True), frame("train"),
                               frame("val", "lindau", image=True), frame("val", "lindau"),
                               frame("train", suffix="color.png"),
                               frame("train", suffix="instanceIds.png"),
                               frame("train", suffix="labelTrainIds.png"),
                               frame("train", suffix="polygons.json")), RULE, SOURCE)
    assert [(i["source_key"], i["split"], i["name"]) for i in out.items] == [
        (frame("train", image=True), "train", "train__aachen__aachen_000000_000019.png"),
        (frame("val", "lindau", image=True), "val", "val__lindau__lindau_000000_000019.png")]
    assert out.refused == []
    assert sorted((k, r) for k, r, _ in out.not_used) == [
        (frame("train", suffix="color.png"), "not_selected"),
        (frame("train", suffix="instanceIds.png"), "not_selected"),
        (frame("train", suffix="labelTrainIds.png"), "not_selected"),
        (frame("train", suffix="polygons.json"), "not_selected")]


def test_a_mask_under_another_split_folder_is_refused_with_its_image():
    out = pair_by_rule(listing(frame("train", image=True), frame("val")), RULE, SOURCE)
    assert out.items == []
    assert sorted((e.source_key, e.reason) for e in out.refused) == [
        (frame("val"), "split_mismatch"), (frame("train", image=True), "split_mismatch")]
    assert "'train'" in out.refused[0].detail and "'val'" in out.refused[0].detail
    assert quarantine.FIXES["split_mismatch"].startswith("the image and its mask")


def test_a_folder_that_names_no_split_is_refused_naming_it():
    rows = listing(frame("train", image=True), frame("train"),
                   "leftImg8bit/train_extra/x/x_000000_000019_leftImg8bit.png")
    with pytest.raises(SpecError, match=r"folder\(s\) \['train_extra \(leftImg8bit/"
                                        r"train_extra/.*name no split.*splits.folders"):
        pair_by_rule(rows, RULE, SOURCE, "s3://raw/cityscapes")


def test_a_split_name_the_spec_leaves_out_is_set_aside_not_refused():
    out = pair_by_rule(listing(frame("train", image=True), frame("train"),
                               frame("test", "berlin", image=True), frame("test", "berlin"),
                               frame("test", "berlin", suffix="color.png")), RULE, SOURCE)
    assert [i["split"] for i in out.items] == ["train"] and out.refused == []
    assert sorted((k, r) for k, r, _ in out.not_used) == [
        (frame("test", "berlin", suffix="color.png"), "split_not_mapped"),
        (frame("test", "berlin"), "split_not_mapped"),
        (frame("test", "berlin", image=True), "split_not_mapped")]
    # the default splits.folders keeps test as test
    default = SplitSpec.model_validate({"from": "source"})
    out = pair_by_rule(listing(frame("test", "berlin", image=True), frame("test", "berlin")),
                       RULE, default)
    assert [i["split"] for i in out.items] == ["test"]


def test_a_pair_outside_any_split_folder_is_refused():
    out = pair_by_rule(listing("leftImg8bit/a_leftImg8bit.png", "gtFine/a_gtFine_labelIds.png"),
                       RULE, SOURCE)
    assert out.items == []
    assert sorted((e.source_key, e.reason) for e in out.refused) == [
        ("gtFine/a_gtFine_labelIds.png", "not_in_split_folder"),
        ("leftImg8bit/a_leftImg8bit.png", "not_in_split_folder")]
    assert "not_in_split_folder" in quarantine.FIXES


def test_hash_splits_over_the_official_split_folders_are_refused():
    rows = listing(frame("train", image=True), frame("train"),
                   frame("val", "lindau", image=True), frame("val", "lindau"))
    with pytest.raises(SpecError, match=r"split folders \['train', 'val'\].*mix.*"
                                        r"splits.from: source.*images: leftImg8bit/<split>"):
        pair_by_rule(rows, RULE, SplitSpec(), "s3://raw/cityscapes")
    # one split's folder, split by hash, is a choice the spec may make
    out = pair_by_rule(rows[:2], RULE, SplitSpec())
    assert len(out.items) == 1 and "split" not in out.items[0]
    one = PairRule("leftImg8bit/train", "gtFine/train", "_leftImg8bit.png",
                   "_gtFine_labelIds.png")
    out = pair_by_rule(rows, one, SplitSpec())
    assert [i["source_key"] for i in out.items] == [frame("train", image=True)]
    assert [e.reason for e in out.refused] == ["outside_pair_folders"] * 2


def test_the_layout_ingests_text_and_json_and_quarantines_stray_extensionless_files():
    spec = spec_from_doc("Cityscapes", "raw-data")
    layout = layouts.for_spec(spec)
    assert set(layout.extensions(spec)) == {".json", ".txt", ""}
    flat = layout.flatten(listing("README", "license.txt", "leftImg8bit/train/notes",
                                  frame("train", image=True), frame("train")), spec)
    assert [i["split"] for i in flat.items] == ["train"]
    assert [(n.key, n.reason) for n in flat.not_used] == [
        ("README", "documentation"), ("license.txt", "documentation")]
    assert [(e.source_key, e.reason) for e in flat.refused] == [
        ("leftImg8bit/train/notes", "unsupported_extension")]
    assert "<prefix>/leftImg8bit/<split>/<path>_leftImg8bit.png" in layout.expected(spec)


def test_a_pair_list_names_no_splits():
    data = spec_doc("Cityscapes", "raw-data")
    data["source"]["pairs"] = {"layout": "pair_list", "list_uri": "s3://raw-data/pairs.tsv"}
    spec = parse_spec(data)
    with pytest.raises(SpecError, match="pair_list names no splits"):
        layouts.for_spec(spec).flatten(listing("a.png"), spec)
