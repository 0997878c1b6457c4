"""The gate on the results: the spec's floors per environment, ``bench.json``, the verdict.

``run_and_gate`` is what the DAG's ``benchmark`` task calls: run, save ``bench.json`` (before
the gate, so a failed build still shows its numbers), then raise ``BenchFloorsFailed`` when
the loader misses a floor. Batch problems fail the gate whatever the floors say.
"""

from __future__ import annotations

import json
import logging
import os
import threading

from recforge import storage
from recforge.bench import loaders
from recforge.bench.benchmark import run_benchmark
from recforge.bench.records import LoaderBenchError
from recforge.errors import RecforgeFailure
from recforge.spec.bench import BenchFloors, BenchSpec

log = logging.getLogger(__name__)

ENV_VAR = "RECFORGE_BENCH_ENV"


class BenchFloorsFailed(RecforgeFailure):
    """The loader is below a floor of the spec; ``violations`` lists each with its numbers."""

    def __init__(self, violations: list[str]):
        super().__init__("loader benchmark below its floors:\n  - " + "\n  - ".join(violations))
        self.violations = violations


def select_floors(spec: BenchSpec | None, device_kind: str, environment: str | None = None,
                  loader: str = "mxnet") -> tuple[str | None, BenchFloors | None]:
    """The floors for this environment, as ``(key, floors)``.

    An environment named explicitly (argument, else ``$RECFORGE_BENCH_ENV``) must exist in
    the spec: silently gating a GPU worker with another environment's floors would hide a
    misconfiguration (unless the spec has no floors at all). Without a name: the device kind
    (``gpu``/``cpu``), then ``default``, else ``(None, None)`` (no floors; batch problems
    still fail the gate).
    """
    wanted = environment or os.environ.get(ENV_VAR) or None
    floors = getattr(spec, loaders.one(loader).floors) if spec is not None else {}
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
    storage.put_bytes(uri, (json.dumps(results, indent=2, sort_keys=True) + "\n").encode(),
                      "application/json")


def run_and_gate(prefix: str, spec: BenchSpec | None, out_uri: str,
                 dataset_version: str | None = None, environment: str | None = None,
                 run_id: str | None = None, previous: dict | None = None,
                 quiet: threading.Event | None = None, identity: str | None = None) -> dict:
    """What the DAG's ``benchmark`` task calls: run, save ``bench.json``, then gate.

    ``bench.json`` is written before the gate so a failed build still shows its numbers;
    raises ``BenchFloorsFailed`` (listing every violation) when the loader misses a floor.
    ``previous``: the latest version's ``bench.json``, reused when the loader would read the
    same bytes (``recforge.bench.measure.reusable``); the floors are checked either way.
    ``quiet``, ``identity``: as ``run_benchmark`` takes them.
    Returns a small summary for XCom.
    """
    spec = spec or BenchSpec()
    results = run_benchmark(prefix, spec.options, previous=previous, loader=spec.loader,
                            quiet=quiet, identity=identity)
    measured = (results.get("loader_choice") or {}).get("measured", spec.loader)
    primary = measured if measured in loaders.NAMES else "mxnet"  # both, all: MXNet's
    env, floors = select_floors(spec, results["device"]["kind"], environment, primary)
    results["dataset_version"] = dataset_version
    results["run_id"] = run_id
    results["floors"] = {"environment": env,
                         "values": floors.model_dump(mode="json") if floors else None}
    violations = check_floors(results, floors)
    for name in loaders.BESIDE["all"]:
        if name not in results:  # measured beside MXNet's: gated by floors of its own
            continue
        other, label = results[name], loaders.one(name).label
        oenv, ofloors = select_floors(spec, other["device"]["kind"], environment, name)
        other["floors"] = {"environment": oenv,
                           "values": ofloors.model_dump(mode="json") if ofloors else None}
        other["violations"] = check_floors(other, ofloors)
        violations += [f"{label}: {v}" for v in other["violations"]]
    results["violations"] = violations
    results["passed"] = not violations
    save_results(results, out_uri)
    log.info("bench: %s (%s); saved %s", "passed" if not violations else "FAILED",
             results["device"]["statement"], out_uri)
    if violations:
        raise BenchFloorsFailed(violations)
    return {"uri": out_uri, "summary": results["summary"],
            "recommendation": results["recommendation"], "environment": env,
            "reused_from": (results.get("reused_from") or {}).get("dataset_version")}
