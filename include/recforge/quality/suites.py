"""The expectation plans: checklist items 1-16 as GX expectations, tagged with their check.

Each checklist item is one named check (``recforge.spec.quality.CHECKS``): an expectation or a
small group tagged ``meta.check``, with a severity from :class:`QualitySpec` (``fail`` blocks
publishing, ``warn`` is reported, ``off`` plans nothing). What each check plans is its own
module's (``recforge.quality.checks``); planning here walks that table: the dataset's checks
on the dataset's frames, items 6-10 on the loader benchmark's results, which
:func:`loader_frames` turns into two frames. Planning only builds the expectations (and says
why a check is not run); :mod:`recforge.quality.gx` runs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks import DATASET, LOADER, Plan, Planned, frames_kind, not_for
from recforge.spec.quality import QualitySpec

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Planned", "describe_batch", "from_bench_json", "loader_frames",
           "plan_expectations", "plan_loader_expectations"]


def plan_expectations(frames: dict[str, pd.DataFrame], quality: QualitySpec, pack=None,
                      task: str = "classification", num_classes: int | None = None
                      ) -> tuple[list[Planned], dict[str, str]]:
    """The expectations per check (only those whose inputs exist) and why others are not run."""
    plans: list[Planned] = []
    not_run: dict[str, str] = {}
    kind = frames_kind(frames, task)
    for c in DATASET:
        reason = not_for(c.name, kind)
        if reason:
            not_run[c.name] = reason
        else:
            c.plan(Plan(c.name, frames, quality, plans, not_run, pack, num_classes))
    return plans, not_run


def plan_loader_expectations(frames: dict[str, pd.DataFrame], quality: QualitySpec
                             ) -> tuple[list[Planned], dict[str, str]]:
    """Items 6-10 on :func:`loader_frames`' frames, and why any of them is not run."""
    plans: list[Planned] = []
    not_run: dict[str, str] = {}
    for c in LOADER:
        c.plan(Plan(c.name, frames, quality, plans, not_run))
    return plans, not_run


# ----------------------------------------------------------------------------- loader (6-10)


def describe_batch(data) -> dict:
    """What items 6-8 need from one loader batch (an MXNet NDArray or a numpy array).

    Call it in the loader benchmark per batch and put the dicts in ``results["batches"]``.
    """
    import numpy as np

    arr = data.asnumpy() if hasattr(data, "asnumpy") else np.asarray(data)
    return {"type": type(data).__name__, "dtype": str(arr.dtype), "shape": list(arr.shape),
            "min": float(arr.min()) if arr.size else None,
            "max": float(arr.max()) if arr.size else None}


def from_bench_json(bench: dict) -> dict:
    """``recforge.bench.benchmark``'s ``bench.json`` → the loader results items 6-10 check.

    Batches come from the benchmark's untimed value-check pass (every batch of one epoch);
    throughput from its best measured setting; the floors from those the benchmark was
    gated by (``bench.floors``: its environment's), which the checklist holds it to beside
    the spec's ``quality.loader`` floors."""
    s = bench.get("summary", {})
    per_batch = (bench.get("value_check") or {}).get("per_batch") or []
    peak = s.get("gpu_memory_peak_bytes")
    floors = (bench.get("floors") or {}).get("values") or {}
    return {
        "batches": [{"type": "NDArray", "dtype": b["dtype"], "shape": b["shape"],
                     "min": b["min"], "max": b["max"]} for b in per_batch],
        "images_per_sec": s.get("images_per_sec"),
        "read_mb_per_sec": s.get("read_mb_per_sec"),
        "gpu_mem_peak_mb": None if peak is None else peak / 1e6,
        "device": s.get("device", (bench.get("device") or {}).get("kind", "cpu")),
        "min_images_per_sec": floors.get("min_images_per_sec"),
        "min_read_mb_per_sec": floors.get("min_read_mb_per_sec"),
    }


def loader_frames(results: dict) -> dict[str, pd.DataFrame]:
    """The loader benchmark's results → a per-batch table and a one-row summary table.

    ``results`` keys: ``batches`` (list of :func:`describe_batch` dicts), ``images_per_sec``,
    ``read_mb_per_sec``, ``gpu_mem_peak_mb`` (null on CPU), ``device`` ("cpu"/"gpu"), and
    optionally the benchmark's own floors ``min_images_per_sec`` / ``min_read_mb_per_sec``.
    """
    import pandas as pd

    if "value_check" in results or "schema" in results:  # a bench.json as written
        results = from_bench_json(results)
    batches = pd.DataFrame(results.get("batches") or [],
                           columns=["type", "dtype", "shape", "min", "max"])
    batches["shape"] = batches["shape"].map(lambda s: list(s) if s is not None else None)
    batches["sample_shape"] = batches["shape"].map(
        lambda s: "x".join(map(str, s[1:])) if s else None)
    sizes = batches["shape"].map(lambda s: s[0] if s else None)
    full = sizes.iloc[0] if len(sizes) else None
    # every batch has the first batch's size; the last may be smaller (last_batch="keep")
    batches["batch_size_ok"] = [bool(n == full or (i == len(sizes) - 1 and n is not None
                                                   and full is not None and n <= full))
                                for i, n in enumerate(sizes)]
    summary = pd.DataFrame([{
        "images_per_sec": _num(results.get("images_per_sec", results.get("throughput"))),
        "read_mb_per_sec": _num(results.get("read_mb_per_sec")),
        "gpu_mem_peak_mb": _num(results.get("gpu_mem_peak_mb")),
        "device": results.get("device", "cpu"),
        "floor_images_per_sec": _num(results.get("min_images_per_sec")),
        "floor_read_mb_per_sec": _num(results.get("min_read_mb_per_sec")),
    }])
    return {"loader_batches": batches, "loader": summary}


def _num(v) -> float:
    return float(v) if v is not None else float("nan")
