"""Loader benchmark: does the packed ``.rec`` feed a trainer fast enough? (``recforge bench``)

A dataset that validates but starves the GPU is still a failed build. This module runs the
loader users train with (``mx.io.ImageRecordIter``) over a packed split and measures what a
training loop sees: images per second over a warm window, per-batch latency percentiles,
time to the first batch, ``.rec`` bytes consumed per second, and every batch's shape, dtype,
value range and label range. Batches are copied to ``mx.gpu()`` when MXNet sees a GPU;
otherwise the result says plainly that it ran on CPU and the GPU memory peak is ``null``.

Next to the loader it measures the bare-decode rate of the same records (one Python loop of
``recordio`` reads + ``cv2.imdecode``) so the user sees how close to the limit the loader
runs, and it sweeps ``preprocess_threads``. MXNet 1.9.1 silently caps that knob at
``max(nprocs // 2 - 1, 1)`` (``ImageRecordIOParser2::Init``); the effective value is
predicted from the formula, read back from MXNet's own log line and recorded, and grid values
that collapse to the same effective value are measured once.

MXNet facts this relies on (checked with mxnet 1.9.1, see docs/gpu-worker.md): images smaller
than ``data_shape`` are NOT an error: they are upscaled (bilinear, aspect kept) and cropped,
so the benchmark counts them and warns; the real error is an explicit ``max_crop_size``
larger than an image, which is reported with the smallest image found.

The pydantic models here (``BenchOptions``, ``BenchFloors``, ``BenchSpec``) are imported by
the dataset spec, so this module imports no mxnet/cv2 at import time.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import tempfile
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

log = logging.getLogger(__name__)

SCHEMA = "recforge.bench/1"
BENCH_FILE = "bench.json"
ENV_VAR = "RECFORGE_BENCH_ENV"
# Two settings within this fraction of the best throughput are "equal": prefer fewer threads,
# they leave cores to the training process.
TIE_FRACTION = 0.03
UPSCALE_NOTE = (
    "MXNet 1.9.1 ImageRecordIter does not fail on these: it upscales them (bilinear, aspect "
    "kept) until they cover data_shape, then crops, so training sees blurred images. Pack "
    "with pack.resize >= the crop size, or lower data_shape."
)


class LoaderBenchError(RuntimeError):
    """The benchmark could not run; the message names the file, the value and the fix."""


class BenchFloorsFailed(RuntimeError):
    """The loader is below a floor of the spec; ``violations`` lists each with its numbers."""

    def __init__(self, violations: list[str]):
        super().__init__("loader benchmark below its floors:\n  - " + "\n  - ".join(violations))
        self.violations = violations


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BenchOptions(_Strict):
    """How to run the loader: the settings a training job would use, plus the sweep."""

    split: str = Field("train", description="which <split>.rec/.idx to load")
    loader: Literal["image_record_iter", "segmentation"] = "image_record_iter"
    batch_size: int = Field(64, ge=1, le=65536)
    data_shape: tuple[int, int, int] = Field((3, 224, 224), description="C, H, W; C in 1, 3, 4")
    rand_crop: bool = True
    rand_mirror: bool = True
    resize: int = Field(-1, ge=-1, description="ImageRecordIter resize (short side); -1 = off")
    max_crop_size: int = Field(-1, ge=-1)
    min_crop_size: int = Field(-1, ge=-1)
    label_width: int = Field(1, ge=1)
    shuffle: bool = True
    seed: int = 0
    preprocess_threads: int = Field(4, ge=1, le=256, description="the setting users train with")
    thread_grid: tuple[int, ...] = Field(
        (1, 2, 4, 8), description="preprocess_threads values to sweep; () = only the one above"
    )
    prefetch_buffer: int = Field(4, ge=1, le=16, description="MXNet caps its queue at 16")
    warmup_batches: int = Field(5, ge=0)
    measure_batches: int = Field(50, ge=1)
    max_seconds_per_run: float = Field(
        120.0, gt=0, description="stop a run's warm window early after this long"
    )
    decode_records: int = Field(500, ge=1, description="records for the bare-decode rate")
    max_check_batches: int = Field(
        200, ge=1, description="value-range pass: one epoch, at most this many batches"
    )
    device: Literal["auto", "cpu", "gpu"] = Field(
        "auto", description="auto: the GPU if MXNet sees one, else CPU (stated in the result)"
    )
    gpu_id: int = Field(0, ge=0)
    iter_kwargs: dict[str, int | float | bool | str] = Field(
        default_factory=dict,
        description="further ImageRecordIter arguments (mean_r, std_r, ...) passed unchanged",
    )

    @field_validator("data_shape")
    @classmethod
    def _shape_ok(cls, v: tuple[int, int, int]) -> tuple[int, int, int]:
        if v[0] not in (1, 3, 4) or v[1] < 1 or v[2] < 1:
            raise ValueError(
                f"data_shape {v} is not (C, H, W) with C in 1, 3, 4 and H, W >= 1; "
                "ImageRecordIter decodes to 1 (gray), 3 (RGB) or 4 (RGBA) channels"
            )
        return v

    @field_validator("thread_grid")
    @classmethod
    def _grid_ok(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(t < 1 for t in v):
            raise ValueError(f"thread_grid {v} has a value below 1; use positive thread counts")
        return tuple(sorted(set(v)))

    @field_validator("iter_kwargs")
    @classmethod
    def _no_overlap(cls, v: dict) -> dict:
        owned = {"path_imgrec", "path_imgidx", "data_shape", "batch_size", "rand_crop",
                 "device_id",
                 "rand_mirror", "preprocess_threads", "prefetch_buffer", "shuffle", "seed",
                 "resize", "max_crop_size", "min_crop_size", "label_width", "verbose"}
        clash = sorted(owned & set(v))
        if clash:
            raise ValueError(f"iter_kwargs sets {clash}, which are options of their own; "
                             "set them as bench options instead")
        return v

    @model_validator(mode="after")
    def _crop_sizes(self) -> BenchOptions:
        if self.max_crop_size != -1 and self.min_crop_size > self.max_crop_size:
            raise ValueError(f"min_crop_size {self.min_crop_size} > max_crop_size "
                             f"{self.max_crop_size}; MXNet requires min <= max")
        return self


class BenchFloors(_Strict):
    """Limits the benchmark must meet; ``None`` means not checked."""

    min_images_per_sec: float | None = Field(None, gt=0)
    max_p50_ms: float | None = Field(None, gt=0)
    max_p95_ms: float | None = Field(None, gt=0)
    max_p99_ms: float | None = Field(None, gt=0)
    max_first_batch_s: float | None = Field(None, gt=0)
    min_read_mb_per_sec: float | None = Field(None, gt=0)
    min_fraction_of_bare_decode: float | None = Field(
        None, gt=0, description="loader img/s ÷ single-core bare-decode img/s"
    )
    max_fraction_smaller_than_data_shape: float | None = Field(
        None, ge=0, le=1, description="images MXNet would silently upscale"
    )
    max_gpu_memory_bytes: int | None = Field(None, gt=0)
    require_gpu: bool = Field(False, description="fail if the benchmark ran on CPU")


class BenchSpec(_Strict):
    """The ``bench:`` section of a dataset spec: how to run, and floors per environment.

    ``floors`` is keyed by environment name; the key used is the one given explicitly, else
    ``$RECFORGE_BENCH_ENV``, else the device the run used (``gpu`` / ``cpu``), else
    ``default``.
    """

    options: BenchOptions = BenchOptions()
    floors: dict[str, BenchFloors] = Field(default_factory=dict)


# --------------------------------------------------------------------------------------
# small helpers


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), without importing numpy."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def nprocs() -> int:
    """CPUs this process may run on: what libgomp's ``omp_get_num_procs`` reports."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_cap(procs: int | None = None) -> int:
    """MXNet 1.9.1's silent cap on ``preprocess_threads``: ``max(nprocs/2 - 1, 1)``."""
    procs = nprocs() if procs is None else procs
    return max(procs // 2 - 1, 1)


def count_records(idx_path: Path) -> int:
    with open(idx_path, encoding="ascii", errors="replace") as f:
        return sum(1 for line in f if line.strip())


_THREADS_RE = re.compile(r"use (\d+) threads for decoding")


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


def _first_mxnet_message(exc: Exception) -> str:
    """MXNet errors carry a C++ traceback; keep the ``MXNetError: ...`` line."""
    text = str(exc)
    for line in text.splitlines():
        if "Check failed" in line or line.startswith("MXNetError"):
            return line.split("MXNetError: ", 1)[-1].strip()
    return text.strip().splitlines()[0] if text.strip() else repr(exc)


# --------------------------------------------------------------------------------------
# inputs


def fetch_split(prefix: str, split: str, dest: Path) -> dict:
    """Local folder → used in place; S3 prefix → the split's files downloaded into ``dest``.

    Returns paths and the download time (S3 only), so the result can show S3 read speed.
    """
    from recforge import storage

    names = [f"{split}.rec", f"{split}.idx"]
    optional = ["classes.json", "records.jsonl", f"{split}_mask.rec", f"{split}_mask.idx"]
    if not storage.is_s3(prefix):
        root = storage.local_path(prefix)
        missing = [n for n in names if not (root / n).exists()]
        if missing:
            have = sorted(p.name for p in root.glob("*.rec")) if root.exists() else []
            raise LoaderBenchError(
                f"{root}: {missing} missing; a packed split needs {split}.rec and {split}.idx "
                f"(.rec files there: {have or 'none'}); pass a prefix that holds them or "
                "choose another --split"
            )
        return {"root": root, "download_seconds": None, "downloaded_bytes": 0}
    started = time.perf_counter()
    size = 0
    for name in names + optional:
        uri = storage.join(prefix, name)
        if name in optional and not storage.exists(uri):
            continue
        try:
            storage.download(uri, dest / name)
        except Exception as exc:
            raise LoaderBenchError(
                f"cannot download {uri}: {exc}; check the prefix and that {split}.rec/.idx "
                "were published there"
            ) from exc
        size += (dest / name).stat().st_size
    return {"root": dest, "download_seconds": time.perf_counter() - started,
            "downloaded_bytes": size}


def _record_sizes(root: Path, split: str) -> list[tuple[int, int, int]] | None:
    """(key, height, width) of every record of the split, from the pack manifest."""
    path = root / "records.jsonl"
    if not path.exists():
        return None
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("split", split) == split and "height" in r and "width" in r:
                out.append((int(r["key"]), int(r["height"]), int(r["width"])))
    return out or None


def bare_decode(rec_path: Path, records: int, min_seconds: float = 0.5,
                max_passes: int = 20) -> dict:
    """The single-core limit: read records with ``recordio`` and ``cv2.imdecode`` them.

    Repeats passes over the same records until ``min_seconds`` so small samples still time
    stably. Also returns the size of every decoded image (for the data_shape check).
    """
    import cv2
    import numpy as np

    from recforge import recordio

    payloads = []
    started = time.perf_counter()
    for _, payload in recordio.iter_records(rec_path):
        payloads.append(payload)
        if len(payloads) >= records:
            break
    read_s = time.perf_counter() - started
    if not payloads:
        raise LoaderBenchError(f"{rec_path} holds no records; nothing to benchmark")
    sizes: list[tuple[int, int, int]] = []
    failed = 0
    passes = 0
    t0 = time.perf_counter()
    while True:
        for payload in payloads:
            header, image = recordio.unpack_image_record(payload)
            img = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
            if passes == 0:
                if img is None:
                    failed += 1
                else:
                    sizes.append((header.id, img.shape[0], img.shape[1]))
        passes += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds or passes >= max_passes:
            break
    n = len(payloads) * passes
    return {
        "records": len(payloads), "passes": passes, "seconds": round(elapsed, 4),
        "images_per_sec": round(n / elapsed, 1), "threads": 1, "undecodable": failed,
        "read_seconds": round(read_s, 4), "sizes": sizes,
        "method": "recforge.recordio.iter_records + cv2.imdecode(IMREAD_COLOR), one thread",
    }


def size_check(sizes: list[tuple[int, int, int]], data_shape: tuple[int, int, int],
               source: str) -> dict:
    """Count images smaller than ``data_shape`` (which MXNet silently upscales)."""
    _, h, w = data_shape
    small = [(k, ih, iw) for k, ih, iw in sizes if ih < h or iw < w]
    smallest = min(sizes, key=lambda s: min(s[1], s[2])) if sizes else None
    return {
        "source": source, "checked": len(sizes), "smaller_than_data_shape": len(small),
        "fraction_smaller": round(len(small) / len(sizes), 6) if sizes else None,
        "examples": [{"key": k, "height": ih, "width": iw} for k, ih, iw in small[:5]],
        "smallest": ({"key": smallest[0], "height": smallest[1], "width": smallest[2]}
                     if smallest else None),
        "min_height": min((s[1] for s in sizes), default=None),
        "min_width": min((s[2] for s in sizes), default=None),
        "behaviour": UPSCALE_NOTE if small else None,
    }


# --------------------------------------------------------------------------------------
# device


def resolve_device(requested: str, gpu_id: int = 0) -> dict:
    """Which device batches are copied to, with a sentence saying why."""
    import mxnet as mx

    features = mx.runtime.Features()
    cuda_build = features.is_enabled("CUDA")
    try:
        n = mx.context.num_gpus()
    except Exception as exc:  # a CUDA build without a driver raises here
        log.warning("mx.context.num_gpus() failed: %s", _first_mxnet_message(exc))
        n = 0
    info = {"requested": requested, "num_gpus": n, "mxnet_cuda_build": cuda_build,
            "gpu_id": None, "kind": "cpu"}
    if requested == "cpu":
        info["statement"] = "ran on CPU because device=cpu was requested; no GPU was used"
        return info
    if n > gpu_id:
        broken = gpu_smoke_test(gpu_id)
        if broken is None:
            info.update(kind="gpu", gpu_id=gpu_id,
                        statement=f"batches copied to mx.gpu({gpu_id}) ({n} GPU(s) visible)")
            return info
        if requested == "gpu":
            raise LoaderBenchError(broken)
        info["gpu_error"] = broken
        info["statement"] = (f"ran on CPU: GPU {gpu_id} is visible but unusable ({broken}); "
                             "batches stayed in host memory, GPU memory peak is null")
        return info
    why = (f"mx.context.num_gpus() = {n}, MXNet build has CUDA={cuda_build}"
           + ("" if cuda_build else " (the CPU wheel; install mxnet-cu112 on GPU workers)"))
    if requested == "gpu":
        raise LoaderBenchError(
            f"device=gpu requested but no GPU {gpu_id} is usable: {why}. On a GPU worker "
            "check the driver (nvidia-smi), CUDA_VISIBLE_DEVICES and the mxnet-cu112 install; "
            "use --device auto to fall back to CPU"
        )
    info["statement"] = (f"ran on CPU: no GPU visible to MXNet ({why}); batches stayed in "
                         "host memory and the GPU memory peak is not measured (null)")
    return info


def gpu_smoke_test(gpu_id: int) -> str | None:
    """Run one tiny kernel on the GPU; None if it works, else what broke and what to check.

    A copy to the GPU needs no kernel, an operator does: a wheel without code for this GPU's
    architecture (e.g. mxnet-cu112 on an sm_90 H200 if it ships no PTX to JIT) fails here.
    """
    import mxnet as mx

    try:
        got = (mx.nd.ones((4,), ctx=mx.gpu(gpu_id)) * 2).asnumpy()
    except Exception as exc:
        msg = _first_mxnet_message(exc)
        hint = ""
        if "no kernel image" in msg or "PTX" in msg or "invalid device function" in msg:
            hint = ("; the MXNet build has no kernels for this GPU's compute capability and "
                    "no PTX the driver could JIT (see docs/gpu-worker.md)")
        return f"a kernel on mx.gpu({gpu_id}) failed: {msg}{hint}"
    if list(got) != [2.0] * 4:
        return f"a kernel on mx.gpu({gpu_id}) computed {list(got)} instead of [2, 2, 2, 2]"
    return None


def _gpu_used_bytes(mx, gpu_id: int) -> int:
    free, total = mx.context.gpu_memory_info(gpu_id)
    return int(total - free)


# --------------------------------------------------------------------------------------
# one loader run


def _iter_kwargs(root: Path, opts: BenchOptions, threads: int, verbose: bool,
                 device_id: int = 0) -> dict:
    kw = {
        "path_imgrec": str(root / f"{opts.split}.rec"),
        "path_imgidx": str(root / f"{opts.split}.idx"),
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
    msg = _first_mxnet_message(exc)
    smallest = (sizes or {}).get("smallest")
    small_txt = (f"the smallest image checked is {smallest['height']}x{smallest['width']} "
                 f"(key {smallest['key']})" if smallest else "image sizes unknown")
    if "smaller than max_crop_size" in msg:
        hint = (f"max_crop_size={opts.max_crop_size} is larger than an image ({small_txt}); "
                "lower max_crop_size or pack with a larger pack.resize")
    elif "smaller than input shape" in msg:
        hint = (f"data_shape {opts.data_shape} is larger than an image ({small_txt}); lower "
                "data_shape or pack with a larger pack.resize")
    elif "label_width" in msg:
        hint = ("the records carry a different number of labels than label_width="
                f"{opts.label_width}; set label_width to the records' label count")
    elif "Cannot find any files" in msg:
        hint = f"{rec} does not exist or is unreadable"
    elif "number of input images must be bigger than the batch size" in msg:
        hint = f"the split has fewer records than batch_size={opts.batch_size}; lower it"
    else:
        hint = "see the MXNet message; run with -v for the full traceback"
    return f"ImageRecordIter failed on {rec}: {msg} — {hint}"


def _open_iter(mx, root: Path, opts: BenchOptions, threads: int, sizes: dict | None,
               device_id: int = 0):
    """Construct the iterator (which decodes the first batch); returns (iter, seconds, log)."""
    rec = root / f"{opts.split}.rec"
    t0 = time.perf_counter()
    failure = None
    with _captured_stderr() as err:
        try:
            # MXDataIter.__init__ fetches the first batch, so this is time to first batch
            it = mx.io.ImageRecordIter(**_iter_kwargs(root, opts, threads, verbose=True,
                                                      device_id=device_id))
        except mx.base.MXNetError as exc:
            failure = exc
    seconds = time.perf_counter() - t0
    text = err[0] if err else ""
    for line in text.splitlines():
        log.debug("mxnet: %s", line)
    if failure is not None:
        raise LoaderBenchError(explain_iter_error(failure, rec, opts, sizes)) from failure
    return it, seconds, text


def _next(it):
    """Next batch, wrapping to a new epoch like a training loop; returns (batch, wrapped)."""
    try:
        return it.next(), False
    except StopIteration:
        it.reset()
        return it.next(), True


def run_loader(root: Path, opts: BenchOptions, threads: int, device: dict,
               sizes: dict | None = None) -> dict:
    """Build one ImageRecordIter and time it like a training loop that waits for data.

    Per batch the timed loop only waits for the data (copied to the GPU when there is one)
    and reads the labels; shape, dtype, pad and label range of every batch are recorded.
    Value ranges need full reductions, which on CPU steal the decode threads' cores (they
    cut measured throughput by 40-90 % on 2 cores), so ``check_values`` does them in a
    separate, untimed pass.
    """
    import mxnet as mx
    import numpy as np

    rec = root / f"{opts.split}.rec"
    ctx = mx.gpu(device["gpu_id"]) if device["kind"] == "gpu" else None
    gpu_base = _gpu_used_bytes(mx, device["gpu_id"]) if ctx is not None else None
    gpu_peak = gpu_base
    it, first_batch_s, text = _open_iter(mx, root, opts, threads, sizes,
                                         device["gpu_id"] or 0)
    m = _THREADS_RE.search(text)
    observed = int(m.group(1)) if m else None

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
        batch, wrapped = _next(it)
        epochs += wrapped
        data = batch.data[0]
        if ctx is not None:
            data = data.as_in_context(ctx)
        data.wait_to_read()
        lat = time.perf_counter() - t
        labels = batch.label[0].asnumpy()
        if ctx is not None:
            gpu_peak = max(gpu_peak, _gpu_used_bytes(mx, device["gpu_id"]))
        pad = int(batch.pad or 0)
        row = {
            "batch": i, "warmup": i < opts.warmup_batches, "latency_ms": round(lat * 1e3, 3),
            "shape": list(data.shape), "dtype": np.dtype(data.dtype).name,
            "label_min": float(labels.min()), "label_max": float(labels.max()),
            "pad": pad, "context": str(data.context),
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
    window_s = time.perf_counter() - window_start
    del it

    rec_bytes = rec.stat().st_size
    n_records = count_records(root / f"{opts.split}.idx")
    ips = images / window_s if window_s > 0 else 0.0
    return {
        "requested_threads": threads,
        "observed_threads": observed,
        "time_to_first_batch_s": round(first_batch_s, 4),
        "images_per_sec": round(ips, 1),
        "read_mb_per_sec": round(ips * rec_bytes / max(n_records, 1) / 1e6, 3),
        "latency_ms": {
            "p50": _r(percentile(latencies, 50) * 1e3), "p95": _r(percentile(latencies, 95) * 1e3),
            "p99": _r(percentile(latencies, 99) * 1e3), "max": _r(max(latencies) * 1e3),
            "mean": _r(sum(latencies) / len(latencies) * 1e3),
        },
        "window": {"batches": len(latencies), "images": images, "seconds": round(window_s, 4),
                   "warmup_batches": opts.warmup_batches, "epochs_wrapped": epochs},
        "batches_seen": {
            "count": len(per_batch),
            "shapes": sorted({tuple(b["shape"]) for b in per_batch}),
            "dtypes": sorted({b["dtype"] for b in per_batch}),
            "label_min": min(b["label_min"] for b in per_batch),
            "label_max": max(b["label_max"] for b in per_batch),
        },
        "batches": per_batch,
        "gpu_memory_peak_bytes": gpu_peak,
        "gpu_memory_baseline_bytes": gpu_base,
        "problems": problems,
    }


def check_values(root: Path, opts: BenchOptions, threads: int, device: dict,
                 sizes: dict | None = None) -> dict:
    """Untimed pass: value range and finiteness of every batch of one epoch.

    One epoch (capped at ``max_check_batches``) sees every record once. Reductions run on the
    GPU when there is one (after the same copy training does), else in numpy.
    """
    import mxnet as mx
    import numpy as np

    n_records = count_records(root / f"{opts.split}.idx")
    n_batches = min(math.ceil(n_records / opts.batch_size), opts.max_check_batches)
    ctx = mx.gpu(device["gpu_id"]) if device["kind"] == "gpu" else None
    it, _, _ = _open_iter(mx, root, opts, threads, sizes, device["gpu_id"] or 0)
    rows = []
    problems = []
    for i in range(n_batches):
        batch, _ = _next(it)
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
        rows.append({"batch": i, "shape": list(data.shape), "dtype": np.dtype(data.dtype).name,
                     "min": lo, "max": hi, "finite": finite, "label_min": float(labels.min()),
                     "label_max": float(labels.max()), "pad": int(batch.pad or 0)})
        if not finite:
            problems.append(f"value check batch {i}: data has NaN or Inf")
    del it
    lo = min(r["min"] for r in rows)
    hi = max(r["max"] for r in rows)
    if hi <= lo:
        problems.append(f"every value of every checked batch is {lo}: the images decode to a "
                        "constant (corrupt data or a wrong mean/std)")
    return {
        "batches": len(rows), "records_covered": min(n_records, len(rows) * opts.batch_size),
        "of_records": n_records, "value_min": lo, "value_max": hi,
        "all_finite": all(r["finite"] for r in rows),
        "label_min": min(r["label_min"] for r in rows),
        "label_max": max(r["label_max"] for r in rows),
        "shapes": sorted({tuple(r["shape"]) for r in rows}),
        "dtypes": sorted({r["dtype"] for r in rows}),
        "per_batch": rows, "problems": problems,
        "note": "untimed pass with the recommended preprocess_threads, after the sweep",
    }


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


# --------------------------------------------------------------------------------------
# the benchmark


def _segmentation(prefix: str, root: Path, opts: BenchOptions, fetched: dict,
                  started) -> dict:
    """The segmentation loader: ``SegmentationRecordDataset`` + joint transforms (mirror,
    random crop to ``data_shape`` padded with ignore, ToTensor) + Gluon ``DataLoader``, timed
    like ``run_loader`` over a ``num_workers`` grid (``thread_grid`` values, capped at the CPU
    count, plus 0). Same result layout as the ImageRecordIter benchmark, so floors, the
    quality gate and ``bench.json`` work unchanged; ``preprocess_threads`` there means
    DataLoader workers here."""
    import mxnet as mx
    import numpy as np

    from recforge.gluon import (
        JointCompose,
        RandomCrop,
        RandomFlipLeftRight,
        SegmentationRecordDataset,
        ToTensor,
    )

    device = resolve_device(opts.device, opts.gpu_id)
    rec = root / f"{opts.split}.rec"
    mask_rec = root / f"{opts.split}_mask.rec"
    if not mask_rec.exists():
        raise LoaderBenchError(f"{mask_rec} missing: loader=segmentation needs the split's "
                               "_mask.rec/.idx next to its .rec")
    n_records = count_records(root / f"{opts.split}.idx")
    if n_records < opts.batch_size:
        raise LoaderBenchError(f"{rec} has {n_records} records, fewer than batch_size="
                               f"{opts.batch_size}; lower the batch size for this split")
    doc = json.loads((root / "classes.json").read_text()) if (root / "classes.json").exists() \
        else {}
    ignore = int(doc.get("ignore_index", 255))
    rec_bytes = rec.stat().st_size + mask_rec.stat().st_size
    steps = [RandomCrop(opts.data_shape[1:], pad_image="mean", ignore_index=ignore)]
    if opts.rand_mirror:
        steps.insert(0, RandomFlipLeftRight())
    ds = SegmentationRecordDataset.from_split(str(root), opts.split,
                                              transform=JointCompose([*steps, ToTensor()]))
    decode = bare_decode(rec, opts.decode_records)
    decode.pop("sizes", None)
    procs = nprocs()
    workers = sorted({min(t, procs) for t in opts.thread_grid} | {min(opts.preprocess_threads,
                                                                      procs), 0})
    ctx = mx.gpu(device["gpu_id"]) if device["kind"] == "gpu" else None
    gpu_base = _gpu_used_bytes(mx, device["gpu_id"]) if ctx is not None else None
    runs = []
    for nw in workers:
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
        runs.append({
            "requested_threads": [nw], "effective_threads": nw, "observed_threads": nw,
            "time_to_first_batch_s": round(first or 0.0, 4), "images_per_sec": round(ips, 1),
            "read_mb_per_sec": round(ips * rec_bytes / n_records / 1e6, 3),
            "latency_ms": {k: _r(percentile(latencies, q) * 1e3) for k, q in
                           (("p50", 50), ("p95", 95), ("p99", 99))} |
                          {"max": _r(max(latencies) * 1e3),
                           "mean": _r(sum(latencies) / len(latencies) * 1e3)},
            "window": {"batches": len(latencies), "images": images, "seconds": round(window, 4),
                       "warmup_batches": opts.warmup_batches, "epochs_wrapped": epochs},
            "batches": per_batch, "problems": [],
            "gpu_memory_peak_bytes": (_gpu_used_bytes(mx, device["gpu_id"])
                                      if ctx is not None else None),
            "gpu_memory_baseline_bytes": gpu_base,
        })
        log.info("bench (segmentation): %d DataLoader workers: %.0f img/s", nw, ips)
    pick = recommend(runs)
    best = next(r for r in runs if r["effective_threads"] == pick["preprocess_threads"])

    # untimed value pass over one epoch (capped), workers 0: ranges, finiteness, mask values
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
    num_classes = doc.get("num_classes")
    bad = sorted(v for v in mask_values if num_classes is not None and v != ignore
                 and not 0 <= v < num_classes)
    if bad:
        problems.append(f"mask values {bad[:10]} outside [0, {num_classes}) and ignore {ignore}")
    if not all(r["finite"] for r in rows):
        problems.append("image batches hold NaN or Inf")
    summary = {
        "device": device["kind"], "preprocess_threads": best["effective_threads"],
        "num_workers": best["effective_threads"], "images_per_sec": best["images_per_sec"],
        "latency_p50_ms": best["latency_ms"]["p50"], "latency_p95_ms": best["latency_ms"]["p95"],
        "latency_p99_ms": best["latency_ms"]["p99"],
        "time_to_first_batch_s": best["time_to_first_batch_s"],
        "read_mb_per_sec": best["read_mb_per_sec"],
        "bare_decode_images_per_sec": decode["images_per_sec"],
        "fraction_of_bare_decode": round(best["images_per_sec"] / decode["images_per_sec"], 3),
        "bare_decode_limit_at_threads": round(decode["images_per_sec"] * max(
            best["effective_threads"], 1), 1),
        "fraction_smaller_than_data_shape": None,
        "gpu_memory_peak_bytes": best["gpu_memory_peak_bytes"],
        "configured_threads_images_per_sec": next(
            (r["images_per_sec"] for r in runs
             if r["effective_threads"] == min(opts.preprocess_threads, procs)),
            best["images_per_sec"]),
    }
    lo = min((r["min"] for r in rows), default=0.0)
    hi = max((r["max"] for r in rows), default=0.0)
    return {
        "schema": SCHEMA, "created_at": started.isoformat(),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 3),
        "prefix": prefix, "split": opts.split, "dataset_version": None, "run_id": None,
        "loader": "recforge.gluon.SegmentationRecordDataset + gluon.data.DataLoader",
        "options": opts.model_dump(mode="json"), "host": _host(), "device": device,
        "dataset": {"records": n_records, "rec_bytes": rec_bytes,
                    "mean_record_bytes": round(rec_bytes / n_records, 1),
                    "num_classes": num_classes,
                    "download_seconds": _r(fetched["download_seconds"]),
                    "download_mb_per_sec": None},
        "bare_decode": decode, "image_sizes": None,
        "threads": {"nprocs": procs, "cap": procs,
                    "cap_formula": "DataLoader num_workers (processes), capped at the CPUs",
                    "grid": workers, "measured_effective": workers},
        "runs": runs,
        "value_check": {"batches": len(rows), "records_covered": len(rows) * opts.batch_size,
                        "of_records": n_records, "value_min": lo, "value_max": hi,
                        "all_finite": all(r["finite"] for r in rows),
                        "label_min": min(mask_values, default=0),
                        "label_max": max(mask_values, default=0),
                        "shapes": sorted({tuple(r["shape"]) for r in rows}),
                        "dtypes": sorted({r["dtype"] for r in rows}), "per_batch": rows,
                        "problems": problems, "mask_values": sorted(mask_values),
                        "note": "untimed pass, 0 workers, after the sweep"},
        "label_range": [min(mask_values, default=0), max(mask_values, default=0)],
        "recommendation": {**pick, "num_workers": pick["preprocess_threads"],
                           "prefetch_buffer": opts.prefetch_buffer,
                           "batch_size": opts.batch_size, "device": device["kind"]},
        "summary": summary, "problems": problems,
        "warnings": ["preprocess_threads / thread_grid are read as DataLoader num_workers "
                     "for loader=segmentation"],
    }


def _host() -> dict:
    import platform

    import cv2
    import mxnet as mx

    feats = mx.runtime.Features()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "hostname": platform.node(), "python": platform.python_version(),
        "mxnet": mx.__version__, "opencv": cv2.__version__, "nprocs": nprocs(),
        "cpu_count": os.cpu_count(), "loadavg_at_start": load,
        "mxnet_features": {k: feats.is_enabled(k) for k in
                           ("CUDA", "CUDNN", "OPENMP", "OPENCV", "MKLDNN")},
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
    }


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


def run_benchmark(prefix: str, options: BenchOptions | None = None) -> dict:
    """Benchmark the loader over ``<prefix>/<split>.rec``; returns the ``bench.json`` dict.

    ``prefix`` is a local folder or an ``s3://`` prefix (downloaded to a temporary folder).
    Raises ``LoaderBenchError`` with the values and the fix when the loader cannot run.
    """
    opts = options or BenchOptions()
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="recforge-bench-") as tmp:
        fetched = fetch_split(prefix, opts.split, Path(tmp))
        root = fetched["root"]
        if opts.loader == "segmentation":
            return _segmentation(prefix, root, opts, fetched, started)
        return _run(prefix, root, opts, fetched, started)


