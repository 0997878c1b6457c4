"""Pascal VOC 2007 + 2012 as the devkit ships them, built from docs/datasets.md's spec (07+12)
on the local S3 server: every image in the split of its ImageSets/Main list, boxes exact,
the action-only image, the other lists and the segmentation PNGs set aside; and the
layout's rules one by one on listings (the engine, no build)."""

from __future__ import annotations

import pytest

from recforge import layouts, run_state, storage
from recforge.errors import SourceEmpty, SpecError
from recforge.format import detection_label, names
from recforge.run import Run
from recforge.stages import entry
from tests.common import mini_voc
from tests.common.datasets_doc import spec_from_doc
from tests.common.detection import build

PX = 1e-3  # the label's 6 decimals, in pixels of a 64-pixel side
GLUONCV_0712 = {"train": ["trainval"], "val": ["test"]}


def _out(run, name: str) -> str:
    return storage.join(run_state.out(run), name)


def _not_used(image_sets: dict) -> dict[str, str]:
    """key → reason of what a build with ``image_sets`` sets aside."""
    chosen = {f"VOC{y}/ImageSets/Main/{n}.txt" for ns in image_sets.values() for n in ns
              for y in mini_voc.MAIN if n in mini_voc.MAIN[y]}
    kept = {k.replace("JPEGImages", "Annotations").replace(".jpg", ".xml")
            for k in mini_voc.truth(image_sets)} | set(mini_voc.truth(image_sets))
    out = {}
    for key in mini_voc.objects():
        if "/ImageSets/" in key and key not in chosen:
            out[key] = "image_set_list"
        elif "/Segmentation" in key and key.endswith(".png"):
            out[key] = "segmentation_mask"
        elif ("/JPEGImages/" in key or "/Annotations/" in key) and key not in kept:
            out[key] = "not_in_image_set"
    return out


def test_vocdevkit_07_12_keeps_the_image_sets_splits(bucket):
    made = mini_voc.upload(f"s3://{bucket}/VOCdevkit")
    spec = spec_from_doc("Pascal VOC", bucket)
    assert spec.source.voc.years == (2007, 2012)
    assert dict(spec.source.voc.image_sets) == {s: tuple(n) for s, n in GLUONCV_0712.items()}
    run = build(spec, "r1")
    classes = storage.read_json(_out(run, names.CLASSES))["classes"]
    assert classes == sorted(mini_voc.COLOURS)  # VOC orders no classes: by name
    rows = {r["source_key"]: r for r in storage.iter_jsonl(_out(run, names.RECORDS))}
    truth = mini_voc.truth(GLUONCV_0712)
    assert {k: r["split"] for k, r in rows.items()} == {k: t[0] for k, t in truth.items()}
    assert {k for k, t in truth.items() if t[0] == "val"} == {
        "VOC2007/JPEGImages/000001.jpg", "VOC2007/JPEGImages/000004.jpg"}  # 2007 test
    for key, (_, w, h, boxes) in truth.items():
        (width, height), objects = detection_label.decode(rows[key]["label"])
        assert (width, height) == (w, h), key
        assert rows[key]["annotation_key"] == key.replace("JPEGImages", "Annotations") \
            .replace(".jpg", ".xml")
        assert len(objects) == len(boxes), key
        for o, (name, x0, y0, x1, y1, difficult) in zip(objects, boxes, strict=True):
            assert classes[int(o[0])] == name and o[5] == difficult, key
            corners = zip((o[1] * w, o[2] * h, o[3] * w, o[4] * h), (x0, y0, x1, y1),
                          strict=True)
            assert max(abs(a - b) for a, b in corners) < PX, key
    assert storage.get_bytes(_out(run, names.QUARANTINE)) == b""  # nothing here is bad data
    not_used = {r["key"]: r["reason"] for r in storage.iter_jsonl(_out(run, names.NOT_USED))}
    assert not_used == _not_used(GLUONCV_0712)
    assert not_used["VOC2012/JPEGImages/2011_003276.jpg"] == "not_in_image_set"  # action only
    assert not_used["VOC2012/Annotations/2011_003276.xml"] == "not_in_image_set"
    summary = storage.read_json(_out(run, names.SUMMARY))
    assert summary["listed"] == len(made) == \
        summary["packed"] + summary["quarantined"] + summary["not_used"]
    used = ["VOC2007/ImageSets/Main/test.txt", "VOC2007/ImageSets/Main/trainval.txt",
            "VOC2012/ImageSets/Main/trainval.txt"]
    assert summary["used"] == used
    assert summary["packed"] == 2 * len(truth) + len(used)  # image + XML a record
    assert summary["quarantined"] == 0 and summary["splits"] == {"train": 4, "val": 2}


