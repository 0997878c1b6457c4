"""An upload that reuses what the store holds: runs of the file that are bytes of an object
already there are copied server-side (``UploadPartCopy``, pinned to the source's ETag), the
rest sent, within S3's part rules; the object is the local file byte for byte, and a source
that changed since is never trusted."""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest

from recforge import storage
from recforge.storage import multipart
from recforge.storage.multipart import MIN_PART, Reusable, plan_reusing

pytestmark = pytest.mark.both_stores  # the uploads against moto and Ceph RGW

MiB = 1 << 20


def _check(size: int, runs: list[Reusable], pieces: list[tuple], part_size: int) -> None:
    """The plan's rules: in file order, covering the file once, every piece but the last
    at least 5 MiB, sends at most ``part_size`` (10 MiB where less), each copy inside its
    run."""
    pos = 0
    for n, piece in enumerate(pieces):
        if piece[0] == "copy":
            _, i, offset, nbytes = piece
            run = runs[i]
            assert 0 <= offset and offset + nbytes <= run.length
            start = run.start + offset
        else:
            _, start, nbytes = piece
            assert nbytes <= max(part_size, 2 * MIN_PART)
        assert start == pos and nbytes > 0
        assert nbytes >= MIN_PART or n == len(pieces) - 1, (n, pieces)
        pos += nbytes
    assert pos == size


def test_a_run_is_copied_and_the_bytes_before_it_are_sent_as_a_whole_part():
    runs = [Reusable(0, 8 * MiB, "s3://b/old", 0, "e"),
            Reusable(8 * MiB + 100_000, 12 * MiB - 100_000, "s3://b/old", 8 * MiB + 70_000, "e")]
    pieces = plan_reusing(20 * MiB, runs)
    assert pieces == [("copy", 0, 0, 8 * MiB), ("send", 8 * MiB, MIN_PART),
                      ("copy", 1, MIN_PART - 100_000, 12 * MiB - MIN_PART)]
    _check(20 * MiB, runs, pieces, multipart.UPLOAD_PART)


def test_runs_too_short_to_be_a_part_are_sent_and_then_nothing_is_copied():
    runs = [Reusable(0, 3 * MiB, "s3://b/old", 0, "e"),
            Reusable(4 * MiB, 5 * MiB + 1, "s3://b/old", 3 * MiB, "e")]  # 1 MiB lent: too short
    assert plan_reusing(10 * MiB, runs) == []


def test_random_layouts_keep_s3s_part_rules():
    rng = random.Random(7)
    for _ in range(500):
        size = rng.randrange(1, 80 * MiB)
        cuts = sorted(rng.sample(range(size), min(size, rng.randrange(0, 12))))
        bounds = list(zip([0, *cuts], [*cuts, size], strict=True))
        runs = [Reusable(a, b - a, "s3://b/old", rng.randrange(0, 9 * MiB), "e")
                for a, b in bounds if b > a and rng.random() < 0.6]
        part_size = rng.choice([MIN_PART, 8 * MiB, multipart.UPLOAD_PART])
        pieces = plan_reusing(size, runs, part_size)
        if pieces:
            _check(size, runs, pieces, part_size)
        else:  # nothing copied: only when no run could hold a part after lending
            assert all(r.length < (2 if r.start else 1) * MIN_PART for r in runs)


def _patched(tmp_path, bucket: str) -> tuple[bytes, bytes, list[Reusable]]:
    """An 18 MiB object on the store, and a local file that is it with 100 kB replaced
    8 MiB in: the runs on either side are the store's."""
    old = np.random.default_rng(1).bytes(18 * MiB)
    storage.put_bytes(f"s3://{bucket}/old.rec", old)
    etag = storage.head(f"s3://{bucket}/old.rec").etag
    at, cut = 8 * MiB, 100_000
    new = old[:at] + np.random.default_rng(2).bytes(cut + 3) + old[at + cut:]
    (tmp_path / "new.rec").write_bytes(new)
    runs = [Reusable(0, at, f"s3://{bucket}/old.rec", 0, etag),
            Reusable(at + cut + 3, len(old) - at - cut, f"s3://{bucket}/old.rec", at + cut, etag)]
    return old, new, runs


