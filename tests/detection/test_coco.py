"""COCO instances files → (file_name, Annotation) pairs, read as a stream."""

from __future__ import annotations

import json

import pytest

from recforge.detection import coco
from recforge.detection.annotation import AnnotationUnparsable

KEY = "annotations/instances_train.json"
CATEGORIES = [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}]


def write(tmp_path, doc, name="instances.json"):
    path = tmp_path / name
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


def ann(aid, image_id, cat=1, bbox=(10, 20, 30, 40), **extra):
    return {"id": aid, "image_id": image_id, "category_id": cat,
            "bbox": list(bbox) if bbox is not None else None, "iscrowd": 0, **extra}


def image(iid, name, width=640, height=480):
    return {"id": iid, "file_name": name, "width": width, "height": height}


def parsed(tmp_path, images, annotations, categories=CATEGORIES):
    doc = {"images": images, "annotations": annotations, "categories": categories}
    result = coco.parse(write(tmp_path, doc), KEY)
    return result, dict(result)


def by_part(entries):
    return {e.part: e for e in entries}


# --- the valid file ------------------------------------------------------------------


def test_a_valid_file_with_annotations_before_images(tmp_path):
    text = json.dumps({
        "info": {"year": 2017}, "licenses": [{"id": 1, "name": "cc"}],
        "annotations": [
            {"id": 7, "image_id": 20, "category_id": 3, "bbox": [1.5, 2.25, 10, 20],
             "iscrowd": 0, "segmentation": [[1, 2, 3, 4, 5, 6]], "area": 200.0},
            {"id": 5, "image_id": 20, "category_id": 1, "bbox": [0, 0, 4, 8], "iscrowd": 1,
             "segmentation": {"counts": [1, 2], "size": [480, 640]}},
            {"id": 9, "image_id": 10, "category_id": 1, "bbox": [100, 50, 0.5, 0.25]},
        ],
        "images": [image(20, "b/second.jpg", 640, 480), image(10, "first.jpg", 32, 16),
                   image(30, "empty.jpg")],
        "categories": CATEGORIES,
    })
    result = coco.parse(write(tmp_path, text), KEY)
    pairs = list(result)
    # the order of the images array, not of the ids
    assert [name for name, _ in pairs] == ["b/second.jpg", "first.jpg", "empty.jpg"]
    second, first, empty = (a for _, a in pairs)
    # objects by annotation id; crowd flagged difficult; [x, y, w, h] → [x0, y0, x1, y1]
    assert second.objects == [["person", 0.0, 0.0, 4.0, 8.0, 1, "annotation 5"],
                              ["car", 1.5, 2.25, 11.5, 22.25, 0, "annotation 7"]]
    assert first.objects == [["person", 100.0, 50.0, 100.5, 50.25, 0, "annotation 9"]]
    assert (second.size, first.size, empty.size) == ((640, 480), (32, 16), (640, 480))
    assert empty.objects == [] and empty.refused == []
    assert second.refused == first.refused == [] and result.refused == []
    assert len(result) == 3
    assert result.categories == {1: "person", 3: "car"}


def test_the_arrays_in_any_order_give_the_same_pairs(tmp_path):
    images = [image(1, "a.jpg"), image(2, "b.jpg")]
    annotations = [ann(11, 2, 3), ann(10, 1), ann(12, 1, 3, (5, 5, 1, 1))]
    orders = [("images", "annotations", "categories"), ("categories", "annotations", "images"),
              ("annotations", "categories", "images")]
    seen = []
    for i, order in enumerate(orders):
        parts = {"images": images, "annotations": annotations, "categories": CATEGORIES}
        doc = "{" + ", ".join(f'"{k}": {json.dumps(parts[k])}' for k in order) + "}"
        seen.append(list(coco.parse(write(tmp_path, doc, f"{i}.json"), KEY)))
    assert seen[0] == seen[1] == seen[2]
    assert [[o[-1] for o in a.objects] for _, a in seen[0]] == [
        ["annotation 10", "annotation 12"], ["annotation 11"]]


@pytest.mark.parametrize("width, height, size", [
    (640, 480, (640, 480)), (640.0, 480.0, (640, 480)), (0, 480, None), (640, -1, None),
    (640.5, 480, None), ("640", 480, None), (True, 480, None), (None, 480, None)])