# ---------------------------------------------------------------- the engine


def _flatten(rows: list[dict], spec):
    """The layout's flatten on a listing."""
    return layouts.for_spec(spec).flatten(rows, spec)


def _source(tmp_path, objects: dict[str, bytes]) -> list[dict]:
    for key, data in objects.items():
        path = tmp_path / "src" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return [{"key": k, "etag": f"e-{k}", "size": 1} for k in objects]


def _spec(tmp_path, **overrides):
    return spec_from_doc("Pascal VOC", "unit-bucket", **{
        "source.uri": str(tmp_path / "src"), "publish.uri": str(tmp_path / "pub"),
        **overrides})


def _year(year: int) -> dict[str, bytes]:
    """One year folder of the miniature, keys relative to it."""
    root = f"VOC{year}/"
    return {k[len(root):]: v for k, v in mini_voc.objects().items() if k.startswith(root)}


def test_one_year_folder_with_the_default_sets(tmp_path):
    rows = _source(tmp_path, _year(2007))
    out = _flatten(rows, _spec(tmp_path, **{"source.voc": None}))
    assert [(i["source_key"], i["split"]) for i in out.items] == [
        ("JPEGImages/000012.jpg", "train"), ("JPEGImages/000017.jpg", "val")]
    assert sorted(out.used) == ["ImageSets/Main/train.txt", "ImageSets/Main/val.txt"]
    reasons = {n.key: n.reason for n in out.not_used}
    assert reasons["JPEGImages/000001.jpg"] == reasons["Annotations/000001.xml"] == \
        "not_in_image_set"  # test is no default set
    assert reasons["ImageSets/Main/test.txt"] == "image_set_list"
    assert reasons["SegmentationObject/000012.png"] == "segmentation_mask"
    assert not out.refused


def test_hash_splits_build_every_annotated_image_and_set_the_lists_aside(tmp_path):
    rows = _source(tmp_path, mini_voc.objects())
    out = _flatten(rows, _spec(tmp_path, **{"splits.from": "hash"}))
    assert sorted(i["source_key"] for i in out.items) == sorted(
        f"VOC{y}/JPEGImages/{i}.jpg" for y, ims in mini_voc.IMAGES.items() for i in ims)
    assert all("split" not in i for i in out.items) and not out.used and not out.refused
    assert {n.reason for n in out.not_used} == {"image_set_list", "segmentation_mask"}
    assert len(out.not_used) == sum(1 for k in mini_voc.objects()
                                    if "/ImageSets/" in k or k.endswith(".png"))


def test_a_set_in_no_chosen_year_is_refused_naming_its_paths(tmp_path):
    rows = _source(tmp_path, mini_voc.objects())
    spec = _spec(tmp_path, **{"source.voc.image_sets": {"train": ["trainval"],
                                                        "val": ["minival"]}})
    with pytest.raises(SpecError, match=r"VOC2007/ImageSets/Main/minival\.txt, "
                       r"VOC2012/ImageSets/Main/minival\.txt"):
        _flatten(rows, spec)


def test_a_set_missing_in_one_year_contributes_nothing_there(tmp_path):
    rows = _source(tmp_path, mini_voc.objects())
    out = _flatten(rows, _spec(tmp_path, **{"source.voc.image_sets": {
        "train": ["train"], "val": ["val", "test"]}}))  # test.txt: 2007 only
    assert [(i["source_key"], i["split"]) for i in out.items] == [
        ("VOC2007/JPEGImages/000001.jpg", "val"), ("VOC2007/JPEGImages/000004.jpg", "val"),
        ("VOC2007/JPEGImages/000012.jpg", "train"), ("VOC2007/JPEGImages/000017.jpg", "val"),
        ("VOC2012/JPEGImages/2008_000002.jpg", "train"),
        ("VOC2012/JPEGImages/2008_000003.jpg", "val")]
    assert not out.refused


def test_a_year_folder_not_chosen_is_set_aside(tmp_path):
    rows = _source(tmp_path, mini_voc.objects())
    out = _flatten(rows, _spec(tmp_path, **{"source.voc": {"years": [2012]}}))
    assert [(i["source_key"], i["split"]) for i in out.items] == [
        ("VOC2012/JPEGImages/2008_000002.jpg", "train"),
        ("VOC2012/JPEGImages/2008_000003.jpg", "val")]
    assert {n.reason for n in out.not_used if n.key.startswith("VOC2007/")} == \
        {"year_not_chosen"}
    assert not out.refused


