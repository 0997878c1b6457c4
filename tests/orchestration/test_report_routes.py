"""The api-server's report routes (``recforge.orchestration.ui``) without a browser: FastAPI's
TestClient against the real moto server, S3 read through an Airflow connection only (no
``AWS_*`` credentials left in the environment when a request is served).

A run resolves to its published version, else to its merged dataset (a dry run's staging
``out/``, a failed gate's claimed version folder); links between the report and Data Docs
resolve through the same URLs; a path that could leave the run's folder, a file that is not
a web page or image, another dataset's folder, and an unauthenticated request are refused.
"""

from __future__ import annotations

import json
import re
import urllib.parse

import pytest
import yaml

from recforge import run_state, storage
from recforge.dev import s3server
from recforge.orchestration import ui
from recforge.run import Run
from recforge.spec import parse_spec
from tests.common.sources import spec_doc

RUN_ID = "manual__2026-12-06T05:00:00.123456+00:00"
VERSION = "v20261206T050000Z-abc"
REPORT = ('<!DOCTYPE html><html><body><h1>pets <small>{v}</small></h1>'
          '<a href="quality/index.html">Data Docs</a></body></html>')
DOCS = ('<html><body><h1>Quality checklist: pets</h1><a href="../report.html">report</a>'
        '<a href="validations/train.html">train</a></body></html>')
PAGE = '<html><body><h1>train suite</h1><a href="../index.html">index</a></body></html>'


@pytest.fixture
def specs(tmp_path, bucket):
    folder = tmp_path / "specs"
    folder.mkdir()
    for name in ("pets", "cats"):
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(
            spec_doc(bucket, name=name, schedule=None, aws_conn_id="reports_s3")))
    return folder


def _write_version(spec, run_id: str, version: str, manifest: bool = True) -> str:
    """A version folder as the pipeline leaves it: report, Data Docs, a data file."""
    run = Run(spec, run_id)
    storage.write_json(run.uri("publish", "version.json"), {"version": version})
    folder = f"{spec.publish.uri}/{spec.name}/{version}"
    storage.put_bytes(f"{folder}/report.html", REPORT.format(v=version).encode())
    storage.put_bytes(f"{folder}/quality/index.html", DOCS.encode())
    storage.put_bytes(f"{folder}/quality/validations/train.html", PAGE.encode())
    storage.put_bytes(f"{folder}/chart.png", b"\x89PNG\r\n\x1a\n....")
    storage.put_bytes(f"{folder}/train.rec", b"\0" * 64)
    if manifest:
        storage.write_json(f"{folder}/manifest.json", {"run_id": run_id, "version": version})
    else:
        storage.write_json(run.home, {"version": version})  # merge claimed it, not published
    return folder


@pytest.fixture
def client(specs, bucket, s3_endpoint, monkeypatch):
    """The app, admitted without Airflow's check, with the runs' confs given; S3 only through
    the spec's connection ``reports_s3`` from the moment a request is made."""
    from fastapi.testclient import TestClient

    confs: dict[str, dict] = {RUN_ID: {}}
    app = ui.create_app(authorize=lambda: None, specs_dir=specs)

    def run_conf(dag_id: str, run_id: str) -> dict:
        if run_id not in confs:
            from fastapi import HTTPException

            raise HTTPException(404, f"DAG {dag_id} has no run {run_id!r}")
        return confs[run_id]

    app.dependency_overrides[ui.run_conf] = run_conf

    def serve():
        monkeypatch.setenv("AIRFLOW_CONN_REPORTS_S3", json.dumps({
            "conn_type": "aws", "login": s3server.DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "password": s3server.DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "extra": {"endpoint_url": s3_endpoint, "region_name": "us-east-1"}}))
        for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(var, raising=False)
        return TestClient(app)

    spec = parse_spec(yaml.safe_load((specs / "pets.yaml").read_text()))
    yield {"serve": serve, "confs": confs, "spec": spec, "app": app}
    ui.S3.conn_id = None
    storage.configure_s3(None)


def _url(path: str, run_id: str = RUN_ID, dag_id: str = "recforge__pets") -> str:
    return f"/runs/{dag_id}/{urllib.parse.quote(run_id, safe='')}/{path}"


def _raw_get(app, path: str) -> tuple[int, str]:
    """GET ``path`` exactly as an HTTP server hands it over: percent-decoded, dot segments
    kept (HTTP clients, browsers included, resolve ``..`` before sending; a raw request need
    not)."""
    import asyncio

    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": urllib.parse.unquote(path),
             "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": [],
             "server": ("testserver", 80), "client": ("127.0.0.1", 1)}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]).decode()


