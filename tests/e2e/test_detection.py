"""The detection DAG end to end: the VOC sample in S3 → `airflow dags test` → a published
version whose boxes MXNet's detection reader returns, every bad annotation quarantined."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from recforge import storage
from recforge.dev import demo, detection_sample
from recforge.format import detection_label
from tests.common import mxnet_readers
from tests.common.sources import SMALL_BENCH

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def test_detection_dag_publishes_boxes_the_readers_read(bucket, tmp_path):
    src = f"s3://{bucket}/raw"
    detection_sample.upload(src, "voc", count=8)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "boxes.yaml").write_text(yaml.safe_dump({
        "name": "boxes", "task": "detection", "schedule": None,
        "source": {"uri": src, "layout": "voc"},
        "splits": {"val_ratio": 0.0}, "pack": {"resize": 160, "shard_size": 4},
        "bench": {"options": {**SMALL_BENCH["options"], "data_shape": [3, 64, 64]}},
        "publish": {"uri": f"s3://{bucket}/datasets"},
    }))
    env = demo.airflow_env(REPO, {"AIRFLOW_HOME": str(tmp_path / "airflow"),
                                  "RECFORGE_SPECS_DIR": str(specs)})
    ok, out = demo.run_dag_test("recforge__boxes", env)
    assert ok, out[-5000:]

    version = storage.read_json(f"s3://{bucket}/datasets/boxes/latest.json")["uri"]
    local = tmp_path / "pub"
    for obj in storage.list_objects(version):
        storage.download(f"{version}/{obj.key}", local / obj.key)
    summary = json.loads((local / "summary.json").read_text())
    assert summary["listed"] == summary["packed"] + summary["quarantined"]
    assert summary["splits"] == {"train": 9}  # 8 scenes and the EXIF-rotated one
    quarantined = {e["source_key"]: e["reason"] for line in
                   (local / "quarantine.jsonl").read_text().splitlines()
                   if "part" not in (e := json.loads(line))}
    assert {k: quarantined.get(k) for k in detection_sample.BAD_OBJECTS["voc"]} == \
        detection_sample.BAD_OBJECTS["voc"]

    records = {json.loads(x)["key"]: json.loads(x) for x in
               (local / "records.jsonl").read_text().splitlines()}
    got = mxnet_readers.read("detection_labels", rec=str(local / "train.rec"),
                             idx=str(local / "train.idx"))
    assert sorted(got) == sorted(str(k) for k in records)
    for key, objects in got.items():
        _, want = detection_label.decode(records[int(key)]["label"])
        assert [[round(v, 5) for v in o] for o in objects] == \
            [[round(float(v), 5) for v in o] for o in want.tolist()]
