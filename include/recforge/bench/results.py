"""What every loader's results share: the ``bench.json`` schema, latency numbers, the pick,
the label and detection statistics.

Every loader (``recforge.bench.loaders``) writes the same result layout, so floors, the
quality gate and ``bench.json`` work unchanged for any; the pieces they compute alike live
here, below all of them, in either interpreter (no numpy at import, nothing the MXNet
environment lacks).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

SCHEMA = "recforge.bench/1"

# Two settings within this fraction of the best throughput are "equal": prefer fewer threads,
# they leave cores to the training process.
TIE_FRACTION = 0.03


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), without importing numpy."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def rounded(x: float | None, nd: int = 3) -> float | None:
    """``x`` rounded to ``nd`` digits, None kept: how ``bench.json`` writes its numbers."""
    return None if x is None else round(x, nd)


def latency_ms(latencies: list[float]) -> dict:
    """A run's ``latency_ms``: percentiles, max and mean of its per-batch seconds, in ms."""
    return {"p50": rounded(percentile(latencies, 50) * 1e3),
            "p95": rounded(percentile(latencies, 95) * 1e3),
            "p99": rounded(percentile(latencies, 99) * 1e3),
            "max": rounded(max(latencies) * 1e3),
            "mean": rounded(sum(latencies) / len(latencies) * 1e3)}


def dataset_facts(n_records: int, rec_bytes: int, num_classes: int | None,
                  sample: dict | None) -> dict:
    """``bench.json``'s ``dataset`` as every loader writes it (the MXNet loaders add the
    download's numbers)."""
    return {"records": n_records, "rec_bytes": rec_bytes,
            "mean_record_bytes": round(rec_bytes / n_records, 1), "num_classes": num_classes,
            "sample": sample}


def bench_document(*, prefix: str, opts, started: datetime, loader: str, host: dict,
                   device: dict, dataset: dict, bare_decode: dict, image_sizes: dict | None,
                   threads: dict, runs: list[dict], value_check: dict, label_range: list,
                   recommendation: dict, summary: dict, problems: list[str],
                   warnings: list[str]) -> dict:
    """The ``bench.json`` document, one layout (and key order) for every loader: the floors,
    the quality gate and the report read any of them alike. ``opts``: the ``BenchOptions``
    measured with; ``duration_s`` runs from ``started`` to now. The version and run are
    filled in when the document is published with them."""
    return {
        "schema": SCHEMA, "created_at": started.isoformat(),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 3),
        "prefix": prefix, "split": opts.split, "dataset_version": None, "run_id": None,
        "loader": loader, "options": opts.model_dump(mode="json"), "host": host,
        "device": device, "dataset": dataset, "bare_decode": bare_decode,
        "image_sizes": image_sizes, "threads": threads, "runs": runs,
        "value_check": value_check, "label_range": label_range,
        "recommendation": recommendation, "summary": summary, "problems": problems,
        "warnings": warnings,
    }


def run_entry(*, threads: int, first: float, ips: float, rec_bytes: int, n_records: int,
              latencies: list[float], measured: int, window: float, opts, shapes,
              batches_seen: int, label_min, label_max, peak: int | None = None,
              baseline: int | None = None, problems: list[str]) -> dict:
    """One timed run of an in-process loader (DALI's, PyTorch's) as ``bench.json``'s
    ``runs`` hold it: the same keys as MXNet's runs."""
    return {
        "requested_threads": [threads], "effective_threads": threads,
        "observed_threads": threads,
        "time_to_first_batch_s": round(first, 4), "images_per_sec": round(ips, 1),
        "read_mb_per_sec": round(ips * rec_bytes / max(n_records, 1) / 1e6, 3),
        "latency_ms": latency_ms(latencies),
        "window": {"batches": measured, "images": measured * opts.batch_size,
                   "seconds": round(window, 4), "warmup_batches": opts.warmup_batches},
        "batches_seen": {"count": batches_seen, "shapes": [list(x) for x in sorted(shapes)],
                         "label_min": label_min, "label_max": label_max},
        "gpu_memory_peak_bytes": peak, "gpu_memory_baseline_bytes": baseline,
        "problems": problems,
    }


def thread_grid(opts, procs: int) -> list[int]:
    """The worker counts an in-process loader is timed at: the spec's grid and its setting,
    each capped at the CPUs."""
    return sorted({min(t, procs) for t in (*opts.thread_grid, opts.preprocess_threads)})


def picked(runs: list[dict], decode: dict, device_kind: str, procs: int, opts,
           fraction_smaller: float) -> tuple[dict, dict, dict]:
    """``(recommendation, the recommended run, summary)`` of an in-process loader's runs:
    the summary at the recommended worker count, beside the rate at the configured one."""
    pick = recommend(runs)
    best = next(r for r in runs if r["effective_threads"] == pick["preprocess_threads"])
    configured = min(opts.preprocess_threads, procs)
    summary = summary_of(best, decode, device_kind, min(best["effective_threads"], procs),
                         fraction_smaller, next(r["images_per_sec"] for r in runs
                                                if r["effective_threads"] == configured))
    return pick, best, summary


