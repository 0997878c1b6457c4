"""Secrets never leak through the real DAG either: one ``airflow dags test`` run with
distinctive AWS credentials and a webhook secret in the spec (on_success, so the alert is
really sent) writes none of them to the task logs, the Airflow log files or any staged or
published object; the alert carries neither the secret key nor the webhook secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recforge import storage
from recforge.dev import demo
from tests.common.sources import dag_specs, make_source
from tests.stages.test_secrets import KEY_ID, SECRET_KEY, WEBHOOK_SECRET, leaks

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def test_a_dag_run_leaks_no_secret(bucket, tmp_path, webhook_server):  # noqa: F811
    hook_url, received = webhook_server
    make_source(bucket, classes=("dog", "eel"), per_class=6)
    specs = dag_specs(tmp_path, bucket, alerts={"webhook_url": f"{hook_url}/{WEBHOOK_SECRET}",
                                                "on_success": True})
    home = tmp_path / "airflow"
    env = demo.airflow_env(REPO, {"AIRFLOW_HOME": str(home), "RECFORGE_SPECS_DIR": str(specs),
                                  "AWS_ACCESS_KEY_ID": KEY_ID,
                                  "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
    ok, out = demo.run_dag_test("recforge__pets", env)
    assert ok, out[-3000:]
    assert len(received) == 1, out[-3000:]  # the alert went out, through the secret URL

    assert not leaks(out.encode()), [ln for ln in out.splitlines() if leaks(ln.encode())][:5]
    logs = {p: leaks(p.read_bytes()) for p in home.rglob("*")
            if p.is_file() and p.name != "airflow.db"}  # the database holds XCom results
    assert not {str(p): v for p, v in logs.items() if v}
    objects = {o.key: leaks(storage.get_bytes(f"s3://{bucket}/{o.key}"))
               for o in storage.list_objects(f"s3://{bucket}")}
    assert not {k: v for k, v in objects.items() if v}
    alert = json.dumps(received[0]["json"]).encode()
    assert SECRET_KEY.encode() not in alert and WEBHOOK_SECRET.encode() not in alert
