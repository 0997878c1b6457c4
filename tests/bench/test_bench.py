"""Loader benchmark: result structure, floors, the CPU statement, MXNet's real behaviour on
small images and crops, the thread cap, the S3 path and the CLI.

Datasets are packed here with ``recforge.format.recordio`` + cv2 (64 images of 64x64, 4
classes) and read by the real ``mx.io.ImageRecordIter``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from pydantic import ValidationError

from recforge import storage
from recforge.bench import (
    BenchFloorsFailed,
    LoaderBenchError,
    check_floors,
    device,
    run_and_gate,
    run_benchmark,
    select_floors,
)
from recforge.bench.floors import ENV_VAR
from recforge.bench.results import SCHEMA
from recforge.format import recordio
from recforge.spec.bench import BenchFloors, BenchOptions, BenchSpec
from recforge.storage import objects

pytestmark = pytest.mark.mxnet  # mx.io.ImageRecordIter in the MXNet environment: a slow tier

NUM_CLASSES = 4
FAST = dict(batch_size=16, data_shape=(3, 56, 56), warmup_batches=2, measure_batches=8,
            decode_records=64, thread_grid=(1, 2), preprocess_threads=2)


def pack(root: Path, n: int = 64, size: tuple[int, int] = (64, 64), split: str = "train",
         seed: int = 0, fmt: str = ".jpg") -> list[np.ndarray]:
    """Write ``<split>.rec/.idx`` + classes.json; returns the BGR images."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images = []
    with recordio.RecordWriter(root / f"{split}.rec", root / f"{split}.idx") as w:
        for i in range(n):
            img = cv2.GaussianBlur(rng.integers(0, 256, (*size, 3), dtype=np.uint8), (5, 5), 0)
            ok, buf = cv2.imencode(fmt, img)
            assert ok
            images.append(img)
            w.write(i, recordio.pack_image_record(float(i % NUM_CLASSES), i, buf.tobytes()))
    (root / "classes.json").write_text(json.dumps({"num_classes": NUM_CLASSES}))
    return images


@pytest.fixture(scope="module")
def results(dataset) -> dict:
    return run_benchmark(str(dataset), BenchOptions(**FAST))


class TestResults:
    def test_structure_and_numbers(self, results):
        json.dumps(results)  # bench.json must serialise as is
        assert results["schema"] == SCHEMA
        assert results["dataset"]["records"] == 64
        assert results["dataset"]["num_classes"] == NUM_CLASSES
        s = results["summary"]
        assert s["images_per_sec"] > 0 and s["read_mb_per_sec"] > 0
        assert 0 < s["latency_p50_ms"] <= s["latency_p95_ms"] <= s["latency_p99_ms"]
        assert s["time_to_first_batch_s"] > 0
        assert s["bare_decode_images_per_sec"] > 0
        assert s["fraction_of_bare_decode"] == pytest.approx(
            s["images_per_sec"] / s["bare_decode_images_per_sec"], abs=1e-3)
        for run in results["runs"]:
            assert run["window"]["batches"] == FAST["measure_batches"]
            assert len(run["batches"]) == FAST["warmup_batches"] + FAST["measure_batches"]
            assert all(b["shape"] == [16, 3, 56, 56] and b["dtype"] == "float32"
                       for b in run["batches"])
        assert results["recommendation"]["preprocess_threads"] in \
            [r["effective_threads"] for r in results["runs"]]
        assert results["problems"] == []

    def test_every_record_value_checked(self, results):
        chk = results["value_check"]
        assert chk["batches"] == 4 and chk["records_covered"] == 64
        assert chk["shapes"] == [[16, 3, 56, 56]] and chk["dtypes"] == ["float32"]
        assert 0 <= chk["value_min"] < chk["value_max"] <= 255 and chk["all_finite"]
        assert results["label_range"] == [0.0, NUM_CLASSES - 1.0]

    def test_cpu_run_says_so(self, results):
        if results["device"]["num_gpus"]:
            pytest.skip("a GPU is visible; the CPU statement is for CPU-only hosts")
        dev = results["device"]
        assert dev["kind"] == "cpu" and results["summary"]["device"] == "cpu"
        assert dev["statement"].startswith("ran on CPU")
        assert "num_gpus() = 0" in dev["statement"]
        assert results["summary"]["gpu_memory_peak_bytes"] is None
        assert all(r["gpu_memory_peak_bytes"] is None for r in results["runs"])
        assert all(b["context"].startswith("cpu") for b in results["runs"][0]["batches"])

    def test_thread_cap_is_what_mxnet_uses(self, results):
        """MXNet 1.9.1 lowers preprocess_threads to max(nprocs/2 - 1, 1), silently."""
        cap = device.thread_cap()
        assert results["threads"]["cap"] == cap
        for run in results["runs"]:
            assert run["effective_threads"] == min(max(run["requested_threads"]), cap)
            assert run["observed_threads"] == run["effective_threads"]  # MXNet's own log line
        assert sum(len(r["requested_threads"]) for r in results["runs"]) == 2  # grid {1, 2}