def _run(prefix: str, root: Path, opts: BenchOptions, fetched: dict, started) -> dict:
    warnings: list[str] = []
    device = resolve_device(opts.device, opts.gpu_id)
    host = _host()
    rec = root / f"{opts.split}.rec"
    n_records = count_records(root / f"{opts.split}.idx")
    rec_bytes = rec.stat().st_size
    num_classes = None
    if (root / "classes.json").exists():
        num_classes = json.loads((root / "classes.json").read_text()).get("num_classes")
    if n_records < opts.batch_size:
        raise LoaderBenchError(
            f"{rec} has {n_records} records, fewer than batch_size={opts.batch_size}; "
            "lower the batch size for this split"
        )

    log.info("bench %s/%s: %d records, %.1f MB; %s", prefix, opts.split, n_records,
             rec_bytes / 1e6, device["statement"])
    decode = bare_decode(rec, opts.decode_records)
    manifest_sizes = _record_sizes(root, opts.split)
    sizes = (size_check(manifest_sizes, opts.data_shape, "records.jsonl (every record)")
             if manifest_sizes else
             size_check(decode["sizes"], opts.data_shape,
                        f"decoded sample of the first {decode['records']} records"))
    decode.pop("sizes")
    if sizes["smaller_than_data_shape"]:
        warnings.append(
            f"{sizes['smaller_than_data_shape']} of {sizes['checked']} images are smaller "
            f"than data_shape {opts.data_shape[1]}x{opts.data_shape[2]} (smallest "
            f"{sizes['smallest']['height']}x{sizes['smallest']['width']}): {UPSCALE_NOTE}"
        )

    procs = nprocs()
    cap = thread_cap(procs)
    grid = sorted(set(opts.thread_grid) | {opts.preprocess_threads})
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
    primary = next(r for r in runs if opts.preprocess_threads in r["requested_threads"])
    rec_pick = recommend(runs)
    best = next(r for r in runs if r["effective_threads"] == rec_pick["preprocess_threads"])

    problems = [f"{r['effective_threads']} thread(s): {p}" for r in runs for p in r["problems"]]
    values = check_values(root, opts, best["effective_threads"], device, sizes)
    problems += values["problems"]
    lab_lo = min([values["label_min"]] + [r["batches_seen"]["label_min"] for r in runs])
    lab_hi = max([values["label_max"]] + [r["batches_seen"]["label_max"] for r in runs])
    if num_classes is not None and opts.label_width == 1 and (
            lab_lo < 0 or lab_hi >= num_classes or lab_lo != int(lab_lo)
            or lab_hi != int(lab_hi)):
        problems.append(f"labels span [{lab_lo:g}, {lab_hi:g}], not integers in "
                        f"[0, {num_classes}) as classes.json says")
    if decode["undecodable"]:
        problems.append(f"{decode['undecodable']} of the first {decode['records']} records "
                        "do not decode with cv2.imdecode")
    if opts.preprocess_threads > cap:
        warnings.append(
            f"preprocess_threads={opts.preprocess_threads} is above MXNet's cap "
            f"max(nprocs/2 - 1, 1) = {cap} on this {procs}-CPU host; MXNet silently uses {cap}"
        )

    summary = {
        "device": device["kind"],
        "preprocess_threads": best["effective_threads"],
        "images_per_sec": best["images_per_sec"],
        "latency_p50_ms": best["latency_ms"]["p50"],
        "latency_p95_ms": best["latency_ms"]["p95"],
        "latency_p99_ms": best["latency_ms"]["p99"],
        "time_to_first_batch_s": best["time_to_first_batch_s"],
        "read_mb_per_sec": best["read_mb_per_sec"],
        "bare_decode_images_per_sec": decode["images_per_sec"],
        "fraction_of_bare_decode": round(best["images_per_sec"] / decode["images_per_sec"], 3),
        "bare_decode_limit_at_threads": round(
            decode["images_per_sec"] * min(best["effective_threads"], procs), 1),
        "fraction_smaller_than_data_shape": sizes["fraction_smaller"],
        "gpu_memory_peak_bytes": best["gpu_memory_peak_bytes"],
        "configured_threads_images_per_sec": primary["images_per_sec"],
    }
    return {
        "schema": SCHEMA,
        "created_at": started.isoformat(),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 3),
        "prefix": prefix, "split": opts.split, "dataset_version": None, "run_id": None,
        "loader": "mx.io.ImageRecordIter",
        "options": opts.model_dump(mode="json"),
        "host": host,
        "device": device,
        "dataset": {
            "records": n_records, "rec_bytes": rec_bytes,
            "mean_record_bytes": round(rec_bytes / n_records, 1), "num_classes": num_classes,
            "download_seconds": _r(fetched["download_seconds"]),
            "download_mb_per_sec": (round(fetched["downloaded_bytes"] / 1e6
                                          / fetched["download_seconds"], 2)
                                    if fetched["download_seconds"] else None),
        },
        "bare_decode": decode,
        "image_sizes": sizes,
        "threads": {
            "nprocs": procs, "cap": cap, "cap_formula": "max(nprocs // 2 - 1, 1) (MXNet 1.9.1 "
            "ImageRecordIOParser2::Init, applied silently)",
            "grid": grid, "measured_effective": sorted(by_effective),
        },
        "runs": runs,
        "value_check": values,
        "label_range": [lab_lo, lab_hi],
        "recommendation": {**rec_pick, "prefetch_buffer": opts.prefetch_buffer,
                           "batch_size": opts.batch_size, "device": device["kind"]},
        "summary": summary,
        "problems": problems,
        "warnings": warnings,
    }


