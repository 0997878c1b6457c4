"""One night over a source holding every hostile input at once — line-breaking characters in
keys and class names, a 2 MB deeply nested COCO file, sizes of 1e19 and 1e308, a 10 MB class
name, 500,000 broken objects in one XML, a UTF-16 DTD, an XML over the size cap — finishes
and publishes the good objects, quarantines each bad one with its reason, reconciles, stays
under 500 MiB, and publishes files proportional to the good data."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest
import yaml

from recforge import releases, storage
from recforge.detection import voc
from recforge.dev import detection_sample
from recforge.format import names
from recforge.spec import parse_spec
from tests.common.sources import SMALL_BENCH

MAX_RSS_MIB = 500
BENCH = {"options": {**SMALL_BENCH["options"], "data_shape": [3, 64, 64]}}


def _scene_xml(name: str = "cat") -> bytes:
    s = detection_sample.scenes(1)[0]
    return detection_sample.voc_xml(s).replace(s.boxes[0][0].encode(), name.encode(), 1)


def _voc_hostile() -> dict[str, tuple[bytes, str | None]]:
    """key → (bytes, the reason its image and XML get; None: packed)."""
    scene = detection_sample.scenes(1)[0]
    jpeg = scene.jpeg
    many = b"<annotation>" + b"<object/>" * 500_000 + b"</annotation>"
    utf16 = ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE a [<!ENTITY x "cat">]>'
             '<annotation><object><name>&x;</name></object></annotation>').encode("utf-16")
    huge = b"<annotation>" + b" " * (voc.MAX_XML_BYTES + 1) + b"</annotation>"
    out = {}
    for stem, xml, reason in (
            ("line\u2028sep", detection_sample.voc_xml(scene), None),
            ("caf\x85", _scene_xml("caf\x85s"), None),
            ("many_broken", many, "no_objects"),
            ("utf16_dtd", utf16, "annotation_unparsable"),
            ("oversize", huge, "annotation_unparsable"),
            ("long_name", _scene_xml("n" * 10_000_000), None)):
        out[f"JPEGImages/{stem}.jpg"] = (jpeg, reason)
        out[f"Annotations/{stem}.xml"] = (xml, reason)
    return out


def _coco_hostile() -> dict[str, bytes]:
    nested = 1_000_000
    return {"annotations/nested.json": b'{"info": ' + b"[" * nested + b"]" * nested
            + b', "images": [], "annotations": [], "categories": []}',
            "annotations/sizes.json": json.dumps({
                "images": [{"id": 900, "file_name": "huge_a.jpg", "width": 1e19, "height": 5},
                           {"id": 901, "file_name": "huge_b.jpg", "width": 1e308,
                            "height": 5}],
                "annotations": [],
                "categories": [{"id": 77, "name": "x" * 10_000_000}]}).encode()}


def _build(tmp_path, doc: dict) -> subprocess.CompletedProcess:
    spec_file = tmp_path / f"{doc['name']}.yaml"
    spec_file.write_text(yaml.safe_dump(doc))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([sys.executable, "-m", "recforge.cli", "build", str(spec_file),
                           "--workers", "1"], capture_output=True, text=True)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert peak_mib < MAX_RSS_MIB or before / 1024 >= MAX_RSS_MIB, f"peak {peak_mib:.0f} MiB"
    return proc


def _published(spec) -> tuple[str, dict, dict]:
    version = releases.read_latest(spec)["uri"]
    summary = storage.read_json(storage.join(version, names.SUMMARY))
    refused = {}
    for e in storage.read_jsonl(storage.join(version, names.QUARANTINE)):
        if "part" not in e:
            refused[e["source_key"]] = e["reason"]
    return version, summary, refused


def _sizes_stay_small(version: str) -> None:
    sizes = {o.key: o.size for o in storage.list_objects(version)}
    assert sizes[names.QUARANTINE] < 2 * 1024 ** 2, sizes[names.QUARANTINE]
    assert sizes[names.CLASSES] < 16 * 1024 and sizes[names.REPORT] < 8 * 1024 ** 2


@pytest.mark.parametrize("layout", ["voc", "coco"])
@pytest.mark.pipeline  # whole builds over every hostile input: a slow tier
def test_a_night_over_every_hostile_input_publishes_the_good_and_stays_small(
        bucket, tmp_path, layout):
    src = f"s3://{bucket}/raw"
    good = detection_sample.generate(layout, count=6)
    hostile = _voc_hostile() if layout == "voc" else \
        {k: (v, "annotation_unparsable" if "nested" in k else None)
         for k, v in _coco_hostile().items()}
    for key, data in {**good, **{k: v for k, (v, _) in hostile.items()}}.items():
        storage.put_bytes(storage.join(src, key), data)
    doc = {"name": f"hostile_{layout}", "task": "detection", "schedule": None,
           "source": {"uri": src, "layout": layout}, "publish": {"uri": f"s3://{bucket}/pub"},
           "splits": {"val_ratio": 0.0}, "pack": {"resize": 64}, "bench": BENCH,
           "detection": {"max_name_chars": 64}}
    _build(tmp_path, doc)
    version, summary, refused = _published(parse_spec(doc))
    assert summary["listed"] == summary["packed"] + summary["quarantined"] + \
        summary.get("not_used", 0)
    for key, (_, reason) in hostile.items():
        assert refused.get(key) == reason, key
    for key, reason in detection_sample.BAD_OBJECTS[layout].items():
        assert refused.get(key) == reason, key
    records = {r["source_key"] for r in storage.read_jsonl(storage.join(version, names.RECORDS))}
    if layout == "voc":
        assert {"JPEGImages/line\u2028sep.jpg", "JPEGImages/caf\x85.jpg",
                "JPEGImages/long_name.jpg"} <= records
        parts = [e for e in storage.read_jsonl(storage.join(version, names.QUARANTINE))
                 if e["source_key"] == "JPEGImages/long_name.jpg"]
        assert any("10,000,000 characters (at most 64)" in e["detail"] for e in parts)
        classes = storage.read_json(storage.join(version, names.CLASSES))["classes"]
        assert "caf\x85s" in classes and max(map(len, classes)) <= 64
    _sizes_stay_small(version)