def test_thread_cap_formula():
    assert [device.thread_cap(n) for n in (1, 2, 3, 4, 6, 8, 16, 64)] == \
        [1, 1, 1, 1, 2, 3, 7, 31]


class TestFloors:
    def test_floor_above_achieved_names_the_numbers(self, results):
        s = results["summary"]
        floors = BenchFloors(min_images_per_sec=s["images_per_sec"] * 100,
                             max_p99_ms=s["latency_p99_ms"] / 100,
                             min_fraction_of_bare_decode=50.0)
        v = check_floors(results, floors)
        assert len(v) == 3
        assert f"loader throughput {s['images_per_sec']} img/s is below the floor " \
               f"{s['images_per_sec'] * 100} img/s" in v[0]
        assert f"batch latency p99 {s['latency_p99_ms']} ms is above the limit" in v[1]
        assert "device " in v[0] and "preprocess_threads=" in v[0]
        assert str(s["bare_decode_images_per_sec"]) in v[2]

    def test_floors_met_pass(self, results):
        s = results["summary"]
        floors = {"min_images_per_sec": s["images_per_sec"] / 10,
                  "max_p99_ms": s["latency_p99_ms"] * 10 + 1000,
                  "max_first_batch_s": 60, "max_fraction_smaller_than_data_shape": 0.0}
        assert check_floors(results, floors) == []
        assert check_floors(results, None) == []

    def test_require_gpu_fails_a_cpu_run(self, results):
        if results["device"]["num_gpus"]:
            pytest.skip("GPU present")
        v = check_floors(results, BenchFloors(require_gpu=True))
        assert len(v) == 1 and "ran on cpu" in v[0] and "requires a GPU" in v[0]

    def test_batch_problems_always_fail(self, results):
        broken = copy.deepcopy(results)
        broken["problems"] = ["batch 3: shape [16, 3, 50, 56] != expected [16, 3, 56, 56]"]
        assert check_floors(broken, None) == [
            "batch check failed: batch 3: shape [16, 3, 50, 56] != expected [16, 3, 56, 56]"]

    def test_select_floors_by_environment(self, monkeypatch):
        spec = BenchSpec(floors={"gpu": BenchFloors(min_images_per_sec=3000),
                                 "cpu": BenchFloors(min_images_per_sec=100),
                                 "ci": BenchFloors(min_images_per_sec=1)})
        monkeypatch.delenv(ENV_VAR, raising=False)
        assert select_floors(spec, "cpu")[0] == "cpu"
        assert select_floors(spec, "gpu", "ci")[0] == "ci"
        monkeypatch.setenv(ENV_VAR, "ci")
        assert select_floors(spec, "gpu")[0] == "ci"
        monkeypatch.setenv(ENV_VAR, "staging")
        with pytest.raises(LoaderBenchError, match="'staging' are not in the spec"):
            select_floors(spec, "gpu")
        assert select_floors(BenchSpec(), "cpu") == (None, None)


