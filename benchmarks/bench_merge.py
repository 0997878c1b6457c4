"""The merge task, side by side: bytes moved and time through the composed merge (S3
server-side ``UploadPartCopy``) against the download + concatenate + upload merge it
replaces, on the local moto S3 server; then the bookkeeping of a 1.28 M-record merge
(ImageNet's count, tiny records, local staging) with its peak RSS, and the validate stage's
composition check of it.

    PYTHONPATH=include .venv/bin/python benchmarks/bench_merge.py [--shards 24]
        [--shard-mib 10] [--records 1280000] [--skip-bookkeeping]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from recforge import storage
from recforge.format import names, recordio
from recforge.run import Run
from recforge.spec import parse_spec

RECORD = 256 * 1024


def _spec(publish: str):
    return parse_spec({"name": "bench", "source": {"uri": f"{publish}-raw"},
                       "publish": {"uri": publish}})


def write_shard(work: Path, first: int, n: int, payload: int, rng) -> list[str]:
    """A shard of ``n`` records of ``payload`` random bytes; returns its source keys."""
    work.mkdir(parents=True, exist_ok=True)
    part = names.SHARD_PART
    block = rng.bytes(payload + 4096)
    keys, lst, rows = [], [], []
    with recordio.RecordWriter(work / names.rec(part), work / names.idx(part)) as w:
        for key in range(first, first + n):
            start = (key * 4) % 4096
            offset = w.write(key, recordio.pack_image_record(key % 1000, key,
                                                             block[start:start + payload]))
            src = f"n{key % 1000:08d}/x_{key}.JPEG"
            keys.append(src)
            lst.append(names.lst_line(key, key % 1000, src))
            rows.append(json.dumps({"key": key, "split": "train", "offset": offset,
                                    "length": payload + 24, "label": key % 1000,
                                    "source_key": src, "class_name": f"n{key % 1000:08d}",
                                    "height": 256, "width": 320, "channels": 3,
                                    "source_sha256": "0" * 64, "phash": "0" * 16},
                                   sort_keys=True) + "\n")
    (work / names.lst(part)).write_text("".join(lst))
    (work / names.RECORDS).write_text("".join(rows))
    (work / names.QUARANTINE).write_bytes(b"")
    return keys


def stage(run: Run, tmp: Path, shards: int, per_shard: int, payload: int) -> list[Path]:
    """Write a run's staging as if ``shards`` pack tasks had finished."""
    storage.write_json(run.classes, {"num_classes": 1000})
    for s in ("ingest", "flatten"):
        storage.put_bytes(run.stage_quarantine(s), b"")
    rng = np.random.default_rng(0)
    ids, listed, dirs = [], [], []
    for i in range(shards):
        sid = f"train-{i:05d}"
        work = tmp / sid
        listed += write_shard(work, i * per_shard, per_shard, payload, rng)
        files = names.shard_files()
        for name in files:
            storage.upload(work / name, run.shard_output(sid, name))
        storage.write_json(run.shard_output(sid, names.SHARD_META), {
            "shard": sid, "records": per_shard, "masks": False,
            "files": {n: storage.file_digest(work / n) for n in files}})
        ids.append(sid)
        dirs.append(work)
    storage.write_json(run.shard_list, {"shards": ids})
    with open(tmp / "listing.jsonl", "w") as f:
        f.writelines(json.dumps({"key": k}) + "\n" for k in listed)
    storage.upload(tmp / "listing.jsonl", run.source_manifest)
    return dirs


def old_merge(run: Run, shard_ids: list[str], tmp: Path) -> None:
    """The data movement of the merge before issue 11: download every shard whole,
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
        run = Run(_spec("s3://bench/datasets"), "bench")
        dirs = stage(run, Path(tmp), args.shards, per_shard, RECORD)
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
        same = (storage.get_bytes(run.output("train.rec"))
                == storage.get_bytes(storage.join(run.uri("old-out"), "train.rec")))
        print(f"  {'merge':<38} {'seconds':>8} {'MB down':>9} {'.rec MB down':>13} "
              f"{'MB up':>8}")
        for name, seconds, moved in rows:
            print(f"  {name:<38} {seconds:>8.1f} {moved.down / 1e6:>9.1f} "
                  f"{moved.down_by_suffix.get('.rec', 0) / 1e6:>13.1f} {moved.up / 1e6:>8.1f}")
        print(f"  train.rec byte-identical to the old merge's: {same}")


def bookkeeping_section(args) -> None:
    """Stage 1.28 M tiny records locally in a child process, then merge them here."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--stage-local", tmp,
                        "--records", str(args.records)], check=True)
        staged = time.perf_counter() - started
        from recforge.stages import merge

        run = Run(_spec(str(Path(tmp) / "pub")), "bench")
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


def stage_local(root: str, records: int) -> None:
    run = Run(_spec(str(Path(root) / "pub")), "bench")
    shards = 1024
    per = -(-records // shards)
    stage_root = Path(root) / "work"
    # tiny records, written straight into staging (local storage: upload is a copy)
    stage(run, stage_root, shards, per, 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=24)
    ap.add_argument("--shard-mib", type=int, default=10)
    ap.add_argument("--records", type=int, default=1_280_000)
    ap.add_argument("--skip-bookkeeping", action="store_true")
    ap.add_argument("--skip-s3", action="store_true")
    ap.add_argument("--stage-local", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage_local:
        stage_local(args.stage_local, args.records)
        return
    if not args.skip_s3:
        s3_section(args)
    if not args.skip_bookkeeping:
        bookkeeping_section(args)


if __name__ == "__main__":
    main()