# --------------------------------------------------------------------------------------
# floors, saving, the gate


def select_floors(spec: BenchSpec | None, device_kind: str,
                  environment: str | None = None) -> tuple[str | None, BenchFloors | None]:
    """The floors for this environment, as ``(key, floors)``.

    An environment named explicitly (argument, else ``$RECFORGE_BENCH_ENV``) must exist in
    the spec: silently gating a GPU worker with another environment's floors would hide a
    misconfiguration (unless the spec has no floors at all). Without a name: the device kind
    (``gpu``/``cpu``), then ``default``, else ``(None, None)`` (no floors; batch problems
    still fail the gate).
    """
    wanted = environment or os.environ.get(ENV_VAR) or None
    floors = spec.floors if spec is not None else {}
    if not floors:  # $RECFORGE_BENCH_ENV is worker-wide; a spec without floors is not gated
        return None, None
    if wanted:
        if wanted not in floors:
            raise LoaderBenchError(
                f"bench floors for environment {wanted!r} are not in the spec (it has "
                f"{sorted(floors)}); add them under bench.floors or set {ENV_VAR} to one of "
                "those"
            )
        return wanted, floors[wanted]
    for key in (device_kind, "default"):
        if key in floors:
            return key, floors[key]
    return None, None


def check_floors(results: dict, floors: BenchFloors | dict | None) -> list[str]:
    """Every way ``results`` misses ``floors``, each with the measured number and the limit.

    Structural problems of the batches (wrong shape, NaN, labels out of range) are always
    violations, floors or not: a loader that yields wrong batches fails regardless of speed.
    """
    if isinstance(floors, dict):
        floors = BenchFloors.model_validate(floors)
    s = results["summary"]
    where = (f"(split {results['split']}, device {s['device']}, "
             f"preprocess_threads={s['preprocess_threads']}, batch_size="
             f"{results['options']['batch_size']})")
    out = [f"batch check failed: {p}" for p in results.get("problems", [])]
    if floors is None:
        return out

    def low(name: str, value, floor, unit: str) -> None:
        if floor is not None and (value is None or value < floor):
            out.append(f"{name} {value} {unit} is below the floor {floor} {unit} {where}")

    def high(name: str, value, ceiling, unit: str) -> None:
        if ceiling is not None and (value is None or value > ceiling):
            out.append(f"{name} {value} {unit} is above the limit {ceiling} {unit} {where}")

    low("loader throughput", s["images_per_sec"], floors.min_images_per_sec, "img/s")
    high("batch latency p50", s["latency_p50_ms"], floors.max_p50_ms, "ms")
    high("batch latency p95", s["latency_p95_ms"], floors.max_p95_ms, "ms")
    high("batch latency p99", s["latency_p99_ms"], floors.max_p99_ms, "ms")
    high("time to first batch", s["time_to_first_batch_s"], floors.max_first_batch_s, "s")
    low("read rate", s["read_mb_per_sec"], floors.min_read_mb_per_sec, "MB/s")
    if floors.min_fraction_of_bare_decode is not None and (
            s["fraction_of_bare_decode"] < floors.min_fraction_of_bare_decode):
        out.append(
            f"loader runs at {s['fraction_of_bare_decode']} of the bare-decode rate "
            f"({s['images_per_sec']} vs {s['bare_decode_images_per_sec']} img/s), below the "
            f"floor {floors.min_fraction_of_bare_decode} {where}")
    frac = s["fraction_smaller_than_data_shape"]
    if floors.max_fraction_smaller_than_data_shape is not None and frac is not None and (
            frac > floors.max_fraction_smaller_than_data_shape):
        sz = results["image_sizes"]
        out.append(
            f"{sz['smaller_than_data_shape']} of {sz['checked']} images ({frac:.2%}) are "
            f"smaller than data_shape {results['options']['data_shape']}, above the limit "
            f"{floors.max_fraction_smaller_than_data_shape:.2%}; MXNet would upscale them")
    if floors.require_gpu and s["device"] != "gpu":
        out.append(f"the benchmark ran on {s['device']}, but this environment requires a GPU: "
                   f"{results['device']['statement']}")
    if floors.max_gpu_memory_bytes is not None and s["gpu_memory_peak_bytes"] is not None and (
            s["gpu_memory_peak_bytes"] > floors.max_gpu_memory_bytes):
        out.append(f"GPU memory peak {s['gpu_memory_peak_bytes']} bytes is above the limit "
                   f"{floors.max_gpu_memory_bytes} bytes {where}")
    return out