class TestMXNetErrors:
    def test_crop_larger_than_images_is_a_clear_error(self, tmp_path):
        pack(tmp_path, n=32, size=(32, 32))
        opts = BenchOptions(**{**FAST, "max_crop_size": 48, "min_crop_size": 40,
                               "thread_grid": (), "preprocess_threads": 1})
        with pytest.raises(LoaderBenchError) as err:
            run_benchmark(str(tmp_path), opts)
        msg = str(err.value)
        assert "ImageRecordIter failed on" in msg and "train.rec" in msg
        assert "input image size smaller than max_crop_size" in msg
        assert "max_crop_size=48 is larger than an image (the smallest image checked is " \
               "32x32 (key 0))" in msg
        assert "Traceback" not in msg

    def test_label_width_mismatch_is_explained(self, tmp_path):
        tmp_path.mkdir(exist_ok=True)
        ok, buf = cv2.imencode(".jpg", np.full((64, 64, 3), 128, np.uint8))
        with recordio.RecordWriter(tmp_path / "train.rec", tmp_path / "train.idx") as w:
            for i in range(16):
                w.write(i, recordio.pack_image_record([1.0, 2.0], i, buf.tobytes()))
        opts = BenchOptions(**{**FAST, "thread_grid": (), "preprocess_threads": 1,
                               "decode_records": 16})
        with pytest.raises(LoaderBenchError, match="set label_width to the records' label count"):
            run_benchmark(str(tmp_path), opts)


class TestInputs:
    def test_missing_split_names_what_is_there(self, dataset):
        with pytest.raises(LoaderBenchError, match=r"\['val.rec', 'val.idx'\] missing.*"
                                                   r"\['train.rec'\]"):
            run_benchmark(str(dataset), BenchOptions(**{**FAST, "split": "val"}))

    def test_fewer_records_than_batch(self, dataset):
        with pytest.raises(LoaderBenchError, match="64 records, fewer than batch_size=128"):
            run_benchmark(str(dataset), BenchOptions(**{**FAST, "batch_size": 128}))

    def test_segmentation_loader_needs_masks(self, dataset):
        with pytest.raises(LoaderBenchError, match="train_mask.rec missing"):
            run_benchmark(str(dataset), BenchOptions(**{**FAST,
                                                                    "loader": "segmentation"}))

    def test_segmentation_loader_benchmark(self, tmp_path):
        from recforge.segmentation import pack as segpack
        from recforge.segmentation.pack import SegPackOptions

        rng = np.random.default_rng(0)
        pairs = []
        for k in range(12):
            img = rng.integers(0, 256, (48, 64, 3), np.uint8)
            mask = rng.integers(0, 3, (48, 64), np.uint8)
            mask[0, 0] = 255
            pairs.append(segpack.SegPair(k, f"{k}.png", cv2.imencode(".png", img)[1].tobytes(),
                                         cv2.imencode(".png", mask)[1].tobytes(), {}))
        segpack.pack_pairs(pairs, tmp_path, SegPackOptions(), name="train")
        (tmp_path / "classes.json").write_text('{"num_classes": 3, "ignore_index": 255}')
        opts = BenchOptions(loader="segmentation", batch_size=4, data_shape=(3, 32, 32),
                            thread_grid=(1,), preprocess_threads=1, warmup_batches=1,
                            measure_batches=4, decode_records=12)
        results = run_benchmark(str(tmp_path), opts)
        assert [r["effective_threads"] for r in results["runs"]] == [0, 1]
        assert results["summary"]["images_per_sec"] > 0
        assert results["value_check"]["shapes"] == [[4, 3, 32, 32]]
        assert set(results["value_check"]["mask_values"]) <= {0, 1, 2, 255}
        assert results["problems"] == []
        assert check_floors(results, {"min_images_per_sec": 1e9})
        (tmp_path / "classes.json").write_text('{"num_classes": 2, "ignore_index": 255}')
        bad = run_benchmark(str(tmp_path), opts)
        assert any("mask values [2]" in p for p in bad["problems"])

    @pytest.mark.parametrize("bad, match", [
        ({"data_shape": (2, 56, 56)}, "C in 1, 3, 4"),
        ({"thread_grid": (0, 2)}, "below 1"),
        ({"iter_kwargs": {"batch_size": 3}}, "options of their own"),
        ({"max_crop_size": 40, "min_crop_size": 50}, "min <= max"),
        ({"bogus": 1}, "Extra inputs are not permitted"),
    ])
    def test_options_refuse_bad_values(self, bad, match):
        with pytest.raises(ValidationError, match=match):
            BenchOptions(**bad)


