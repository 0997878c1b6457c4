"""``recforge validate`` of a split on S3: the bytes and GETs it reads by record headers
(``format.ranged``, the default) against ``--full`` (every file downloaded, as validate did
before), on the moto S3 server. The split is synthesised (``--records`` records of
``--record-bytes`` random bytes: ~1 GB by default), uploaded once, validated both ways, and
then once more with one record's header corrupted, which both must find.

    PYTHONPATH=include .venv/bin/python benchmarks/bench_validate_ranges.py
        [--records 10000] [--record-bytes 100000] [--skip-full]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from recforge import storage
from recforge.format import names, recordio, validate


def build(root: Path, n: int, record_bytes: int) -> None:
    """A valid ``train.rec/.idx/.lst`` of ``n`` records, labels in [0, 1000)."""
    root.mkdir(parents=True, exist_ok=True)
    block = random.Random(0).randbytes(record_bytes + 4096)
    with recordio.RecordWriter(root / "train.rec", root / "train.idx") as w, \
            open(root / "train.lst", "w", encoding="utf-8") as lst:
        for key in range(n):
            start = (key * 4) % 4096
            w.write(key, recordio.pack_image_record(key % 1000, key,
                                                    block[start:start + record_bytes]))
            lst.write(names.lst_line(key, key % 1000, f"n{key % 1000:08d}/x_{key}.JPEG"))
    (root / names.CLASSES).write_text(json.dumps({"num_classes": 1000}))


def measured(uri: str, full: bool) -> dict:
    before, gets = storage.transferred(), storage.request_counts()
    started = time.perf_counter()
    report = validate.validate_prefix(uri, full=full)
    wall = time.perf_counter() - started
    moved, after = storage.transferred().minus(before), storage.request_counts()
    return {"ok": report["ok"], "failures": report["failures"][:2], "wall_s": round(wall, 2),
            "bytes_read": moved.down, "rec_bytes_read": moved.down_by_suffix.get(".rec", 0),
            "reported_bytes": report["read"]["bytes"], "of": report["read"]["of"],
            "requests": {op: after[op] - gets.get(op, 0) for op in after
                         if after[op] != gets.get(op, 0)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--record-bytes", type=int, default=100_000)
    ap.add_argument("--skip-full", action="store_true", help="only the ranged check")
    args = ap.parse_args()
    from recforge.dev import s3server

    with s3server.running_server() as endpoint, \
            tempfile.TemporaryDirectory(prefix="bench-validate-ranges-") as tmp:
        os.environ.update({**s3server.DEV_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint})
        storage.s3_client().create_bucket(Bucket="bench")
        root, uri = Path(tmp) / "ds", "s3://bench/ds"
        build(root, args.records, args.record_bytes)
        for p in sorted(root.iterdir()):
            storage.upload(p, f"{uri}/{p.name}")
        total = sum(p.stat().st_size for p in root.iterdir())
        rec = (root / "train.rec").stat().st_size
        print(f"split: {args.records:,} records of {args.record_bytes:,} B; "
              f"{total / 1e9:.3f} GB in all, train.rec {rec / 1e9:.3f} GB", file=sys.stderr)
        rows = {"ranged": measured(uri, False)}
        if not args.skip_full:
            rows["full"] = measured(uri, True)
        at = dict(recordio.read_idx(root / "train.idx"))[args.records // 2]
        with open(root / "train.rec", "r+b") as f:  # one corrupted header
            f.seek(at)
            f.write(b"\0\0\0\0")
        storage.upload(root / "train.rec", f"{uri}/train.rec")
        rows["ranged, one header corrupted"] = measured(uri, False)
        out = {"records": args.records, "record_bytes": args.record_bytes,
               "total_bytes": total, "rec_bytes": rec,
               "rows": {k: {**v, "share": round(v["bytes_read"] / total, 5)}
                        for k, v in rows.items()}}
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