def save_results(results: dict, uri: str) -> None:
    """Write ``bench.json`` to a local path or S3 URI."""
    from recforge import storage

    storage.put_bytes(uri, (json.dumps(results, indent=2, sort_keys=True) + "\n").encode(),
                      "application/json")


def run_and_gate(prefix: str, spec: BenchSpec | None, out_uri: str,
                 dataset_version: str | None = None, environment: str | None = None,
                 run_id: str | None = None) -> dict:
    """What the DAG's ``benchmark`` task calls: run, save ``bench.json``, then gate.

    ``bench.json`` is written before the gate so a failed build still shows its numbers;
    raises ``BenchFloorsFailed`` (listing every violation) when the loader misses a floor.
    Returns a small summary for XCom.
    """
    spec = spec or BenchSpec()
    results = run_benchmark(prefix, spec.options)
    env, floors = select_floors(spec, results["device"]["kind"], environment)
    results["dataset_version"] = dataset_version
    results["run_id"] = run_id
    results["floors"] = {"environment": env,
                         "values": floors.model_dump(mode="json") if floors else None}
    violations = check_floors(results, floors)
    results["violations"] = violations
    results["passed"] = not violations
    save_results(results, out_uri)
    log.info("bench: %s (%s); saved %s", "passed" if not violations else "FAILED",
             results["device"]["statement"], out_uri)
    if violations:
        raise BenchFloorsFailed(violations)
    return {"uri": out_uri, "summary": results["summary"],
            "recommendation": results["recommendation"], "environment": env}