def test_sets_that_overlap_across_splits_are_refused(tmp_path):
    rows = _source(tmp_path, _year(2012))
    spec = _spec(tmp_path, **{"source.voc": {"image_sets": {"train": ["train"],
                                                            "val": ["trainval"]}}})
    with pytest.raises(SpecError, match=r"2008_000002 in train .* and in val"):
        _flatten(rows, spec)


def test_an_id_listed_without_image_or_xml_is_a_part_of_its_set_file(tmp_path):
    objects = _year(2012)
    objects["ImageSets/Main/train.txt"] += b"2008_009999\n"
    del objects["Annotations/2008_000003.xml"]  # val image without its XML
    rows = _source(tmp_path, objects)
    out = _flatten(rows, _spec(tmp_path, **{"source.voc": None}))
    got = {(e.source_key, e.reason, e.part): e.detail for e in out.refused}
    assert set(got) == {("JPEGImages/2008_000003.jpg", "annotation_missing", None),
                        ("ImageSets/Main/train.txt", "image_set_missing", "image 2008_009999")}
    assert "no JPEGImages/2008_009999.<ext> and no Annotations/2008_009999.xml" in \
        got[("ImageSets/Main/train.txt", "image_set_missing", "image 2008_009999")]
    assert [i["source_key"] for i in out.items] == ["JPEGImages/2008_000002.jpg"]


def test_keys_outside_the_year_folders_are_outside_the_layout(tmp_path):
    objects = {f"VOC2007/{k}": v for k, v in _year(2007).items()}
    objects["devkit_doc.txt"] = b"x"
    rows = _source(tmp_path, objects)
    out = _flatten(rows, _spec(tmp_path, **{"source.voc.years": [2007],
                                                         "source.voc.image_sets": {
                                                             "train": ["trainval"]}}))
    assert [(e.source_key, e.reason) for e in out.refused] == [
        ("devkit_doc.txt", "not_in_detection_layout")]
    assert len(out.items) == 2 and all(i["split"] == "train" for i in out.items)


def test_ingest_accepts_the_image_set_lists():
    spec = spec_from_doc("Pascal VOC", "unit-bucket")
    assert ".txt" in layouts.for_spec(spec).extensions(spec)


def test_a_source_where_nothing_matches_names_the_year_folders_and_sets(tmp_path):
    rows = _source(tmp_path, {"VOC2007/photos/a.jpg": b"x"})
    spec = _spec(tmp_path, **{"splits.from": "hash"})
    run = Run(spec, "r")
    storage.write_jsonl(run.ingested, rows)
    with pytest.raises(SourceEmpty, match=r"<prefix>/VOC2007/ and <prefix>/VOC2012/ holding "
                       r"JPEGImages/<id>\.<ext> with Annotations/<id>\.xml"):
        entry("flatten")(run)
    source = _spec(tmp_path)
    assert "ImageSets/Main/{test,trainval}.txt" in layouts.for_spec(source).expected(source)
    one = _spec(tmp_path, **{"source.voc": None})  # VOCdevkit/ given as one year folder
    assert layouts.for_spec(one).expected(one) == (
        "<prefix>/ holding JPEGImages/<id>.<ext> with Annotations/<id>.xml, the images listed "
        "in ImageSets/Main/{train,val}.txt (a VOCdevkit of VOC<year>/ folders needs "
        "source.voc.years)")


@pytest.mark.parametrize("voc, words", [
    ({"years": []}, "distinct 4-digit years"), ({"years": [2007, 2007]}, "distinct"),
    ({"years": [7]}, "distinct 4-digit years"),
    ({"image_sets": {"train": []}}, "at least one ImageSets/Main set"),
    ({"image_sets": {"train": ["../Main/train"]}}, "not set names")])
def test_unusable_voc_settings_are_refused_by_the_spec(voc, words):
    with pytest.raises(SpecError, match=r"source\.voc\.(years|image_sets)"):
        spec_from_doc("Pascal VOC", "unit-bucket", **{"source.voc": voc})
    with pytest.raises(SpecError, match=words):
        spec_from_doc("Pascal VOC", "unit-bucket", **{"source.voc": voc})
