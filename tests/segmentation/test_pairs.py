"""Pairing images with masks: folder rule and list file, with every object accounted for."""

from __future__ import annotations

import pytest

from recforge.segmentation.pairs import PairRule, pair_by_list, pair_by_rule


def listing(*keys):
    return [{"key": k, "size": 10, "etag": f"e-{k}"} for k in keys]


def test_cityscapes_rule_accounts_for_every_object():
    rows = listing(
        "leftImg8bit/train/aachen/aachen_000000_000019_leftImg8bit.png",
        "gtFine/train/aachen/aachen_000000_000019_gtFine_color.png",
        "gtFine/train/aachen/aachen_000000_000019_gtFine_labelIds.png",
        "leftImg8bit/train/bonn/bonn_000001_000019_leftImg8bit.png",   # no mask
        "gtFine/val/x/x_000002_000019_gtFine_color.png",                # no image
        "README.md",
    )
    rule = PairRule("leftImg8bit", "gtFine", "_leftImg8bit.png", "_gtFine_color.png")
    out = pair_by_rule(rows, rule)
    items, refused = out.items, out.refused
    assert [(i["source_key"], i["mask_key"], i["name"]) for i in items] == [(
        "leftImg8bit/train/aachen/aachen_000000_000019_leftImg8bit.png",
        "gtFine/train/aachen/aachen_000000_000019_gtFine_color.png",
        "train__aachen__aachen_000000_000019.png")]
    assert items[0]["mask_etag"].startswith("e-gtFine")
    reasons = {e.source_key.split("/")[-1]: e.reason for e in refused}
    assert reasons == {
        "bonn_000001_000019_leftImg8bit.png": "mask_missing",
        "x_000002_000019_gtFine_color.png": "orphan_mask",
        "README.md": "outside_pair_folders",  # not a text file: ingest refused it anyway
    }
    # a sibling the rule does not select is no bad data: set aside, not quarantined
    assert sorted((k.split("/")[-1], r) for k, r, _ in out.not_used) == [
        ("aachen_000000_000019_gtFine_labelIds.png", "not_selected")]
    assert len(items) * 2 + len(refused) + len(out.not_used) == len(rows)


def test_voc_rule_any_extension():
    rows = listing("JPEGImages/2007_000032.jpg", "SegmentationClass/2007_000032.png",
                   "JPEGImages/2007_000033.jpg", "JPEGImages/2007_000033.png")
    out = pair_by_rule(rows, PairRule("JPEGImages", "SegmentationClass"))
    items, refused = out.items, out.refused
    assert [i["mask_key"] for i in items] == ["SegmentationClass/2007_000032.png"]
    assert {(e.source_key, e.reason) for e in refused} == {
        ("JPEGImages/2007_000033.png", "duplicate_stem"),
        ("JPEGImages/2007_000033.jpg", "mask_missing")}


def test_same_folder_needs_different_suffixes():
    with pytest.raises(ValueError, match="different folders or different suffixes"):
        PairRule("data", "data")
    out = pair_by_rule(listing("data/a.png", "data/a_mask.png"),
                       PairRule("data", "data", ".png", "_mask.png"))
    items, refused = out.items, out.refused
    assert [(i["source_key"], i["mask_key"]) for i in items] == [("data/a.png",
                                                                  "data/a_mask.png")]
    assert not refused and not out.not_used


def test_pair_list():
    rows = listing("img/a.jpg", "m/a.png", "img/b.jpg", "img/c.jpg", "m/c.png")
    out = pair_by_list(rows, "# pairs\nimg/a.jpg\tm/a.png\nimg/b.jpg,m/b.png\n")
    assert [i["mask_key"] for i in out.items] == ["m/a.png"]
    assert {(e.source_key, e.reason) for e in out.refused} == {("img/b.jpg", "mask_missing")}
    assert {(k, r) for k, r, _ in out.not_used} == {("img/c.jpg", "not_selected"),
                                                    ("m/c.png", "not_selected")}
    with pytest.raises(ValueError, match="line 1: image 'img/z.jpg' is not in the source"):
        pair_by_list(rows, "img/z.jpg\tm/a.png")
    with pytest.raises(ValueError, match="listed twice"):
        pair_by_list(rows, "img/a.jpg\tm/a.png\nimg/c.jpg\tm/a.png")
