"""A no-change night through the real DAG (``airflow dags test``): it ends green, publishes
no version and emits no Asset event; ``force_rebuild`` from the trigger form publishes."""

from __future__ import annotations

import sqlite3

import pytest
import yaml

from recforge import storage
from tests.common.sources import make_source, make_spec
from tests.e2e.test_dag import _asset_events, _env

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
    spec = make_spec(bucket, schedule=None).model_dump(mode="json")
    (specs / "pets.yaml").write_text(yaml.safe_dump(spec))
    home = tmp_path / "airflow"
    env = _env(home, specs)
    ok, out = _run(env)
    assert ok, out[-4000:]
    latest = storage.read_json(f"s3://{bucket}/datasets/pets/latest.json")
    assert len(_asset_events(home, "recforge/pets")) == 1

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