def test_s3_prefix_gate_saves_bench_json_then_fails(bucket, tmp_path):
    local = tmp_path / "ds"
    pack(local, n=32)
    prefix = f"s3://{bucket}/datasets/demo/v1"
    for name in ("train.rec", "train.idx", "classes.json"):
        storage.upload(local / name, storage.join(prefix, name))
    spec = BenchSpec(options=BenchOptions(**{**FAST, "decode_records": 32, "thread_grid": (),
                                             "preprocess_threads": 1}),
                     floors={"default": BenchFloors(min_images_per_sec=1e9)})
    out = storage.join(prefix, "bench.json")
    with pytest.raises(BenchFloorsFailed) as err:
        run_and_gate(prefix, spec, out, dataset_version="v1", run_id="r1")
    assert "below the floor 1000000000.0 img/s" in str(err.value)
    saved = storage.read_json(out)
    assert saved["passed"] is False and saved["dataset_version"] == "v1"
    assert saved["run_id"] == "r1"
    assert saved["floors"]["environment"] == "default"
    assert saved["violations"] == err.value.violations
    assert saved["dataset"]["download_seconds"] > 0

    ok = BenchSpec(options=spec.options, floors={"default": BenchFloors(min_images_per_sec=1)})
    got = run_and_gate(prefix, ok, out, dataset_version="v1")
    assert got["uri"] == out and storage.read_json(out)["passed"] is True
    assert got["recommendation"]["preprocess_threads"] >= 1


