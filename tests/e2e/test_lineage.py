"""OpenLineage end to end: the real DAG, run with ``airflow dags test`` against the local S3
server with the provider's file transport, emits run events naming the source prefix as
ingest's input and the published version as publish's output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recforge import storage
from recforge.dev import demo
from tests.common.sources import dag_specs, make_source

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e
pytest.importorskip("airflow.providers.openlineage")


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _datasets(event: dict, side: str) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in event.get(side, [])]


def _complete(events: list[dict], job: str) -> dict:
    done = [e for e in events if e.get("eventType") == "COMPLETE"
            and e.get("job", {}).get("name") == job]
    assert len(done) == 1, (job, sorted({e.get("job", {}).get("name") for e in events}))
    return done[0]


def test_run_events_name_the_source_and_the_published_version(bucket, tmp_path):
    make_source(bucket)
    specs = dag_specs(tmp_path, bucket)
    log = tmp_path / "openlineage.jsonl"
    env = demo.airflow_env(REPO, {
        "AIRFLOW_HOME": str(tmp_path / "airflow"), "RECFORGE_SPECS_DIR": str(specs),
        "AIRFLOW__OPENLINEAGE__DISABLED": "false",
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "recforge-test",
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(log), "append": True}),
    })

    ok, out = demo.run_dag_test("recforge__pets", env, log_path=tmp_path / "dags_test.log")
    assert ok, out[-4000:]
    latest = storage.read_json(f"s3://{bucket}/datasets/pets/latest.json")
    events = _events(log)

    ingest = _complete(events, "recforge__pets.ingest")
    assert ingest["job"]["namespace"] == "recforge-test"
    assert _datasets(ingest, "inputs") == [(f"s3://{bucket}", "raw")]
    publish = _complete(events, "recforge__pets.publish")
    outputs = _datasets(publish, "outputs")
    assert (f"s3://{bucket}", f"datasets/pets/{latest['version']}") in outputs  # the version
    assert (f"s3://{bucket}", "datasets/pets") in outputs  # and the Asset it updates
    # both belong to the run of the DAG: the same parent run
    parents = {e["run"]["facets"]["parent"]["run"]["runId"] for e in (ingest, publish)}
    assert len(parents) == 1
