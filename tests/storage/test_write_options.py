"""storage.write_options: every request into a locked-down bucket carries what its policy asks
for — per operation exactly the parameters S3 takes there — whichever client and write path
sends it: single PUTs, multipart uploads, server-side copies and compositions, through a
proxy that refuses (403 AccessDenied, as S3 does) any request without them."""

from __future__ import annotations

import uuid

import pytest

from recforge import storage
from recforge.storage import multipart, retry, write_options
from recforge.storage.write_options import WriteOptions
from tests.common.faultproxy import BucketPolicy, running_proxy

OWNER = "123456789012"  # moto's account: moto itself accepts the header
KEY = "arn:aws:kms:us-east-1:123456789012:key/recforge-test"
LOCKED = WriteOptions(sse="aws:kms", kms_key_id=KEY, storage_class="STANDARD_IA",
                      expected_bucket_owner=OWNER)
MiB = 1024 ** 2


@pytest.fixture(autouse=True)
def no_options_after():
    yield
    storage.use_write_options({})


def _model(op: str):
    import botocore.session

    return botocore.session.get_session().get_service_model("s3").operation_model(op)


def _params(op: str, **params) -> dict:
    """What the hook makes of ``params`` for operation ``op``."""
    write_options.add_parameters(params, model=_model(op), context={})
    return params


def test_each_parameter_goes_where_s3s_model_takes_it():
    """The parameters the hook adds to each operation are members of its input in botocore's
    S3 model, and the spec's values are S3's."""
    import botocore.session

    from recforge.spec import s3 as spec_s3

    model = botocore.session.get_session().get_service_model("s3")
    creating = WriteOptions(sse="aws:kms", kms_key_id="k", storage_class="STANDARD",
                            acl="bucket-owner-full-control").creating()
    for op in write_options.CREATING:
        members = model.operation_model(op).input_shape.members
        assert set(creating) | {"ExpectedBucketOwner"} <= set(members), op
    for op in write_options.COPYING:
        assert "ExpectedSourceBucketOwner" in model.operation_model(op).input_shape.members
    for op in ("UploadPart", "UploadPartCopy", "CompleteMultipartUpload",
               "AbortMultipartUpload"):  # a multipart upload's encryption is its creation's
        assert not set(creating) & set(model.operation_model(op).input_shape.members), op
    assert set(spec_s3.READABLE_CLASSES + spec_s3.ARCHIVE_CLASSES) <= set(
        model.shape_for("StorageClass").enum)
    assert {"AES256", *spec_s3.KMS} <= set(model.shape_for("ServerSideEncryption").enum)
    assert "bucket-owner-full-control" in model.shape_for("ObjectCannedACL").enum


