"""storage.record_writes: what a stage wrote, and only that: nested blocks each keep their own
record, and a version's claim, touched while a stage records, is in none."""

from __future__ import annotations

import pytest

from recforge import claims, storage
from recforge.format import names


@pytest.fixture(params=["local", "s3"])
def out(request, tmp_path) -> str:
    """A version folder on a local path and on S3."""
    if request.param == "local":
        return str(tmp_path / "v1")
    return f"s3://{request.getfixturevalue('bucket')}/ds/v1"


def test_a_claim_is_in_no_stage_record(out):
    with storage.record_writes(out) as written:
        claims.claim("run-1", out)
        storage.put_bytes(storage.join(out, "train.rec"), b"records")
        claims.touch("run-1", out)
    assert sorted(written) == ["train.rec"]
    assert storage.read_json(storage.join(out, names.CLAIM))["run_id"] == "run-1"


def test_writes_outside_unrecorded_are_still_recorded_there(tmp_path):
    out = str(tmp_path)
    with storage.record_writes(out) as written:
        with storage.unrecorded():
            storage.put_bytes(storage.join(out, "a"), b"a")
        storage.put_bytes(storage.join(out, "b"), b"b")
    assert sorted(written) == ["b"]


def test_nested_blocks_on_one_prefix_each_end_their_own(tmp_path):
    """Two blocks on the same prefix hold equal records: ending the inner one must end the
    inner one, not the first equal entry (the outer one)."""
    out = str(tmp_path)
    with storage.record_writes(out) as outer:
        with storage.record_writes(out) as inner:
            storage.put_bytes(storage.join(out, "a"), b"a")
        storage.put_bytes(storage.join(out, "b"), b"b")
    assert sorted(outer) == ["a", "b"] and sorted(inner) == ["a"]
    storage.put_bytes(storage.join(out, "c"), b"c")  # after both: in neither
    assert sorted(outer) == ["a", "b"] and sorted(inner) == ["a"]
