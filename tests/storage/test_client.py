"""The S3 client is made once per process and configuration and shared by its threads; a
forked child, another endpoint or another factory gets a client of its own."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from recforge import storage
from recforge.storage import client


@pytest.fixture
def counted(monkeypatch):
    """The clients the default factory makes, in order."""
    made = []

    def factory():
        made.append(client.default_client())
        return made[-1]

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    storage.configure_s3(factory)
    yield made
    storage.configure_s3()


def test_threads_share_one_client_made_once(counted):
    start = threading.Barrier(16)

    def first_use(_):
        start.wait()
        return client.s3_client()

    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(first_use, range(16)))
    assert len(counted) == 1
    assert all(c is counted[0] for c in got)
    pool_size = counted[0].meta.config.max_pool_connections
    assert pool_size >= 16, "threads sharing a client would drop connections"


def test_another_endpoint_or_factory_makes_another_client(counted, monkeypatch):
    first = client.s3_client()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:10")
    second = client.s3_client()
    assert second is not first
    assert second.meta.endpoint_url == "http://127.0.0.1:10"
    storage.configure_s3(client.default_client)
    assert client.s3_client() is not second
    assert len(counted) == 2  # the last one came from the new factory


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_makes_its_own(counted):
    parent = client.s3_client()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never share the parent's connections
        try:
            os.write(write, b"own" if client.s3_client() is not parent else b"shared")
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"own"
    assert client.s3_client() is parent


def test_max_attempts_counts_every_request_the_first_included(bucket, s3_endpoint,
                                                              monkeypatch):
    """``RECFORGE_S3_MAX_ATTEMPTS`` requests per botocore call, not one more: a PUT
    answered 500 every time is sent that many times inside each of the rule's attempts."""
    from tests.common.faultproxy import running_proxy

    monkeypatch.setenv("RECFORGE_S3_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("RECFORGE_S3_RETRY_MODE", "standard")
    monkeypatch.setenv("RECFORGE_S3_BACKOFF_S", "0.001")
    with running_proxy(s3_endpoint, rate=1.0, modes=("internal",)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        with pytest.raises(Exception) as failed:
            storage.put_bytes(f"s3://{bucket}/any.jpg", b"bytes")
        assert storage.is_transient(failed.value)
        assert proxy.stats["internal"] == 2 * storage.retry.READ_ATTEMPTS
