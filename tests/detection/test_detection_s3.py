"""The detection sample (VOC and COCO) through the real stages and the local S3 server: every
box within a pixel of its annotation, every bad annotation quarantined with its reason,
the counts reconciled, a changed annotation re-packing its record."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from recforge import run_state, storage
from recforge.dev import detection_sample
from recforge.format import detection_label, names
from tests.common.detection import build, spec

pytestmark = pytest.mark.both_stores  # each test against moto and Ceph RGW
COUNT = 10


def _entries(run) -> list[dict]:
    return [json.loads(x) for x in
            storage.get_bytes(storage.join(run_state.out(run), names.QUARANTINE)).splitlines()]


def _truth(layout: str) -> dict[str, detection_sample.Scene]:
    made = detection_sample.scenes(COUNT + 4)
    folder = "JPEGImages" if layout == "voc" else "images"
    return {f"{folder}/{s.stem}.jpg": s for s in made[:COUNT] + [made[-1]]}


@pytest.fixture(scope="module", params=detection_sample.LAYOUTS)
def built(request, s3_endpoint):
    """One build per layout for the module (its tests only read it), in a bucket of its own."""
    layout = request.param
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    storage.s3_client().create_bucket(Bucket=bucket)
    src, pub = f"s3://{bucket}/raw", f"s3://{bucket}/datasets"
    detection_sample.upload(src, layout, count=COUNT)
    run = build(spec(src, pub, layout, **{"pack.resize": 200, "splits.val_ratio": 0.3}))
    return layout, run


def test_every_box_within_a_pixel_of_its_annotation(built):
    layout, run = built
    truth = _truth(layout)
    classes = storage.read_json(storage.join(run_state.out(run), names.CLASSES))["classes"]
    rows = {r["source_key"]: r
            for r in storage.iter_jsonl(storage.join(run_state.out(run), names.RECORDS))}
    assert set(truth) <= set(rows)
    for key, scene in truth.items():
        (w, h), objects = detection_label.decode(rows[key]["label"])
        assert (w, h) == (rows[key]["width"], rows[key]["height"])
        got = sorted((classes[int(o[0])], *o[1:5]) for o in objects)
        sw, sh = scene.width, scene.height
        if scene.stem == detection_sample.EXIF_SCENE:  # orientation 6: displayed sh x sw
            want = sorted((n, (sh - y1) / sh, x0 / sw, (sh - y0) / sh, x1 / sw)
                          for n, x0, y0, x1, y1 in scene.boxes)
            sw, sh = sh, sw
        else:
            want = sorted((n, x0 / sw, y0 / sh, x1 / sw, y1 / sh)
                          for n, x0, y0, x1, y1 in scene.boxes)
        assert [g[0] for g in got] == [x[0] for x in want], key
        px = np.array([g[1:] for g in got]) - np.array([x[1:] for x in want])
        assert (np.abs(px) * [sw, sh, sw, sh]).max() <= 1.0, key


def test_every_bad_annotation_quarantined_with_its_reason(built):
    layout, run = built
    entries = _entries(run)
    whole = {e["source_key"]: e["reason"] for e in entries if "part" not in e}
    for key, reason in detection_sample.BAD_OBJECTS[layout].items():
        assert whole.get(key) == reason, key
    parts = {(e["source_key"], e["reason"]) for e in entries if "part" in e}
    folder = "JPEGImages" if layout == "voc" else "images"
    for stem, reason in detection_sample.BAD_PARTS:
        assert (f"{folder}/{stem}.jpg", reason) in parts
    assert all(e["fix"] for e in entries)
    assert all(len(e["box"]) == 4 for e in entries if e.get("reason") in
               ("box_outside_image", "degenerate_box"))
    if layout == "coco":
        assert ("annotations/instances_sample.json", "image_missing") in parts
        assert any(r == "unknown_category" for _, r in parts)
    summary = storage.read_json(storage.join(run_state.out(run), names.SUMMARY))
    assert summary["listed"] == summary["packed"] + summary["quarantined"]
    assert summary["objects_quarantined"] == sum(1 for e in entries if "part" in e)


def test_a_changed_annotation_repacks_its_record(bucket):
    src, pub = f"s3://{bucket}/raw", f"s3://{bucket}/datasets"
    detection_sample.upload(src, "voc", count=4)
    s = spec(src, pub, **{"pack.resize": 160})
    first = build(s, "one")
    key = "Annotations/scene_0003.xml"
    xml = storage.get_bytes(storage.join(src, key)).decode()
    storage.put_bytes(storage.join(src, key), xml.replace("<difficult>0</difficult>",
                                                          "<difficult>1</difficult>", 1).encode())
    second = build(s, "two")
    content = [storage.read_json(r.content)["content_id"] for r in (first, second)]
    assert content[0] != content[1]
    label = {r["source_key"]: r["label"] for r in
             storage.iter_jsonl(storage.join(run_state.out(second), names.RECORDS))}
    _, objects = detection_label.decode(label["JPEGImages/scene_0003.jpg"])
    assert objects[0][5] == 1.0
