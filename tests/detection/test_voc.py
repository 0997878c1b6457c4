"""Pascal VOC annotations: parsing, hostile files, the pairing of images with their XML."""

from __future__ import annotations

import pytest

from recforge.detection import voc
from recforge.detection.annotation import AnnotationUnparsable
from recforge.detection.sources import flatten_voc
from tests.common.detection import spec, voc_xml


def test_parse_objects_and_size():
    a = voc.parse(voc_xml(100, 80, [("dog", 0, 0, 10, 20), ("cat", 5, 5, 50, 60)]), "i.jpg")
    assert a.size == (100, 80)
    assert a.objects == [["dog", 0, 0, 10, 20, 0, "object 0"],
                         ["cat", 5, 5, 50, 60, 0, "object 1"]]
    assert not a.refused


def test_zero_based_origin():
    xml = voc_xml(100, 80, [("dog", 0, 0, 10, 20)], origin=0)
    assert voc.parse(xml, "i.jpg", origin=0).objects[0][1:5] == [0, 0, 10, 20]


@pytest.mark.parametrize("data, words", [
    (b"<annotation><object>", "not well-formed"),
    (b"<notvoc/>", "root element"),
    (b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "y">]><annotation/>', "DTD"),
    (b"<annotation><size><width>ten</width><height>5</height></size></annotation>",
     "whole numbers"),
    (b"<annotation>" + b" " * (voc.MAX_XML_BYTES + 1) + b"</annotation>", "bytes"),
])
def test_unusable_files_raise(data, words):
    with pytest.raises(AnnotationUnparsable, match=words):
        voc.parse(data, "i.jpg")


def test_bad_objects_are_parts():
    extra = ("<object><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax>"
             "</bndbox></object><object><name>cat</name></object><object><name>cat</name>"
             "<bndbox><xmin>1</xmin><ymin>x</ymin><xmax>5</xmax><ymax>5</ymax></bndbox>"
             "</object>")
    a = voc.parse(voc_xml(50, 50, [("dog", 1, 1, 9, 9)], extra=extra), "JPEGImages/i.jpg")
    assert len(a.objects) == 1
    assert [(e.source_key, e.reason, e.part) for e in a.refused] == [
        ("JPEGImages/i.jpg", "bad_object", "object 1"),
        ("JPEGImages/i.jpg", "bad_object", "object 2"),
        ("JPEGImages/i.jpg", "bad_object", "object 3")]


def test_pairing(tmp_path):
    src = tmp_path / "src"
    files = {"JPEGImages/a.jpg": b"x", "Annotations/a.xml": voc_xml(10, 10, [("dog", 1, 1, 5, 5)]),
             "JPEGImages/sub/b.png": b"x", "Annotations/sub/b.xml": voc_xml(10, 10, []),
             "JPEGImages/c.jpg": b"x", "JPEGImages/c.png": b"x", "Annotations/c.xml": b"<a/>",
             "JPEGImages/lonely.jpg": b"x", "Annotations/orphan.xml": b"<a/>",
             "elsewhere/x.jpg": b"x"}
    for k, v in files.items():
        (src / k).parent.mkdir(parents=True, exist_ok=True)
        (src / k).write_bytes(v)
    rows = [{"key": k, "etag": "e", "size": 1} for k in files]
    s = spec(str(src), str(tmp_path / "pub"), **{"detection.classes": ["cat"]})
    items, refused = flatten_voc(rows, s)
    assert [i["source_key"] for i in items] == ["JPEGImages/a.jpg", "JPEGImages/sub/b.png"]
    assert items[0]["annotation_key"] == "Annotations/a.xml" and items[0]["objects"] == []
    reasons = {(e.source_key, e.reason) for e in refused}
    assert reasons >= {("JPEGImages/c.jpg", "duplicate_stem"),
                       ("JPEGImages/c.png", "duplicate_stem"),
                       ("Annotations/c.xml", "duplicate_stem"),
                       ("JPEGImages/lonely.jpg", "annotation_missing"),
                       ("Annotations/orphan.xml", "orphan_annotation"),
                       ("elsewhere/x.jpg", "not_in_detection_layout"),
                       ("JPEGImages/a.jpg", "unknown_class")}
    assert [e.part for e in refused if e.reason == "unknown_class"] == ["object 0"]
