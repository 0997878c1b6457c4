"""A bucket whose policy refuses any write without SSE-KMS under its key, its storage class
and the bucket owner condition: a whole ``recforge build`` publishes into it when the spec
says so (``publish.s3``), every object of the run encrypted, classed and owner-checked; a
spec that does not say so fails naming the refusal, and publishes nothing."""

from __future__ import annotations

import uuid

import pytest

from recforge import pipeline, releases, storage
from tests.common.faultproxy import BucketPolicy, running_proxy
from tests.common.sources import make_source, make_spec

OWNER = "123456789012"  # moto's account: moto itself accepts the header
KEY = "arn:aws:kms:us-east-1:123456789012:key/recforge-locked"
LOCKED = {"sse": "aws:kms", "kms_key_id": KEY, "expected_bucket_owner": OWNER,
          "storage_class": "STANDARD_IA"}


@pytest.fixture
def locked(s3_endpoint, monkeypatch):
    """A bucket holding a small source, behind a proxy enforcing its policy, boto3 pointed
    at the proxy; yields (bucket, proxy). No write options are left behind."""
    storage.use_write_options({})
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    storage.s3_client().create_bucket(Bucket=bucket)
    make_source(bucket, classes=("dog", "eel"), per_class=6)
    with running_proxy(s3_endpoint, policy=BucketPolicy(bucket, OWNER, KEY,
                                                        "STANDARD_IA")) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        yield bucket, proxy
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    storage.use_write_options({})


@pytest.mark.pipeline  # a whole build: a slow tier
def test_a_build_publishes_into_a_locked_down_bucket(locked):
    bucket, proxy = locked
    spec = make_spec(bucket, publish={"uri": f"s3://{bucket}/datasets", "s3": LOCKED})
    out = pipeline.build(spec, run_id="locked", workers=1)
    assert proxy.denials == [] and proxy.stats["requests"] > 50
    assert releases.read_latest(spec)["uri"] == out["publish"]["uri"]
    written = [o.key for o in storage.list_objects(f"s3://{bucket}/datasets")]
    assert any(k.endswith("/train.rec") for k in written)  # published
    assert any(k.startswith("_staging/") for k in written)  # and staged
    client = storage.s3_client()
    for key in written:
        got = client.head_object(Bucket=bucket, Key=f"datasets/{key}")
        assert (got.get("ServerSideEncryption"), got.get("SSEKMSKeyId"),
                got.get("StorageClass")) == ("aws:kms", KEY, "STANDARD_IA"), key


@pytest.mark.parametrize("s3, refusal", [
    ({}, f"no x-amz-expected-bucket-owner: {OWNER}"),  # its first request: the listing
    ({"expected_bucket_owner": OWNER}, f"a write without SSE-KMS under {KEY}"),
], ids=["nothing", "owner-only"])
def test_a_spec_without_the_options_fails_naming_the_refusal(locked, s3, refusal):
    bucket, proxy = locked
    spec = make_spec(bucket, publish={"uri": f"s3://{bucket}/plain", "s3": s3})
    with pytest.raises(Exception, match="AccessDenied|403") as refused:
        pipeline.build(spec, run_id="plain", workers=1)  # (a HEAD's 403 has no body)
    assert set(proxy.denials) == {refusal}
    assert "publish.s3 / staging_s3" in storage.explain(refused.value)
    storage.use_write_options({f"s3://{bucket}": storage.WriteOptions(
        expected_bucket_owner=OWNER)})
    assert not list(storage.list_objects(f"s3://{bucket}/plain/pets"))  # nothing published
