"""Listing an S3 prefix: one request per 1,000 keys, and, for a prefix of folders, those
folders listed side by side.

A ListObjectsV2 page holds at most 1,000 keys and the next page needs the previous one's
token, so a listing of ImageNet's 1.28 M images is 1,281 requests one after the other:
minutes on S3, every night, however little changed. Sources are folders (one per class,
one per split), and S3 lists any prefix on its own, so :func:`s3_rows` lists the folders
at once in a pool of :data:`LIST_THREADS` and yields their keys in the order one listing
would. Which level of folders it fans out over comes from the first page's keys (at most
:data:`MAX_DEPTH` down), and only where that level's folders hold, on that page, a page's
worth of keys per thread on average: below that, listing a folder apart costs more time
than the pages it replaces, so a layout of one folder per image (a request a folder) is
listed page by page as before. A prefix within one page costs that one request either way.

Every request goes through the one retry rule (``retry.call``), each page on its own, so a
fault late in a long listing does not start it over. Like a paginated listing, the result
is not a snapshot: an object written or deleted during it may or may not be in it.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from recforge.storage import retry
from recforge.storage.uri import split_s3

LIST_THREADS = 16  # folders listed at once (the shared client keeps 64 connections)
MAX_DEPTH = 3  # folder levels below the prefix a fan-out looks through
PAGE_KEYS = 1000  # what S3 returns at most a page (the tests lower it)

# (key relative to the listed prefix, size, ETag, last written in seconds since the epoch)
Row = tuple[str, int, str, float]


def pages(prefix_uri: str, **kwargs) -> tuple[str, Iterator[dict]]:
    """``(prefix with its trailing slash, pages of list_objects_v2)`` for an S3 prefix."""
    bucket, prefix = split_s3(prefix_uri)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return prefix, _pages(prefix_uri, bucket, prefix, **kwargs)


def _pages(uri: str, bucket: str, prefix: str, **kwargs) -> Iterator[dict]:
    token: dict = {}
    while True:
        page = retry.call("list_objects_v2", uri, Bucket=bucket, Prefix=prefix,
                          MaxKeys=PAGE_KEYS, **kwargs, **token)
        yield page
        if not page.get("IsTruncated"):
            return
        token = {"ContinuationToken": page["NextContinuationToken"]}


def s3_rows(prefix_uri: str, threads: int = 1) -> Iterator[Row]:
    """Every object under an S3 prefix, sorted by key (S3's order: UTF-8 bytes), keys
    relative to the prefix; ``threads`` > 1 lists its folders that many at a time (see the
    module docstring)."""
    prefix, listing = pages(prefix_uri)
    first = next(listing)
    yield from _rows(first, prefix)
    if not first.get("IsTruncated"):
        return
    keys = [o["Key"] for o in first.get("Contents", [])]
    depth = _fan_out_depth(keys, prefix, PAGE_KEYS / threads) if threads > 1 else 0
    if depth == 0:
        for page in listing:
            yield from _rows(page, prefix)
        return
    bucket, _ = split_s3(prefix_uri)
    yield from _fanned(prefix_uri, bucket, prefix, keys[-1], depth, threads)


def _rows(page: dict, prefix: str) -> Iterator[Row]:
    for obj in page.get("Contents", []):
        yield (obj["Key"][len(prefix):], obj["Size"], obj["ETag"].strip('"'),
               obj["LastModified"].timestamp())


def _fan_out_depth(keys: list[str], prefix: str, min_keys: float) -> int:
    """The level of folders below ``prefix`` to list apart, judged from the first page's
    ``keys``: going down while the page lies in one folder of a level, the level where it
    spreads over several (or the deepest holding folders, at most ``MAX_DEPTH``), as long
    as that level's folders hold ``min_keys`` keys each on average on the page; 0 (a plain
    paginated listing) when the first level's do not."""
    parts = [k[len(prefix):].split("/") for k in keys]
    depth = 0
    for level in range(1, MAX_DEPTH + 1):
        inside = [tuple(p[:level]) for p in parts if len(p) > level]
        folders = set(inside)
        if not folders or len(inside) / len(folders) < min_keys:
            break
        depth = level
        if len(folders) > 1:
            break
    return depth


def _fanned(uri: str, bucket: str, prefix: str, after: str, depth: int,
            threads: int) -> Iterator[Row]:
    """The keys after ``after`` (the first page's last), in key order: the folders
    ``depth`` levels down found level by level with delimiter listings (a level's folders
    at once), then each listed whole in the pool, a window of them ahead of the one being
    yielded."""
    with ThreadPoolExecutor(threads, thread_name_prefix="recforge-list") as pool:
        plan: list[Row | str] = [prefix]  # rows, and folders still to look into
        for _ in range(depth):
            found = pool.map(lambda f: _entries(uri, bucket, prefix, f, after),
                             [f for f in plan if isinstance(f, str)])
            plan = [e for item in plan
                    for e in (next(found) if isinstance(item, str) else (item,))]
        window: collections.deque[Future | Row] = collections.deque()
        try:
            for item in plan:
                if isinstance(item, str):
                    start = {"StartAfter": after} if after.startswith(item) else {}
                    window.append(pool.submit(_folder, uri, bucket, prefix, item, start))
                else:
                    window.append(item)
                while len(window) > 4 * threads or (window and not isinstance(window[0],
                                                                               Future)):
                    yield from _ready(window.popleft())
            while window:
                yield from _ready(window.popleft())
        finally:  # a failed folder (or a caller that stopped) leaves nothing queued
            for item in window:
                if isinstance(item, Future):
                    item.cancel()


def _ready(item: Future | Row) -> list[Row]:
    return item.result() if isinstance(item, Future) else [item]


def _folder(uri: str, bucket: str, prefix: str, folder: str, start: dict) -> list[Row]:
    return [row for page in _pages(uri, bucket, folder, **start) for row in _rows(page, prefix)]


def _entries(uri: str, bucket: str, prefix: str, folder: str, after: str) -> list[Row | str]:
    """What lies directly in ``folder`` after the key ``after``, in key order: its objects
    (rows) and its folders (names), from a delimiter listing. A folder whose keys all sort
    before ``after`` is left out: a key below a folder compares with any key outside it as
    the folder's name does."""
    entries: list[tuple[str, dict | None]] = []
    for page in _pages(uri, bucket, folder, Delimiter="/"):
        entries += [(o["Key"], o) for o in page.get("Contents", [])]
        entries += [(p["Prefix"], None) for p in page.get("CommonPrefixes", [])]
    out: list[Row | str] = []
    for name, obj in sorted(entries, key=lambda e: e[0]):
        if obj is not None:
            if name > after:
                out += _rows({"Contents": [obj]}, prefix)
        elif name > after or after.startswith(name):
            out.append(name)
    return out