def test_the_hook_adds_per_operation_and_by_the_longest_prefix():
    storage.use_write_options({"s3://locked/datasets": LOCKED,
                               "s3://locked/datasets/_staging": WriteOptions(sse="AES256"),
                               "s3://other/x": WriteOptions(storage_class="ONEZONE_IA")})
    kms = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": KEY,
           "StorageClass": "STANDARD_IA", "ExpectedBucketOwner": OWNER}
    for op in ("PutObject", "CreateMultipartUpload"):
        assert _params(op, Bucket="locked", Key="datasets/v1/a.rec") == {
            "Bucket": "locked", "Key": "datasets/v1/a.rec", **kms}
    # the staging prefix's own options; the bucket's owner guards every request to it
    assert _params("PutObject", Bucket="locked", Key="datasets/_staging/r/x.json") == {
        "Bucket": "locked", "Key": "datasets/_staging/r/x.json",
        "ServerSideEncryption": "AES256", "ExpectedBucketOwner": OWNER}
    for key in ("raw/a.jpg", "datasets2/a.rec", "datasets"[:-1]):  # whole segments only
        assert _params("PutObject", Bucket="locked", Key=key) == {
            "Bucket": "locked", "Key": key, "ExpectedBucketOwner": OWNER}
    copy = _params("CopyObject", Bucket="locked", Key="datasets/v/b",
                   CopySource={"Bucket": "locked", "Key": "datasets/_staging/b"})
    assert copy == {"Bucket": "locked", "Key": "datasets/v/b", **kms,
                    "CopySource": {"Bucket": "locked", "Key": "datasets/_staging/b"},
                    "ExpectedSourceBucketOwner": OWNER}
    part = {"Bucket": "locked", "Key": "datasets/v/c", "UploadId": "u", "PartNumber": 1}
    assert _params("UploadPartCopy", **part, CopySource="other/x/y") == {
        **part, "CopySource": "other/x/y", "ExpectedBucketOwner": OWNER}
    assert _params("UploadPartCopy", **part, CopySource="locked/raw/y")[
        "ExpectedSourceBucketOwner"] == OWNER
    for op in ("UploadPart", "CompleteMultipartUpload", "AbortMultipartUpload"):
        assert _params(op, **part) == {**part, "ExpectedBucketOwner": OWNER}, op
    for op, params in (("GetObject", {"Key": "raw/a"}), ("HeadObject", {"Key": "raw/a"}),
                       ("ListObjectsV2", {"Prefix": "raw/"}), ("DeleteObject", {"Key": "a"}),
                       ("DeleteObjects", {"Delete": {"Objects": []}}), ("HeadBucket", {})):
        assert _params(op, Bucket="locked", **params)["ExpectedBucketOwner"] == OWNER, op
    assert _params("PutObject", Bucket="other", Key="x/a") == {
        "Bucket": "other", "Key": "x/a", "StorageClass": "ONEZONE_IA"}
    assert _params("GetObject", Bucket="elsewhere", Key="a") == {"Bucket": "elsewhere",
                                                                  "Key": "a"}
    # what the caller set stays; a presigned URL gets nothing (a browser sends no headers)
    assert _params("PutObject", Bucket="locked", Key="datasets/a",
                   StorageClass="STANDARD")["StorageClass"] == "STANDARD"
    presigned = {"Bucket": "locked", "Key": "datasets/a"}
    write_options.add_parameters(presigned, model=_model("GetObject"),
                                 context={"is_presign_request": True})
    assert presigned == {"Bucket": "locked", "Key": "datasets/a"}


def test_the_table_is_replaced_whole_and_a_bucket_has_one_owner():
    storage.use_write_options({"s3://locked/datasets": LOCKED, "/local/path": LOCKED})
    assert set(write_options.in_force()) == {"s3://locked/datasets"}
    storage.use_write_options({"s3://locked/other": WriteOptions(sse="AES256")})
    assert _params("PutObject", Bucket="locked", Key="datasets/a") == {
        "Bucket": "locked", "Key": "datasets/a"}
    with pytest.raises(ValueError, match="two expected owners"):
        storage.use_write_options({
            "s3://locked/a": LOCKED,
            "s3://locked/b": WriteOptions(expected_bucket_owner="111122223333")})


def test_a_presigned_url_names_no_header_the_browser_would_not_send(s3_endpoint):
    storage.use_write_options({"s3://locked/datasets": LOCKED})
    signed: list[dict] = []
    storage.s3_client().meta.events.register(
        "before-sign.s3.GetObject", lambda request, **_: signed.append(dict(request.headers)),
        unique_id="test-presign-headers")
    try:
        url = storage.browser_url("s3://locked/datasets/a.json")
    finally:
        storage.s3_client().meta.events.unregister("before-sign.s3.GetObject",
                                                   unique_id="test-presign-headers")
    assert signed and not any("x-amz-expected-bucket-owner" in {k.lower() for k in h}
                              for h in signed), signed
    assert "expected-bucket-owner" not in url.lower()


@pytest.fixture
def locked(s3_endpoint, monkeypatch):
    """A bucket behind a proxy that refuses what its policy refuses, boto3 pointed at the
    proxy; yields (bucket, proxy)."""
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    storage.s3_client().create_bucket(Bucket=bucket)
    policy = BucketPolicy(bucket, OWNER, KEY, "STANDARD_IA")
    with running_proxy(s3_endpoint, policy=policy) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        yield bucket, proxy
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)


def _stored(bucket: str, key: str) -> tuple:
    got = storage.s3_client().head_object(Bucket=bucket, Key=key)
    return got.get("ServerSideEncryption"), got.get("SSEKMSKeyId"), got.get("StorageClass")


