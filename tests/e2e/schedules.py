"""Datasets scheduled on events, beside ``fresh`` in the fresh ``airflow standalone``
(tests/e2e/test_fresh_airflow.py): ``fresh_b`` rebuilds when ``fresh`` publishes (its Asset
``recforge/fresh``), ``fresh_c`` when objects land under ``incoming/`` (S3 event
notifications on an SQS queue of the moto server, read by the triggerer). One Airflow serves
all three: a second one would cost its start and its own runs."""

from __future__ import annotations

import datetime
from pathlib import Path

import yaml

from tests.common.sources import spec_doc
from tests.common.sqs import notifying_queue
from tests.e2e.cluster import wait_for

ON_ASSET, ON_S3_EVENTS = "fresh_b", "fresh_c"
FINISHED = ("success", "failed")


def write_event_specs(specs: Path, bucket: str, endpoint: str) -> None:
    """The two event-scheduled specs, and the queue the bucket notifies for ``incoming/``
    (empty: the objects come in the test)."""
    small = {"pack": {"resize": 32, "shard_size": 5}}
    (specs / f"{ON_ASSET}.yaml").write_text(yaml.safe_dump(spec_doc(
        bucket, name=ON_ASSET, schedule={"asset": "recforge/fresh"}, **small)))
    queue = notifying_queue(endpoint, bucket, "incoming/")
    doc = spec_doc(bucket, name=ON_S3_EVENTS, schedule={"s3_events": {"queue": queue}}, **small)
    doc["source"]["uri"] = f"s3://{bucket}/incoming"
    (specs / f"{ON_S3_EVENTS}.yaml").write_text(yaml.safe_dump(doc))


def queue_of(home: Path) -> str:
    spec = yaml.safe_load((home / "specs" / f"{ON_S3_EVENTS}.yaml").read_text())
    return spec["schedule"]["s3_events"]["queue"]


def runs(api, name: str) -> list[dict]:
    """The DAG's runs, oldest first."""
    status, body = api.call("GET", f"/api/v2/dags/recforge__{name}/dagRuns?limit=100")
    assert status == 200, body
    return sorted(body["dag_runs"], key=lambda r: (r["run_after"], r["dag_run_id"]))


def finished_run(fresh, name: str, index: int, timeout: float = 480) -> dict:
    """The ``index``-th run (0-based, oldest first) once it has ended."""
    def ended():
        found = runs(fresh["api"], name)
        return found[index] if len(found) > index and found[index]["state"] in FINISHED \
            else None

    return wait_for(f"run {index} of {name}", ended, timeout, fresh["procs"], fresh["logs"])


def settled(fresh, name: str, timeout: float = 480) -> list[dict]:
    """The DAG's runs once none is queued or running and no new one came for 15 s."""
    last: list = [None, 0]

    def quiet():
        found = runs(fresh["api"], name)
        now = datetime.datetime.now().timestamp()
        if any(r["state"] not in FINISHED for r in found):
            last[:] = [None, now]
            return None
        if last[0] != len(found):
            last[:] = [len(found), now]
            return None
        return found if now - last[1] >= 15 else None

    return wait_for(f"the runs of {name} to settle", quiet, timeout, fresh["procs"],
                    fresh["logs"])


def upstream_events(api, name: str, run_id: str) -> list[dict]:
    """The Asset events that started the run."""
    status, body = api.call(
        "GET", f"/api/v2/dags/recforge__{name}/dagRuns/{run_id}/upstreamAssetEvents")
    assert status == 200, body
    return body["asset_events"]


def task_states(api, name: str, run_id: str) -> dict[str, set[str]]:
    status, body = api.call(
        "GET", f"/api/v2/dags/recforge__{name}/dagRuns/{run_id}/taskInstances?limit=200")
    assert status == 200, body
    states: dict[str, set[str]] = {}
    for ti in body["task_instances"]:
        states.setdefault(ti["task_id"], set()).add(ti["state"])
    return states


def seconds(run: dict) -> float:
    start, end = (datetime.datetime.fromisoformat(run[k]) for k in ("start_date", "end_date"))
    return (end - start).total_seconds()
