"""The quality gate inside the real DAG: an injected fault fails the run before publish and
the alert reaches a real SMTP server and a real webhook receiver, naming the failed check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recforge import storage
from recforge.dev import demo
from recforge.stages import split
from tests.common.sources import SMALL_BENCH, dag_specs, make_source

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def test_same_image_in_train_and_val_blocks_publish_and_alerts(
        bucket, tmp_path, smtp_server, webhook_server):  # noqa: F811
    smtp_port, inbox = smtp_server
    hook_url, received = webhook_server
    objects = make_source(bucket)
    original = "cat/a/1.jpg"
    where = split.assign_split(original, 0.25, 0.0, 1)
    twin = next(f"dog/copy_{i}.jpg" for i in range(100)
                if split.assign_split(f"dog/copy_{i}.jpg", 0.25, 0.0, 1) != where)
    storage.put_bytes(f"s3://{bucket}/raw/{twin}", objects[original])

    specs = dag_specs(tmp_path, bucket, alerts={
        "emails": ["ml-team@example.com"], "webhook_url": hook_url,
        "smtp_conn_id": "recforge_smtp"})
    env = demo.airflow_env(REPO, {
        "AIRFLOW_HOME": str(tmp_path / "airflow"), "RECFORGE_SPECS_DIR": str(specs),
        "AIRFLOW_CONN_RECFORGE_SMTP": json.dumps({
            "conn_type": "smtp", "host": "127.0.0.1", "port": smtp_port,
            "extra": {"disable_ssl": True, "disable_tls": True, "retry_limit": 0,
                      "from_email": "airflow@example.com"}}),
    })
    ok, out = demo.run_dag_test("recforge__pets", env)
    assert not ok, "the run must fail at the quality gate"
    assert "QualityGateFailed" in out and "split_content" in out
    assert not storage.exists(f"s3://{bucket}/datasets/pets/latest.json")
    assert_nothing_published(f"s3://{bucket}/datasets/pets")

    assert len(inbox) == 1, out[-3000:]
    mail_from, rcpts, msg = inbox[0]
    assert rcpts == ["ml-team@example.com"]
    body = msg.get_body(("html", "plain")).get_content()  # the smtp provider sends HTML
    assert "pets" in msg["Subject"] and "split_content" in body
    assert "index.html" in body  # the Data Docs link
    assert len(received) == 1
    assert "split_content" in json.dumps(received[0]["json"])


def test_loader_below_its_floor_blocks_publish_and_alerts_with_numbers(
        bucket, tmp_path, webhook_server):  # noqa: F811
    hook_url, received = webhook_server
    make_source(bucket)
    floors = {"cpu": {"min_images_per_sec": 1e9}, "gpu": {"min_images_per_sec": 1e9}}
    specs = dag_specs(tmp_path, bucket, bench={**SMALL_BENCH, "floors": floors},
                      alerts={"webhook_url": hook_url})
    env = demo.airflow_env(REPO, {"AIRFLOW_HOME": str(tmp_path / "airflow"),
                                  "RECFORGE_SPECS_DIR": str(specs)})
    ok, out = demo.run_dag_test("recforge__pets", env)
    assert not ok and "BenchFloorsFailed" in out
    assert_nothing_published(f"s3://{bucket}/datasets/pets")
    assert len(received) == 1, out[-3000:]
    alert = json.dumps(received[0]["json"])
    assert "benchmark" in alert and "is below the floor 1000000000" in alert


def test_warning_publishes_and_notifies(bucket, tmp_path, webhook_server):  # noqa: F811
    hook_url, received = webhook_server
    make_source(bucket)
    # no class is exactly as large as the largest: class balance (a warn check) warns;
    # on_warning keeps its default (true)
    specs = dag_specs(tmp_path, bucket, quality={"class_balance_min_ratio": 1.0},
                      alerts={"webhook_url": hook_url})
    env = demo.airflow_env(REPO, {"AIRFLOW_HOME": str(tmp_path / "airflow"),
                                  "RECFORGE_SPECS_DIR": str(specs)})
    ok, out = demo.run_dag_test("recforge__pets", env)
    assert ok, out[-3000:]
    assert storage.exists(f"s3://{bucket}/datasets/pets/latest.json")
    assert len(received) == 1, out[-3000:]
    assert "class_balance" in json.dumps(received[0]["json"])


def assert_nothing_published(root: str) -> None:
    """No version a reader can see: the run's folder (merge composed into it) has no
    manifest, so ``releases`` lists none and ``latest.json`` is absent."""
    from recforge import releases
    from recforge.format import names

    assert releases.versions(root) == [] and releases.resolve_latest(root) is None
    assert not [o.key for o in storage.list_objects(root)
                if o.key.endswith(names.MANIFEST) or o.key == names.LATEST]
