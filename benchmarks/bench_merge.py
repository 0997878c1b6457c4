"""The merge task, side by side: bytes moved and time through the composed merge (S3
server-side ``UploadPartCopy``) against the download + concatenate + upload merge it
replaces, on the local moto S3 server; then the bookkeeping of a 1.28 M-record merge
(ImageNet's count, tiny records, local staging) with its peak RSS, and the validate stage's
composition check of it.

    PYTHONPATH=include .venv/bin/python benchmarks/bench_merge.py [--shards 24]
        [--shard-mib 10] [--records 1280000] [--skip-bookkeeping] [--skip-latency]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recforge import run_state, storage
from recforge.dev.scale import bench_spec, local_run, stage_shards
from recforge.dev.scale import stage_local as stage_local_run
from recforge.format import names, recordio
from recforge.run import Run

RECORD = 256 * 1024


def old_merge(run: Run, shard_ids: list[str], tmp: Path) -> None:
    """The reference data movement (a client-side merge): download every shard whole,
    concatenate locally, upload the split."""
    part = names.SHARD_PART
    dirs = []
    for sid in shard_ids:
        d = tmp / "old" / sid
        for name in names.shard_files():
            storage.download(run.shard_output(sid, name), d / name)
        dirs.append(d)
    out = tmp / "old" / "out"
    out.mkdir()
    recordio.concat_indexed([(d / names.rec(part), d / names.idx(part)) for d in dirs],
                            out / "train.rec", out / "train.idx")
    with open(out / "train.lst", "wb") as lst:
        for d in dirs:
            lst.write((d / names.lst(part)).read_bytes())
    for p in out.iterdir():
        storage.upload(p, storage.join(run.uri("old-out"), p.name))


def s3_section(args) -> None:
    from recforge.dev import s3server
    from recforge.stages import merge

    per_shard = max(1, args.shard_mib * (1 << 20) // (RECORD + 32))
    with s3server.running_server() as endpoint, tempfile.TemporaryDirectory() as tmp:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        os.environ.update(s3server.DEV_CREDENTIALS)
        storage.s3_client().create_bucket(Bucket="bench")
        run = Run(bench_spec("s3://bench/datasets"), "bench")
        dirs = stage_shards(run, Path(tmp), args.shards, per_shard, RECORD)
        rec_bytes = sum((d / "part.rec").stat().st_size for d in dirs)
        print(f"{args.shards} shards x {per_shard} records of {RECORD // 1024} KB: "
              f"{rec_bytes / 1e6:.0f} MB of .rec, on moto at {endpoint}")
        rows = []
        before, started = storage.transferred(), time.perf_counter()
        old_merge(run, [f"train-{i:05d}" for i in range(args.shards)], Path(tmp))
        rows.append(("download + concat + upload (before)", time.perf_counter() - started,
                     storage.transferred().minus(before)))
        before, started = storage.transferred(), time.perf_counter()
        merge.merge(run)
        rows.append(("composed (UploadPartCopy)", time.perf_counter() - started,
                     storage.transferred().minus(before)))
        same = (storage.get_bytes(run_state.output(run, "train.rec"))
                == storage.get_bytes(storage.join(run.uri("old-out"), "train.rec")))
        print(f"  {'merge':<38} {'seconds':>8} {'MB down':>9} {'.rec MB down':>13} "
              f"{'MB up':>8}")
        for name, seconds, moved in rows:
            print(f"  {name:<38} {seconds:>8.1f} {moved.down / 1e6:>9.1f} "
                  f"{moved.down_by_suffix.get('.rec', 0) / 1e6:>13.1f} {moved.up / 1e6:>8.1f}")
        print(f"  train.rec byte-identical to the old merge's: {same}")


def latency_section(args) -> None:
    """Merge's reads of the shards' small files (``shard.json``, ``.idx``, ``.lst``,
    ``records.jsonl``, ``quarantine.jsonl``) through a proxy that holds every response back
    0-``2 x --latency-ms`` (S3's per-request latency, which the loopback server lacks): one
    at a time (the serial reference) and ``merge.READ_THREADS`` at a time."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from recforge.dev import s3server
    from recforge.stages import merge
    from tests.common.faultproxy import running_proxy

    with s3server.running_server() as endpoint, tempfile.TemporaryDirectory() as tmp:
        os.environ.update(s3server.DEV_CREDENTIALS)
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        storage.s3_client().create_bucket(Bucket="bench-latency")
        run = Run(bench_spec("s3://bench-latency/datasets"), "latency")
        stage_shards(run, Path(tmp), args.latency_shards, 50, 1024)
        with running_proxy(endpoint, rate=1.0, modes=("delay",),
                           max_delay_s=2 * args.latency_ms / 1000) as proxy:
            os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
            took, threads_now = {}, merge.READ_THREADS
            for threads in (1, threads_now):
                merge.READ_THREADS = threads
                started = time.perf_counter()
                merge.merge(run)
                took[threads] = time.perf_counter() - started
            merge.READ_THREADS = threads_now
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        print(f"\nlatency: merge of {args.latency_shards} shards with ~{args.latency_ms} ms a "
              f"request: their files read one at a time {took[1]:.1f} s, {threads_now} at a "
              f"time {took[threads_now]:.1f} s: {took[1] / took[threads_now]:.1f}x")


def bookkeeping_section(args) -> None:
    """Stage 1.28 M tiny records locally in a child process, then merge them here."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--stage-local", tmp,
                        "--records", str(args.records)], check=True)
        staged = time.perf_counter() - started
        from recforge.stages import merge

        run = local_run(Path(tmp))
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        summary = merge.merge(run)
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"\nbookkeeping: {summary['packed']:,} records in 1,024 shards (local staging, "
              f"staged in {staged:.0f} s): merge {seconds:.1f} s, peak RSS "
              f"{peak / 1024:.0f} MiB (before merging: {rss0 / 1024:.0f} MiB)")
        from recforge.stages import validate

        started = time.perf_counter()
        checked = validate.validate(run)
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"validate stage ({checked['checked']}): {seconds:.1f} s, peak RSS so far "
              f"{peak / 1024:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=24)
    ap.add_argument("--shard-mib", type=int, default=10)
    ap.add_argument("--records", type=int, default=1_280_000)
    ap.add_argument("--skip-bookkeeping", action="store_true")
    ap.add_argument("--skip-s3", action="store_true")
    ap.add_argument("--latency-shards", type=int, default=200)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--stage-local", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage_local:
        stage_local_run(Path(args.stage_local), args.records)
        return
    if not args.skip_s3:
        # the bookkeeping in a child started first, while this process is small: a child
        # started from a large process inherits its peak RSS across exec (Linux's ru_maxrss)
        bookkeeping = None if args.skip_bookkeeping else subprocess.run(
            [sys.executable, __file__, "--skip-s3", "--records", str(args.records)],
            stdout=subprocess.PIPE, text=True, check=True).stdout
        s3_section(args)
        if not args.skip_latency:
            latency_section(args)
        print(bookkeeping or "", end="")
    elif not args.skip_bookkeeping:
        bookkeeping_section(args)


if __name__ == "__main__":
    main()
