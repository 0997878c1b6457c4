"""Public datasets as they ship, through the real DAG (``airflow dags test``) with their
official splits: ImageNet (train folders + the val ground-truth list), COCO 2017 and
VOCdevkit 2007+2012, each built from docs/datasets.md's spec and published with every image
in exactly its source's split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from recforge import storage
from recforge.dev import demo
from recforge.format import names
from tests.common import mini_coco, mini_imagenet, mini_voc
from tests.common.datasets_doc import spec_doc
from tests.common.sources import SMALL_BENCH

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e
GLUONCV_0712 = {"train": ["trainval"], "val": ["test"]}


def _imagenet(bucket: str) -> dict[str, str]:
    objects, truth = mini_imagenet.imagenet()
    mini_imagenet.upload(bucket, "imagenet", objects)
    return {key: split for key, (split, _) in truth.items()}


def _coco(bucket: str) -> dict[str, str]:
    mini_coco.upload(f"s3://{bucket}/coco2017")
    return {key: t[0] for key, t in mini_coco.truth().items()}


def _voc(bucket: str) -> dict[str, str]:
    mini_voc.upload(f"s3://{bucket}/VOCdevkit")
    return {key: t[0] for key, t in mini_voc.truth(GLUONCV_0712).items()}


DATASETS = {"ImageNet": ("imagenet", _imagenet, 32), "COCO 2017": ("coco2017", _coco, 64),
            "Pascal VOC": ("voc0712", _voc, 64)}


@pytest.mark.parametrize("heading", list(DATASETS))
def test_a_public_dataset_publishes_its_official_splits_through_the_dag(bucket, tmp_path,
                                                                         heading):
    name, upload, side = DATASETS[heading]
    truth = upload(bucket)
    doc = spec_doc(heading, bucket, **{"pack.resize": side, "pack.shard_size": 4})
    doc.update(schedule=None, bench={"options": {**SMALL_BENCH["options"],
                                                 "data_shape": [3, side, side]}})
    assert doc["name"] == name and doc["splits"]["from"] == "source"
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    env = demo.airflow_env(REPO, {"AIRFLOW_HOME": str(tmp_path / "airflow"),
                                  "RECFORGE_SPECS_DIR": str(specs)})
    ok, out = demo.run_dag_test(f"recforge__{name}", env)
    assert ok, out[-5000:]

    version = storage.read_json(f"{doc['publish']['uri'].rstrip('/')}/{name}/latest.json")
    rows = storage.read_jsonl(storage.join(version["uri"], names.RECORDS))
    assert {r["source_key"]: r["split"] for r in rows} == truth
    summary = storage.read_json(storage.join(version["uri"], names.SUMMARY))
    assert summary["quarantined"] == 0
    assert summary["listed"] == summary["packed"] + summary["not_used"]
    quality = json.loads(storage.get_bytes(storage.join(
        version["uri"], names.QUALITY_DIR, names.QUALITY_RESULT)))
    assert quality["ok"] and not quality["failed"], quality
