"""S3 through an Airflow connection (amazon provider's hook → recforge's storage), against the
real moto server; without the connection, boto3's own chain stays in charge. An assumed-role
connection's credentials refresh during a task, in its threads and in its forked workers."""

from __future__ import annotations

import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

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


def test_the_connections_clients_carry_the_runs_write_options(bucket, s3_endpoint,
                                                               monkeypatch, restore_storage):
    """A locked-down bucket (a proxy refusing, as S3 does, requests without SSE-KMS under
    its key and the expected owner) reached through the connection: its clients get the
    run's write options as boto3's chain's do."""
    from tests.common.faultproxy import BucketPolicy, running_proxy

    owner, key = "123456789012", "alias/recforge-connection"
    policy = BucketPolicy(bucket, owner, key)
    with running_proxy(s3_endpoint, policy=policy) as proxy:
        monkeypatch.setenv("AIRFLOW_CONN_RECFORGE_TEST_S3", _connection(proxy.endpoint))
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        assert connections.use_connection("recforge_test_s3") == "recforge_test_s3"
        storage.use_write_options({f"s3://{bucket}/d": storage.WriteOptions(
            sse="aws:kms", kms_key_id=key, expected_bucket_owner=owner)})
        try:
            storage.put_bytes(f"s3://{bucket}/d/a.json", b"{}")
            got = storage.s3_client().head_object(Bucket=bucket, Key="d/a.json")
        finally:
            storage.use_write_options({})
    assert storage.s3_client().meta.endpoint_url == proxy.endpoint
    assert proxy.denials == [] and proxy.stats["requests"] == 2
    assert (got["ServerSideEncryption"], got["SSEKMSKeyId"]) == ("aws:kms", key)


def test_no_connection_keeps_boto3s_own_configuration(bucket, s3_endpoint, restore_storage):
    assert connections.use_connection("recforge_no_such_connection") is None
    storage.put_bytes(f"s3://{bucket}/via-env.txt", b"env")
    assert storage.s3_client().meta.endpoint_url == s3_endpoint  # AWS_ENDPOINT_URL


def test_which_connection(monkeypatch):
    assert connections.conn_id_for(None) == "aws_default"
    monkeypatch.setenv("AIRFLOW__RECFORGE__AWS_CONN_ID", "team_s3")
    assert connections.conn_id_for(None) == "team_s3"
    assert connections.conn_id_for("from_the_spec") == "from_the_spec"


# STS's shortest role session is 900 s, and botocore refreshes credentials with 900 s left:
# a role session of 903 s is good for ~3 s here, an hour-long one outlived in seconds.
ROLE_SESSION_S = 903
ROLE_ARN = "arn:aws:iam::123456789012:role/recforge-test"


def _assumed_role_connection(endpoint: str) -> str:
    """The connection's own keys only call STS (moto, same server); S3 gets the role's."""
    return json.dumps({
        "conn_type": "aws", "login": s3server.DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "password": s3server.DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "extra": {"endpoint_url": endpoint, "region_name": "us-east-1", "role_arn": ROLE_ARN,
                  "assume_role_kwargs": {"DurationSeconds": ROLE_SESSION_S},
                  "service_config": {"sts": {"endpoint_url": endpoint}}}})


@pytest.fixture
def assumed_role(s3_endpoint, monkeypatch, restore_storage):
    monkeypatch.setenv("AIRFLOW_CONN_RECFORGE_TEST_ROLE", _assumed_role_connection(s3_endpoint))
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    assert connections.use_connection("recforge_test_role") == "recforge_test_role"


def _signing_keys(client) -> list[str]:
    """The access key of every request ``client`` sends, from its signed ``Authorization``
    header (``AWS4-HMAC-SHA256 Credential=<key>/<date>/...``), appended as they go."""
    keys: list[str] = []

    def sent(request, **_):
        auth = request.headers["Authorization"]
        auth = auth.decode() if isinstance(auth, bytes) else auth
        keys.append(auth.split("Credential=", 1)[1].split("/", 1)[0])

    client.meta.events.register("before-send.s3", sent)
    return keys


def _write_until_the_key_changes(uri: str, deadline_s: float = 30.0) -> list[str]:
    """A long task: writes ``uri`` again and again through this thread's one client until a
    request is signed with another key than the first (or ``deadline_s`` passes); returns
    the keys in request order."""
    client = storage.s3_client()
    keys = _signing_keys(client)
    storage.put_bytes(uri, b"first")
    deadline = time.monotonic() + deadline_s
    while keys[-1] == keys[0] and time.monotonic() < deadline:
        time.sleep(0.25)
        storage.put_bytes(uri, b"later")
    assert storage.s3_client() is client  # the same client all along, as a task keeps it
    return keys


def test_a_long_task_signs_with_the_roles_new_credentials(bucket, assumed_role):
    uri = f"s3://{bucket}/long-task.txt"
    keys = _write_until_the_key_changes(uri)
    login = s3server.DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"]
    assert keys[0].startswith("ASIA") and keys[0] != login  # the role's, not the login's
    assert keys[-1] != keys[0], f"every request signed with {keys[0]} ({len(keys)} requests)"
    assert keys[-1].startswith("ASIA")  # the role assumed again, not a fallback
    assert storage.get_bytes(uri) == b"later"  # and S3 took the request


def _in_forked_worker(uri: str) -> list[str]:
    return _write_until_the_key_changes(uri)


def test_a_forked_worker_assumes_the_role_itself_and_refreshes(bucket, assumed_role):
    parent_keys = _signing_keys(storage.s3_client())
    storage.put_bytes(f"s3://{bucket}/parent.txt", b"parent")
    fork = multiprocessing.get_context("fork")  # as the pack pool's workers start
    with ProcessPoolExecutor(1, mp_context=fork) as pool:
        child_keys = pool.submit(_in_forked_worker, f"s3://{bucket}/child.txt").result(60)
    assert child_keys[0].startswith("ASIA")
    assert child_keys[0] not in parent_keys  # its own session, not the parent's across fork
    assert child_keys[-1] != child_keys[0], "the worker's credentials never refreshed"
    assert storage.get_bytes(f"s3://{bucket}/child.txt") == b"later"
