"""What a locked-down bucket asks of every request: the write options of each prefix recforge
writes into (server-side encryption, its KMS key, the storage class, a canned ACL) and the
account that must own each bucket, added to the requests by one botocore hook on every
client ``client.s3_client`` makes, so no write path can forget them.

A bucket policy can refuse any ``PutObject`` without ``x-amz-server-side-encryption:
aws:kms`` and the expected key id; a bucket owner condition (``ExpectedBucketOwner``) makes
S3 refuse a request with 403 when the bucket is not the named account's, which guards every
request, reads included (AWS: "available for all S3 object operations and most bucket
operations"). So:

* the writes that create an object (``PutObject``, ``CreateMultipartUpload``, ``CopyObject``)
  get the options of the longest configured prefix their key lies in;
* every request to a bucket that has an expected owner gets ``ExpectedBucketOwner`` where
  the operation takes it (parts, completions, aborts, reads, listings, deletes), and a
  server-side copy from such a bucket ``ExpectedSourceBucketOwner``;
* nothing the caller set is replaced, and a presigned URL gets none (a browser would not
  send the headers its signature covers).

The table is the current run's (:func:`use_write_options`, set by ``recforge.run.Run`` from
the spec): replaced whole, so a spec without options leaves none behind from the last run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

# The operations that create an object, and what each takes (botocore's S3 model; checked
# by the tests against it). The parts, completion and abort of a multipart upload take no
# encryption or class: the upload carries those from its CreateMultipartUpload.
CREATING = ("PutObject", "CreateMultipartUpload", "CopyObject")
COPYING = ("CopyObject", "UploadPartCopy")  # also take ExpectedSourceBucketOwner
HOOK_ID = "recforge-write-options"


@dataclass(frozen=True)
class WriteOptions:
    """The options of writes into one prefix: ``sse`` (``aws:kms``, ``aws:kms:dsse``,
    ``AES256``; None: send none, the bucket's default encryption applies), ``kms_key_id``
    (with a KMS ``sse``; None: the account's ``aws/s3`` key), ``storage_class`` (None: the
    bucket's default, STANDARD), ``acl`` (a canned ACL; None: send none) and
    ``expected_bucket_owner`` (a 12-digit account id; it guards every request to the
    bucket)."""

    sse: str | None = None
    kms_key_id: str | None = None
    storage_class: str | None = None
    acl: str | None = None
    expected_bucket_owner: str | None = None

    def creating(self) -> dict[str, str]:
        """The parameters of a request that creates an object."""
        params = {"ServerSideEncryption": self.sse, "SSEKMSKeyId": self.kms_key_id,
                  "StorageClass": self.storage_class, "ACL": self.acl}
        return {k: v for k, v in params.items() if v}


_lock = threading.Lock()
# (bucket, prefix without a trailing '/') → options; replaced whole, read without the lock
_table: dict[tuple[str, str], WriteOptions] = {}


def _bucket_key(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key.strip("/")


def use_write_options(by_prefix: dict[str, WriteOptions]) -> None:
    """From now on, writes into each ``s3://bucket/prefix`` get its options (the longest
    prefix a key lies in wins), and every request to a bucket whose options name an owner
    gets that owner; the table before is dropped. Local paths are ignored. Two prefixes of
    one bucket naming different owners are refused: a bucket has one owner."""
    global _table
    table = {_bucket_key(uri): opts for uri, opts in by_prefix.items()
             if uri.startswith("s3://")}
    owners: dict[str, str] = {}
    for (bucket, _), opts in table.items():
        owner = opts.expected_bucket_owner
        if owner and owners.setdefault(bucket, owner) != owner:
            raise ValueError(f"bucket {bucket} is given two expected owners, {owners[bucket]} "
                             f"and {owner}: a bucket has one")
    with _lock:
        _table = table


def in_force() -> dict[str, WriteOptions]:
    """The table in force, by ``s3://bucket/prefix``."""
    return {f"s3://{b}/{p}".rstrip("/"): o for (b, p), o in _table.items()}


def options_for(bucket: str, key: str) -> WriteOptions | None:
    """The options of a write of ``key`` into ``bucket``: its longest configured prefix's
    (whole path segments), or None."""
    best, found = -1, None
    for (b, prefix), opts in _table.items():
        if b == bucket and len(prefix) > best and (
                not prefix or key == prefix or key.startswith(prefix + "/")):
            best, found = len(prefix), opts
    return found


def owner_of(bucket: str) -> str | None:
    """The account that must own ``bucket``, if any configured prefix of it names one."""
    return next((o.expected_bucket_owner for (b, _), o in _table.items()
                 if b == bucket and o.expected_bucket_owner), None)


def _source_bucket(copy_source) -> str:
    if isinstance(copy_source, dict):
        return copy_source.get("Bucket", "")
    return str(copy_source).lstrip("/").split("/", 1)[0]


def add_parameters(params: dict, model, context: dict | None = None, **_) -> None:
    """botocore's ``before-parameter-build.s3`` hook: the table's parameters for this
    request, where the operation takes them and the caller set none."""
    if not _table or (context or {}).get("is_presign_request"):
        return
    bucket = params.get("Bucket")
    if not bucket:
        return
    members = model.input_shape.members if model.input_shape is not None else {}
    owner = owner_of(bucket)
    if owner and "ExpectedBucketOwner" in members:
        params.setdefault("ExpectedBucketOwner", owner)
    if model.name in COPYING:
        source_owner = owner_of(_source_bucket(params.get("CopySource", "")))
        if source_owner:
            params.setdefault("ExpectedSourceBucketOwner", source_owner)
    if model.name in CREATING:
        opts = options_for(bucket, params.get("Key", ""))
        for name, value in (opts.creating() if opts else {}).items():
            params.setdefault(name, value)


def register(client) -> None:
    """Attach :func:`add_parameters` to a boto3 S3 client (once, however often called)."""
    client.meta.events.register("before-parameter-build.s3", add_parameters,
                                unique_id=HOOK_ID)
