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
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from recforge import storage
from recforge.dev import s3server
from tests.common.browser import screenshot
from tests.common.sources import make_source, spec_doc
from tests.common.sqs import waiting
from tests.e2e import schedules
from tests.e2e.cluster import dump_logs, ready_api, wait_for

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "recforge__fresh"
PASSWORD = "fresh-test-pw"


def _airflow_env(home: Path, port: int, specs: Path, s3_mode: str, endpoint: str) -> dict:
    # no RECFORGE_MXNET_PYTHON either: the benchmark finds .venv-mxnet beside the checkout
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AIRFLOW") and k != "RECFORGE_MXNET_PYTHON"}
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
    if request.param == "environment":  # datasets scheduled on events: checked once, here
        schedules.write_event_specs(specs, bucket, s3_endpoint)
    env = _airflow_env(home, s3server.free_port(), specs, request.param, s3_endpoint)
    with standalone(home, env) as (api, procs, logs):
        yield {"api": api, "procs": procs, "logs": logs, "bucket": bucket, "objects": objects,
               "mode": request.param, "home": home, "endpoint": s3_endpoint}


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
    """The Asset events this DAG emitted. Airflow 3.3.2 answers 500 while a run an event
    created (the downstream dataset's) has no start_date yet (``AssetEventResponse``
    validation), so a 500 is asked again until that run has started."""
    for _ in range(60):
        status, body = fresh["api"].call(
            "GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}")
        if status != 500:
            break
        time.sleep(1)
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
    task_logs = [p.read_text(errors="replace") for p in (fresh["home"] / "logs").rglob("*.log")]
    assert any(said in text for text in task_logs), f"no task log says {said!r}"
    beside = "beside the checkout (no RECFORGE_MXNET_PYTHON set)"  # nothing set, still found
    assert any(beside in text for text in task_logs), f"no task log says {beside!r}"


def test_a_bad_value_is_refused_with_a_message_that_names_the_limit(fresh):
    if fresh["mode"] == "connection":
        pytest.skip("the trigger form is checked once, in the environment set-up")
    status, body = fresh["api"].call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                                     {"logical_date": None, "conf": {"resize": 20000}})
    assert status == 400, body
    assert "resize" in json.dumps(body) and "maximum of 16384" in json.dumps(body)


def _published_run(fresh) -> str:
    """The run id of a run that published (the one the real-run test made, else a new one)."""
    events = _events(fresh)
    return events[0]["source_run_id"] if events else _run(fresh, {})[0]