def test_size_is_the_entrys_width_and_height_when_both_are_positive_whole(
        tmp_path, width, height, size):
    _, got = parsed(tmp_path, [image(1, "a.jpg", width, height)], [ann(1, 1)])
    assert got["a.jpg"].size == size
    assert got["a.jpg"].objects  # the size never refuses the boxes; pack checks them


def test_a_utf8_byte_order_mark_is_read_past(tmp_path):
    doc = json.dumps({"images": [image(1, "a.jpg")], "annotations": [ann(1, 1)],
                      "categories": CATEGORIES})
    result = coco.parse(write(tmp_path, b"\xef\xbb\xbf" + doc.encode()), KEY)
    assert [(n, len(a.objects)) for n, a in result] == [("a.jpg", 1)]


def test_the_file_is_never_loaded_as_one_tree(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("json.load(s) of the whole file")

    monkeypatch.setattr(json, "load", refuse)
    monkeypatch.setattr(json, "loads", refuse)
    path = tmp_path / "i.json"
    path.write_text('{"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": '
                    '[{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4]}], '
                    '"categories": [{"id": 1, "name": "person"}]}')
    assert dict(coco.parse(path, KEY))["a.jpg"].objects[0][:5] == ["person", 1, 2, 4, 6]


# --- refused annotations -------------------------------------------------------------


@pytest.mark.parametrize("bbox, why", [
    (None, "bbox"), ((1, 2, 3), "bbox"), ((1, 2, 3, 4, 5), "bbox"), ((1, "2", 3, 4), "bbox"),
    ((1, 2, True, 4), "bbox"), ((1, 2, [3], 4), "bbox")])
def test_an_annotation_without_4_numbers_in_its_bbox_is_a_bad_object(tmp_path, bbox, why):
    annotations = [ann(1, 1), ann(2, 1, bbox=bbox)]
    if bbox is None:
        del annotations[1]["bbox"]
    result, got = parsed(tmp_path, [image(1, "a.jpg")], annotations)
    a = got["a.jpg"]
    assert [o[-1] for o in a.objects] == ["annotation 1"]
    [entry] = a.refused
    assert (entry.reason, entry.part, entry.source_key, entry.box, entry.stage) == (
        "bad_object", "annotation 2", "images/a.jpg", None, "flatten")
    assert why in entry.detail and entry.detail.startswith("annotation 2: ")
    assert result.refused == []


def test_a_bbox_whose_corner_overflows_is_a_bad_object(tmp_path):
    result, got = parsed(tmp_path, [image(1, "a.jpg")],
                         [ann(1, 1, bbox=(1.7e308, 0, 1.7e308, 10)), ann(2, 1)])
    a = got["a.jpg"]
    assert [o[-1] for o in a.objects] == ["annotation 2"]
    [entry] = a.refused
    assert (entry.reason, entry.part, entry.source_key, entry.box) == (
        "bad_object", "annotation 1", "images/a.jpg", None)
    assert "not finite" in entry.detail and result.refused == []


def test_a_second_bbox_key_in_one_annotation_is_a_bad_object(tmp_path):
    path = write(tmp_path, '{"images": [{"id": 1, "file_name": "a.jpg"}], "categories": '
                           '[{"id": 1, "name": "p"}], "annotations": [{"id": 4, "image_id": 1,'
                           ' "category_id": 1, "bbox": [1, 2, 3, 4], "bbox": [5, 6, 7, 8]}]}')
    [(_, a)] = list(coco.parse(path, KEY))
    assert a.objects == [] and [(e.reason, e.part) for e in a.refused] == [
        ("bad_object", "annotation 4")]


def test_a_key_with_dots_does_not_pose_as_a_field(tmp_path):
    _, got = parsed(tmp_path, [image(1, "a.jpg")],
                    [ann(1, 1, bbox=(1, 2, 3, 4), **{"bbox.item": 99, "iscrowd.x": 1})])
    assert got["a.jpg"].objects == [["person", 1.0, 2.0, 4.0, 6.0, 0, "annotation 1"]]


@pytest.mark.parametrize("field, value, detail", [
    ("id", None, "no integer id"), ("id", "7", "no integer id"), ("id", 7.5, "no integer id"),
    ("image_id", "1", "no integer image_id"), ("iscrowd", 2, "iscrowd 2, not 0 or 1"),
    ("iscrowd", "yes", "iscrowd")])
def test_an_annotation_with_an_unusable_field_is_a_bad_object(tmp_path, field, value, detail):
    bad = ann(8, 1)
    bad[field] = value
    if value is None:
        del bad[field]
    result, got = parsed(tmp_path, [image(1, "a.jpg")], [bad, ann(9, 1)])
    refused = got["a.jpg"].refused + result.refused
    assert [o[-1] for o in got["a.jpg"].objects] == ["annotation 9"]
    [entry] = refused
    assert entry.reason == "bad_object" and detail in entry.detail
    if field == "image_id":  # its image is unknown: the file holds the refusal
        assert (entry.source_key, entry.part) == (KEY, "annotation 8")
    elif field == "id":  # no id to name it by: its position in the annotations array
        assert (entry.source_key, entry.part) == ("images/a.jpg", "annotation #0")
    else:
        assert (entry.source_key, entry.part) == ("images/a.jpg", "annotation 8")
        assert entry.box == (10.0, 20.0, 40.0, 60.0)


def test_crowd_given_as_a_boolean_or_null(tmp_path):
    _, got = parsed(tmp_path, [image(1, "a.jpg")],
                    [ann(1, 1, iscrowd=True), ann(2, 1, iscrowd=False), ann(3, 1, iscrowd=None)])
    assert [o[5] for o in got["a.jpg"].objects] == [1, 0, 0]


def test_an_unknown_category_is_refused_with_its_box(tmp_path):
    result, got = parsed(tmp_path, [image(1, "a.jpg")],
                         [ann(1, 1, cat=42, bbox=(1, 2, 3, 4)), ann(2, 1, cat="3")])
    a = got["a.jpg"]
    assert a.objects == []
    first, second = a.refused
    assert (first.reason, first.part, first.source_key, first.box) == (
        "unknown_category", "annotation 1", "images/a.jpg", (1.0, 2.0, 4.0, 6.0))
    assert "category_id 42 is not in categories" in first.detail
    assert (second.reason, second.part) == ("unknown_category", "annotation 2")
    assert "'3' is not an integer" in second.detail
    assert result.refused == []


def test_an_annotation_of_no_images_entry_is_refused_by_the_file(tmp_path):
    result, got = parsed(tmp_path, [image(1, "a.jpg")],
                         [ann(1, 1), ann(2, 99, bbox=(0, 0, 5, 5))])
    assert [o[-1] for o in got["a.jpg"].objects] == ["annotation 1"]
    assert got["a.jpg"].refused == []
    [entry] = result.refused
    assert (entry.reason, entry.part, entry.source_key, entry.box) == (
        "bad_object", "annotation 2", KEY, (0.0, 0.0, 5.0, 5.0))
    assert "image_id 99 has no entry in images" in entry.detail


def test_annotations_of_a_file_without_images_entries_are_refused_by_the_file(tmp_path):
    result, got = parsed(tmp_path, [], [ann(1, 1), ann(2, 2, cat=42)])
    assert got == {} and len(result) == 0
    assert [(e.part, e.reason, e.source_key) for e in result.refused] == [
        ("annotation 1", "bad_object", KEY), ("annotation 2", "bad_object", KEY)]
    assert all("has no entry in images" in e.detail for e in result.refused)


@pytest.mark.parametrize("categories, detail", [
    ([{"id": 1, "name": "person"}, {"id": 3, "name": ""}], "category 3 has no name"),
    ([{"id": 1, "name": "person"}, {"id": 3, "name": "  "}], "category 3 has no name"),
    ([{"id": 1, "name": "person"}, {"id": 3}], "category 3 has no name"),
    ([{"id": 1, "name": "person"}, {"id": 3, "name": 5}], "category 3 has no name"),
    ([{"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 3, "name": "bus"}],
     "category 3 is listed twice, as 'car' and 'bus'")])
def test_annotations_of_an_unusable_category_are_bad_objects(tmp_path, categories, detail):
    result, got = parsed(tmp_path, [image(1, "a.jpg")], [ann(1, 1), ann(2, 1, cat=3)],
                         categories)
    a = got["a.jpg"]
    assert [o[0] for o in a.objects] == ["person"]
    [entry] = a.refused
    assert (entry.reason, entry.part, entry.source_key) == (
        "bad_object", "annotation 2", "images/a.jpg")
    assert detail in entry.detail
    assert 3 not in result.categories


def test_a_category_listed_twice_with_one_name_is_usable(tmp_path):
    _, got = parsed(tmp_path, [image(1, "a.jpg")], [ann(1, 1, cat=3)],
                    CATEGORIES + [{"id": 3, "name": "car"}])
    assert [o[0] for o in got["a.jpg"].objects] == ["car"]


def test_refused_annotations_come_in_id_order_after_the_images_own(tmp_path):
    images = [image(1, "a.jpg"), image(2, "a.jpg")]
    annotations = [ann(30, 1, cat=42), ann(10, 1, bbox=None), ann(20, 1, cat=42),
                   ann(5, 2)]
    _, got = parsed(tmp_path, images, annotations)
    assert [e.part for e in got["a.jpg"].refused] == [
        "image 2", "annotation 5", "annotation 10", "annotation 20", "annotation 30"]


# --- refused images entries ----------------------------------------------------------


@pytest.mark.parametrize("entry, part, detail", [
    ({"id": 5}, "image 5", "no file_name"),
    ({"id": 5, "file_name": ""}, "image 5", "no file_name"),
    ({"id": 5, "file_name": 12}, "image 5", "no file_name"),
    ({"file_name": "c.jpg"}, "image #1", "no integer id"),
    ({"id": "5", "file_name": "c.jpg"}, "image #1", "no integer id"),
    ({"id": 5.0, "file_name": "c.jpg"}, "image #1", "no integer id")])
def test_an_images_entry_without_id_or_file_name_is_a_bad_object(tmp_path, entry, part,
                                                                   detail):
    result, got = parsed(tmp_path, [image(1, "a.jpg"), entry], [ann(1, 1), ann(2, 5)])
    assert list(got) == ["a.jpg"]
    by = by_part(result.refused)
    assert (by[part].reason, by[part].source_key) == ("bad_object", KEY)
    assert detail in by[part].detail
    # its annotations cannot reach an image either
    assert by["annotation 2"].reason == "bad_object"
    assert by["annotation 2"].source_key == KEY


@pytest.mark.parametrize("name", ["/etc/passwd", "../../x.jpg", "a/../../x.jpg",
                                  "a\\b.jpg", "a\x01.jpg", "a\nb.jpg", "C:/x.jpg", "a//b.jpg",
                                  "./a.jpg", "x" * 300 + ".jpg"])
def test_a_hostile_file_name_is_a_bad_object_of_the_file(tmp_path, name):
    result, got = parsed(tmp_path, [image(1, "ok.jpg"), image(2, name)], [ann(1, 2)])
    assert list(got) == ["ok.jpg"]
    by = by_part(result.refused)
    assert (by["image 2"].reason, by["image 2"].source_key) == ("bad_object", KEY)
    assert "not a safe relative path" in by["image 2"].detail
    assert by["annotation 1"].reason == "bad_object"
    assert "images entry is refused" in by["annotation 1"].detail


def test_a_second_entry_for_a_file_name_is_refused_and_its_annotations_too(tmp_path):
    images = [image(1, "a.jpg", 640, 480), image(2, "a.jpg", 100, 100), image(3, "b.jpg")]
    result, got = parsed(tmp_path, images, [ann(1, 1), ann(2, 2), ann(3, 3)])
    assert list(got) == ["a.jpg", "b.jpg"] and len(result) == 2
    a = got["a.jpg"]
    assert a.size == (640, 480)  # the first entry is kept
    assert [o[-1] for o in a.objects] == ["annotation 1"]
    dup, its_annotation = a.refused
    assert (dup.reason, dup.part, dup.source_key) == (
        "duplicate_image_entry", "image 2", "images/a.jpg")
    assert "file_name 'a.jpg' of image 1" in dup.detail
    assert (its_annotation.reason, its_annotation.part, its_annotation.source_key) == (
        "duplicate_image_entry", "annotation 2", "images/a.jpg")
    assert result.refused == []


def test_a_second_entry_with_an_id_is_refused_and_the_first_kept(tmp_path):
    images = [image(1, "a.jpg"), image(1, "a.jpg"), image(1, "c.jpg"), image(2, "b.jpg")]
    result, got = parsed(tmp_path, images, [ann(1, 1)])
    assert list(got) == ["a.jpg", "b.jpg"]
    assert [o[-1] for o in got["a.jpg"].objects] == ["annotation 1"]
    [same] = got["a.jpg"].refused
    assert (same.reason, same.part, same.source_key) == (
        "duplicate_image_entry", "image 1", "images/a.jpg")
    assert "a second images entry with id 1" in same.detail
    # c.jpg is given out by no entry: the file holds the refusal
    [other] = result.refused
    assert (other.reason, other.part, other.source_key) == (
        "duplicate_image_entry", "image 1", "images/c.jpg")


def test_entries_that_are_not_objects_are_bad_objects(tmp_path):
    result, got = parsed(tmp_path, [image(1, "a.jpg"), 7, ["x"]], [ann(1, 1), "oops"])
    assert [o[-1] for o in got["a.jpg"].objects] == ["annotation 1"]
    assert {(e.part, e.reason, e.source_key) for e in result.refused} == {
        ("image #1", "bad_object", KEY), ("image #2", "bad_object", KEY),
        ("annotation #1", "bad_object", KEY)}


def test_a_stage_names_the_refusals(tmp_path):
    doc = {"images": [image(1, "a.jpg")], "annotations": [ann(1, 1, cat=9)],
           "categories": CATEGORIES}
    [(_, a)] = list(coco.parse(write(tmp_path, doc), KEY, stage="check"))
    assert [e.stage for e in a.refused] == ["check"]


# --- unparsable files ----------------------------------------------------------------


def unparsable(path) -> str:
    got = []
    with pytest.raises(AnnotationUnparsable) as exc:
        got.extend(coco.parse(path, KEY))
    assert got == []
    return str(exc.value)


def test_a_truncated_file_raises_before_anything_is_given_out(tmp_path):
    doc = json.dumps({"images": [image(i, f"{i}.jpg") for i in range(1, 50)],
                      "annotations": [ann(i, i) for i in range(1, 50)],
                      "categories": CATEGORIES})
    full = write(tmp_path, doc, "full.json")
    assert len(list(coco.parse(full, KEY))) == 49
    cut = write(tmp_path, doc[: len(doc) - 40], "cut.json")
    message = unparsable(cut)
    assert "truncated" in message and f"{len(doc) - 40:,}" in message


def test_invalid_json_names_the_bytes_where(tmp_path):
    text = '{"images": [{"id": 1, "file_name": "a.jpg",}], "annotations": [], "categories": []}'
    message = unparsable(write(tmp_path, text))
    assert "not valid JSON in bytes 0-" in message and f"of {len(text):,}" in message
    assert "invalid object key" in message


@pytest.mark.parametrize("text, words", [
    ("[1, 2, 3]", "the top level is an array, not an object"),
    ('"images"', "the top level is a string"),
    ("", "no JSON value"),
    ("   \n", "no JSON value"),
    ('{"annotations": [], "categories": []}', "no top-level 'images' array"),
    ('{"images": [], "categories": []}', "no top-level 'annotations' array"),
    ('{"images": [], "annotations": []}', "no top-level 'categories' array"),
    ('{"images": {"id": 1}, "annotations": [], "categories": []}',
     "'images' is an object, not an array"),
    ('{"images": [], "annotations": null, "categories": []}',
     "'annotations' is null, not an array"),
    ('{"images": [], "images": [], "annotations": [], "categories": []}', "appears twice"),
    ('{"images": [], "annotations": [], "categories": []} {}', "trailing garbage"),
    ('{"images": [], "annotations": [{"id": 1e999}], "categories": []}', "overflow"),
])
def test_a_document_that_is_not_coco_instances_is_unparsable(tmp_path, text, words):
    assert words in unparsable(write(tmp_path, text))


def test_invalid_utf8_is_unparsable(tmp_path):
    path = write(tmp_path, b'{"images": [{"id": 1, "file_name": "\xff.jpg"}], '
                           b'"annotations": [], "categories": []}')
    assert "UTF8" in unparsable(path)


def test_empty_arrays_are_an_instances_file_with_nothing_in_it(tmp_path):
    result = coco.parse(write(tmp_path, '{"images": [], "annotations": [], "categories": []}'),
                        KEY)
    assert (list(result), result.refused, len(result)) == ([], [], 0)
