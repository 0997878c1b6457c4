"""COCO 2017 as shipped, built from docs/datasets.md's spec on the local S3 server: every
image in the split of its instances file, boxes exact, class ids in category id order,
crowd regions not packed, the other annotation files and test2017/ set aside; and the
layout's rules one by one on listings (the engine, no build)."""

from __future__ import annotations

import json

import pytest

from recforge import layouts, run_state, storage
from recforge.errors import SourceEmpty, SpecError
from recforge.format import detection_label, names
from recforge.run import Run
from recforge.stages import entry
from recforge.stages.remap_labels import ordered, remap
from tests.common import mini_coco
from tests.common.datasets_doc import spec_from_doc
from tests.common.detection import build

PX = 1e-3  # the label's 6 decimals, in pixels of a 64-pixel side


def _out(run, name: str) -> str:
    return storage.join(run_state.out(run), name)


def test_coco_2017_keeps_its_splits_and_category_order(bucket):
    made = mini_coco.upload(f"s3://{bucket}/coco2017")
    spec = spec_from_doc("COCO 2017", bucket)
    assert spec.source.uri == f"s3://{bucket}/coco2017" and spec.detection.crowd == "drop"
    run = build(spec, "r1")
    classes = storage.read_json(_out(run, names.CLASSES))["classes"]
    assert classes == mini_coco.CATEGORY_ORDER  # person (id 1) is 0, dog (id 18) is 3
    rows = {r["source_key"]: r for r in storage.iter_jsonl(_out(run, names.RECORDS))}
    truth = mini_coco.truth()
    assert {k: r["split"] for k, r in rows.items()} == {k: t[0] for k, t in truth.items()}
    for key, (_, w, h, boxes) in truth.items():
        (width, height), objects = detection_label.decode(rows[key]["label"])
        assert (width, height) == (w, h), key
        got = [(classes[int(o[0])], o[1] * w, o[2] * h, o[3] * w, o[4] * h, o[5])
               for o in objects]
        assert len(got) == len(boxes), key  # the crowd region of image 30 is not packed
        for g, (name, x0, y0, x1, y1) in zip(got, boxes, strict=True):
            assert g[0] == name and g[5] == 0, key
            corners = zip(g[1:5], (x0, y0, x1, y1), strict=True)
            assert max(abs(a - b) for a, b in corners) < PX, key
    assert storage.get_bytes(_out(run, names.QUARANTINE)) == b""  # nothing here is bad data
    not_used = {r["key"]: r["reason"] for r in storage.iter_jsonl(_out(run, names.NOT_USED))}
    assert not_used == mini_coco.NOT_USED
    summary = storage.read_json(_out(run, names.SUMMARY))
    assert summary["listed"] == len(made) == \
        summary["packed"] + summary["quarantined"] + summary["not_used"]
    assert summary["quarantined"] == 0 and summary["not_used"] == len(mini_coco.NOT_USED)
    assert summary["packed"] == len(truth) + len(mini_coco.USED)
    assert summary["used"] == mini_coco.USED
    assert summary["splits"] == {"train": 5, "val": 3}
    assert summary["crowd_dropped"] == mini_coco.CROWD_REGIONS
    files = storage.read_json(run.annotation_files)
    assert files["counts"] == {"crowd_dropped": mini_coco.CROWD_REGIONS}
    assert files["class_order"] == mini_coco.CATEGORY_ORDER


# ---------------------------------------------------------------- the engine


def _flatten(rows: list[dict], spec):
    """The layout's flatten on a listing."""
    return layouts.for_spec(spec).flatten(rows, spec)


def _source(tmp_path, objects: dict) -> list[dict]:
    """Write ``objects`` under tmp_path/src; their listing rows."""
    for key, data in objects.items():
        path = tmp_path / "src" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(json.dumps(data).encode() if isinstance(data, dict) else data)
    return [{"key": k, "etag": f"e-{k}", "size": 1} for k in objects]


def _spec(tmp_path, **overrides):
    return spec_from_doc("COCO 2017", "unit-bucket", **{"source.uri": str(tmp_path / "src"),
                                              **overrides})