def test_every_write_path_satisfies_the_policy(locked, tmp_path):
    """A PUT, a multipart upload (5 MiB parts), CopyObject, UploadPartCopy (the copy of a
    multipart object, a composition of parts of 5 MiB and more), listings and deletes: the
    proxy refuses none, and every object is SSE-KMS under the key, in the class."""
    bucket, proxy = locked
    root = f"s3://{bucket}/datasets"
    storage.use_write_options({root: LOCKED})
    before = retry.counts()
    storage.put_bytes(f"{root}/small.json", b"{}")
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * (11 * MiB // 256))
    multipart.upload_file(big, f"{root}/big.bin", part_size=5 * MiB)  # 3 parts
    storage.copy_exact(f"{root}/small.json", f"{root}/copied.json")  # CopyObject
    storage.copy_exact(f"{root}/big.bin", f"{root}/big-copy.bin")  # UploadPartCopy
    six = tmp_path / "six.bin"
    six.write_bytes(b"6" * 6 * MiB)
    storage.upload(six, f"{root}/parts/a")
    storage.upload(six, f"{root}/parts/b")
    storage.compose([f"{root}/parts/a", f"{root}/parts/b"], f"{root}/joined.bin")
    sent = {op: n - before.get(op, 0) for op, n in retry.counts().items()}
    for op in ("put_object", "create_multipart_upload", "upload_part", "copy_object",
               "upload_part_copy", "complete_multipart_upload"):
        assert sent.get(op), (op, sent)
    assert proxy.denials == []
    keys = [o.key for o in storage.list_objects(root)]
    assert len(keys) == 7
    for key in keys:
        assert _stored(bucket, f"datasets/{key}") == ("aws:kms", KEY, "STANDARD_IA"), key
    assert storage.get_bytes(f"{root}/joined.bin") == b"6" * 12 * MiB
    assert storage.delete_prefix(root) == 7
    assert proxy.denials == [] and proxy.stats["requests"] > 20


def test_without_the_options_the_locked_bucket_refuses_by_name(locked):
    from botocore.exceptions import ClientError

    bucket, proxy = locked
    with pytest.raises(ClientError, match="AccessDenied"):
        storage.put_bytes(f"s3://{bucket}/datasets/a.json", b"{}")
    assert proxy.denials == [f"no x-amz-expected-bucket-owner: {OWNER}"]
    storage.use_write_options({f"s3://{bucket}/datasets": WriteOptions(
        expected_bucket_owner=OWNER)})
    with pytest.raises(ClientError, match="AccessDenied") as refused:
        storage.put_bytes(f"s3://{bucket}/datasets/a.json", b"{}")
    assert f"without SSE-KMS under {KEY}" in str(refused.value)
    storage.use_write_options({f"s3://{bucket}/datasets": WriteOptions(
        sse="aws:kms", kms_key_id=KEY, storage_class="STANDARD_IA", acl="public-read",
        expected_bucket_owner=OWNER)})
    with pytest.raises(ClientError, match="AccessControlListNotSupported"):
        storage.put_bytes(f"s3://{bucket}/datasets/a.json", b"{}")
    assert storage.head(f"s3://{bucket}/datasets/a.json") is None


def test_a_client_from_a_configured_factory_carries_them_too(locked):
    """``configure_s3``'s factory (the Airflow connection's, in a task) makes clients of its
    own: they pass through ``s3_client`` and get the hook like boto3's chain's."""
    import boto3

    bucket, proxy = locked
    storage.use_write_options({f"s3://{bucket}/d": LOCKED})
    made = []

    def factory():
        made.append(boto3.session.Session().client("s3", config=storage.client_config()))
        return made[-1]

    storage.configure_s3(factory)
    try:
        storage.put_bytes(f"s3://{bucket}/d/a.json", b"{}")
        assert made and storage.s3_client() is made[-1]
    finally:
        storage.configure_s3(None)
    assert proxy.denials == []
    assert _stored(bucket, "d/a.json") == ("aws:kms", KEY, "STANDARD_IA")
