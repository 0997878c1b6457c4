"""Execution timeouts of the whole-dataset tasks (merge, validate, benchmark, quality_gate).

A DAG is parsed before any run has planned its records, so a timeout cannot follow the run's
own count. Each whole-dataset task therefore gets the time it needs at a record ceiling:
``RECFORGE_MAX_RECORDS`` (default 10 M, ImageNet's 1.28 M with room to grow), read at parse
time, from per-million-record rates with a safety factor of 3, never below the fixed floor
each task had before. The gate's rate is measured (``benchmarks/bench_scale.py``: about
250 s a million records with GX, on 2 shared cores); merge's and validate's are estimates
until their bookkeeping (being rebuilt) joins that benchmark. The benchmark reads a bounded
window of the split (``bench.options.max_bytes``), so its timeout does not grow with the data.

At 10 M records: merge 2 h 30 m, validate 2 h, quality_gate 3 h, benchmark 30 m.
"""

from __future__ import annotations

import os
from datetime import timedelta

ENV_VAR = "RECFORGE_MAX_RECORDS"
DEFAULT_MAX_RECORDS = 10_000_000
SAFETY = 3
# task → (floor, measured seconds per million records before the safety factor)
RATES: dict[str, tuple[timedelta, float]] = {
    "merge": (timedelta(hours=2), 300.0),
    "validate": (timedelta(hours=1), 240.0),
    "quality_gate": (timedelta(hours=1), 360.0),
    "benchmark": (timedelta(minutes=30), 0.0),  # a bounded sample: no per-record cost
}


def max_records(env: dict | None = None) -> int:
    """The record ceiling timeouts are sized for (``RECFORGE_MAX_RECORDS``)."""
    raw = (os.environ if env is None else env).get(ENV_VAR, "")
    try:
        return max(int(raw), 1) if raw.strip() else DEFAULT_MAX_RECORDS
    except ValueError:
        raise ValueError(f"{ENV_VAR}={raw!r} is not a whole number of records") from None


def execution_timeout(task: str, records: int | None = None) -> timedelta:
    """The task's timeout for ``records`` (default: the ceiling), rounded up to minutes."""
    floor, per_million = RATES[task]
    n = max_records() if records is None else records
    needed = timedelta(seconds=SAFETY * per_million * n / 1e6)
    minutes = -(-max(floor, needed) // timedelta(minutes=1))
    return timedelta(minutes=minutes)
