"""Structural validation, side by side in one run, on a hot page cache: the record-by-record
check (``validate_split_records``, what ``recforge validate`` did before), MXNet's own
``MXRecordIO`` reading every record (no checks at all: the floor for reading), the bare
numpy structural scan (``scan.parse_idx`` + ``scan.scan_rec``: framing and chain only), and
``recforge validate`` itself (every check: .idx, .lst, labels, ids, counts). Two datasets:
tiny records (1 M) and 40 KB records (~2 GB).

    PYTHONPATH=include .venv/bin/python benchmarks/bench_validate.py [--tiny 1000000]
        [--large 50000] [--large-bytes 40000] [--dir /tmp/bench-validate]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from recforge.format import names, recordio, scan, validate


def build(root: Path, n: int, image_bytes: int) -> None:
    """A valid ``train.rec/.idx/.lst`` of ``n`` records, labels in [0, 1000)."""
    if (root / "train.lst").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    block = np.random.default_rng(0).bytes(image_bytes + 4096)
    with recordio.RecordWriter(root / "train.rec", root / "train.idx") as w, \
            open(root / "train.lst", "w", encoding="utf-8") as lst:
        for key in range(n):
            start = (key * 4) % 4096
            w.write(key, recordio.pack_image_record(key % 1000, key,
                                                    block[start:start + image_bytes]))
            lst.write(names.lst_line(key, key % 1000, f"n{key % 1000:08d}/x_{key}.JPEG"))
    (root / names.CLASSES).write_text(json.dumps({"num_classes": 1000}))


def warm(root: Path) -> None:
    for p in root.iterdir():
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def record_by_record(root: Path) -> int:
    rep = validate.validate_split_records(root, "train", 1000)
    assert rep.ok, rep.failures
    return rep.records


def mxnet_read(root: Path) -> int:
    import mxnet as mx

    reader = mx.recordio.MXRecordIO(str(root / "train.rec"), "r")
    n = 0
    while reader.read() is not None:
        n += 1
    reader.close()
    return n


def numpy_scan(root: Path) -> int:
    keys, offsets = scan.parse_idx((root / "train.idx").read_bytes())
    headers = scan.scan_rec(root / "train.rec", offsets)
    assert headers is not None
    return len(keys)


def recforge_validate(root: Path) -> int:
    from recforge.cli import main

    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["validate", str(root), "--json"]) == 0, out.getvalue()
    return json.loads(out.getvalue())["splits"]["train"]["records"]


PATHS = [("record by record (before)", record_by_record), ("mx.recordio read loop", mxnet_read),
         ("bare numpy scan", numpy_scan), ("recforge validate", recforge_validate)]


def timed(fn, root: Path, repeat: int) -> tuple[float, float, int]:
    """Best wall and CPU seconds of ``repeat`` runs (CPU time is what a shared machine's
    load does not inflate), and the records seen."""
    wall, cpu, n = float("inf"), float("inf"), 0
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        n = fn(root)
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - cpu_started)
    return wall, cpu, n


def run(label: str, root: Path, repeat: int) -> None:
    warm(root)
    size = (root / "train.rec").stat().st_size
    print(f"\n{label}: {size / 1e9:.2f} GB .rec")
    print(f"  {'path':<28} {'wall s':>8} {'cpu s':>8} {'records/s':>12} {'GB/s':>8} "
          f"{'vs before':>10}   (rates from CPU time)")
    base = None
    for name, fn in PATHS:
        wall, cpu, n = timed(fn, root, 1 if fn is record_by_record else repeat)
        base = base or cpu
        print(f"  {name:<28} {wall:>8.3f} {cpu:>8.3f} {n / cpu:>12,.0f} "
              f"{size / cpu / 1e9:>8.2f} {base / cpu:>9.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", type=int, default=1_000_000)
    ap.add_argument("--large", type=int, default=50_000)
    ap.add_argument("--large-bytes", type=int, default=40_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/bench-validate")
    ap.add_argument("--keep", action="store_true", help="keep the datasets for another run")
    args = ap.parse_args()
    root = Path(args.dir)
    try:
        build(root / "tiny", args.tiny, 8)
        run(f"{args.tiny:,} tiny records (8-byte images)", root / "tiny", args.repeat)
        build(root / "large", args.large, args.large_bytes)
        run(f"{args.large:,} records of {args.large_bytes // 1000} KB", root / "large",
            args.repeat)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\n(cpus: {os.cpu_count()}; best of {args.repeat} for the fast paths)")


if __name__ == "__main__":
    main()
