"""``storage.parse_timestamp``: botocore's values, faster for S3's ISO form, through a real
listing."""

from __future__ import annotations

import pytest
from botocore.utils import parse_timestamp as botocore_parse

from recforge import storage


@pytest.mark.parametrize("value", [
    "2026-12-01T02:00:00.000Z", "2026-12-01T02:00:00Z", "2026-12-01T23:59:59.123456Z",
    "2026-12-01T02:00:00+00:00", "2026-12-01T04:00:00.5+02:00",
    "Tue, 01 Dec 2026 02:00:00 GMT", "1764554400", 1764554400,
])
def test_same_value_as_botocore(value):
    ours, theirs = storage.parse_timestamp(value), botocore_parse(value)
    assert ours == theirs and ours.utcoffset() == theirs.utcoffset()
    assert ours.tzinfo is not None


def test_a_listing_parses_last_modified_with_it(bucket, monkeypatch):
    storage.put_bytes(f"s3://{bucket}/a/x", b"1")
    seen = []
    fast = storage.parse_timestamp
    monkeypatch.setattr(storage.client, "parse_timestamp", lambda v: seen.append(v) or fast(v))
    storage.client._sessions.clear()  # a new session picks the parser up
    storage.configure_s3(None)  # and new clients
    (obj,) = storage.list_objects(f"s3://{bucket}/a")
    assert seen and obj.modified and abs(obj.modified - botocore_parse(seen[0]).timestamp()) < 1
    storage.client._sessions.clear()  # later tests get sessions with the real parser
