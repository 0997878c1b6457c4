"""ingest's listing of a source, side by side: one paginated listing (the reference, what
``aws s3 ls --recursive`` and im2rec-style scripts do) against the source's folders listed
``storage.LIST_THREADS`` at a time, through a proxy that holds every response back
0-``2 x --latency-ms`` (S3's per-request latency, which the loopback server lacks).

A listing's time on S3 is its requests one after the other, not its objects: ImageNet's
1.28 M images are 1,281 pages of 1,000 keys. Creating a million objects on the local server
takes too long for a benchmark, so ``--page-keys`` shrinks the page instead: the default,
100 class folders of 200 objects listed 16 keys a page, is 1,250 pages one after the other,
ImageNet's count (its folders then take 13 pages each where ImageNet's take 2, and finding
them 7 pages where ImageNet's 1,000 take one: the fan-out is charged more than it would be).

    PYTHONPATH=include .venv/bin/python benchmarks/bench_listing.py [--classes 100]
        [--per-class 200] [--page-keys 16] [--latency-ms 25] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from recforge import storage
from recforge.storage import listing, retry


def timed_listing(uri: str, threads: int) -> tuple[float, int, int]:
    """(seconds, objects, list requests) of one listing of ``uri``."""
    before = retry.counts().get("list_objects_v2", 0)
    started = time.perf_counter()
    n = sum(1 for _ in storage.list_objects(uri, threads=threads))
    return (time.perf_counter() - started, n,
            retry.counts()["list_objects_v2"] - before)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--per-class", type=int, default=200)
    ap.add_argument("--page-keys", type=int, default=16)
    ap.add_argument("--latency-ms", type=float, default=25.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from recforge.dev import s3server
    from tests.common.faultproxy import running_proxy

    listing.PAGE_KEYS = args.page_keys
    with s3server.running_server() as endpoint:
        os.environ.update(s3server.DEV_CREDENTIALS)
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        storage.s3_client().create_bucket(Bucket="bench-listing")
        keys = [f"raw/n{c:08d}/n{c:08d}_{i}.JPEG" for c in range(args.classes)
                for i in range(args.per_class)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: storage.put_bytes(f"s3://bench-listing/{k}", b"x"), keys))
        uri = "s3://bench-listing/raw"
        with running_proxy(endpoint, rate=1.0, modes=("delay",),
                           max_delay_s=2 * args.latency_ms / 1000) as proxy:
            os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
            storage.connect()  # a client for the proxy's endpoint
            runs: dict[int, list] = {1: [], listing.LIST_THREADS: []}
            for _ in range(args.repeat):  # taking turns
                for threads in runs:
                    runs[threads].append(timed_listing(uri, threads))
    print(f"{len(keys):,} objects in {args.classes} folders, {args.page_keys} keys a page, "
          f"~{args.latency_ms:g} ms a request (0-{2 * args.latency_ms:g} ms), moto behind a "
          f"delaying proxy; medians of {args.repeat}")
    print(f"  {'listing':<40}{'seconds':>9}{'requests':>10}{'objects':>10}")
    seconds = {}
    for threads, got in runs.items():
        assert all(n == len(keys) for _, n, _ in got), "a listing missed objects"
        seconds[threads] = statistics.median(s for s, _, _ in got)
        name = ("one paginated listing (before)" if threads == 1
                else f"folders {threads} at a time")
        print(f"  {name:<40}{seconds[threads]:>9.2f}{got[0][2]:>10}{got[0][1]:>10,}")
    print(f"  {seconds[1] / seconds[listing.LIST_THREADS]:.1f}x faster")


if __name__ == "__main__":
    main()
