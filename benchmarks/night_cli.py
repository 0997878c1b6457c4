"""``recforge build`` with a stopwatch per stage: wall, CPU and peak memory of each stage,
and this process's S3 requests, written as JSON to the file ``NIGHT_CLI_OUT`` names.

    NIGHT_CLI_OUT=cli.json python benchmarks/night_cli.py build SPEC --json --workers 2 ...

The arguments are ``recforge``'s own. Each stage entry (``recforge.stages.entry``) is wrapped:
CPU is the process's and its reaped children's (the MXNet loader) over the stage, every
thread included; a stage that overlapped another (the benchmark runs in a thread beside
validate and the checklist) is marked ``cpu_shared``: its CPU includes the other's. Peak
memory is the process's ``VmHWM`` since the stage began (reset only when no other stage is
running, so a stage beside others shows the shared peak). The per-shard stages run in a
process pool (``recforge.pipeline.run_shards``): their CPU is the pool's (children reaped
when it closes) and their peak the largest shard's own ``peak_rss_mb``.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "include")]

from recforge import pipeline, progress, stages, storage  # noqa: E402

STAGES: dict[str, dict] = {}
_state = {"active": 0, "starts": 0}
_lock = threading.Lock()


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _process_cpu() -> float:
    return _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)


def _measure(name: str, fn, *args, **kwargs):
    with _lock:
        alone = not _state["active"]
        if alone:
            progress.reset_peak_rss()
        _state["active"] += 1
        _state["starts"] += 1
        starts = _state["starts"]
    wall, cpu = time.perf_counter(), _process_cpu()
    try:
        return fn(*args, **kwargs)
    finally:
        with _lock:
            _state["active"] -= 1
            alone = alone and _state["starts"] == starts
        STAGES[name] = {"wall": time.perf_counter() - wall, "cpu": _process_cpu() - cpu,
                        "cpu_shared": not alone, "peak_rss_mb": progress.peak_rss_mb()}


_entry = stages.entry
_run_shards = pipeline.run_shards


def entry(task_id: str):
    fn = _entry(task_id)

    def timed(*args, **kwargs):
        return _measure(task_id, fn, *args, **kwargs)

    return timed


def run_shards(jobs, workers, done):
    wall, cpu = time.perf_counter(), _process_cpu()
    results = _run_shards(jobs, workers, done)
    task_ids = jobs[0][2] if jobs else ()
    peaks = [r[t].get("peak_rss_mb") or 0 for r in results for t in task_ids
             if isinstance(r.get(t), dict)]
    STAGES["+".join(task_ids)] = {"wall": time.perf_counter() - wall,
                                  "cpu": _process_cpu() - cpu, "cpu_shared": False,
                                  "peak_rss_mb": max(peaks, default=None)}
    return results


def main() -> int:
    stages.entry = entry
    pipeline.run_shards = run_shards
    from recforge.cli import main as cli_main

    started = time.perf_counter()
    try:
        code = cli_main()  # recforge's own entry point
    finally:
        out = os.environ.get("NIGHT_CLI_OUT")
        if out:
            Path(out).write_text(json.dumps({
                "wall": time.perf_counter() - started, "stages": STAGES,
                "cpu_total": _process_cpu(),
                "process_s3_requests": storage.request_counts()}, indent=1))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
