"""A no-change night through the real DAG (``airflow dags test``): it ends green, publishes
no version and emits no Asset event; ``force_rebuild`` from the trigger form publishes. The
spec sizes its shards ``auto`` on one pack slot, so one pack task packs every shard."""

from __future__ import annotations

import sqlite3

import pytest
import yaml

from recforge import storage
from recforge.orchestration.dags import shards_label
from tests.common.sources import make_source, make_spec
from tests.e2e.test_dag import _asset_events, _env, _map_indexes, _staging

pytestmark = pytest.mark.e2e


def _states(airflow_home, run_index: int) -> dict[str, str]:
    """task id → state of the ``run_index``-th run (0-based, in start order)."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        runs = [r for (r,) in db.execute("SELECT run_id FROM dag_run ORDER BY id")]
        rows = db.execute("SELECT task_id, state FROM task_instance WHERE run_id = ?",
                          (runs[run_index],)).fetchall()
    return dict(rows)


def test_a_night_without_changes_publishes_nothing(bucket, tmp_path):
    make_source(bucket, classes=("dog", "eel"), per_class=8)
    specs = tmp_path / "specs"
    specs.mkdir()
    spec = make_spec(bucket, schedule=None, pack={"resize": 48, "shard_size": "auto"},
                     splits={"val_ratio": 0.25, "test_ratio": 0.25, "seed": 1})
    (specs / "pets.yaml").write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    home = tmp_path / "airflow"
    env = {**_env(home, specs), "RECFORGE_PACK_POOL_SLOTS": "1"}
    ok, out = _run(env)
    assert ok, out[-4000:]
    latest = storage.read_json(f"s3://{bucket}/datasets/pets/latest.json")
    assert len(_asset_events(home, "recforge/pets")) == 1
    # one pack task for the one slot, shown with the shards it packed one after the other
    planned = storage.read_json(f"{_staging(bucket)}/split/shards.json")
    splits = [s for s, n in planned["planned"].items() if n]
    assert len(planned["shards"]) == len(splits) >= 2  # auto: one shard a split, this small
    assert planned["pack_tasks"] == [sorted(
        planned["shards"], key=lambda s: -planned["planned"][s.split("-")[0]])]
    assert _map_indexes(home, "pack") == [shards_label(planned["pack_tasks"][0])]
    assert set(storage.read_json(f"{latest['uri']}/summary.json")["splits"]) == set(splits)

    ok, out = _run(env)  # nothing changed
    assert ok, out[-4000:]
    assert "no changes since" in out
    assert storage.read_json(f"s3://{bucket}/datasets/pets/latest.json") == latest
    assert len(_asset_events(home, "recforge/pets")) == 1  # no Asset event
    states = _states(home, 1)
    assert states["split"] == "success"
    assert {states[t] for t in ("pack", "merge", "quality_gate", "publish")} == {"skipped"}
    versions = {o.key.split("/")[0] for o in storage.list_objects(f"s3://{bucket}/datasets/pets")
                if o.key.endswith("/manifest.json")}
    assert versions == {latest["version"]}

    ok, out = _run(env, {"force_rebuild": True})
    assert ok, out[-4000:]
    forced = storage.read_json(f"s3://{bucket}/datasets/pets/latest.json")
    assert forced["version"] != latest["version"]
    assert len(_asset_events(home, "recforge/pets")) == 2


def _run(env, conf=None):
    from recforge.dev import demo

    return demo.run_dag_test("recforge__pets", env, conf=conf)
