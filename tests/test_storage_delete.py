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
