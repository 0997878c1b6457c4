"""MXNet's ImageRecordIter loader (ImageDetRecordIter for boxes): the whole measurement of a
fetched window, run in the MXNet environment.

``measure`` (the signature of every loader, ``recforge.bench.loaders``): the untimed value
check (``recforge.bench.value_check``), then, once the caller is quiet, the bare decode and
the ``preprocess_threads`` sweep of timed runs (``recforge.bench.loader``), one
``bench.json`` document.

The sweep: the effective value of each grid value is predicted from MXNet's cap formula, read
back from MXNet's own log line and recorded, and grid values that collapse to the same
effective value are measured once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from recforge.bench.device import host_info, nprocs, resolve_device, thread_cap
from recforge.bench.loader import boxes, explain_iter_error, iter_name, run_loader
from recforge.bench.loaders import at_once
from recforge.bench.records import (
    UPSCALE_NOTE,
    LoaderBenchError,
    bare_decode,
    count_records,
    size_check,
)
from recforge.bench.results import (
    bench_document,
    dataset_facts,
    detection_problems,
    label_range,
    recommend,
    rounded,
    summary_of,
)
from recforge.bench.value_check import check_values
from recforge.format import names
from recforge.spec.bench import BenchOptions

log = logging.getLogger(__name__)

_PARSER = ("ImageRecordIOParser2", "ImageDetRecordIOParser")  # whose Init caps the threads
DET_RESIZE_NOTE = (
    "MXNet 1.9.1 ImageDetRecordIter does not fail on these: it resizes every image to "
    "data_shape (resize_mode force, aspect not kept; the normalised boxes do not move), so "
    "these are upscaled and training sees blurred images. Pack with pack.resize >= the "
    "data_shape, or lower data_shape.")


def measure(prefix: str, root: Path, opts: BenchOptions, fetched: dict, sizes: dict | None,
            started: datetime, quiet: Callable[[], object] = at_once) -> dict:
    """The ImageRecordIter (or ImageDetRecordIter) benchmark of the window in ``root``: the
    value check (untimed, so it may run beside the caller's work), then, once the caller
    is quiet, the bare decode and the ``preprocess_threads`` sweep; one ``bench.json``
    document (the signature of every loader: ``recforge.bench.loaders``)."""
    warnings: list[str] = []
    device = resolve_device(opts.device, opts.gpu_id)
    host = host_info()
    rec, n_records, rec_bytes, num_classes = _split_facts(root, opts)
    log.info("bench %s/%s: %d records, %.1f MB; %s", prefix, opts.split, n_records,
             rec_bytes / 1e6, device["statement"])
    procs = nprocs()
    cap = thread_cap(procs)
    # the values do not depend on the thread count: the setting users train with
    try:
        values = check_values(root, opts, min(opts.preprocess_threads, cap), device, sizes,
                              procs)
    except LoaderBenchError as exc:
        if sizes is not None or exc.__cause__ is None:
            raise
        # no manifest to size the images: the decoded sample says which one is too small
        _, sizes = _decode_and_sizes(rec, opts, sizes, [])
        raise LoaderBenchError(explain_iter_error(exc.__cause__, rec, opts, sizes)) \
            from exc.__cause__
    quiet()
    decode, sizes = _decode_and_sizes(rec, opts, sizes, warnings)
    grid = sorted(set(opts.thread_grid) | {opts.preprocess_threads})
    by_effective, runs = _sweep(root, opts, grid, cap, procs, device, sizes, warnings)
    primary = next(r for r in runs if opts.preprocess_threads in r["requested_threads"])
    rec_pick = recommend(runs)
    best = next(r for r in runs if r["effective_threads"] == rec_pick["preprocess_threads"])
    lab_lo, lab_hi, problems = _problems(runs, values, decode, num_classes, opts)
    if opts.preprocess_threads > cap:
        warnings.append(
            f"preprocess_threads={opts.preprocess_threads} is above MXNet's cap "
            f"max(nprocs/2 - 1, 1) = {cap} on this {procs}-CPU host; MXNet silently uses {cap}"
        )

    summary = summary_of(best, decode, device["kind"], min(best["effective_threads"], procs),
                         sizes["fraction_smaller"], primary["images_per_sec"])
    return bench_document(
        prefix=prefix, opts=opts, started=started, loader=iter_name(opts),
        host=host, device=device,
        dataset={
            **dataset_facts(n_records, rec_bytes, num_classes, fetched.get("sample")),
            "download_seconds": rounded(fetched["download_seconds"]),
            "download_mb_per_sec": (round(fetched["downloaded_bytes"] / 1e6
                                          / fetched["download_seconds"], 2)
                                    if fetched["download_seconds"] else None),
        },
        bare_decode=decode, image_sizes=sizes,
        threads={
            "nprocs": procs, "cap": cap, "cap_formula": "max(nprocs // 2 - 1, 1) (MXNet 1.9.1 "
            f"{_PARSER[boxes(opts)]}::Init, applied silently)",
            "grid": grid, "measured_effective": sorted(by_effective),
        },
        runs=runs, value_check=values, label_range=[lab_lo, lab_hi],
        recommendation={**rec_pick, "prefetch_buffer": opts.prefetch_buffer,
                        "batch_size": opts.batch_size, "device": device["kind"]},
        summary=summary, problems=problems, warnings=warnings)


def _split_facts(root: Path, opts: BenchOptions) -> tuple[Path, int, int, int | None]:
    """``(rec, records, rec bytes, num_classes)`` of the fetched split; a split with fewer
    records than a batch is refused here, with the fix, before MXNet starts."""
    rec = root / names.rec(opts.split)
    n_records = count_records(root / names.idx(opts.split))
    rec_bytes = rec.stat().st_size
    num_classes = None
    if (root / names.CLASSES).exists():
        num_classes = json.loads((root / names.CLASSES).read_text()).get("num_classes")
    if n_records < opts.batch_size:
        raise LoaderBenchError(
            f"{rec} has {n_records} records, fewer than batch_size={opts.batch_size}; "
            "lower the batch size for this split"
        )
    return rec, n_records, rec_bytes, num_classes


def _decode_and_sizes(rec: Path, opts: BenchOptions, sizes: dict | None,
                      warnings: list[str]) -> tuple[dict, dict]:
    """The bare-decode rate, and the size check (the manifest's over the whole split when
    given, else the decoded sample's): images smaller than ``data_shape`` are upscaled by
    the loader, which the warning says, since it changes what training sees."""
    decode = bare_decode(rec, opts.decode_records)
    sizes = sizes or size_check(
        decode["sizes"], opts.data_shape,
        f"decoded sample of the first {decode['records']} records")
    decode.pop("sizes")
    if sizes["smaller_than_data_shape"]:
        warnings.append(
            f"{sizes['smaller_than_data_shape']} of {sizes['checked']} images are smaller "
            f"than data_shape {opts.data_shape[1]}x{opts.data_shape[2]} (smallest "
            f"{sizes['smallest']['height']}x{sizes['smallest']['width']}): "
            f"{DET_RESIZE_NOTE if boxes(opts) else UPSCALE_NOTE}"
        )
    return decode, sizes


def _sweep(root: Path, opts: BenchOptions, grid: list[int], cap: int, procs: int,
           device: dict, sizes: dict, warnings: list[str]
           ) -> tuple[dict[int, list[int]], list[dict]]:
    """The ``preprocess_threads`` sweep: grid values MXNet's cap collapses to the same
    effective value are measured once (``by_effective``: effective → requested); a run
    whose observed threads differ from the prediction is warned about, the observed value
    wins."""
    by_effective: dict[int, list[int]] = {}
    for t in grid:
        by_effective.setdefault(min(t, cap), []).append(t)
    runs = []
    for eff, requested in sorted(by_effective.items()):
        log.info("bench: preprocess_threads %s → effective %d", requested, eff)
        r = run_loader(root, opts, max(requested), device, sizes)
        r["effective_threads"] = eff
        r["requested_threads"] = requested
        if r["observed_threads"] is not None and r["observed_threads"] != eff:
            warnings.append(
                f"MXNet used {r['observed_threads']} decode threads where the cap formula "
                f"predicts {eff} (requested {requested}, {procs} CPUs); trust the observed value"
            )
        runs.append(r)
        log.info("bench: %d thread(s): %.0f img/s, p99 %.1f ms, first batch %.2f s", eff,
                 r["images_per_sec"], r["latency_ms"]["p99"], r["time_to_first_batch_s"])
    return by_effective, runs


def _problems(runs: list[dict], values: dict, decode: dict, num_classes: int | None,
              opts: BenchOptions) -> tuple[float, float, list[str]]:
    """``(label lo, label hi, problems)``: what makes the benchmark's document not pass —
    each run's problems, the value check's, labels outside ``classes.json`` and records
    that do not decode."""
    problems = [f"{r['effective_threads']} thread(s): {p}" for r in runs for p in r["problems"]]
    problems += values["problems"]
    detection = boxes(opts)
    lab_lo, lab_hi, label_problem = label_range(
        runs, values, num_classes, 1 if detection else opts.label_width,
        "the objects' class ids" if detection else "labels")
    problems += [label_problem] if label_problem else []
    if detection:  # the timed runs' boxes (augmented): the value check adds its own
        problems += [p for r in runs for p in detection_problems(
            r["batches_seen"]["detection"], f"{r['effective_threads']} thread(s)",
            need_objects=False)]
    if decode["undecodable"]:
        problems.append(f"{decode['undecodable']} of the first {decode['records']} records "
                        "do not decode with cv2.imdecode")
    return lab_lo, lab_hi, problems
