"""The segmentation loader: ``SegmentationRecordDataset`` + Gluon ``DataLoader``, timed.

What segmentation users train with, swept over DataLoader ``num_workers`` instead of
``preprocess_threads``; the result has the ImageRecordIter benchmark's layout. Runs in the
MXNet environment (its row in ``recforge.bench.loaders``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from recforge.bench.device import gpu_used_bytes, host_info, nprocs, resolve_device
from recforge.bench.loaders import at_once
from recforge.bench.records import LoaderBenchError, bare_decode, count_records
from recforge.bench.results import (
    bench_document,
    dataset_facts,
    latency_ms,
    recommend,
    rounded,
    summary_of,
)
from recforge.format import names
from recforge.spec.bench import BenchOptions

log = logging.getLogger(__name__)


def measure(prefix: str, root: Path, opts: BenchOptions, fetched: dict, sizes: dict | None,
            started: datetime, quiet: Callable[[], object] = at_once) -> dict:
    """The segmentation loader: ``SegmentationRecordDataset`` + joint transforms (mirror,
    random crop to ``data_shape`` padded with ignore, ToTensor) + Gluon ``DataLoader``, timed
    like ``run_loader`` over a ``num_workers`` grid (``thread_grid`` values, capped at the CPU
    count, plus 0). Same result layout as the ImageRecordIter benchmark, so floors, the
    quality gate and ``bench.json`` work unchanged; ``preprocess_threads`` there means
    DataLoader workers here. The signature of every loader (``recforge.bench.loaders``):
    ``sizes`` is not used (the result has no size check), ``quiet`` is waited for first."""
    quiet()
    import mxnet as mx

    device = resolve_device(opts.device, opts.gpu_id)
    rec, n_records, rec_bytes, doc = _split_facts(root, opts)
    ignore = int(doc.get("ignore_index", 255))
    ds = _dataset(root, opts, ignore)
    decode = bare_decode(rec, opts.decode_records)
    decode.pop("sizes", None)
    procs = nprocs()
    workers = sorted({min(t, procs) for t in opts.thread_grid} | {min(opts.preprocess_threads,
                                                                      procs), 0})
    ctx = mx.gpu(device["gpu_id"]) if device["kind"] == "gpu" else None
    gpu_base = gpu_used_bytes(mx, device["gpu_id"]) if ctx is not None else None
    runs = []
    for nw in workers:
        runs.append(_timed_run(mx, ds, opts, nw, ctx, device, gpu_base, rec_bytes, n_records))
        log.info("bench (segmentation): %d DataLoader workers: %.0f img/s", nw,
                 runs[-1]["images_per_sec"])
    pick = recommend(runs)
    best = next(r for r in runs if r["effective_threads"] == pick["preprocess_threads"])
    num_classes = doc.get("num_classes")
    value_check = _value_check(mx, ds, opts, n_records, ignore, num_classes)
    summary = summary_of(best, decode, device["kind"], max(best["effective_threads"], 1), None,
                         next((r["images_per_sec"] for r in runs
                               if r["effective_threads"] == min(opts.preprocess_threads, procs)),
                              best["images_per_sec"]))
    summary["num_workers"] = best["effective_threads"]
    return bench_document(
        prefix=prefix, opts=opts, started=started,
        loader="recforge.segmentation.dataset.SegmentationRecordDataset + gluon.data.DataLoader",
        host=host_info(), device=device,
        dataset={**dataset_facts(n_records, rec_bytes, num_classes, fetched.get("sample")),
                 "download_seconds": rounded(fetched["download_seconds"]),
                 "download_mb_per_sec": None},
        bare_decode=decode, image_sizes=None,
        threads={"nprocs": procs, "cap": procs,
                 "cap_formula": "DataLoader num_workers (processes), capped at the CPUs",
                 "grid": workers, "measured_effective": workers},
        runs=runs, value_check=value_check,
        label_range=[value_check["label_min"], value_check["label_max"]],
        recommendation={**pick, "num_workers": pick["preprocess_threads"],
                        "prefetch_buffer": opts.prefetch_buffer,
                        "batch_size": opts.batch_size, "device": device["kind"]},
        summary=summary, problems=value_check["problems"],
        warnings=["preprocess_threads / thread_grid are read as DataLoader num_workers "
                  "for loader=segmentation"])


def _split_facts(root: Path, opts: BenchOptions) -> tuple[Path, int, int, dict]:
    """``(rec, records, rec + mask bytes, classes.json)`` of the fetched split: refused here,
    with the fix, before any loader starts (no masks, fewer records than a batch)."""
    rec = root / names.rec(opts.split)
    mask_rec = root / names.rec(opts.split, mask=True)
    if not mask_rec.exists():
        raise LoaderBenchError(f"{mask_rec} missing: loader=segmentation needs the split's "
                               "_mask.rec/.idx next to its .rec")
    n_records = count_records(root / names.idx(opts.split))
    if n_records < opts.batch_size:
        raise LoaderBenchError(f"{rec} has {n_records} records, fewer than batch_size="
                               f"{opts.batch_size}; lower the batch size for this split")
    doc = json.loads((root / names.CLASSES).read_text()) if (root / names.CLASSES).exists() \
        else {}
    return rec, n_records, rec.stat().st_size + mask_rec.stat().st_size, doc


def _dataset(root: Path, opts: BenchOptions, ignore: int):
    """The dataset as segmentation users train with it: mirror (if asked), random crop to
    ``data_shape`` padded with ``ignore``, ToTensor."""
    from recforge.segmentation.dataset import (
        JointCompose,
        RandomCrop,
        RandomFlipLeftRight,
        SegmentationRecordDataset,
        ToTensor,
    )

    steps = [RandomCrop(opts.data_shape[1:], pad_image="mean", ignore_index=ignore)]
    if opts.rand_mirror:
        steps.insert(0, RandomFlipLeftRight())
    return SegmentationRecordDataset.from_split(str(root), opts.split,
                                                transform=JointCompose([*steps, ToTensor()]))


def _timed_run(mx, ds, opts: BenchOptions, nw: int, ctx, device: dict, gpu_base: int | None,
               rec_bytes: int, n_records: int) -> dict:
    """One ``num_workers`` setting timed over warmup + measured batches (wrapping epochs,
    stopping at ``max_seconds_per_run``): one ``runs`` entry, laid out like ``run_loader``'s
    so the floors read both alike."""
    import numpy as np

    loader = mx.gluon.data.DataLoader(ds, batch_size=opts.batch_size, shuffle=opts.shuffle,
                                      num_workers=nw, last_batch="discard")
    latencies, per_batch, images, epochs = [], [], 0, 0
    t0 = time.perf_counter()
    it = iter(loader)
    first = None
    window_start = None
    total = opts.warmup_batches + opts.measure_batches
    for i in range(total):
        t = time.perf_counter()
        try:
            data, mask = next(it)
        except StopIteration:
            epochs += 1
            it = iter(loader)
            data, mask = next(it)
        if ctx is not None:
            data, mask = data.as_in_context(ctx), mask.as_in_context(ctx)
            data.wait_to_read()
        else:
            data.wait_to_read()
        now = time.perf_counter()
        if first is None:
            first = now - t0
        per_batch.append({"shape": list(data.shape), "dtype": np.dtype(data.dtype).name,
                          "mask_shape": list(mask.shape)})
        if i >= opts.warmup_batches:
            window_start = window_start or t
            latencies.append(now - t)
            images += data.shape[0]
        if window_start and now - window_start > opts.max_seconds_per_run:
            break
    window = time.perf_counter() - (window_start or t0)
    ips = images / window if window > 0 else 0.0
    del it, loader
    return {
        "requested_threads": [nw], "effective_threads": nw, "observed_threads": nw,
        "time_to_first_batch_s": round(first or 0.0, 4), "images_per_sec": round(ips, 1),
        "read_mb_per_sec": round(ips * rec_bytes / n_records / 1e6, 3),
        "latency_ms": latency_ms(latencies),
        "window": {"batches": len(latencies), "images": images, "seconds": round(window, 4),
                   "warmup_batches": opts.warmup_batches, "epochs_wrapped": epochs},
        "batches": per_batch, "problems": [],
        "gpu_memory_peak_bytes": (gpu_used_bytes(mx, device["gpu_id"])
                                  if ctx is not None else None),
        "gpu_memory_baseline_bytes": gpu_base,
    }


def _value_check(mx, ds, opts: BenchOptions, n_records: int, ignore: int,
                 num_classes: int | None) -> dict:
    """The untimed value pass over one epoch (capped), 0 workers, after the sweep: value
    ranges, finiteness and mask values, so a broken split fails on what it holds, not on
    how fast it loads."""
    import numpy as np

    rows, problems = [], []
    n_check = min(n_records // opts.batch_size, opts.max_check_batches)
    check_loader = mx.gluon.data.DataLoader(ds, batch_size=opts.batch_size, shuffle=False,
                                            last_batch="discard")
    mask_values: set[int] = set()
    for i, (data, mask) in enumerate(check_loader):
        if i >= n_check:
            break
        a, m = data.asnumpy(), mask.asnumpy()
        mask_values |= {int(v) for v in np.unique(m)}
        rows.append({"batch": i, "shape": list(a.shape), "dtype": a.dtype.name,
                     "min": float(a.min()), "max": float(a.max()),
                     "finite": bool(np.isfinite(a).all()), "label_min": float(m.min()),
                     "label_max": float(m.max()), "pad": 0})
    bad = sorted(v for v in mask_values if num_classes is not None and v != ignore
                 and not 0 <= v < num_classes)
    if bad:
        problems.append(f"mask values {bad[:10]} outside [0, {num_classes}) and ignore {ignore}")
    if not all(r["finite"] for r in rows):
        problems.append("image batches hold NaN or Inf")
    return {"batches": len(rows), "records_covered": len(rows) * opts.batch_size,
            "of_records": n_records,
            "value_min": min((r["min"] for r in rows), default=0.0),
            "value_max": max((r["max"] for r in rows), default=0.0),
            "all_finite": all(r["finite"] for r in rows),
            "label_min": min(mask_values, default=0),
            "label_max": max(mask_values, default=0),
            "shapes": sorted({tuple(r["shape"]) for r in rows}),
            "dtypes": sorted({r["dtype"] for r in rows}), "per_batch": rows,
            "problems": problems, "mask_values": sorted(mask_values),
            "note": "untimed pass, 0 workers, after the sweep"}