# --------------------------------------------------------------------------------------
# CLI


def format_table(results: dict) -> str:
    s = results["summary"]
    d = results["dataset"]
    lines = [
        f"loader benchmark: {results['prefix']} split {results['split']}: {d['records']} "
        f"records, {d['rec_bytes'] / 1e6:.1f} MB",
        f"device: {results['device']['statement']}",
        f"bare decode (1 thread, {results['bare_decode']['records']} records): "
        f"{results['bare_decode']['images_per_sec']:.0f} img/s",
        f"preprocess_threads cap on {results['threads']['nprocs']} CPUs: "
        f"{results['threads']['cap']} ({results['threads']['cap_formula']})",
        "",
        f"{'requested':>12} {'used':>5} {'img/s':>8} {'vs decode':>9} {'p50 ms':>8} "
        f"{'p95 ms':>8} {'p99 ms':>8} {'1st batch s':>11} {'MB/s':>8}",
    ]
    for r in results["runs"]:
        req = ",".join(str(t) for t in r["requested_threads"])
        used = r["observed_threads"] if r["observed_threads"] is not None else \
            r["effective_threads"]
        lat = r["latency_ms"]
        lines.append(
            f"{req:>12} {used:>5} {r['images_per_sec']:>8.1f} "
            f"{r['images_per_sec'] / results['bare_decode']['images_per_sec']:>9.2f} "
            f"{lat['p50']:>8.2f} {lat['p95']:>8.2f} {lat['p99']:>8.2f} "
            f"{r['time_to_first_batch_s']:>11.3f} {r['read_mb_per_sec']:>8.2f}")
    chk = results["value_check"]
    lines += [
        "",
        f"value check ({chk['batches']} batches, {chk['records_covered']} of "
        f"{chk['of_records']} records): shapes {chk['shapes']}, dtypes {chk['dtypes']}, "
        f"values [{chk['value_min']:g}, {chk['value_max']:g}], finite {chk['all_finite']}, "
        f"labels [{results['label_range'][0]:g}, {results['label_range'][1]:g}]",
        f"GPU memory peak: {s['gpu_memory_peak_bytes'] if s['gpu_memory_peak_bytes'] is not None else 'null (CPU run)'}",  # noqa: E501
        f"recommendation: preprocess_threads={results['recommendation']['preprocess_threads']}"
        f" ({results['recommendation']['images_per_sec']:.0f} img/s)",
    ]
    lines += [f"warning: {w}" for w in results["warnings"]]
    lines += [f"PROBLEM: {p}" for p in results["problems"]]
    for v in results.get("violations", []):
        lines.append(f"FLOOR: {v}")
    return "\n".join(lines)