def _doc(file_names: list[str], categories=None, crowd: bool = False) -> dict:
    cats = categories or [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"}]
    return {"images": [{"id": i, "file_name": n, "width": 64, "height": 48}
                       for i, n in enumerate(file_names, 1)],
            "annotations": [{"id": i, "image_id": i, "category_id": cats[0]["id"],
                             "bbox": [1, 2, 10, 20], "iscrowd": 0}
                            for i in range(1, len(file_names) + 1)] +
            ([{"id": 99, "image_id": 1, "category_id": cats[-1]["id"], "bbox": [5, 5, 9, 9],
               "iscrowd": 1, "segmentation": {"counts": [1, 2], "size": [48, 64]}}]
             if crowd else []),
            "categories": cats}


def test_the_images_layout_of_one_annotations_folder_still_builds(tmp_path):
    rows = _source(tmp_path, {"annotations/instances.json": _doc(["a.jpg", "b.jpg"]),
                              "images/a.jpg": b"x", "images/b.jpg": b"x"})
    out = _flatten(rows, _spec(tmp_path, **{"splits.from": "hash"}))
    assert [i["source_key"] for i in out.items] == ["images/a.jpg", "images/b.jpg"]
    assert all("split" not in i for i in out.items)
    assert out.used == ["annotations/instances.json"] and not out.refused


def test_a_file_whose_name_gives_no_split_is_refused_under_source_splits(tmp_path):
    rows = _source(tmp_path, {"annotations/instances.json": _doc(["a.jpg"]),
                              "images/a.jpg": b"x"})
    with pytest.raises(SpecError, match=r"annotations/instances\.json names no split.*"
                       r"splits\.folders"):
        _flatten(rows, _spec(tmp_path))


def test_the_split_word_maps_through_splits_folders(tmp_path):
    rows = _source(tmp_path, {"annotations/instances_minival2014.json": _doc(["a.jpg"]),
                              "minival2014/a.jpg": b"x"})
    out = _flatten(rows, _spec(tmp_path, **{"splits.folders": {
        "train": ["train"], "val": ["minival"]}}))
    assert [(i["source_key"], i["split"]) for i in out.items] == [("minival2014/a.jpg", "val")]


def test_other_annotation_files_are_set_aside_unread(tmp_path, monkeypatch):
    rows = _source(tmp_path, {
        "annotations/instances_val2017.json": _doc(["000000000139.jpg"]),
        "annotations/captions_val2017.json": b"not even json",
        "annotations/person_keypoints_val2017.json": b"{}",
        "annotations/stuff_val2017.json": b"{}",
        "annotations/panoptic_val2017.json": b"{}",
        "annotations/panoptic_val2017/000000000139.png": b"x",
        "annotations/image_info_test2017.json": b"{}",
        "val2017/000000000139.jpg": b"x", "test2017/000000000001.jpg": b"x",
        "unlabeled2017/000000000002.jpg": b"x"})
    fetched = []
    real = storage.download
    monkeypatch.setattr(storage, "download", lambda uri, dest: (fetched.append(uri),
                                                                real(uri, dest)))
    out = _flatten(rows, _spec(tmp_path))
    assert [u.rsplit("/", 2)[-2:] for u in fetched] == [["annotations",
                                                          "instances_val2017.json"]]
    assert {n.key: n.reason for n in out.not_used} == {
        "annotations/captions_val2017.json": "not_instances",
        "annotations/person_keypoints_val2017.json": "not_instances",
        "annotations/stuff_val2017.json": "not_instances",
        "annotations/panoptic_val2017.json": "not_instances",
        "annotations/panoptic_val2017/000000000139.png": "not_instances",
        "annotations/image_info_test2017.json": "not_instances",
        "test2017/000000000001.jpg": "no_annotations_file",
        "unlabeled2017/000000000002.jpg": "no_annotations_file"}
    assert not out.refused
    assert [(i["source_key"], i["split"]) for i in out.items] == [
        ("val2017/000000000139.jpg", "val")]


def test_an_image_its_instances_file_does_not_name_is_annotation_missing(tmp_path):
    rows = _source(tmp_path, {"annotations/instances_train2017.json": _doc(["a.jpg"]),
                              "train2017/a.jpg": b"x", "train2017/b.jpg": b"x",
                              "elsewhere/c.jpg": b"x"})
    out = _flatten(rows, _spec(tmp_path))
    got = {(e.source_key, e.reason): e.detail for e in out.refused}
    assert set(got) == {("train2017/b.jpg", "annotation_missing"),
                        ("elsewhere/c.jpg", "not_in_detection_layout")}
    assert "annotations/instances_train2017.json" in got[("train2017/b.jpg",
                                                          "annotation_missing")]


def test_a_refusal_names_the_image_in_its_2017_folder(tmp_path):
    doc = _doc(["a.jpg"])
    doc["annotations"][0]["category_id"] = 7  # no such category
    rows = _source(tmp_path, {"annotations/instances_val2017.json": doc,
                              "val2017/a.jpg": b"x"})
    out = _flatten(rows, _spec(tmp_path))
    assert [(e.source_key, e.reason, e.part) for e in out.refused] == [
        ("val2017/a.jpg", "unknown_category", "annotation 1")]


def test_the_class_order_is_the_category_id_order(tmp_path):
    cats = [{"id": 18, "name": "dog"}, {"id": 3, "name": "car"}, {"id": 1, "name": "person"}]
    rows = _source(tmp_path, {"annotations/instances_val2017.json": _doc(["a.jpg"], cats),
                              "val2017/a.jpg": b"x"})
    out = _flatten(rows, _spec(tmp_path))
    assert out.class_order == ["person", "car", "dog"]
    # a first version: the source's order; every category numbered, boxes or not
    assert remap({"dog", "person", "car"}, None, False, out.class_order) == \
        ["person", "car", "dog"]
    # a later one: published ids kept, new classes appended in the source's order
    assert remap({"dog", "person", "car", "zebra", "bus"}, ["dog", "person"], False,
                 ["person", "bus", "car", "dog", "zebra"]) == \
        ["dog", "person", "bus", "car", "zebra"]
    assert ordered({"b", "a", "z"}, ["z"]) == ["z", "a", "b"]  # unknown ones by name after


@pytest.mark.parametrize("policy, want", [
    ("drop", [["person", 1.0, 2.0, 11.0, 22.0, 0]]),
    ("difficult", [["person", 1.0, 2.0, 11.0, 22.0, 0], ["dog", 5.0, 5.0, 14.0, 14.0, 1]]),
    ("keep", [["person", 1.0, 2.0, 11.0, 22.0, 0], ["dog", 5.0, 5.0, 14.0, 14.0, 0]])])
def test_crowd_regions_by_policy(tmp_path, policy, want):
    rows = _source(tmp_path, {"annotations/instances_val2017.json":
                              _doc(["a.jpg"], crowd=True), "val2017/a.jpg": b"x"})
    out = _flatten(rows, _spec(tmp_path, **{"detection.crowd": policy}))
    assert [o[:6] for o in out.items[0]["objects"]] == want
    assert out.counts == ({"crowd_dropped": 1} if policy == "drop" else {})
    assert not out.refused  # a dropped crowd region is no quarantine entry


def test_flatten_writes_the_class_order_and_counts_and_remap_numbers_by_it(tmp_path):
    rows = _source(tmp_path, {"annotations/instances_val2017.json": _doc(
        ["a.jpg"], [{"id": 1, "name": "Person"}, {"id": 2, "name": "Bicycle"},
                    {"id": 18, "name": "Dog"}], crowd=True), "val2017/a.jpg": b"x"})
    spec = _spec(tmp_path, **{"labels.case": "lower",
                              "publish.uri": str(tmp_path / "pub")})
    run = Run(spec, "r")
    storage.write_jsonl(run.ingested, rows)
    result = entry("flatten")(run)
    assert result["crowd_dropped"] == 1
    files = storage.read_json(run.annotation_files)
    assert files["class_order"] == ["person", "bicycle", "dog"]
    entry("remap_labels")(run)
    # bicycle has no box here and is still numbered: the categories are the label space
    assert storage.read_json(run.classes)["classes"] == ["person", "bicycle", "dog"]


def test_a_source_where_nothing_matches_names_the_2017_paths(tmp_path):
    rows = _source(tmp_path, {"photos/a.jpg": b"x"})
    spec = _spec(tmp_path, **{"publish.uri": str(tmp_path / "pub")})
    run = Run(spec, "r")
    storage.write_jsonl(run.ingested, rows)
    with pytest.raises(SourceEmpty, match=r"instances_train2017\.json.*<prefix>/<split><year>/"
                       r"<file_name>.*<prefix>/images/<file_name>"):
        entry("flatten")(run)
    assert "each file's name gives its split" in layouts.for_spec(spec).expected(spec)