def _login(page, base: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{base}/dags")
    expect(page).to_have_url(re.compile(r"/auth/login"))
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/dags/?(\?.*)?$"))


@pytest.mark.browser
def test_the_report_and_data_docs_open_from_the_run_page(fresh, page, artifacts):
    """The run page's "Dataset report" tab frames the published report, read from S3 by the
    api-server through the connection (Airflow has no ``AWS_*`` here, the browser nothing at
    all); its Data Docs link opens Data Docs in the same frame, and their link leads back.
    Without Airflow's login the route refuses."""
    from playwright.sync_api import expect

    if fresh["mode"] != "connection":
        pytest.skip("checked once, where S3 is reachable only through the Airflow connection")
    run_id = _published_run(fresh)
    base = fresh["api"].base
    latest = storage.read_json(f"s3://{fresh['bucket']}/datasets/fresh/latest.json")
    route = f"/recforge/runs/{DAG_ID}/{urllib.parse.quote(run_id, safe='')}/report.html"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(base + route, timeout=30)  # no cookie, no bearer token
    assert refused.value.code == 401

    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    _login(page, base)
    page.goto(f"{base}/dags/{DAG_ID}/runs/{urllib.parse.quote(run_id, safe='')}")
    tab = page.get_by_role("link", name="Dataset report")
    expect(tab).to_be_visible()
    screenshot(page, artifacts, "01-run-page")
    tab.click()
    expect(page).to_have_url(re.compile(r"/plugin/recforge-report$"))
    frame = page.frame_locator("iframe[title='Dataset report']")
    heading = frame.get_by_role("heading", level=1)
    expect(heading).to_contain_text("fresh")
    expect(heading).to_contain_text(latest["version"])
    expect(frame.locator("[id='checklist']")).to_be_visible()
    screenshot(page, artifacts, "02-report-tab")

    frame.get_by_role("link", name="Data Docs", exact=True).first.click()
    expect(frame.get_by_role("heading", name=re.compile(r"^Quality checklist: fresh"))
           ).to_be_visible()
    docs = next(f for f in page.frames if f.url.endswith("/quality/index.html"))
    assert docs.url == base + route.replace("report.html", "quality/index.html")
    screenshot(page, artifacts, "03-data-docs")
    # and back: Data Docs link the report next to them (../report.html), through the same app
    frame.get_by_role("link", name="dataset report").first.click()
    expect(heading).to_contain_text(latest["version"])
    assert any(f.url == base + route for f in page.frames)

    s3 = urllib.parse.urlsplit(fresh["endpoint"]).netloc
    leaks = [url for url in requested if s3 in url or "X-Amz-" in url or "s3://" in url]
    assert leaks == [], f"the browser was sent to S3: {leaks}"
    assert all(url.startswith((base, f"blob:{base}", "data:")) for url in requested), \
        sorted({url for url in requested if not url.startswith(base)})


def test_a_publish_upstream_rebuilds_the_dataset_scheduled_on_its_asset(fresh):
    """fresh_b (``schedule: {asset: recforge/fresh}``) runs because fresh published, and
    publishes itself."""
    if fresh["mode"] == "connection":
        pytest.skip("event schedules are checked once, in the environment set-up")
    if not _events(fresh):  # run alone: fresh has not published yet
        _run(fresh, {})
    upstream = _events(fresh)[-1]
    run = schedules.finished_run(fresh, schedules.ON_ASSET, 0)
    assert run["run_type"] == "asset_triggered" and run["state"] == "success", run
    (cause,) = schedules.upstream_events(fresh["api"], schedules.ON_ASSET, run["dag_run_id"])
    assert cause["name"] == "recforge/fresh"
    assert (cause["source_dag_id"], cause["source_run_id"]) == (DAG_ID,
                                                                upstream["source_run_id"])
    latest = storage.read_json(f"s3://{fresh['bucket']}/datasets/fresh_b/latest.json")
    assert storage.read_json(f"{latest['uri']}/manifest.json")["run_id"] == run["dag_run_id"]


def test_objects_landing_in_the_source_start_the_dataset_scheduled_on_s3_events(fresh):
    """Objects copied under incoming/ make the bucket notify the queue; the triggerer's watcher
    turns that into an Asset event and fresh_c builds and publishes. The same bytes written
    again fire once more: that run finds nothing changed, ends green and publishes nothing."""
    if fresh["mode"] == "connection":
        pytest.skip("event schedules are checked once, in the environment set-up")
    bucket, s3 = fresh["bucket"], storage.s3_client()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="raw/")["Contents"]]
    for key in keys:
        s3.copy_object(Bucket=bucket, Key=f"incoming/{key[4:]}",
                       CopySource={"Bucket": bucket, "Key": key})
    first = schedules.finished_run(fresh, schedules.ON_S3_EVENTS, 0)
    assert first["run_type"] == "asset_triggered" and first["state"] == "success", first
    causes = schedules.upstream_events(fresh["api"], schedules.ON_S3_EVENTS,
                                       first["dag_run_id"])
    assert {c["name"] for c in causes} == {"recforge/fresh_c/s3_events"}
    assert all(c["extra"]["from_trigger"] for c in causes)  # the watcher's, not a task's
    named = [o for c in causes for o in c["extra"]["payload"]["objects"]]
    assert named and all(o.startswith(f"s3://{bucket}/incoming/") for o in named), causes

    built = schedules.settled(fresh, schedules.ON_S3_EVENTS)  # every copy's event consumed
    assert all(r["state"] == "success" for r in built), built
    assert waiting(os.environ["AWS_ENDPOINT_URL"], schedules.queue_of(fresh["home"])) == 0
    latest = storage.read_json(f"s3://{bucket}/datasets/fresh_c/latest.json")
    body = s3.get_object(Bucket=bucket, Key=f"incoming/{keys[0][4:]}")["Body"].read()
    s3.put_object(Bucket=bucket, Key=f"incoming/{keys[0][4:]}", Body=body)
    again = schedules.finished_run(fresh, schedules.ON_S3_EVENTS, len(built))
    assert again["run_type"] == "asset_triggered" and again["state"] == "success", again
    states = schedules.task_states(fresh["api"], schedules.ON_S3_EVENTS, again["dag_run_id"])
    assert states["split"] == {"success"} and states["publish"] == {"skipped"}, states
    assert storage.read_json(f"s3://{bucket}/datasets/fresh_c/latest.json") == latest
    print(f"fresh_c: full build {schedules.seconds(first):.1f} s, the no-change run "
          f"{schedules.seconds(again):.1f} s")
