"""recforge in an Airflow nobody prepared: ``airflow standalone`` (LocalExecutor, SQLite, its
own AIRFLOW_HOME) on this repo's DAG folder, with no pools created, no ``recforge demo`` and
no plugins folder. Runs are triggered through the REST API (simple auth manager, JWT).

Two set-ups, one Airflow each: S3 through boto3's environment (``AWS_*``, no connection),
and S3 only through the Airflow connection ``aws_default`` (``AIRFLOW_CONN_AWS_DEFAULT``
with the moto endpoint in its extra; no ``AWS_*`` variable reaches Airflow at all).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from recforge import storage
from recforge.dev import s3server
from tests.common.sources import make_source, spec_doc
from tests.e2e.cluster import dump_logs, ready_api, wait_for

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "recforge__fresh"
PASSWORD = "fresh-test-pw"


def _airflow_env(home: Path, port: int, specs: Path, s3_mode: str, endpoint: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex,
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
        "RECFORGE_SPECS_DIR": str(specs),
    })
    if s3_mode == "connection":
        for key in [k for k in env if k.startswith("AWS_")]:
            del env[key]
        env["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps({
            "conn_type": "aws", "login": s3server.DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "password": s3server.DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}})
    return env


@contextlib.contextmanager
def standalone(home: Path, env: dict):
    """``airflow standalone`` until the DAG is parsed; yields a logged-in :class:`Api`."""
    (home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    logs = home / "logs_proc"
    logs.mkdir()
    out = open(logs / "standalone.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).with_name("airflow")), "standalone"],
                            env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    procs = {"standalone": proc}
    try:
        yield ready_api(f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}", PASSWORD, DAG_ID, procs,
                        logs), procs, logs
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # standalone stops its components on Ctrl-C
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # LocalExecutor workers, if any are left
        out.close()


@pytest.fixture(scope="module", params=["environment", "connection"])
def fresh(request, s3_endpoint, tmp_path_factory):
    home = tmp_path_factory.mktemp(f"fresh_{request.param}")
    bucket = f"fresh-{uuid.uuid4().hex[:8]}"
    storage.s3_client().create_bucket(Bucket=bucket)
    objects = make_source(bucket, per_class=6)
    specs = home / "specs"
    specs.mkdir()
    (specs / "fresh.yaml").write_text(yaml.safe_dump(spec_doc(
        bucket, name="fresh", schedule=None, pack={"resize": 32, "shard_size": 5})))
    env = _airflow_env(home, s3server.free_port(), specs, request.param, s3_endpoint)
    with standalone(home, env) as (api, procs, logs):
        yield {"api": api, "procs": procs, "logs": logs, "bucket": bucket, "objects": objects,
               "mode": request.param, "home": home}


def _run(fresh, conf: dict) -> tuple[str, list[dict]]:
    """Trigger through the REST API, wait for the end; returns the run id and its tasks."""
    api = fresh["api"]
    status, run = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                           {"logical_date": None, "conf": conf})
    assert status == 200, run
    path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}"

    def finished():
        state = api.call("GET", path)[1].get("state")
        return state if state in ("success", "failed") else None

    state = wait_for("the DAG run", finished, 420, fresh["procs"], fresh["logs"])
    tis = api.call("GET", f"{path}/taskInstances?limit=200")[1]["task_instances"]
    assert state == "success", (json.dumps(tis, indent=1)[:3000] + dump_logs(fresh["logs"]))
    return run["dag_run_id"], tis


def _events(fresh) -> list[dict]:
    status, body = fresh["api"].call("GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}")
    assert status == 200, body
    return body["asset_events"]


def test_dry_run_succeeds_without_pools_and_emits_no_asset_event(fresh):
    if fresh["mode"] == "connection":
        pytest.skip("the dry run is checked once, in the environment set-up")
    _, tis = _run(fresh, {"dry_run": True})
    by_task = {}
    for t in tis:
        by_task.setdefault(t["task_id"], []).append(t)
    assert [t["state"] for t in by_task["publish"]] == ["skipped"]
    assert len(by_task["pack"]) > 1
    # no pool was created: the recforge policy moved the pooled tasks to default_pool
    assert {t["pool"] for t in by_task["pack"] + by_task["benchmark"]} == {"default_pool"}
    assert _events(fresh) == []
    assert not storage.exists(f"s3://{fresh['bucket']}/datasets/fresh/latest.json")


def test_real_run_publishes_and_its_asset_event_carries_version_and_uri(fresh):
    run_id, tis = _run(fresh, {})
    assert all(t["state"] == "success" for t in tis)
    latest = storage.read_json(f"s3://{fresh['bucket']}/datasets/fresh/latest.json")
    manifest = storage.read_json(f"{latest['uri']}/manifest.json")
    assert manifest["run_id"] == run_id
    (event,) = _events(fresh)
    assert event["name"] == "recforge/fresh" and event["source_run_id"] == run_id
    assert event["extra"]["version"] == latest["version"]
    assert event["extra"]["uri"] == latest["uri"]
    said = {"connection": "S3: Airflow connection 'aws_default' (http://127.0.0.1:",
            "environment": "S3: no Airflow connection 'aws_default'"}[fresh["mode"]]
    task_logs = (p.read_text(errors="replace") for p in (fresh["home"] / "logs").rglob("*.log"))
    assert any(said in text for text in task_logs), f"no task log says {said!r}"


def test_a_bad_value_is_refused_with_a_message_that_names_the_limit(fresh):
    if fresh["mode"] == "connection":
        pytest.skip("the trigger form is checked once, in the environment set-up")
    status, body = fresh["api"].call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                                     {"logical_date": None, "conf": {"resize": 20000}})
    assert status == 400, body
    assert "resize" in json.dumps(body) and "maximum of 16384" in json.dumps(body)
