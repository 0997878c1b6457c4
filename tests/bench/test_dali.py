"""DALI's RecordIO reader as a second loader: measured on CPU here, beside MXNet's, with
floors of its own, and refused (with the fix) where it cannot read the split."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from recforge.bench import BenchFloorsFailed, format_table, run_and_gate, run_benchmark
from recforge.spec.bench import BenchFloors, BenchOptions, BenchSpec
from tests.bench.test_bench import FAST, NUM_CLASSES

pytestmark = pytest.mark.mxnet  # MXNet's loader beside DALI's: a slow tier


@pytest.fixture(scope="module")
def both(dataset) -> dict:
    return run_benchmark(str(dataset), BenchOptions(**FAST), loader="both")


def test_both_loaders_side_by_side(both):
    json.dumps(both)
    assert both["loader"] == "mx.io.ImageRecordIter" and both["host"]["mxnet"] == "1.9.1"
    dali = both["dali"]
    assert dali["loader"].startswith("nvidia.dali fn.readers.mxnet")
    assert dali["host"]["dali"] and dali["device"]["kind"] == "cpu"
    assert dali["summary"]["images_per_sec"] > 0
    assert [r["effective_threads"] for r in dali["runs"]] == [1, 2]
    assert dali["value_check"]["records_covered"] == 64
    assert dali["value_check"]["shapes"] == [[16, 3, 56, 56]]
    assert dali["label_range"] == [0.0, NUM_CLASSES - 1.0] == both["label_range"]
    assert dali["problems"] == []
    table = format_table(both)
    assert "--- DALI, side by side ---" in table and "dali 2." in table


def test_dali_alone_needs_no_mxnet(dataset, monkeypatch):
    monkeypatch.setenv("RECFORGE_MXNET_PYTHON", "/nonexistent/python")
    res = run_benchmark(str(dataset), BenchOptions(**FAST), loader="dali")
    assert res["loader"].startswith("nvidia.dali") and "dali" not in res


def test_dali_floors_gate_publish(dataset, tmp_path):
    spec = BenchSpec(loader="both", options=BenchOptions(**FAST),
                     dali_floors={"default": BenchFloors(min_images_per_sec=1e9)})
    with pytest.raises(BenchFloorsFailed, match="DALI: loader throughput"):
        run_and_gate(str(dataset), spec, str(tmp_path / "bench.json"))
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["passed"] is False and saved["dali"]["violations"]
    assert saved["dali"]["floors"]["environment"] == "default"


def test_dali_refuses_segmentation_in_the_spec():
    with pytest.raises(ValidationError, match="use bench.loader: mxnet"):
        BenchSpec(loader="dali", options=BenchOptions(loader="segmentation"))
