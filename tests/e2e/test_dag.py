"""The real DAG, run with ``airflow dags test`` against the local S3 server, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from recforge import storage
from recforge.dev import demo
from tests.common import mxnet_readers
from tests.common.sources import BAD, SMALL_BENCH, make_source

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory):
    return tmp_path_factory.mktemp("airflow")


def _asset_events(airflow_home: Path, name: str) -> list[dict]:
    """The extras of every event of Asset ``name``, from the Airflow database."""
    import sqlite3

    with sqlite3.connect(airflow_home / "airflow.db") as db:
        rows = db.execute("SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                          "WHERE a.name = ? ORDER BY e.id", (name,)).fetchall()
    return [json.loads(extra) if isinstance(extra, str) else extra for (extra,) in rows]


def _map_indexes(airflow_home: Path, task_id: str) -> list[str]:
    """The rendered map indexes of the first run's mapped ``task_id``."""
    import sqlite3

    with sqlite3.connect(airflow_home / "airflow.db") as db:
        run = db.execute("SELECT run_id FROM dag_run ORDER BY id LIMIT 1").fetchone()[0]
        rows = db.execute("SELECT rendered_map_index FROM task_instance WHERE task_id = ? "
                          "AND run_id = ?", (task_id, run)).fetchall()
    return sorted(r for (r,) in rows)


def _staging(bucket: str) -> str:
    """The first run's staging prefix (the only run id under recforge__pets)."""
    root = f"s3://{bucket}/datasets/_staging/recforge__pets"
    return f"{root}/{next(storage.list_objects(root)).key.split('/')[0]}"


def _env(airflow_home: Path, specs: Path) -> dict:
    return demo.airflow_env(REPO, {"AIRFLOW_HOME": str(airflow_home),
                                   "RECFORGE_SPECS_DIR": str(specs)})


def test_dag_builds_publishes_and_fails_safely(bucket, airflow_home, tmp_path):
    objects = make_source(bucket)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "pets.yaml").write_text(yaml.safe_dump({
        "name": "pets", "schedule": None,
        "source": {"uri": f"s3://{bucket}/raw"},
        "publish": {"uri": f"s3://{bucket}/datasets"},
        "splits": {"val_ratio": 0.25, "seed": 1},
        "pack": {"resize": 40, "shard_size": 10}, "bench": SMALL_BENCH,
    }))
    env = _env(airflow_home, specs)
    # a deployment that maps at most 3 tasks: the plan grows shards instead of failing
    env["AIRFLOW__CORE__MAX_MAP_LENGTH"] = "3"

    ok, out = demo.run_dag_test("recforge__pets", env)
    assert ok, out[-4000:]
    latest = storage.read_json(f"s3://{bucket}/datasets/pets/latest.json")
    # the Asset event carries the release: version, URI, report, records per split
    (event,) = _asset_events(airflow_home, "recforge/pets")
    assert event["version"] == latest["version"] and event["uri"] == latest["uri"]
    assert event["report"] == f"{latest['uri']}/report.html"
    assert sum(event["records"].values()) == storage.read_json(
        f"{latest['uri']}/summary.json")["packed"]
    # mapped tasks are shown by shard id; no more of them than the deployment can map
    assert len(_map_indexes(airflow_home, "pack")) <= 3
    assert _map_indexes(airflow_home, "pack") == sorted(
        storage.read_json(f"{_staging(bucket)}/split/shards.json")["shards"])
    version = latest["uri"]
    local = tmp_path / "published"
    for obj in storage.list_objects(version):
        storage.download(f"{version}/{obj.key}", local / obj.key)
    summary = json.loads((local / "summary.json").read_text())
    assert summary["listed"] == len(objects)
    assert summary["packed"] == len(objects) - len(BAD) and summary["quarantined"] == len(BAD)
    n_train = summary["splits"]["train"]
    batch = mxnet_readers.read("iter_batch", rec=str(local / "train.rec"),
                               idx=str(local / "train.idx"), data_shape=[3, 40, 40],
                               batch_size=n_train)
    assert batch["shape"] == [n_train, 3, 40, 40]
    classes = json.loads((local / "classes.json").read_text())["classes"]
    assert {int(x) for x in batch["labels"]} <= set(range(len(classes)))

    # A triggered run with params: dry run + resize override — nothing new is published.
    ok, out = demo.run_dag_test("recforge__pets", env, conf={"dry_run": True, "resize": 32})
    assert ok, out[-4000:]
    assert storage.read_json(f"s3://{bucket}/datasets/pets/latest.json") == latest
    assert len(_asset_events(airflow_home, "recforge/pets")) == 1  # a dry run emits none

    # A vanished class fails the run (no retries: deterministic) and publishes nothing.
    storage.delete_prefix(f"s3://{bucket}/raw/eel")
    ok, out = demo.run_dag_test("recforge__pets", env)
    assert not ok
    assert "LabelMapError" in out and "eel" in out
    assert storage.read_json(f"s3://{bucket}/datasets/pets/latest.json") == latest
