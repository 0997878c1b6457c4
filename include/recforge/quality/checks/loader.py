"""Checklist items 6-10, the loader benchmark's results: ``loader_dtype`` (float32
NDArrays), ``loader_range`` (values within ``quality.loader.value_range``), ``loader_shape``
(one batch shape), ``gpu_memory`` (peak under the limit) and ``loader_throughput`` (images/s
and read MB/s above the floors).

One module for the five: they check one input, planned when the benchmark's results arrive
(``suites.loader_frames``: the ``loader_batches`` and one-row ``loader`` frames), share the
reason they are not run, and item 10's floor (:func:`loader_floor`) is also the report's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from recforge.quality.checks.base import CheckDef, Plan

if TYPE_CHECKING:
    import pandas as pd

    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec

NO_BATCHES = "the loader benchmark produced no batches"


def loader_floor(spec_floor: float, bench_floor: float) -> float:
    """The floor the checklist holds the loader to: the higher of the spec's
    ``quality.loader`` floor and the one the benchmark was gated by (NaN: none) — the floor
    the report draws, so the Data Docs and the report name one number."""
    return max(spec_floor, 0.0 if math.isnan(bench_floor) else bench_floor)


def _batches(p: Plan) -> bool:
    """Whether the benchmark produced batches to check (else this check is not run)."""
    if p.frames["loader_batches"].empty:
        p.skip(NO_BATCHES)
        return False
    return True


def plan_dtype(p: Plan) -> None:
    import great_expectations.expectations as gxe

    if _batches(p):
        p.add("loader_batches", "batch is an NDArray", gxe.ExpectColumnValuesToBeInSet,
              column="type", value_set=["NDArray"])
        p.add("loader_batches", f"batch dtype is {p.quality.loader.dtype}",
              gxe.ExpectColumnValuesToBeInSet, column="dtype",
              value_set=[p.quality.loader.dtype])


def observed_dtype(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    lb = frames["loader_batches"]
    return (f"{len(lb)} batches; types {sorted(lb['type'].dropna().unique())}, dtypes "
            f"{sorted(lb['dtype'].dropna().unique())}")


def plan_range(p: Plan) -> None:
    import great_expectations.expectations as gxe

    if _batches(p):
        lo, hi = p.quality.loader.value_range
        p.add("loader_batches", f"batch min >= {lo}", gxe.ExpectColumnValuesToBeBetween,
              column="min", min_value=lo)
        p.add("loader_batches", f"batch max <= {hi}", gxe.ExpectColumnValuesToBeBetween,
              column="max", max_value=hi)


def observed_range(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    lb = frames["loader_batches"]
    return f"values {lb['min'].min():g}..{lb['max'].max():g}"


def plan_shape(p: Plan) -> None:
    import great_expectations.expectations as gxe

    if _batches(p):
        p.add("loader_batches", "one per-sample shape",
              gxe.ExpectColumnUniqueValueCountToBeBetween, column="sample_shape", min_value=1,
              max_value=1)
        p.add("loader_batches", "constant batch size (last may be smaller)",
              gxe.ExpectColumnValuesToBeInSet, column="batch_size_ok", value_set=[True])


def observed_shape(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    lb = frames["loader_batches"]
    return (f"sample shapes {sorted(lb['sample_shape'].dropna().unique())}, batch sizes "
            f"{sorted({s[0] for s in lb['shape'].dropna()})}")


def plan_gpu_memory(p: Plan) -> None:
    import great_expectations.expectations as gxe

    summary, limit = p.frames["loader"].iloc[0], p.quality.loader.gpu_memory_limit_mb
    if summary["device"] != "gpu" or math.isnan(summary["gpu_mem_peak_mb"]):
        p.skip("CPU run: no GPU memory measured")
    elif limit is None:
        p.skip("no quality.loader.gpu_memory_limit_mb set")
    else:
        p.add("loader", f"peak GPU memory <= {limit} MB", gxe.ExpectColumnValuesToBeBetween,
              column="gpu_mem_peak_mb", max_value=limit)


def observed_gpu_memory(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    return f"peak {frames['loader']['gpu_mem_peak_mb'].iloc[0]:g} MB"


def plan_throughput(p: Plan) -> None:
    import great_expectations.expectations as gxe

    lq, summary = p.quality.loader, p.frames["loader"].iloc[0]
    ips_floor = loader_floor(lq.min_images_per_sec, summary["floor_images_per_sec"])
    p.add("loader", f"images/s >= {ips_floor:g}", gxe.ExpectColumnValuesToBeBetween,
          column="images_per_sec", min_value=ips_floor)
    p.add("loader", "images/s measured", gxe.ExpectColumnValuesToNotBeNull,
          column="images_per_sec")
    mbs_floor = loader_floor(lq.min_read_mb_per_sec, summary["floor_read_mb_per_sec"])
    if not math.isnan(summary["read_mb_per_sec"]) or mbs_floor > 0:
        p.add("loader", f"read MB/s >= {mbs_floor:g}", gxe.ExpectColumnValuesToBeBetween,
              column="read_mb_per_sec", min_value=mbs_floor)
        p.add("loader", "read MB/s measured", gxe.ExpectColumnValuesToNotBeNull,
              column="read_mb_per_sec")


def observed_throughput(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    """The rate against the floor the expectation holds it to."""
    lsum: pd.DataFrame = frames["loader"]
    ips, mbs = lsum["images_per_sec"].iloc[0], lsum["read_mb_per_sec"].iloc[0]
    floor = loader_floor(quality.loader.min_images_per_sec, lsum["floor_images_per_sec"].iloc[0])
    return (f"{ips:.1f} images/s" + (f" (floor {floor:g})" if floor else "") + ", "
            + ("read bandwidth not measured" if math.isnan(mbs) else f"{mbs:.1f} MB/s read"))


DTYPE = CheckDef(
    "loader_dtype", plan_dtype, observed_dtype,
    advice=("the loader does not yield float32 NDArrays",
            "check bench.options.iter_kwargs (dtype) against what training expects"))
RANGE = CheckDef(
    "loader_range", plan_range, observed_range,
    advice=("batch values fall outside quality.loader.value_range",
            "check the mean/std options, or set value_range to what the loader should yield"))
SHAPE = CheckDef(
    "loader_shape", plan_shape, observed_shape,
    advice=("batches change shape between steps",
            "check data_shape and the pack options (pack.resize)"))
GPU_MEMORY = CheckDef(
    "gpu_memory", plan_gpu_memory, observed_gpu_memory,
    advice=("the loader's GPU memory peak is above quality.loader.gpu_memory_limit_mb",
            "lower the batch size or prefetch_buffer, or raise the limit"))
THROUGHPUT = CheckDef(
    "loader_throughput", plan_throughput, observed_throughput,
    advice=("the loader reads fewer images per second than the floor, so training would "
            "wait for data",
            "see the loader table under Charts: use the recommended preprocess_threads, pack "
            "smaller images (pack.resize), or set the floor for this kind of machine"))
CHECKS = (DTYPE, RANGE, SHAPE, GPU_MEMORY, THROUGHPUT)
