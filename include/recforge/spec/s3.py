"""``publish.s3`` and ``staging_s3``: what every write into the publish target (and the
staging prefix) carries, for a bucket whose policy refuses writes without it — server-side
encryption and its KMS key, the storage class, a canned ACL — and the account that must own
the bucket (S3's bucket owner condition, which guards every request to it).

Only values S3 takes are accepted, and only combinations that mean something: a KMS key
with a KMS encryption, an account id of 12 digits, a storage class whose objects can be read
at once (recforge reads back every object it writes: merge composes, publish verifies).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from recforge.spec.base import StrictModel

# S3's storage classes (botocore's StorageClass enum) whose objects are read like STANDARD
READABLE_CLASSES = ("STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA",
                    "INTELLIGENT_TIERING", "GLACIER_IR", "OUTPOSTS", "SNOW", "EXPRESS_ONEZONE")
# ... and those that must be restored before a GET: recforge could not read its own writes
ARCHIVE_CLASSES = ("GLACIER", "DEEP_ARCHIVE")
KMS = ("aws:kms", "aws:kms:dsse")
ACCOUNT_RE = re.compile(r"^[0-9]{12}$")


class S3Spec(StrictModel):
    """Options of every write into one S3 prefix (none are sent by default)."""

    sse: Literal["none", "AES256", "aws:kms", "aws:kms:dsse"] = Field(
        "none", description="server-side encryption each write asks for: none (send no "
        "header: the bucket's default encryption applies), AES256 (SSE-S3), aws:kms "
        "(SSE-KMS) or aws:kms:dsse (dual-layer SSE-KMS)")
    kms_key_id: str | None = Field(
        None, description="with sse aws:kms / aws:kms:dsse: the KMS key (id, ARN or "
        "alias/…) each write names; null: the account's aws/s3 key")
    expected_bucket_owner: str | None = Field(
        None, description="the 12-digit account id that must own the bucket: every request "
        "to it (reads, lists and deletes too) carries it, and S3 refuses the request (403) "
        "if the bucket is another account's")
    storage_class: str | None = Field(
        None, description="the storage class of every object written: one of "
        + ", ".join(READABLE_CLASSES) + "; null: the bucket's default (STANDARD). GLACIER "
        "and DEEP_ARCHIVE are refused: their objects cannot be read back without a restore")
    acl: Literal["none", "bucket-owner-full-control"] = Field(
        "none", description="none: no ACL is sent (what a bucket with ACLs disabled, S3's "
        "default, expects); bucket-owner-full-control: for a policy that requires that "
        "canned ACL on writes from another account")

    @field_validator("kms_key_id")
    @classmethod
    def _key_ok(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or v != v.strip() or " " in v):
            raise ValueError(f"kms_key_id {v!r} is no KMS key: give its id, ARN or alias/name")
        return v

    @field_validator("expected_bucket_owner", mode="before")
    @classmethod
    def _owner_ok(cls, v):
        if isinstance(v, int) and not isinstance(v, bool):  # written unquoted in YAML
            v = str(v)
        if v is not None and not ACCOUNT_RE.match(v):
            raise ValueError(f"expected_bucket_owner {v!r} is no AWS account id: 12 digits, "
                             "e.g. '111122223333' (quote it in YAML, or its leading zeros go)")
        return v

    @field_validator("storage_class")
    @classmethod
    def _class_ok(cls, v: str | None) -> str | None:
        if v is None or v in READABLE_CLASSES:
            return v
        if v in ARCHIVE_CLASSES:
            raise ValueError(f"storage_class {v} keeps objects that must be restored before "
                             "they can be read, and recforge reads back what it writes "
                             "(merge, publish's checks, the loaders): write STANDARD or "
                             "GLACIER_IR, and let a lifecycle rule archive old versions")
        raise ValueError(f"storage_class {v!r} is not one of S3's: "
                         + ", ".join(READABLE_CLASSES))

    @model_validator(mode="after")
    def _key_needs_kms(self) -> S3Spec:
        if self.kms_key_id is not None and self.sse not in KMS:
            raise ValueError(f"kms_key_id is only for sse aws:kms or aws:kms:dsse (sse is "
                             f"{self.sse}): set sse: aws:kms, or drop kms_key_id")
        return self