def test_a_published_runs_report_and_data_docs_link_to_each_other(client):
    _write_version(client["spec"], RUN_ID, VERSION)
    http = client["serve"]()
    report = http.get(_url("report.html"))
    assert report.status_code == 200, report.text
    assert report.headers["content-type"] == "text/html; charset=utf-8"
    assert f"<small>{VERSION}</small>" in report.text
    assert report.headers["x-recforge-version"] == VERSION
    assert "script-src" not in report.headers["content-security-policy"]  # default-src 'none'
    assert report.headers["content-security-policy"].startswith("default-src 'none'")
    # every link followed as the browser does: relative to the page's own URL
    docs_url = urllib.parse.urljoin(str(report.url), re.search(r'href="([^"]+)"',
                                                               report.text)[1])
    docs = http.get(docs_url)
    assert docs.status_code == 200 and "Quality checklist: pets" in docs.text
    page = http.get(urllib.parse.urljoin(docs_url, "validations/train.html"))
    assert page.status_code == 200 and "train suite" in page.text
    assert http.get(urllib.parse.urljoin(str(page.url), "../index.html")).text == docs.text
    back = http.get(urllib.parse.urljoin(docs_url, "../report.html"))
    assert back.status_code == 200 and back.text == report.text
    image = http.get(_url("chart.png"))
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    assert http.get(_url("report.html"), headers={"If-None-Match": report.headers["etag"]}
                    ).status_code == 304
    home = http.get(_url(""), follow_redirects=False)
    assert home.status_code == 307 and home.headers["location"] == "report.html"


def test_a_dry_run_shows_its_staged_report(client):
    spec, run_id = client["spec"], "manual__dry"
    client["confs"][run_id] = {"dry_run": True}
    run = Run(spec, run_id, dry_run=True)
    storage.write_json(run.home, {"version": None})
    storage.put_bytes(run_state.output(run, "report.html"), REPORT.format(v="dry").encode())
    response = client["serve"]().get(_url("report.html", run_id))
    assert response.status_code == 200, response.text
    assert "<small>dry</small>" in response.text
    assert response.headers["x-recforge-version"] == "unpublished"


def test_a_failed_gate_shows_the_report_in_its_claimed_unpublished_folder(client):
    run_id = "manual__failed"
    client["confs"][run_id] = {}
    _write_version(client["spec"], run_id, "v-claimed", manifest=False)
    response = client["serve"]().get(_url("quality/index.html", run_id))
    assert response.status_code == 200 and "Quality checklist" in response.text


def test_a_run_without_a_report_yet_says_so(client):
    client["confs"]["manual__early"] = {}
    http = client["serve"]()
    response = http.get(_url("report.html", "manual__early"))
    assert response.status_code == 404
    assert "has no report yet" in response.json()["detail"]
    unknown = http.get(_url("report.html", "manual__nobody"))
    assert unknown.status_code == 404 and "has no run" in unknown.json()["detail"]
    other = http.get(_url("report.html", dag_id="some_other_dag"))
    assert other.status_code == 404 and "not the DAG of a dataset spec" in \
        other.json()["detail"]


@pytest.mark.parametrize("path", [
    "../cats/report.html", "quality/../../cats/report.html", "%2e%2e/cats/report.html",
    "quality/..%2f..%2fcats/report.html", "quality//index.html", "./report.html",
    "quality\\..\\report.html", "train.rec", "manifest.json.rec", "quality/%00.html",
])
def test_a_path_that_could_leave_the_folder_or_is_no_web_file_is_refused(client, path):
    _write_version(client["spec"], RUN_ID, VERSION)
    cats = parse_spec(spec_doc(client["spec"].source.uri.split("/")[2], name="cats"))
    storage.put_bytes(f"{cats.publish.uri}/cats/report.html", b"<h1>cats</h1>")
    client["serve"]()
    status, text = _raw_get(client["app"], f"/runs/recforge__pets/{RUN_ID}/{path}")
    assert status == 404, (path, text)
    assert "is not" in text and "<h1>cats</h1>" not in text


def test_a_run_conf_outside_the_datasets_bounds_is_not_followed(client):
    run_id = "manual__elsewhere"
    client["confs"][run_id] = {"publish_uri": "s3://someone-elses-bucket/datasets"}
    response = client["serve"]().get(_url("report.html", run_id))
    assert response.status_code == 404
    assert "outside what dataset pets may touch" in response.json()["detail"]


def test_without_airflow_credentials_the_routes_refuse(specs, monkeypatch):
    from airflow.api_fastapi import app as airflow_app
    from fastapi.testclient import TestClient

    http = TestClient(ui.create_app(specs_dir=specs))  # Airflow's own check
    response = http.get(_url("report.html"))
    assert response.status_code == 401 and response.json() == {"detail": "Not authenticated"}
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "test-secret")
    monkeypatch.setattr(airflow_app._AuthManagerState, "instance", None)
    airflow_app.create_auth_manager()  # the deployment's (simple) auth manager judges tokens
    http.cookies.set("_token", "forged.jwt.token")
    forged = http.get(_url("report.html"))
    assert forged.status_code == 403 and "Invalid JWT" in forged.json()["detail"]
