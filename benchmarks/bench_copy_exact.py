"""Publish's server-side copy of a composed split (``storage.copy_exact``): its parts one at
a time (the serial reference) and ``COPY_PART_THREADS`` at a time, side by side on the
local S3 server. A composed split has one part per shard or group of shards — ~40 at 20,160
photos, up to ~1,000 at ImageNet size — and each part copy is a request whose time grows
with its bytes, on S3 as on the stand-in.

    PYTHONPATH=include .venv/bin/python benchmarks/bench_copy_exact.py              # 41 parts
    PYTHONPATH=include .venv/bin/python benchmarks/bench_copy_exact.py --parts 100
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from recforge import storage  # noqa: E402
from recforge.dev import s3server  # noqa: E402

BUCKET = "bench-copy-exact"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", type=int, default=41)
    ap.add_argument("--part-mb", type=float, default=15.5, help="MB a part (a shard's .rec)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with s3server.running_server() as endpoint:
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, **s3server.DEV_CREDENTIALS})
        storage.ensure_bucket(f"s3://{BUCKET}")
        client = storage.s3_client()
        blob = os.urandom(int(args.part_mb * 1e6))
        mpu = client.create_multipart_upload(Bucket=BUCKET, Key="split.rec")["UploadId"]
        parts = [{"PartNumber": n, "ETag": client.upload_part(
            Bucket=BUCKET, Key="split.rec", UploadId=mpu, PartNumber=n, Body=blob)["ETag"]}
            for n in range(1, args.parts + 1)]
        client.complete_multipart_upload(Bucket=BUCKET, Key="split.rec", UploadId=mpu,
                                         MultipartUpload={"Parts": parts})
        src_uri = f"s3://{BUCKET}/split.rec"
        src = storage.head(src_uri)
        print(f"{args.parts} parts, {src.size / 1e6:.0f} MB")
        threads_now = storage.COPY_PART_THREADS
        best: dict[int, float] = {}
        for r in range(args.rounds):
            for threads in (1, threads_now):
                storage.COPY_PART_THREADS = threads
                t0 = time.perf_counter()
                dst = storage.copy_exact(src_uri, f"s3://{BUCKET}/copy-{threads}-{r}")
                took = time.perf_counter() - t0
                assert (dst.size, dst.etag) == (src.size, src.etag)
                best[threads] = min(best.get(threads, took), took)
                print(f"  round {r + 1}: {threads} part(s) at a time {took:.2f} s")
        storage.COPY_PART_THREADS = threads_now
        one, many = best[1], best[threads_now]
        print(f"best of {args.rounds}: one at a time {one:.2f} s, {threads_now} at a time "
              f"{many:.2f} s: {one / many:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
