"""One ``mx.io.ImageRecordIter`` run, timed like a training loop that waits for data.

Measures what a training loop sees: images per second over a warm window, per-batch latency
percentiles, time to the first batch, ``.rec`` bytes consumed per second, and every batch's
shape, dtype and label range (value ranges in a separate, untimed pass:
``recforge.bench.value_check``). MXNet's own log line (captured from fd 2) says how many
decode threads it really used. Runs in the MXNet environment.

For a kind whose labels are boxes (``loader: detection``) it runs ``mx.io.ImageDetRecordIter``
the same way: its own arguments (``det_iter_kwargs``), and labels read as objects
(``detection_objects``): the label range is then the class ids of the real objects, with
the boxes' range and the negatives beside it (``recforge.bench.results``).

An iterator error becomes one sentence with the values and the fix (``explain_iter_error``);
the real size error is an explicit ``max_crop_size`` larger than an image, reported with the
smallest image found.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from recforge.bench.device import first_mxnet_message, gpu_used_bytes
from recforge.bench.loaders import kind_of
from recforge.bench.records import LoaderBenchError, count_records
from recforge.bench.results import detection_summary, latency_ms, object_stats, span
from recforge.format import names
from recforge.spec.bench import BenchOptions

log = logging.getLogger(__name__)

_THREADS_RE = re.compile(r"use (\d+) threads for decoding")
_PAD_WIDTH_RE = re.compile(r"label padding width: (\d+)")  # ImageDetRecordIter's log line

DET_ITER = "mx.io.ImageDetRecordIter"
# ImageDetRecordIter prefixes each label row with (channels, height, width, label length)
DET_PREFIX = 4


@contextmanager
def _captured_stderr():
    """Capture fd 2 (MXNet's C++ LOG lines) into a list holding one string.

    Process-wide for the ~0.1 s it takes to build an iterator: anything another thread
    writes to stderr meanwhile lands in the debug log instead.
    """
    out: list[str] = []
    try:
        fd = os.dup(2)
    except OSError:  # no fd 2 (rare daemons): run uncaptured
        yield out
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(fd, 2)
            os.close(fd)
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", "replace"))


def iter_name(opts: BenchOptions) -> str:
    """The iterator ``opts`` measures, as ``bench.json``'s ``loader`` names it."""
    return DET_ITER if boxes(opts) else "mx.io.ImageRecordIter"


def boxes(opts: BenchOptions) -> bool:
    """Whether ``opts`` reads a kind whose labels are boxes (ImageDetRecordIter's)."""
    return kind_of(opts.loader).boxes


def det_iter_kwargs(root: Path, opts: BenchOptions, threads: int, verbose: bool) -> dict:
    """``mx.io.ImageDetRecordIter``'s arguments: no ``.idx`` (it reads the ``.rec`` through
    its own splitter and shuffles without one), ``rand_crop`` / ``rand_mirror`` as its
    probabilities (crop always with its default sampler, mirror half the time, as
    ImageRecordIter does), and ``iter_kwargs`` over them. Its output stays in the default
    ``ctx`` (pinned memory where there is a GPU): it has no ``device_id``."""
    kw = {
        "path_imgrec": str(root / names.rec(opts.split)),
        "data_shape": tuple(opts.data_shape), "batch_size": opts.batch_size,
        "rand_crop_prob": 1.0 if opts.rand_crop else 0.0,
        "rand_mirror_prob": 0.5 if opts.rand_mirror else 0.0,
        "preprocess_threads": threads, "prefetch_buffer": opts.prefetch_buffer,
        "shuffle": opts.shuffle, "seed": opts.seed, "verbose": verbose,
    }
    if opts.resize != -1:
        kw["resize"] = opts.resize
    kw.update({k: tuple(v) if isinstance(v, list) else v for k, v in opts.iter_kwargs.items()})
    return kw


def _iter_kwargs(root: Path, opts: BenchOptions, threads: int, verbose: bool,
                 device_id: int = 0) -> dict:
    if boxes(opts):
        return det_iter_kwargs(root, opts, threads, verbose)
    kw = {
        "path_imgrec": str(root / names.rec(opts.split)),
        "path_imgidx": str(root / names.idx(opts.split)),
        "data_shape": tuple(opts.data_shape), "batch_size": opts.batch_size,
        "rand_crop": opts.rand_crop, "rand_mirror": opts.rand_mirror,
        "preprocess_threads": threads, "prefetch_buffer": opts.prefetch_buffer,
        "shuffle": opts.shuffle, "seed": opts.seed, "label_width": opts.label_width,
        "verbose": verbose,
        # ImageRecordIter allocates its output in pinned host memory of this GPU
        # (CPUPinned(device_id)); on CPU builds that is ordinary memory
        "device_id": device_id,
    }
    for name in ("resize", "max_crop_size", "min_crop_size"):
        if getattr(opts, name) != -1:
            kw[name] = getattr(opts, name)
    kw.update(opts.iter_kwargs)
    return kw


def explain_iter_error(exc: Exception, rec: Path, opts: BenchOptions,
                       sizes: dict | None) -> str:
    """Turn an MXNet iterator error into one sentence with the values and the fix."""
    msg = first_mxnet_message(exc)
    smallest = (sizes or {}).get("smallest")
    small_txt = (f"the smallest image checked is {smallest['height']}x{smallest['width']} "
                 f"(key {smallest['key']})" if smallest else "image sizes unknown")
    if "smaller than max_crop_size" in msg:
        hint = (f"max_crop_size={opts.max_crop_size} is larger than an image ({small_txt}); "
                "lower max_crop_size or pack with a larger pack.resize")
    elif "smaller than input shape" in msg:
        hint = (f"data_shape {opts.data_shape} is larger than an image ({small_txt}); lower "
                "data_shape or pack with a larger pack.resize")
    elif "Not enough label packed" in msg:
        hint = ("the records' labels are not detection label arrays [A, B, width, height, "
                "objects...]; ImageDetRecordIter reads splits packed with task: detection")
    elif "label_width" in msg:
        hint = ("the records carry a different number of labels than label_width="
                f"{opts.label_width}; set label_width to the records' label count")
    elif "Cannot find any files" in msg:
        hint = f"{rec} does not exist or is unreadable"
    elif "number of input images must be bigger than the batch size" in msg:
        hint = f"the split has fewer records than batch_size={opts.batch_size}; lower it"
    else:
        hint = "see the MXNet message; run with -v for the full traceback"
    return f"{iter_name(opts).rsplit('.', 1)[-1]} failed on {rec}: {msg} — {hint}"


def open_iter(mx, root: Path, opts: BenchOptions, threads: int, sizes: dict | None,
               device_id: int = 0, parts: tuple[int, int] | None = None):
    """Construct the iterator (which decodes the first batch); returns (iter, seconds, log).
    ``parts``: ``(num_parts, part_index)``, the iterator reads that part of the records."""
    rec = root / names.rec(opts.split)
    t0 = time.perf_counter()
    failure = None
    with _captured_stderr() as err:
        try:
            # MXDataIter.__init__ fetches the first batch, so this is time to first batch
            make = mx.io.ImageDetRecordIter if boxes(opts) else mx.io.ImageRecordIter
            kw = _iter_kwargs(root, opts, threads, verbose=True, device_id=device_id)
            if parts is not None:
                kw.update(num_parts=parts[0], part_index=parts[1])
            it = make(**kw)
        except mx.base.MXNetError as exc:
            failure = exc
    seconds = time.perf_counter() - t0
    text = err[0] if err else ""
    for line in text.splitlines():
        log.debug("mxnet: %s", line)
    if failure is not None:
        raise LoaderBenchError(explain_iter_error(failure, rec, opts, sizes)) from failure
    return it, seconds, text


def next_batch(it):
    """Next batch, wrapping to a new epoch like a training loop; returns (batch, wrapped)."""
    try:
        return it.next(), False
    except StopIteration:
        it.reset()
        return it.next(), True


def detection_objects(labels) -> tuple:
    """The real objects of one ``ImageDetRecordIter`` label batch, ``(objects, per_image)``.

    Each label row is ``[channels, height, width, n, <n values of the record's label as
    augmented>, label_pad_value...]``; the record's label is ``[A, B, ..., objects]``.
    ``objects``: an (N, B) float array of every image's rows with a class id >= 0 (the
    padding row of a negative is gone already: the iterator drops rows it cannot read as a
    box, and pads with -1); ``per_image``: the object count of each image."""
    import numpy as np

    labels = np.asarray(labels, np.float32).reshape(len(labels), -1)
    rows, counts, width = [], [], None
    for row in labels:
        n = int(row[DET_PREFIX - 1])
        raw = row[DET_PREFIX:DET_PREFIX + n]
        if n < 2 or int(raw[1]) < 5 or (n - int(raw[0])) % int(raw[1]):
            counts.append(0)
            continue
        width = int(raw[1])
        objs = raw[int(raw[0]):].reshape(-1, width)
        objs = objs[objs[:, 0] >= 0]
        rows.append(objs)
        counts.append(len(objs))
    objects = np.concatenate(rows) if rows else np.zeros((0, width or 6), np.float32)
    return objects, np.asarray(counts, int)


def label_stats(labels, opts: BenchOptions, pad: int = 0) -> dict:
    """One batch's label facts: its min and max; for boxes (``loader: detection``) the class
    ids' range of the real objects (None when the batch holds none), the boxes' range, and
    the images without objects (``pad`` repeated images at the end not counted)."""
    if not boxes(opts):
        return {"label_min": float(labels.min()), "label_max": float(labels.max())}
    objects, per_image = detection_objects(labels[:len(labels) - pad] if pad else labels)
    return object_stats(objects, per_image)


def run_loader(root: Path, opts: BenchOptions, threads: int, device: dict,
               sizes: dict | None = None) -> dict:
    """Build one ImageRecordIter and time it like a training loop that waits for data.

    Per batch the timed loop only waits for the data (copied to the GPU when there is one)
    and reads the labels; shape, dtype, pad and label range of every batch are recorded.
    Value ranges need full reductions, which on CPU steal the decode threads' cores (they
    cut measured throughput by 40-90 % on 2 cores), so ``value_check.check_values`` does
    them in a separate, untimed pass.
    """
    import mxnet as mx

    rec = root / names.rec(opts.split)
    ctx = mx.gpu(device["gpu_id"]) if device["kind"] == "gpu" else None
    gpu_base = gpu_used_bytes(mx, device["gpu_id"]) if ctx is not None else None
    it, first_batch_s, text = open_iter(mx, root, opts, threads, sizes,
                                        device["gpu_id"] or 0)
    m = _THREADS_RE.search(text)
    observed = int(m.group(1)) if m else None
    m = _PAD_WIDTH_RE.search(text)
    pad_width = int(m.group(1)) if m else None
    timed = _timed_batches(mx, it, opts, threads, ctx, device["gpu_id"], gpu_base)
    del it

    rec_bytes = rec.stat().st_size
    n_records = count_records(root / names.idx(opts.split))
    latencies, per_batch, window_s = timed["latencies"], timed["batches"], timed["seconds"]
    ips = timed["images"] / window_s if window_s > 0 else 0.0
    out = {
        "requested_threads": threads,
        "observed_threads": observed,
        "time_to_first_batch_s": round(first_batch_s, 4),
        "images_per_sec": round(ips, 1),
        "read_mb_per_sec": round(ips * rec_bytes / max(n_records, 1) / 1e6, 3),
        "latency_ms": latency_ms(latencies),
        "window": {"batches": len(latencies), "images": timed["images"],
                   "seconds": round(window_s, 4), "warmup_batches": opts.warmup_batches,
                   "epochs_wrapped": timed["epochs"]},
        "batches_seen": {
            "count": len(per_batch),
            "shapes": sorted({tuple(b["shape"]) for b in per_batch}),
            "dtypes": sorted({b["dtype"] for b in per_batch}),
            "label_min": span(per_batch, "label_min", min),
            "label_max": span(per_batch, "label_max", max),
        },
        "batches": per_batch,
        "gpu_memory_peak_bytes": timed["gpu_peak"],
        "gpu_memory_baseline_bytes": gpu_base,
        "problems": timed["problems"],
    }
    if boxes(opts):
        out["batches_seen"]["detection"] = detection_summary(per_batch)
        out["label_pad_width"] = pad_width  # as the iterator logged it
    return out


def _timed_batches(mx, it, opts: BenchOptions, threads: int, ctx, gpu_id: int | None,
                   gpu_peak: int | None) -> dict:
    """The timed loop of ``run_loader`` over ``it``: warm-up, then the measured window
    (stopped early at ``max_seconds_per_run``); each batch's row, the window's latencies,
    images, seconds and wrapped epochs, the problems and the GPU memory peak."""
    import numpy as np

    expect_shape = [opts.batch_size, *opts.data_shape]
    per_batch: list[dict] = []
    problems: list[str] = []
    latencies: list[float] = []
    images = 0
    epochs = 0
    window_start = time.perf_counter()
    for i in range(opts.warmup_batches + opts.measure_batches):
        if i == opts.warmup_batches:
            window_start = time.perf_counter()
            images = 0
        t = time.perf_counter()
        batch, wrapped = next_batch(it)
        epochs += wrapped
        data = batch.data[0]
        if ctx is not None:
            data = data.as_in_context(ctx)
        data.wait_to_read()
        lat = time.perf_counter() - t
        labels = batch.label[0].asnumpy()
        if ctx is not None:
            gpu_peak = max(gpu_peak, gpu_used_bytes(mx, gpu_id))
        pad = int(batch.pad or 0)
        row = {
            "batch": i, "warmup": i < opts.warmup_batches, "latency_ms": round(lat * 1e3, 3),
            "shape": list(data.shape), "dtype": np.dtype(data.dtype).name,
            **label_stats(labels, opts, pad), "pad": pad, "context": str(data.context),
        }
        per_batch.append(row)
        if row["shape"] != expect_shape:
            problems.append(f"batch {i}: shape {row['shape']} != expected {expect_shape}")
        if i >= opts.warmup_batches:
            latencies.append(lat)
            images += opts.batch_size - pad
            if time.perf_counter() - window_start > opts.max_seconds_per_run:
                log.warning("run with %d threads: stopped after %d measured batches "
                            "(max_seconds_per_run=%s)", threads, len(latencies),
                            opts.max_seconds_per_run)
                break
    return {"batches": per_batch, "latencies": latencies, "images": images, "epochs": epochs,
            "seconds": time.perf_counter() - window_start, "problems": problems,
            "gpu_peak": gpu_peak}