def test_cli_prints_table_and_exits_by_floor(dataset, tmp_path, capsys):
    from recforge import cli

    args = ["bench", str(dataset), "--batch-size", "16", "--data-shape", "3,56,56",
            "--warmup", "1", "--batches", "4", "--grid", "", "--threads", "1",
            "--decode-records", "64"]
    out = tmp_path / "bench.json"
    assert cli.main([*args, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "img/s" in text and "vs decode" in text and "bare decode (1 thread" in text
    assert "recommendation: preprocess_threads=1" in text
    assert json.loads(out.read_text())["passed"] is True
    assert cli.main([*args, "--min-images-per-sec", "1e9"]) == 1
    assert "FLOOR: loader throughput" in capsys.readouterr().out
    assert cli.main([*args, "--data-shape", "3,56"]) == 2
    assert "--data-shape needs C,H,W" in capsys.readouterr().err


def test_padded_batches_count_only_real_images(tmp_path):
    """40 records in batches of 16: epoch ends are padded (round_batch); pads are not images."""
    pack(tmp_path, n=40)
    res = run_benchmark(str(tmp_path), BenchOptions(
        **{**FAST, "thread_grid": (), "preprocess_threads": 1, "decode_records": 40}))
    run = res["runs"][0]
    measured = [b for b in run["batches"] if not b["warmup"]]
    assert any(b["pad"] for b in measured)
    assert run["window"]["images"] == sum(16 - b["pad"] for b in measured) < 16 * len(measured)
    assert run["window"]["epochs_wrapped"] >= 1


def test_models_import_without_heavy_modules():
    """DAG files import BenchSpec, the CLI builds its parser: no mxnet/cv2 at import time."""
    import subprocess
    import sys

    code = ("import sys, recforge.bench, recforge.cli.bench; "
            "from recforge.spec.bench import BenchSpec; BenchSpec(); "
            "print(sorted(m for m in ('mxnet', 'cv2', 'boto3', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**__import__("os").environ})
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("where", ["local", "s3"])
def test_reads_a_bounded_window_of_a_larger_split(where, bucket, tmp_path, monkeypatch):
    """The benchmark times a window of the first records that fits max_bytes: ranged reads
    of those bytes only, never the whole split."""
    local = tmp_path / "ds"
    pack(local, n=240, size=(96, 96))
    split_bytes = (local / "train.rec").stat().st_size
    prefix = str(local)
    if where == "s3":
        prefix = f"s3://{bucket}/datasets/big/v1"
        for name in ("train.rec", "train.idx", "classes.json"):
            storage.upload(local / name, storage.join(prefix, name))
    read = []
    real = objects.get_range  # what storage.get_range and iter_range read with
    monkeypatch.setattr(objects, "get_range",
                        lambda uri, start, n: read.append(n) or real(uri, start, n))
    monkeypatch.setattr(storage, "download", lambda *a: pytest.fail(f"downloaded {a}"))  # .rec
    budget = 1 << 17  # about 22 records of 240
    assert split_bytes > 4 * budget
    got = run_benchmark(prefix, BenchOptions(**{**FAST, "max_bytes": budget, "thread_grid": ()}))
    sample = got["dataset"]["sample"]
    assert not sample["whole_split"] and sample["split_records"] == 240
    assert FAST["batch_size"] <= sample["records"] < 240
    assert sum(read) == sample["bytes"] <= budget  # what was read is what was timed
    assert got["dataset"]["records"] == sample["records"]
    assert got["summary"]["images_per_sec"] > 0


def test_a_window_read_in_parallel_parts_is_the_splits_first_bytes(bucket, tmp_path,
                                                                   monkeypatch):
    """The window arrives in ranged parts read side by side, written in order, and the
    SHA-256 taken on the way in is the one of the file read back (reuse compares them)."""
    from recforge.bench.records import fetch_split, window_digest
    from recforge.storage import bulk

    local = tmp_path / "ds"
    pack(local, n=120, size=(96, 96))
    prefix = f"s3://{bucket}/datasets/parts/v1"
    for name in ("train.rec", "train.idx", "classes.json"):
        storage.upload(local / name, storage.join(prefix, name))
    monkeypatch.setattr(bulk, "RANGE_PART", 5000)  # dozens of parts, 8 at a time
    got = fetch_split(prefix, "train", tmp_path / "out", max_bytes=1 << 17, min_records=16)
    window = (tmp_path / "out" / "train.rec").read_bytes()
    assert len(window) == got["sample"]["bytes"] == got["downloaded_bytes"] > 20 * 5000
    assert window == (local / "train.rec").read_bytes()[:len(window)]
    assert got["sample"]["sha256"] == window_digest(tmp_path / "out", "train")


def test_the_window_takes_the_same_keys_masks(tmp_path):
    """Segmentation: the sample's mask records are those of the sample's image keys."""
    from recforge.bench.records import fetch_split

    local = tmp_path / "ds"
    pack(local, n=120, size=(96, 96))
    pack(tmp_path / "m", n=120, size=(48, 48))  # stands in for the masks
    for ext in ("rec", "idx"):
        (local / f"train_mask.{ext}").write_bytes((tmp_path / "m" / f"train.{ext}").read_bytes())
    got = fetch_split(str(local), "train", tmp_path / "out", max_bytes=1 << 17, min_records=16)
    image_keys = [int(line.split("\t")[0]) for line in
                  (tmp_path / "out" / "train.idx").read_text().splitlines()]
    mask_keys = [int(line.split("\t")[0]) for line in
                 (tmp_path / "out" / "train_mask.idx").read_text().splitlines()]
    assert mask_keys == image_keys and 16 <= len(image_keys) < 120
    mask_bytes = (tmp_path / "out" / "train_mask.rec").stat().st_size
    assert got["downloaded_bytes"] == got["sample"]["bytes"] + mask_bytes
    assert mask_bytes < (local / "train_mask.rec").stat().st_size
