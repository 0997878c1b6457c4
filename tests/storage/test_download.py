"""storage.download: a large object as parallel ranged GETs (a small one as one GET), each
under the one retry rule, written to a partial file that takes the name only once its size
and the store's SHA-256 are the object's."""

from __future__ import annotations

import os

import pytest

from recforge import storage
from recforge.errors import ChecksumMismatch
from recforge.storage import checksums, objects
from tests.common.faultproxy import running_proxy

pytestmark = pytest.mark.both_stores  # the ranged GETs against moto and Ceph RGW

PART = 64 << 10  # parts of a test download: a 1 MB object is 16 of them


def sent_since(before: dict[str, int]) -> dict[str, int]:
    now = storage.request_counts()
    return {op: n - before.get(op, 0) for op, n in now.items() if n != before.get(op, 0)}


@pytest.fixture
def big(bucket) -> tuple[str, bytes]:
    data = os.urandom(16 * PART + 1234)  # 17 parts, the last short
    uri = f"s3://{bucket}/big.rec"
    storage.put_bytes(uri, data)
    return uri, data


def test_a_large_object_is_ranged_gets_side_by_side_and_a_small_one_one_get(big, bucket,
                                                                             tmp_path):
    uri, data = big
    before, moved = storage.request_counts(), storage.transferred()
    storage.download(uri, tmp_path / "out" / "big.rec", threads=4, part=PART)
    assert (tmp_path / "out" / "big.rec").read_bytes() == data
    assert sent_since(before) == {"head_object": 1, "get_object": 17}
    assert storage.transferred().minus(moved).down == len(data)  # each byte once
    storage.put_bytes(f"s3://{bucket}/small", b"small")
    before = storage.request_counts()
    storage.download(f"s3://{bucket}/small", tmp_path / "small", part=PART)
    assert (tmp_path / "small").read_bytes() == b"small"
    assert sent_since(before) == {"head_object": 1, "get_object": 1}
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["big.rec", "out", "small"]


def test_a_broken_range_is_read_again_and_the_file_is_byte_identical(big, s3_endpoint,
                                                                     tmp_path, monkeypatch):
    uri, data = big
    monkeypatch.setenv("RECFORGE_S3_BACKOFF_S", "0.01")
    before = storage.request_counts()
    with running_proxy(s3_endpoint, rate=0.3, modes=("reset",), seed=5) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        storage.download(uri, tmp_path / "big.rec", threads=4, part=PART)
    assert (tmp_path / "big.rec").read_bytes() == data
    gets = sent_since(before)["get_object"]
    # a GET broken mid-body is sent again by the retry rule (a HEAD's by botocore)
    assert 17 < gets <= 17 + proxy.stats["reset"]
    assert [p.name for p in tmp_path.iterdir()] == ["big.rec"]


@pytest.mark.moto_only("this Ceph RGW answers a HEAD without the SHA-256 checksum: a "
                       "download there is checked by its size alone")
def test_bytes_that_are_not_the_stores_checksum_take_no_name(big, tmp_path, monkeypatch):
    uri, data = big
    real = objects.head

    def head(u):  # the store's checksum of other bytes: what a corrupted transfer looks like
        info = real(u)
        assert info.checksum == checksums.of_bytes(data)  # the store keeps one
        return objects.ObjectInfo(info.key, info.size, info.etag, None,
                                  checksums.of_bytes(data[::-1]))

    monkeypatch.setattr(objects, "head", head)
    with pytest.raises(ChecksumMismatch, match="SHA-256 is not the store's checksum"):
        storage.download(uri, tmp_path / "big.rec", threads=4, part=PART)
    assert list(tmp_path.iterdir()) == []  # no file, no partial


def test_an_object_replaced_mid_download_is_an_error_not_a_mix(big, tmp_path, monkeypatch):
    uri, data = big
    real, asked = objects.get_range, []

    def get_range(u, start, length, if_match=None):
        asked.append(if_match)
        if start == PART:  # the second part: another writer replaced the object
            storage.put_bytes(uri, data[::-1])
        return real(u, start, length, if_match)

    monkeypatch.setattr(objects, "get_range", get_range)
    with pytest.raises(OSError, match="replaced while it was downloaded"):
        storage.download(uri, tmp_path / "big.rec", threads=1, part=PART)
    assert len(set(asked)) == 1 and asked[0] is not None  # every part asked If-Match
    assert list(tmp_path.iterdir()) == []


def test_a_missing_object_is_file_not_found(bucket, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such object"):
        storage.download(f"s3://{bucket}/nothing", tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def test_a_multipart_object_is_checked_by_its_size(bucket, tmp_path):
    """Its store checksum is of its parts' SHA-256s, not of its bytes: no mismatch."""
    data = os.urandom(storage.MIN_PART + 4096)
    (tmp_path / "src").write_bytes(data)
    storage.multipart.upload_file(tmp_path / "src", f"s3://{bucket}/multi",
                                  part_size=storage.MIN_PART)
    assert storage.head(f"s3://{bucket}/multi").etag.endswith("-2")
    storage.download(f"s3://{bucket}/multi", tmp_path / "got", part=1 << 20)
    assert (tmp_path / "got").read_bytes() == data
