"""The untimed value check of MXNet's ImageRecordIter (or ImageDetRecordIter): one epoch of
the window, every batch's value range, finiteness and labels.

It runs before the timed sweep (``recforge.bench.image_record_iter``), with the setting users
train with, and may run beside the caller's work: nothing here is timed. Runs in the MXNet
environment.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from recforge.bench.loader import boxes, label_stats, next_batch, open_iter
from recforge.bench.records import count_records
from recforge.bench.results import detection_problems, detection_summary, span
from recforge.format import names
from recforge.spec.bench import BenchOptions

VALUE_CHECK_PARTS = 2  # the most iterators the untimed value check runs side by side


def value_check_parts(opts: BenchOptions, n_records: int, threads: int, procs: int,
                      device_kind: str = "cpu") -> int:
    """How many iterators the value check runs side by side, each over its part of the
    window (``num_parts``/``part_index``): up to ``VALUE_CHECK_PARTS`` where the host has
    the cores for their decode threads (MXNet caps an iterator's threads at
    ``max(nprocs/2 - 1, 1)``, so one iterator leaves half the cores idle), each part at
    least a batch. One for ImageDetRecordIter, which splits its file by bytes without an
    index, and on a GPU, where the reductions are MXNet operations: they stay in one
    Python thread."""
    if boxes(opts) or device_kind != "cpu":
        return 1
    return max(1, min(VALUE_CHECK_PARTS, procs // max(threads, 1),
                      n_records // opts.batch_size))


def check_values(root: Path, opts: BenchOptions, threads: int, device: dict,
                 sizes: dict | None = None, procs: int = 1) -> dict:
    """Untimed pass: value range and finiteness of every batch of one epoch.

    One epoch (capped at ``max_check_batches``) sees every record once. Reductions run on the
    GPU when there is one (after the same copy training does), else in numpy. The window is
    read by ``value_check_parts`` iterators side by side (``procs``: the host's CPUs), each
    over its part for one epoch of it, together within the cap: the same records and
    checks in less time, since the pass is untimed.
    """
    import mxnet as mx

    n_records = count_records(root / names.idx(opts.split))
    parts = value_check_parts(opts, n_records, threads, procs, device["kind"])
    ctx = mx.gpu(device["gpu_id"]) if device["kind"] == "gpu" else None
    # opened one after another: opening captures fd 2 for MXNet's log line
    iters = [open_iter(mx, root, opts, threads, sizes, device["gpu_id"] or 0,
                       parts=(parts, p) if parts > 1 else None)[0] for p in range(parts)]
    if parts == 1:
        n_batches = min(math.ceil(n_records / opts.batch_size), opts.max_check_batches)
        checked = [_check_batches(mx, iters[0], n_batches, ctx, opts, wrap=True)]
    else:
        caps = [opts.max_check_batches // parts + (p < opts.max_check_batches % parts)
                for p in range(parts)]
        with ThreadPoolExecutor(parts, thread_name_prefix="recforge-value-check") as pool:
            checked = list(pool.map(lambda ic: _check_batches(mx, ic[0], ic[1], ctx, opts),
                                    zip(iters, caps, strict=True)))
    rows, problems = [], []
    for i, r in enumerate(r for got in checked for r in got):
        if not r.pop("labels_finite"):
            problems.append(f"value check batch {i}: labels hold NaN or Inf")
        if not r["finite"]:
            problems.append(f"value check batch {i}: data has NaN or Inf")
        rows.append({**r, "batch": i})
    covered = sum(opts.batch_size - r["pad"] for r in rows)
    del iters
    lo = min(r["min"] for r in rows)
    hi = max(r["max"] for r in rows)
    if hi <= lo:
        problems.append(f"every value of every checked batch is {lo}: the images decode to a "
                        "constant (corrupt data or a wrong mean/std)")
    out = {
        "batches": len(rows), "records_covered": min(n_records, covered),
        "of_records": n_records, "iterators": parts, "value_min": lo, "value_max": hi,
        "all_finite": all(r["finite"] for r in rows),
        "label_min": span(rows, "label_min", min),
        "label_max": span(rows, "label_max", max),
        "shapes": sorted({tuple(r["shape"]) for r in rows}),
        "dtypes": sorted({r["dtype"] for r in rows}),
        "per_batch": rows, "problems": problems,
        "note": "untimed pass with the spec's preprocess_threads (as MXNet caps them), before "
                "the timed sweep; with several iterators, each over its part of the window",
    }
    if boxes(opts):
        out["detection"] = detection_summary(rows)
        problems += detection_problems(out["detection"], "value check")
    return out


def _check_batches(mx, it, n_batches: int, ctx, opts: BenchOptions, wrap: bool = False
                   ) -> list[dict]:
    """Up to ``n_batches`` of ``it`` checked (the end of its epoch ends them, unless
    ``wrap``): each batch's row, with ``labels_finite``."""
    import numpy as np

    rows = []
    for i in range(n_batches):
        if wrap:
            batch, _ = next_batch(it)
        else:
            try:
                batch = it.next()
            except StopIteration:
                break
        data = batch.data[0]
        if ctx is not None:
            data = data.as_in_context(ctx)
            red = mx.nd.concat(mx.nd.min(data).reshape((1,)), mx.nd.max(data).reshape((1,)),
                               mx.nd.sum(data).reshape((1,)), dim=0).asnumpy()
            lo, hi, finite = float(red[0]), float(red[1]), bool(np.isfinite(red[2]))
        else:
            a = data.asnumpy()
            lo, hi, finite = float(a.min()), float(a.max()), bool(np.isfinite(a).all())
        labels = batch.label[0].asnumpy()
        pad = int(batch.pad or 0)
        rows.append({"batch": i, "shape": list(data.shape), "dtype": np.dtype(data.dtype).name,
                     "min": lo, "max": hi, "finite": finite,
                     **label_stats(labels, opts, pad), "pad": pad,
                     "labels_finite": bool(np.isfinite(labels).all())})
    return rows
