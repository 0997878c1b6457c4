"""S3 through an Airflow connection (amazon provider's hook → recforge's storage), against the
real moto server; without the connection, boto3's own chain stays in charge."""

from __future__ import annotations

import json

import pytest

from recforge import storage
from recforge.dev import s3server
from recforge.orchestration import connections


@pytest.fixture
def restore_storage():
    yield
    storage.configure_s3(None)


def _connection(endpoint: str) -> str:
    return json.dumps({
        "conn_type": "aws", "login": s3server.DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "password": s3server.DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}})


def test_credentials_and_endpoint_come_from_the_connection(bucket, s3_endpoint, monkeypatch,
                                                           restore_storage):
    monkeypatch.setenv("AIRFLOW_CONN_RECFORGE_TEST_S3", _connection(s3_endpoint))
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)  # nothing left for boto3's own chain
    assert connections.use_connection("recforge_test_s3") == "recforge_test_s3"
    uri = f"s3://{bucket}/via-connection.txt"
    storage.put_bytes(uri, b"hello")
    assert storage.get_bytes(uri) == b"hello"
    assert storage.s3_client().meta.endpoint_url == s3_endpoint


def test_no_connection_keeps_boto3s_own_configuration(bucket, s3_endpoint, restore_storage):
    assert connections.use_connection("recforge_no_such_connection") is None
    storage.put_bytes(f"s3://{bucket}/via-env.txt", b"env")
    assert storage.s3_client().meta.endpoint_url == s3_endpoint  # AWS_ENDPOINT_URL


def test_which_connection(monkeypatch):
    assert connections.conn_id_for(None) == "aws_default"
    monkeypatch.setenv("AIRFLOW__RECFORGE__AWS_CONN_ID", "team_s3")
    assert connections.conn_id_for(None) == "team_s3"
    assert connections.conn_id_for("from_the_spec") == "from_the_spec"
