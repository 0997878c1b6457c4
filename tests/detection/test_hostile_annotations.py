"""Hostile annotation files cost bounded work and make bounded output: a deeply nested COCO
file is refused by its depth (naming the byte) before the parser's bookkeeping can grow
with the square of it, sizes beyond any image's are a refused entry, a DTD or entity in
any encoding is refused, and neither a 10 MB class name nor 500,000 broken objects make a
report of their size."""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recforge import quarantine
from recforge.detection import coco, voc
from recforge.detection.annotation import AnnotationUnparsable
from recforge.detection.sources import flatten_voc
from tests.common.detection import spec, voc_xml

KEY = "annotations/instances_train2017.json"
CATEGORIES = [{"id": 1, "name": "person"}]


def _doc(images, annotations=(), categories=CATEGORIES, **extra) -> bytes:
    return json.dumps({**extra, "images": list(images), "annotations": list(annotations),
                       "categories": categories}).encode()


def test_a_2mb_deeply_nested_coco_file_is_refused_by_its_depth_cheaply(tmp_path):
    depth = 1_000_000
    path = tmp_path / "nested.json"
    path.write_bytes(b'{"info": ' + b"[" * depth + b"]" * depth + b', "images": []}')
    tracemalloc.start()
    try:
        with pytest.raises(AnnotationUnparsable, match=r"nested deeper than 64 .* at byte 72"):
            coco.parse(path, KEY)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 ** 2


json_values = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}"\\ab,:', max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(alphabet='[]{}"\\x', max_size=4), inner, max_size=3),
    max_leaves=20)


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(1, 7))
def test_the_depth_guard_follows_strings_and_escapes_across_reads(value, read_size):
    data = json.dumps(value).encode()
    depth = _depth(value)
    guard = coco.NestingGuard(io.BytesIO(data), limit=max(depth, 1))
    while guard.read(read_size):
        pass
    assert (guard.depth, guard.in_string, guard.backslashes) == (0, False, 0)
    if depth > 1:
        tight = coco.NestingGuard(io.BytesIO(data), limit=depth - 1)
        with pytest.raises(AnnotationUnparsable, match="nested deeper"):
            while tight.read(read_size):
                pass


@pytest.mark.parametrize("width", [1e19, 1e308, -1e19, 3e9, 2**62])
def test_a_size_beyond_any_image_refuses_its_entry_naming_it(tmp_path, width):
    path = tmp_path / "sizes.json"
    path.write_bytes(_doc([{"id": 1, "file_name": "a.jpg", "width": width, "height": 10},
                           {"id": 2, "file_name": "b.jpg", "width": 20, "height": 10}],
                          [{"id": 5, "image_id": 2, "category_id": 1, "bbox": [1, 1, 5, 5],
                            "iscrowd": 0}]))
    parsed = coco.parse(path, KEY)
    kept = dict(parsed)
    assert list(kept) == ["b.jpg"] and kept["b.jpg"].size == (20, 10)
    refused = {e.part: e for e in parsed.refused}
    assert refused["image 1"].reason == "bad_object"
    assert "beyond 2,147,483,647 pixels" in refused["image 1"].detail


def test_a_size_beyond_any_image_beside_one_of_a_wrong_type_names_both_readably(tmp_path):
    path = tmp_path / "sizes.json"
    path.write_bytes(_doc([{"id": 1, "file_name": "a.jpg", "width": 3e9, "height": "10"}], []))
    detail = {e.part: e for e in coco.parse(path, KEY).refused}["image 1"].detail
    assert "width 3000000000.0 / height of a wrong type: beyond" in detail, detail


def test_an_integer_beyond_64_bits_refuses_the_file_naming_where(tmp_path):
    path = tmp_path / "overflow.json"
    path.write_bytes(_doc([{"id": 1, "file_name": "a.jpg", "width": 2**64, "height": 10}]))
    with pytest.raises(AnnotationUnparsable, match=r"bytes 0-\d+ of \d+: .*overflow near"):
        coco.parse(path, KEY)


