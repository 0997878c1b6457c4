"""The loader benchmark's MXNet side in-process (the MXNet environment runs this file):
MXNet's real behaviour on small images, the thread sweep, the device choice, the GPU branch.

``measure_here`` is ``run_benchmark`` without the child process, so monkeypatches apply.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import cv2
import numpy as np
import pytest

from recforge.bench import (
    LoaderBenchError,
    check_floors,
    device,
    image_record_iter,
    loader,
    measure,
    value_check,
)
from recforge.bench.records import fetch_split
from recforge.spec.bench import BenchFloors, BenchOptions
from tests.bench.test_bench import FAST, pack


def measure_here(root: Path, opts: BenchOptions) -> dict:
    fetched = fetch_split(str(root), opts.split, root / "window", opts.max_bytes,
                          min_records=opts.batch_size)
    window = fetched.pop("root")
    return measure.measure(str(root), str(window), opts.model_dump(mode="json"), fetched,
                           None, None, datetime.now(UTC).isoformat())


def _mxnet_gpus() -> int:
    import mxnet as mx

    return mx.context.num_gpus()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bench") / "ds"
    pack(root)
    return root


def test_sweep_measures_each_effective_value_once(dataset, monkeypatch):
    # pretend to be an 8-CPU host: the formula caps at 3, so the grid 1,2,4,8 gives 1,2,3
    monkeypatch.setattr(image_record_iter, "nprocs", lambda: 8)  # the sweep's cap
    monkeypatch.setattr(device, "nprocs", lambda: 8)  # host facts, thread_cap()'s default
    opts = BenchOptions(**{**FAST, "thread_grid": (1, 2, 4, 8), "preprocess_threads": 4,
                           "measure_batches": 3})
    res = measure_here(dataset, opts)
    assert [r["effective_threads"] for r in res["runs"]] == [1, 2, 3]
    assert [r["requested_threads"] for r in res["runs"]] == [[1], [2], [4, 8]]
    for r in res["runs"]:  # on a host with fewer CPUs MXNet uses fewer: said, not hidden
        if r["observed_threads"] != r["effective_threads"]:
            assert any("trust the observed value" in w for w in res["warnings"])
    assert any("above MXNet's cap" in w for w in res["warnings"])


class TestValueCheckInParts:
    """The untimed value check reads the window with iterators side by side, each over its
    part (``num_parts`` / ``part_index``): the same records checked as by one iterator."""

    CHECKED = ("records_covered", "of_records", "value_min", "value_max",
               "label_min", "label_max", "shapes", "dtypes", "all_finite", "problems")

    def check(self, root: Path, procs: int, **opts) -> dict:
        return value_check.check_values(root, BenchOptions(**{**FAST, **opts}), 1,
                                   device.resolve_device("cpu"), None, procs)

    def test_two_iterators_check_what_one_does(self, tmp_path):
        pack(tmp_path, n=72)  # 4.5 batches of 16
        one, two = self.check(tmp_path, 1), self.check(tmp_path, 2)
        assert one["iterators"] == 1 and two["iterators"] == 2
        assert {k: one[k] for k in self.CHECKED} == {k: two[k] for k in self.CHECKED}
        # 36 records a part: each ends on a padded batch, one more batch than one iterator
        assert two["records_covered"] == 72 and (one["batches"], two["batches"]) == (5, 6)
        assert [b["batch"] for b in two["per_batch"]] == list(range(6))

    def test_the_cap_is_shared_between_the_parts(self, dataset):
        got = self.check(dataset, 2, max_check_batches=3)
        assert got["iterators"] == 2 and got["batches"] == 3
        assert got["records_covered"] == 48

    def test_one_iterator_where_a_part_would_hold_less_than_a_batch_no_core_is_spare_or_a_gpu(
            self, dataset):
        assert self.check(dataset, 2, batch_size=48)["iterators"] == 1
        assert value_check.value_check_parts(BenchOptions(**FAST), 64, threads=2, procs=2) == 1
        assert value_check.value_check_parts(BenchOptions(**FAST), 64, threads=1, procs=16) == 2
        assert value_check.value_check_parts(
            BenchOptions(**{**FAST, "loader": "detection"}), 64, threads=1, procs=16) == 1
        assert value_check.value_check_parts(BenchOptions(**FAST), 64, threads=1, procs=16,
                                             device_kind="gpu") == 1


class TestMXNetBehaviour:
    def test_images_smaller_than_data_shape_are_upscaled_and_reported(self, tmp_path):
        """MXNet 1.9.1 does not fail on images smaller than data_shape: it upscales them
        (bilinear, aspect kept) and crops. Pin that, and check the benchmark says so."""
        import mxnet as mx

        images = pack(tmp_path, n=32, size=(32, 40), fmt=".png")
        it = mx.io.ImageRecordIter(path_imgrec=str(tmp_path / "train.rec"),
                                   path_imgidx=str(tmp_path / "train.idx"),
                                   data_shape=(3, 56, 56), batch_size=4, verbose=False)
        got = it.next().data[0].asnumpy()[0]
        up = cv2.resize(images[0], (70, 56), interpolation=cv2.INTER_LINEAR)  # 32x40 → 56x70
        want = up[:, 7:63][..., ::-1].transpose(2, 0, 1)  # centre crop, BGR → RGB, CHW
        assert np.abs(got - want).max() == 0

        res = measure_here(tmp_path, BenchOptions(
            **{**FAST, "decode_records": 32, "thread_grid": (), "preprocess_threads": 1}))
        sizes = res["image_sizes"]
        assert sizes["smaller_than_data_shape"] == 32 and sizes["checked"] == 32
        assert sizes["smallest"] == {"key": 0, "height": 32, "width": 40}
        assert any("32 of 32 images are smaller than data_shape 56x56" in w and "upscales" in w
                   for w in res["warnings"])
        v = check_floors(res, {"max_fraction_smaller_than_data_shape": 0.0})
        assert v and "32 of 32 images (100.00%) are smaller than data_shape" in v[0]


class TestDevice:
    def test_gpu_requested_without_gpu_is_an_error(self):
        if _mxnet_gpus():
            pytest.skip("GPU present")
        with pytest.raises(LoaderBenchError, match="device=gpu requested but no GPU 0"):
            device.resolve_device("gpu")
        assert device.resolve_device("cpu")["kind"] == "cpu"

    def test_gpu_code_path_with_cpu_standing_in(self, dataset, monkeypatch):
        """The mx.gpu() branch (copy, device reductions, memory peak) run with mx.cpu()
        standing in, since this host has no GPU; the real GPU run is in docs/gpu-worker.md."""
        import mxnet as mx

        used = iter(range(1000, 10**9, 1000))
        monkeypatch.setattr(image_record_iter, "resolve_device", lambda req, gid=0: {
            "kind": "gpu", "gpu_id": 0, "num_gpus": 1, "statement": "fake gpu (mx.cpu)"})
        monkeypatch.setattr(loader, "gpu_used_bytes", lambda _mx, _gid: next(used))
        monkeypatch.setattr(mx, "gpu", lambda i=0: mx.cpu(i))
        res = measure_here(dataset, BenchOptions(
            **{**FAST, "thread_grid": (), "preprocess_threads": 1}))
        run = res["runs"][0]
        assert run["gpu_memory_baseline_bytes"] == 1000
        assert run["gpu_memory_peak_bytes"] > run["gpu_memory_baseline_bytes"]
        assert res["summary"]["device"] == "gpu"
        assert res["summary"]["gpu_memory_peak_bytes"] == run["gpu_memory_peak_bytes"]
        assert all(b["context"] == "cpu(0)" for b in run["batches"])  # the as_in_context copy
        assert res["value_check"]["all_finite"] and res["problems"] == []
        v = check_floors(res, BenchFloors(max_gpu_memory_bytes=1))
        assert len(v) == 1 and "GPU memory peak" in v[0]


