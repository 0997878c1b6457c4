"""A listing that lists a prefix's folders side by side yields what one paginated listing
yields, in the same order, on both stores; it fans out only where folders hold enough keys,
a prefix within one page costs one request, and a failing folder fails the listing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from recforge import storage
from recforge.storage import listing, retry
from tests.common.faultproxy import running_proxy

pytestmark = pytest.mark.both_stores  # the listings against moto and Ceph RGW


@pytest.fixture
def small_pages(monkeypatch):
    """Pages of 7 keys: the layouts below span many pages without thousands of objects."""
    monkeypatch.setattr(listing, "PAGE_KEYS", 7)


def _put(bucket: str, prefix: str, keys: list[str]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: storage.put_bytes(f"s3://{bucket}/{prefix}/{k}",
                                                  k.encode()), keys))


def _listed(uri: str, threads: int) -> list[tuple[str, int, str]]:
    return [(o.key, o.size, o.etag) for o in storage.list_objects(uri, threads=threads)]


LAYOUTS = {
    # one folder a class; keys that sort around "/" beside folder names ("a.jpg" < "a/" <
    # "a0"), a key at the top, a non-ASCII name
    "classes": [f"c{c:02d}/img{i:03d}.jpg" for c in range(9) for i in range(11)]
    + ["a.jpg", "a/x.jpg", "a/y.jpg", "a/z.jpg", "a0.jpg", "top.jpg", "é/ü.jpg", "é/ö.jpg"],
    # splits, then classes: the fan-out looks one level down
    "splits": [f"{s}/c{c}/i{i:02d}.png" for s in ("train", "val") for c in range(6)
               for i in range(9)],
    # one folder per image: not fanned out (a request a folder)
    "per_image": [f"id{i:04d}/image.jpg" for i in range(60)],
    # no folders at all
    "flat": [f"img{i:04d}.jpg" for i in range(40)],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_fanned_out_listing_is_the_paginated_one(bucket, small_pages, layout):
    _put(bucket, layout, LAYOUTS[layout])
    uri = f"s3://{bucket}/{layout}"
    one = _listed(uri, threads=1)
    assert [k for k, _, _ in one] == sorted(LAYOUTS[layout])
    assert _listed(uri, threads=4) == one
    assert _listed(uri + "/", threads=4) == one


def test_the_fan_out_follows_the_folders_holding_the_first_page():
    at_least = 1000 / 16  # keys a folder on the page: a page's worth per thread
    keys = [f"p/train/n0144/{i}.jpg" for i in range(1000)]
    assert listing._fan_out_depth(keys, "p/", at_least) == 2  # the classes under train/
    two = [f"p/train/tiny0/images/{i}.jpg" for i in range(500)] + \
        [f"p/train/tiny1/images/{i}.jpg" for i in range(500)]
    assert listing._fan_out_depth(two, "p/", at_least) == 2  # the page spreads over classes
    small = [f"p/c{c:03d}/{i}.jpg" for c in range(50) for i in range(20)]
    assert listing._fan_out_depth(small, "p/", at_least) == 0  # 20 keys a folder: paged
    assert listing._fan_out_depth([f"p/id{i}/x.jpg" for i in range(1000)], "p/", at_least) == 0
    assert listing._fan_out_depth([f"p/x{i}.jpg" for i in range(1000)], "p/", at_least) == 0


def test_folders_are_listed_at_once_and_one_page_costs_one_request(bucket, small_pages):
    _put(bucket, "many", LAYOUTS["classes"])
    _put(bucket, "few", ["a/1.jpg", "b/2.jpg"])
    before = retry.counts().get("list_objects_v2", 0)
    assert len(_listed(f"s3://{bucket}/few", threads=4)) == 2
    assert retry.counts()["list_objects_v2"] - before == 1
    before = retry.counts()["list_objects_v2"]
    _listed(f"s3://{bucket}/many", threads=4)
    fanned = retry.counts()["list_objects_v2"] - before
    before = retry.counts()["list_objects_v2"]
    _listed(f"s3://{bucket}/many", threads=1)
    paged = retry.counts()["list_objects_v2"] - before
    assert paged == -(-len(LAYOUTS["classes"]) // 7)  # 16 pages one after the other
    # the first page, the folder listing (12 folders in 2 pages), then each folder after
    # the first page's last key: 9 classes of 2 pages and 2 of one page, the rest passed over
    assert fanned == 1 + 2 + 2 * 8 + 2 + 1


def test_a_folder_that_fails_fails_the_listing(bucket, small_pages, monkeypatch):
    _put(bucket, "broken", LAYOUTS["classes"])
    real = retry.call

    def call(operation, uri, **kwargs):
        if kwargs.get("Prefix", "").endswith("c05/"):
            raise PermissionError("AccessDenied on c05/")
        return real(operation, uri, **kwargs)

    monkeypatch.setattr(retry, "call", call)
    with pytest.raises(PermissionError, match="c05"):
        _listed(f"s3://{bucket}/broken", threads=4)


def test_faults_in_a_fanned_out_listing_are_retried_and_nothing_is_missed(
        bucket, small_pages, s3_endpoint, monkeypatch):
    _put(bucket, "faulty", LAYOUTS["classes"] + LAYOUTS["splits"])
    uri = f"s3://{bucket}/faulty"
    whole = _listed(uri, threads=1)
    monkeypatch.setenv("RECFORGE_S3_BACKOFF_S", "0.01")
    with running_proxy(s3_endpoint, rate=0.3, modes=("slowdown", "internal", "reset"),
                       seed=3) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        assert _listed(uri, threads=4) == whole
    assert proxy.stats["slowdown"] + proxy.stats["internal"] + proxy.stats["reset"] > 5


def test_a_bucket_listed_from_its_root_fans_out_the_same(bucket, small_pages):
    _put(bucket, "root", LAYOUTS["classes"])
    _put(bucket, "other", LAYOUTS["flat"][:9])
    one = _listed(f"s3://{bucket}", threads=1)
    assert len(one) == len(LAYOUTS["classes"]) + 9
    assert _listed(f"s3://{bucket}", threads=4) == one



def test_a_truncated_first_page_without_keys_is_listed_page_by_page(bucket, small_pages,
                                                                     monkeypatch):
    _put(bucket, "empty_first", LAYOUTS["classes"])
    uri = f"s3://{bucket}/empty_first"
    whole = _listed(uri, threads=1)
    real, calls = retry.call, []

    def call(operation, uri_, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:  # a page that holds no key but says more follow
            return {"IsTruncated": True, "Contents": [], "NextContinuationToken": "again"}
        if kwargs.get("ContinuationToken") == "again":
            kwargs = {k: v for k, v in kwargs.items() if k != "ContinuationToken"}
        return real(operation, uri_, **kwargs)

    monkeypatch.setattr(retry, "call", call)
    assert _listed(uri, threads=4) == whole
    assert not any("Delimiter" in kwargs for kwargs in calls)  # no fan-out from no keys
