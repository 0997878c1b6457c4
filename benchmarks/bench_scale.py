"""recforge's bookkeeping at ImageNet size and beyond: time and peak memory per stage, per size.

Synthetic inputs (``recforge.dev.scale``: 1,000 classes, clustered dHashes like photo
bursts, flat images, biased bits) of 10 k, 100 k, 1.28 M and 10 M records go through each
stage below; every (stage, size) runs in its own subprocess, so its peak RSS is its own.
Printed: seconds and peak RSS per row, and the growth exponent ``k`` of time ~ n^k (least
squares over the sizes; 1.0 is linear).

    PYTHONPATH=include .venv/bin/python benchmarks/bench_scale.py \\
        [--sizes 10000,100000,1280000,10000000] [--stages plan,merge,validate,gate]

Stages are functions registered with ``@stage(name)``; a new row is one more function that
reads its inputs from the size's folder (see ``make_inputs``) and does the work to measure.
``merge`` and ``validate`` run on a local staging of 1,024 train shards of tiny records
(``recforge.dev.scale.stage_local``, the staging ``bench_merge.py`` measures): ``merge`` is
``stages.merge.merge`` (compose, shift the ``.idx``, stream ``records.jsonl``, reconcile
against the listing), ``validate`` is ``stages.validate.validate`` on its output (the
composition check; on a local path the part-boundary reads are file reads, not ranged GETs).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

STAGES: dict[str, Callable[[Path, int], str]] = {}
DEFAULT_SIZES = (10_000, 100_000, 1_280_000, 10_000_000)
VAL_SHARE = 0.04  # ImageNet: 50 k val of 1.33 M


def stage(name: str):
    """Register ``fn(root, n) -> note`` as the stage ``name`` (one table row per size)."""
    def register(fn):
        STAGES[name] = fn
        return fn
    return register


@stage("plan")
def _plan(root: Path, n: int) -> str:
    """stages.split.plan over the streamed items.jsonl (shard_size_within included)."""
    from recforge import storage
    from recforge.stages import split

    ids = {f"n{i:08d}": i for i in range(1000)}
    shards = split.plan(storage.iter_jsonl(str(root / "items.jsonl")), ids, VAL_SHARE, 0.0,
                        0, shard_size=1000, max_shards=1024)
    return f"{len(shards)} shards of <= {max(len(r) for r in shards.values())}"


@stage("near_dup")
def _near_dup(root: Path, n: int) -> str:
    """phash.nearest_across, train vs val, on clustered hashes (no I/O)."""
    import numpy as np

    from recforge import phash
    from recforge.dev.scale import clustered_hashes

    hashes, _ = clustered_hashes(n)
    val = np.random.default_rng(1).random(n) < VAL_SHARE
    da, _, db, _ = phash.nearest_across(hashes[~val], hashes[val], 4)
    return f"{int((db >= 0).sum())} of {int(val.sum())} val records have a train near-dup"


@stage("merge")
def _merge(root: Path, n: int) -> str:
    """stages.merge.merge over the staged shards (local staging; merged output in out/)."""
    from recforge.dev.scale import local_run
    from recforge.stages import merge

    summary = merge.merge(local_run(root / "staging"))
    return f"{summary['packed']:,} packed, {summary['listed']:,} listed"


@stage("validate")
def _validate(root: Path, n: int) -> str:
    """stages.validate.validate of merge's output: the composition check (needs merge)."""
    from recforge.dev.scale import local_run
    from recforge.stages import validate

    got = validate.validate(local_run(root / "staging"))
    return f"{got['checked']}: {got['splits']}"


@stage("gate")
def _gate(root: Path, n: int) -> str:
    """The gate's bookkeeping: stream records.jsonl + .idx into columns, every fact column,
    the near-duplicate search (GX itself not included)."""
    from recforge.quality.frames import build_frames
    from recforge.quality.inputs import load_inputs
    from recforge.spec.quality import QualitySpec

    frames = build_frames(load_inputs(str(root)), QualitySpec())
    rec = frames["records"]
    return f"{len(rec)} rows, {int(rec['near_dup_bits'].notna().sum())} near-dups"