def _csv_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None


def _cmd(args) -> int:
    from pydantic import ValidationError

    try:
        shape = _csv_ints(args.data_shape)
        if len(shape) != 3:
            raise ValueError(f"--data-shape needs C,H,W, got {args.data_shape!r}")
        opts = BenchOptions(
            split=args.split, batch_size=args.batch_size, data_shape=shape,
            rand_crop=args.rand_crop, rand_mirror=args.rand_mirror,
            preprocess_threads=args.threads, thread_grid=_csv_ints(args.grid),
            prefetch_buffer=args.prefetch_buffer, warmup_batches=args.warmup,
            measure_batches=args.batches, decode_records=args.decode_records,
            device=args.device, gpu_id=args.gpu_id, resize=args.resize,
            max_crop_size=args.max_crop_size, min_crop_size=args.min_crop_size,
            loader=args.loader,
        )
        floors = BenchFloors(min_images_per_sec=args.min_images_per_sec,
                             max_p99_ms=args.max_p99_ms, require_gpu=args.require_gpu)
    except ValidationError as exc:
        raise ValueError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                   for e in exc.errors())) from None
    results = run_benchmark(args.prefix, opts)
    results["violations"] = check_floors(results, floors)
    results["passed"] = not results["violations"]
    if args.out:
        save_results(results, args.out)
    print(json.dumps(results, indent=2) if args.json else format_table(results))
    if args.out:
        print(f"saved {args.out}")
    return 0 if results["passed"] else 1


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmark the MXNet loader on a packed split")
    p.add_argument("prefix", help="s3://bucket/prefix or a local folder with <split>.rec/.idx")
    p.add_argument("--split", default="train")
    p.add_argument("--loader", choices=["image_record_iter", "segmentation"],
                   default="image_record_iter")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--data-shape", default="3,224,224", help="C,H,W (default 3,224,224)")
    p.add_argument("--no-rand-crop", dest="rand_crop", action="store_false")
    p.add_argument("--no-rand-mirror", dest="rand_mirror", action="store_false")
    p.add_argument("--resize", type=int, default=-1, help="ImageRecordIter resize (short side)")
    p.add_argument("--max-crop-size", type=int, default=-1)
    p.add_argument("--min-crop-size", type=int, default=-1)
    p.add_argument("--threads", type=int, default=4,
                   help="preprocess_threads you train with (default 4)")
    p.add_argument("--grid", default="1,2,4,8", help="preprocess_threads to sweep ('' = none)")
    p.add_argument("--prefetch-buffer", type=int, default=4)
    p.add_argument("--warmup", type=int, default=5, help="batches before timing")
    p.add_argument("--batches", type=int, default=50, help="batches in the timed window")
    p.add_argument("--decode-records", type=int, default=500)
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    p.add_argument("--gpu-id", type=int, default=0)
    p.add_argument("--min-images-per-sec", type=float, help="floor: exit 1 below it")
    p.add_argument("--max-p99-ms", type=float, help="floor: exit 1 above it")
    p.add_argument("--require-gpu", action="store_true", help="floor: exit 1 on a CPU run")
    p.add_argument("--out", help="write bench.json here (path or s3:// URI)")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.set_defaults(func=_cmd)
