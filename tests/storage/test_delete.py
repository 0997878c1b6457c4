"""storage.delete_many: batched deletes that say which objects S3 refused to delete."""

from __future__ import annotations

import pytest

from recforge import storage

pytestmark = pytest.mark.both_stores  # each test against moto and Ceph RGW


def test_delete_many_deletes_in_batches_across_buckets_and_local_paths(bucket, tmp_path):
    uris = [f"s3://{bucket}/d/{i}.rec" for i in range(1203)]  # two batches
    for uri in uris[:5] + uris[-5:]:
        storage.put_bytes(uri, b"x")
    local = tmp_path / "a.rec"
    local.write_bytes(b"x")
    assert storage.delete_many(uris + [str(local), str(tmp_path / "absent.rec")]) == 1205
    assert list(storage.list_objects(f"s3://{bucket}/d/")) == []
    assert not local.exists()


@pytest.mark.moto_only(reason="refusals are injected into moto's DeleteObjects (moto internals)")
def test_keys_s3_refuses_to_delete_fail_naming_the_first(bucket, monkeypatch):
    from moto.s3 import models

    keep = f"s3://{bucket}/locked.rec"
    for uri in (keep, f"s3://{bucket}/free.rec"):
        storage.put_bytes(uri, b"x")
    delete_objects = models.S3Backend.delete_objects

    def refusing(self, bucket_name, objects, *args, **kwargs):  # as a legal hold or a deny
        deleted, errors = delete_objects(self, bucket_name, [
            o for o in objects if o["Key"] != "locked.rec"], *args, **kwargs)
        return deleted, errors + ["locked.rec"]

    monkeypatch.setattr(models.S3Backend, "delete_objects", refusing)
    with pytest.raises(OSError, match=r"could not delete 1 of 2 objects .* 'locked.rec'"):
        storage.delete_many([keep, f"s3://{bucket}/free.rec"])
    assert storage.exists(keep) and not storage.exists(f"s3://{bucket}/free.rec")


@pytest.fixture
def refusing(bucket, s3_endpoint, monkeypatch):
    """A proxy in front of the store that can refuse deletes (``proxy.refuse_delete``),
    boto3 pointed at it with short back-offs; yields it."""
    from tests.common.faultproxy import running_proxy

    monkeypatch.setenv("RECFORGE_S3_BACKOFF_S", "0.01")
    with running_proxy(s3_endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        yield proxy
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)


def _objects(bucket: str, prefix: str, n: int) -> list[str]:
    keys = [f"{prefix}/{i}.rec" for i in range(n)]
    for key in keys:
        storage.put_bytes(f"s3://{bucket}/{key}", b"x")
    return keys


@pytest.mark.moto_only(reason="the proxy rewrites DeleteObjects bodies: RGW checks signatures")
def test_delete_prefix_raises_naming_the_keys_the_store_refused(bucket, refusing):
    """DeleteObjects answers 200 and lists the keys it refused: delete_prefix deletes the
    rest, then fails naming the first refused keys and their codes — a prefix it reports
    deleted is empty."""
    keys = _objects(bucket, "old", 6)
    for key in keys[1:5]:
        refusing.refuse_delete(bucket, key)
    with pytest.raises(storage.DeleteRefused) as refused:
        storage.delete_prefix(f"s3://{bucket}/old")
    message = str(refused.value)
    assert message.startswith(f"could not delete 4 of 6 objects in s3://{bucket}/old: ")
    assert "'old/1.rec': AccessDenied" in message and "'old/3.rec': AccessDenied" in message
    assert message.endswith("; and 1 more") and isinstance(refused.value, OSError)
    assert sorted(e["Key"] for e in refused.value.errors) == keys[1:5]
    assert sorted(o.key for o in storage.list_objects(f"s3://{bucket}/old")) == [
        k.removeprefix("old/") for k in keys[1:5]]


@pytest.mark.moto_only(reason="the proxy rewrites DeleteObjects bodies: RGW checks signatures")
def test_keys_refused_for_now_are_sent_again_alone_under_the_retry_rule(bucket, refusing):
    """A key refused with a transient code (SlowDown, InternalError) is sent again, with
    the others so refused and not the whole batch, through the one retry rule; one refused
    past the rule's attempts is reported like any refusal."""
    from recforge.storage import retry

    keys = _objects(bucket, "busy", 4)
    refusing.refuse_delete(bucket, keys[0], "SlowDown", times=2)
    refusing.refuse_delete(bucket, keys[1], "InternalError", times=1)
    before = retry.counts().get("delete_objects", 0)
    assert storage.delete_prefix(f"s3://{bucket}/busy") == 4
    assert retry.counts()["delete_objects"] - before == 3
    assert refusing.stats["delete_refused"] == 3
    assert list(storage.list_objects(f"s3://{bucket}/busy")) == []

    keys = _objects(bucket, "stuck", 2)
    refusing.refuse_delete(bucket, keys[0], "SlowDown")
    with pytest.raises(storage.DeleteRefused, match=r"1 of 2 .*'stuck/0.rec': SlowDown"):
        storage.delete_many(f"s3://{bucket}/{k}" for k in keys)
    assert refusing.stats["delete_refused"] == 3 + retry.READ_ATTEMPTS
    assert [o.key for o in storage.list_objects(f"s3://{bucket}/stuck")] == ["0.rec"]


def test_a_local_prefix_that_cannot_be_removed_is_an_error(tmp_path, monkeypatch):
    """A file the system will not remove (a permission; faked here, the tests may run as
    root) fails the delete; a folder already gone is no error."""
    import os

    folder = tmp_path / "ds" / "locked"
    folder.mkdir(parents=True)
    (folder / "a.rec").write_bytes(b"x")
    unlink = os.unlink

    def refusing(path, *args, **kwargs):
        if str(path).endswith("a.rec"):
            raise PermissionError(13, "Permission denied", str(path))
        return unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refusing)
    with pytest.raises(PermissionError):
        storage.delete_prefix(str(tmp_path / "ds"))
    assert (folder / "a.rec").exists()
    monkeypatch.setattr(os, "unlink", unlink)
    assert storage.delete_prefix(str(tmp_path / "ds")) == 1
    assert storage.delete_prefix(str(tmp_path / "absent")) == 0