def recommend(runs: list[dict]) -> dict:
    """The fastest setting; among settings within TIE_FRACTION of it, the fewest threads."""
    best = max(r["images_per_sec"] for r in runs)
    ok = [r for r in runs if r["images_per_sec"] >= best * (1 - TIE_FRACTION)]
    pick = min(ok, key=lambda r: (r["effective_threads"], -r["images_per_sec"]))
    return {
        "preprocess_threads": pick["effective_threads"],
        "images_per_sec": pick["images_per_sec"],
        "p99_ms": pick["latency_ms"]["p99"],
        "why": (f"fastest measured setting (within {TIE_FRACTION:.0%} of the best, fewest "
                "threads); values above the cap are not useful: MXNet lowers them silently"),
    }


def summary_of(best: dict, decode: dict, device_kind: str, limit_threads: int,
               fraction_smaller: float | None, configured_images_per_sec: float) -> dict:
    """``bench.json``'s ``summary``: the recommended run's numbers beside the bare-decode rate
    (``limit_threads``: the threads the single-core limit is scaled by)."""
    return {
        "device": device_kind,
        "preprocess_threads": best["effective_threads"],
        "images_per_sec": best["images_per_sec"],
        "latency_p50_ms": best["latency_ms"]["p50"],
        "latency_p95_ms": best["latency_ms"]["p95"],
        "latency_p99_ms": best["latency_ms"]["p99"],
        "time_to_first_batch_s": best["time_to_first_batch_s"],
        "read_mb_per_sec": best["read_mb_per_sec"],
        "bare_decode_images_per_sec": decode["images_per_sec"],
        "fraction_of_bare_decode": round(best["images_per_sec"] / decode["images_per_sec"], 3),
        "bare_decode_limit_at_threads": round(decode["images_per_sec"] * limit_threads, 1),
        "fraction_smaller_than_data_shape": fraction_smaller,
        "gpu_memory_peak_bytes": best["gpu_memory_peak_bytes"],
        "configured_threads_images_per_sec": configured_images_per_sec,
    }


def label_range(runs: list[dict], values: dict, num_classes: int | None,
                label_width: int, what: str = "labels") -> tuple[float | None, float | None,
                                                               str | None]:
    """The labels every batch showed, ``(lo, hi, problem)``: a problem when single labels are
    not integers in ``[0, num_classes)`` as ``classes.json`` says. ``what`` names them in the
    problem (a detection loader's range is its objects' class ids; None where no batch held
    an object)."""
    los = [values["label_min"]] + [r["batches_seen"]["label_min"] for r in runs]
    his = [values["label_max"]] + [r["batches_seen"]["label_max"] for r in runs]
    lo = min((x for x in los if x is not None), default=None)
    hi = max((x for x in his if x is not None), default=None)
    bad = num_classes is not None and label_width == 1 and lo is not None and (
        lo < 0 or hi >= num_classes or lo != int(lo) or hi != int(hi))
    return lo, hi, (f"{what} span [{lo:g}, {hi:g}], not integers in [0, {num_classes}) as "
                    "classes.json says" if bad else None)


def span(rows: list[dict], key: str, pick):
    """``pick`` (min or max) of ``key`` over ``rows``, the Nones left out; None if all are."""
    return pick((r[key] for r in rows if r.get(key) is not None), default=None)


def object_stats(objects, per_image) -> dict:
    """A detection batch's label facts: ``objects`` (N, 6) rows of the real objects,
    ``per_image`` the object count of each image (numpy arrays)."""
    have = len(objects) > 0
    return {
        "label_min": float(objects[:, 0].min()) if have else None,
        "label_max": float(objects[:, 0].max()) if have else None,
        "objects": int(len(objects)), "negatives": int((per_image == 0).sum()),
        "max_objects": int(per_image.max()) if len(per_image) else 0,
        "box_min": float(objects[:, 1:5].min()) if have else None,
        "box_max": float(objects[:, 1:5].max()) if have else None,
        "boxes_ordered": bool(((objects[:, 3] > objects[:, 1])
                               & (objects[:, 4] > objects[:, 2])).all()) if have else True,
    }


def detection_summary(rows: list[dict]) -> dict:
    """What the batches' ``object_stats`` say about the objects, over ``rows``."""
    return {
        "objects": sum(r["objects"] for r in rows),
        "images_without_objects": sum(r["negatives"] for r in rows),
        "max_objects_per_image": max((r["max_objects"] for r in rows), default=0),
        "box_min": span(rows, "box_min", min), "box_max": span(rows, "box_max", max),
        "boxes_ordered": all(r["boxes_ordered"] for r in rows),
    }


def detection_problems(summary: dict, where: str, need_objects: bool = True) -> list[str]:
    """The boxes a detection loader handed out that a trainer cannot use (and, with
    ``need_objects``, a pass that saw no object at all: one epoch should)."""
    out = []
    lo, hi = summary["box_min"], summary["box_max"]
    if lo is not None and not (0.0 <= lo and hi <= 1.0):
        out.append(f"{where}: boxes span [{lo:g}, {hi:g}], outside the normalised [0, 1]")
    if not summary["boxes_ordered"]:
        out.append(f"{where}: a box has xmin >= xmax or ymin >= ymax")
    if need_objects and summary["objects"] == 0:
        out.append(f"{where}: no batch held an object: every image read is a negative "
                   "(or the labels are not detection label arrays)")
    return out