def test_a_huge_category_name_refuses_its_objects_and_stays_small(tmp_path):
    path = tmp_path / "names.json"
    path.write_bytes(_doc([{"id": 1, "file_name": "a.jpg", "width": 20, "height": 10}],
                          [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5],
                            "iscrowd": 0}], categories=[{"id": 1, "name": "x" * 10_000_000}]))
    parsed = coco.parse(path, KEY)
    annotation = dict(parsed)["a.jpg"]
    assert annotation.objects == []
    [entry] = annotation.refused
    assert entry.reason == "bad_object" and "10,000,000 characters (at most 256)" in entry.detail
    assert len(entry.to_json()) < 2000
    assert all(len(n) <= 256 for n in parsed.categories.values())


@pytest.mark.parametrize("data", [
    '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE a [<!ENTITY x "dog">]>'
    '<annotation><object><name>&x;</name></object></annotation>'.encode("utf-16"),
    b'<!DOCTYPE annotation [<!ENTITY dog "cat">]><annotation><object><name>&dog;</name>'
    b"<bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object>"
    b"</annotation>",
], ids=["utf-16", "internal-entity"])
def test_a_dtd_or_entity_in_any_encoding_or_place_is_refused(data):
    with pytest.raises(AnnotationUnparsable, match="DTD or entities|not well-formed"):
        voc.parse(data, "i.jpg")


def test_a_dtd_late_in_the_document_is_refused_as_a_dtd():
    data = b"<!-- " + b"x" * 8192 + b' --><!DOCTYPE a [<!ENTITY d "dog">]><annotation/>'
    with pytest.raises(AnnotationUnparsable, match=r"declares a DTD or entities \(byte 8,"):
        voc.parse(data, "i.jpg")


def test_500000_broken_objects_make_a_report_of_a_thousand_and_one_lines():
    data = b"<annotation>" + b"<object/>" * 500_000 + b"</annotation>"
    annotation = voc.parse(data, "JPEGImages/a.jpg")
    assert len(annotation.refused) == quarantine.MAX_REFUSED_PARTS + 1
    last = annotation.refused[-1]
    assert last.reason == "too_many_refused"
    assert "499,000 more refused objects not listed one by one (499,000 bad_object)" \
        in last.detail
    assert quarantine.FIXES["too_many_refused"]
    # the build's cap over every layout leaves a parser's own cap as it is
    again = quarantine.capped(annotation.refused)
    assert sorted(again, key=lambda e: e.part) == sorted(annotation.refused, key=lambda e: e.part)


def test_a_long_class_name_refuses_its_object():
    xml = voc_xml(100, 80, [("dog", 0, 0, 10, 20)]).replace(b"dog", b"d" * 300)
    annotation = voc.parse(xml, "JPEGImages/a.jpg")
    assert annotation.objects == []
    assert "300 characters (at most 256)" in annotation.refused[0].detail


def test_an_oversize_xml_is_refused_by_its_listed_size_unfetched(tmp_path):
    rows = [{"key": "JPEGImages/a.jpg", "size": 900, "etag": "e"},
            {"key": "Annotations/a.xml", "size": 200 * 1024 ** 2, "etag": "x"}]
    # nothing is at the source: a fetch would make the reason "missing"
    items, refused = flatten_voc(rows, spec(str(tmp_path / "src"), str(tmp_path / "pub")))
    assert items == []
    assert {(e.source_key, e.reason) for e in refused} == {
        ("JPEGImages/a.jpg", "annotation_unparsable"),
        ("Annotations/a.xml", "annotation_unparsable")}
    assert all("209,715,200 bytes" in e.detail for e in refused)


def test_refused_parts_are_capped_for_every_layout():
    entries = [quarantine.QuarantineEntry("a.jpg", "flatten", "bad_object", f"o{i}",
                                          part=f"object {i}") for i in range(1500)]
    entries.append(quarantine.QuarantineEntry("b.jpg", "ingest", "zero_bytes"))
    capped = quarantine.capped(entries, 10)
    assert len(capped) == 12 and capped[0].reason == "zero_bytes"
    assert capped[-1].detail.startswith("1,490 more refused objects")