def test_the_object_is_the_file_and_the_runs_never_left_the_store(tmp_path, bucket):
    _, new, runs = _patched(tmp_path, bucket)
    before, moved = storage.request_counts(), storage.transferred()
    storage.upload(tmp_path / "new.rec", f"s3://{bucket}/new.rec", runs)
    after, sent = storage.request_counts(), storage.transferred().minus(moved).up
    assert storage.get_bytes(f"s3://{bucket}/new.rec") == new
    assert after.get("upload_part_copy", 0) - before.get("upload_part_copy", 0) == 2
    assert sent < MIN_PART + MiB  # the 5 MiB part around the change, not 18 MiB


def test_a_source_changed_since_is_not_trusted(tmp_path, bucket, caplog):
    old, new, runs = _patched(tmp_path, bucket)
    storage.put_bytes(f"s3://{bucket}/old.rec", old[::-1])  # same size, other bytes and ETag
    with caplog.at_level(logging.WARNING, logger="recforge.storage.multipart"):
        storage.upload(tmp_path / "new.rec", f"s3://{bucket}/new.rec", runs)
    assert storage.get_bytes(f"s3://{bucket}/new.rec") == new
    assert "is no longer ETag" in caplog.text and "sending every byte" in caplog.text


def test_a_short_run_after_a_long_copy_is_kept_whole_by_shortening_that_copy():
    runs = [Reusable(0, 20 * MiB, "s3://b/old", 0, "e"),
            Reusable(20 * MiB + 100, 6 * MiB, "s3://b/old", 20 * MiB + 50, "e")]
    pieces = plan_reusing(29 * MiB + 100, runs)  # 3 MiB new at the end
    assert pieces == [("copy", 0, 0, 15 * MiB + 100), ("send", 15 * MiB + 100, MIN_PART),
                      ("copy", 1, 0, 6 * MiB), ("send", 26 * MiB + 100, 3 * MiB)]
    # 5 MiB sent before the second run, not the 6 MiB run as well


def test_an_object_uploaded_reusing_runs_composes_alone(tmp_path, bucket):
    """A split of one shard is composed as one copy of it, whatever parts its upload had
    (Ceph RGW does not report them: ``copy_exact`` could not copy it)."""
    _, new, runs = _patched(tmp_path, bucket)
    storage.upload(tmp_path / "new.rec", f"s3://{bucket}/new.rec", runs)
    storage.compose([f"s3://{bucket}/new.rec"], f"s3://{bucket}/split.rec")
    assert storage.get_bytes(f"s3://{bucket}/split.rec") == new
    # and the composed split copies on exactly (publish's copy into a pinned version)
    copied = storage.copy_exact(f"s3://{bucket}/split.rec", f"s3://{bucket}/v/split.rec",
                                [len(new)])
    assert copied.etag == storage.head(f"s3://{bucket}/split.rec").etag
    assert storage.get_bytes(f"s3://{bucket}/v/split.rec") == new


def test_a_source_gone_since_is_not_copied_from(tmp_path, bucket, caplog):
    _, new, runs = _patched(tmp_path, bucket)
    storage.delete(f"s3://{bucket}/old.rec")  # pruned between the fetch and the upload
    with caplog.at_level(logging.WARNING, logger="recforge.storage.multipart"):
        storage.upload(tmp_path / "new.rec", f"s3://{bucket}/new.rec", runs)
    assert storage.get_bytes(f"s3://{bucket}/new.rec") == new
    assert "is gone" in caplog.text and "sending every byte" in caplog.text


def test_a_plan_over_s3s_part_count_is_refused_before_any_request():
    size = 10_001 * 2 * MIN_PART + 6 * MiB  # sends of 10 MiB, then one run copied
    runs = [Reusable(size - 6 * MiB, 6 * MiB, "s3://b/old", 0, "e")]
    with pytest.raises(ValueError, match="S3 allows at most 10000"):
        plan_reusing(size, runs, part_size=2 * MIN_PART)
