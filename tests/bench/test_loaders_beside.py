"""``bench.loader: all``: DALI's and the PyTorch loader's results beside MXNet's, each that
is installed, each gated by its own floors."""

from __future__ import annotations

import importlib.util

import pytest

from recforge.bench import benchmark, floors
from recforge.bench.floors import BenchFloorsFailed
from recforge.spec.bench import BenchSpec


def _result(kind: str, rate: float) -> dict:
    return {"split": "train", "device": {"kind": "cpu", "statement": "CPU"},
            "options": {"batch_size": 4},
            "summary": {"device": "cpu", "preprocess_threads": 2, "images_per_sec": rate,
                        "latency_p50_ms": 1.0, "latency_p95_ms": 2.0, "latency_p99_ms": 3.0,
                        "time_to_first_batch_s": 0.1, "read_mb_per_sec": 10.0,
                        "bare_decode_images_per_sec": 100.0, "fraction_of_bare_decode": 1.0,
                        "fraction_smaller_than_data_shape": 0.0},
            "recommendation": {}, "runs": [], "warnings": [], "problems": [],
            "engine": kind}


@pytest.mark.parametrize("installed, want", [
    ({"nvidia.dali", "torch"}, ["dali", "torch"]),
    ({"nvidia.dali"}, ["dali"]),
    (set(), []),
])
def test_all_measures_every_installed_loader_beside_mxnets(monkeypatch, installed, want):
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: object() if name in installed else None)
    assert benchmark.beside("all") == want
    assert benchmark.beside("both") == ["dali"] and benchmark.beside("mxnet") == []


def test_each_loader_beside_is_gated_by_its_own_floors(monkeypatch):
    results = {**_result("mxnet", 500.0), "dali": _result("dali", 400.0),
               "torch": _result("torch", 90.0)}
    monkeypatch.setattr(floors, "run_benchmark", lambda *a, **k: results)
    monkeypatch.setattr(floors, "save_results", lambda *a, **k: None)
    spec = BenchSpec.model_validate({
        "loader": "all", "floors": {"cpu": {"min_images_per_sec": 100}},
        "dali_floors": {"cpu": {"min_images_per_sec": 300}},
        "torch_floors": {"cpu": {"min_images_per_sec": 120}}})
    with pytest.raises(BenchFloorsFailed) as failed:
        floors.run_and_gate("s3://b/v", spec, "s3://b/v/bench.json")
    assert failed.value.violations == [
        "PyTorch: loader throughput 90.0 img/s is below the floor 120.0 img/s (split train, "
        "device cpu, preprocess_threads=2, batch_size=4)"]
    assert results["torch"]["floors"]["values"]["min_images_per_sec"] == 120
    assert results["dali"]["violations"] == []


def test_the_pytorch_loader_measured_alone_uses_its_own_floors(monkeypatch):
    measured = {**_result("torch", 90.0), "loader_choice": {"measured": "torch"}}
    monkeypatch.setattr(floors, "run_benchmark", lambda *a, **k: measured)
    monkeypatch.setattr(floors, "save_results", lambda *a, **k: None)
    spec = BenchSpec.model_validate({"loader": "torch",
                                     "floors": {"cpu": {"min_images_per_sec": 10}},
                                     "torch_floors": {"cpu": {"min_images_per_sec": 100}}})
    with pytest.raises(BenchFloorsFailed, match="90.0 img/s is below the floor 100.0"):
        floors.run_and_gate("s3://b/v", spec, "s3://b/v/bench.json")
