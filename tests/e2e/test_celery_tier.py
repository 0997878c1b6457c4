"""The distributed path for real: api-server, scheduler, dag-processor and three Celery
workers (two on queue ``default``, one on ``gpu``) on the machine's PostgreSQL and Redis.

The run is triggered through the REST API exactly as the UI's trigger form does, with
parameters; the test then checks where every task ran and what was published.
"""

from __future__ import annotations

import json

import pytest

from recforge import storage
from tests.common.sources import BAD, make_source
from tests.e2e.cluster import WORKERS, dump_logs, wait_for

pytestmark = pytest.mark.celery


def test_invalid_param_is_refused_by_the_api(cluster):
    status, body = cluster["api"].call("POST", "/api/v2/dags/recforge__pets/dagRuns",
                                       {"logical_date": None, "conf": {"resize": "huge"}})
    assert status == 400, body
    assert "resize" in json.dumps(body)


def test_triggered_run_uses_both_queues_spreads_shards_and_publishes(cluster):
    api, bucket = cluster["api"], cluster["bucket"]
    objects = make_source(bucket, per_class=16)
    status, run = api.call("POST", "/api/v2/dags/recforge__pets/dagRuns",
                           {"logical_date": None, "conf": {"resize": 32, "shard_size": 6}})
    assert status == 200, run
    run_id = run["dag_run_id"]
    path = f"/api/v2/dags/recforge__pets/dagRuns/{run_id}"

    def finished():
        state = api.call("GET", path)[1].get("state")
        return state if state in ("success", "failed") else None

    state = wait_for("the DAG run", finished, 600, cluster["procs"], cluster["logs"])
    status, tis = api.call("GET", f"{path}/taskInstances?limit=200")
    assert state == "success", json.dumps(tis, indent=1)[:4000] + dump_logs(cluster["logs"])

    instances = tis["task_instances"]
    assert instances and all(t["state"] == "success" for t in instances)
    for t in instances:
        worker = t["hostname"]
        assert worker in WORKERS, t
        assert WORKERS[worker] == t["queue"], (t["task_id"], t["queue"], worker)
    assert [t["hostname"] for t in instances if t["task_id"] == "benchmark"] == ["gpu-a"]
    packers = {t["hostname"] for t in instances if t["task_id"] == "pack"}
    assert len([t for t in instances if t["task_id"] == "pack"]) > 2
    assert packers == {"cpu-a", "cpu-b"}, packers

    latest = storage.read_json(f"s3://{bucket}/datasets/pets/latest.json")
    manifest = storage.read_json(f"{latest['uri']}/manifest.json")
    assert manifest["run_id"] == run_id
    assert manifest["spec"]["pack"]["resize"] == 32  # the trigger's param, not the spec's 40
    assert manifest["summary"]["listed"] == len(objects)
    assert manifest["summary"]["quarantined"] == len(BAD)