@stage("gate_gx")
def _gate_gx(root: Path, n: int) -> str:
    """The whole gate as the task runs it: bookkeeping, then GX's suites and Data Docs
    (decode_sample 0: there are no .rec files)."""
    import tempfile

    from recforge.quality import run_quality_gate
    from recforge.spec.quality import QualitySpec

    with tempfile.TemporaryDirectory() as docs:
        result = run_quality_gate(str(root), QualitySpec(decode_sample=0), docs_dir=docs)
    return f"failed {result['failed']}"


@stage("report")
def _report(root: Path, n: int) -> str:
    """recforge.report.build_report (no .rec: thumbnails skipped)."""
    import logging

    from recforge.report import build_report

    logging.disable(logging.WARNING)
    out = build_report(str(root), root / "report.html")
    return f"{out.stat().st_size / 1024:.0f} KB"


NEEDS = {"plan": "items", "merge": "staging", "validate": "staging"}  # else: records


def make_inputs(root: Path, n: int, names: list[str]) -> None:
    """What ``names`` read: records.jsonl + classes.json + <split>.idx (gate, report),
    items.jsonl (plan), a staging of 1,024 shards (merge, validate)."""
    from recforge.dev.scale import stage_local, write_items, write_records

    needs = {NEEDS.get(name, "records") for name in names}
    if "records" in needs:
        write_records(root, n, val=VAL_SHARE, idx=True)
    if "items" in needs:
        write_items(root, n)
    if "staging" in needs:
        stage_local(root / "staging", n)


def _child(name: str, root: Path, n: int) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    note = STAGES[name](root, n)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "peak_mib": peak / 1024,
                      "start_mib": before / 1024, "note": note}))


def _run(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                         check=False)
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:120]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def exponent(points: list[tuple[int, float]]) -> float | None:
    """k of y ~ n^k, least squares in log-log."""
    pts = [(math.log(n), math.log(y)) for n, y in points if y > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--child", nargs=3, metavar=("STAGE", "ROOT", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        name, root, n = args.child
        if name == "make":
            make_inputs(Path(root), int(n), [s for s in args.stages.split(",") if s])
            print("{}")
        else:
            _child(name, Path(root), int(n))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    names = [s for s in args.stages.split(",") if s]
    unknown = sorted(set(names) - set(STAGES))
    if unknown:
        ap.error(f"unknown stage(s) {unknown}; known: {sorted(STAGES)}")
    rows: dict[str, list[tuple[int, dict]]] = {s: [] for s in names}
    print(f"{'stage':<9} {'records':>11} {'seconds':>9} {'peak RSS':>10}  note", flush=True)
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="recforge-scale-") as tmp:
            started = time.perf_counter()
            made = _run(["--child", "make", tmp, str(n), "--stages", ",".join(names)])
            if "error" in made:
                raise SystemExit(f"making {n:,} records failed: {made['error']}")
            print(f"{'(inputs)':<9} {n:>11,} {time.perf_counter() - started:>9.1f}", flush=True)
            for name in names:
                r = _run(["--child", name, tmp, str(n)])
                rows[name].append((n, r))
                if "error" in r:
                    print(f"{name:<9} {n:>11,}  FAILED: {r['error']}", flush=True)
                else:
                    print(f"{name:<9} {n:>11,} {r['seconds']:>9.1f} {r['peak_mib']:>7.0f} MiB"
                          f"  {r['note']}", flush=True)
    print("\ngrowth exponent k (time ~ n^k; RSS ~ n^k over the two largest sizes):")
    for name, got in rows.items():
        ok = [(n, r) for n, r in got if "error" not in r]
        kt = exponent([(n, r["seconds"]) for n, r in ok])
        km = exponent([(n, r["peak_mib"]) for n, r in ok[-2:]])
        print(f"  {name:<9} time k = {kt if kt is None else round(kt, 2)}, "
              f"RSS k = {km if km is None else round(km, 2)}")


if __name__ == "__main__":
    main()
