"""Which GPUs MXNet's kernels run on (CUDA's SASS and PTX rules, over real cuobjdump
listings), what ``bench.loader: auto`` measures on each, and the refusal of MXNet's loader on
a GPU it cannot run on — the GPU faked by replacing the probe."""

from __future__ import annotations

import json
import sys
import types
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from recforge.bench import benchmark, gpu_support, run_and_gate, torch_loader
from recforge.bench.gpu_support import GpuInfo, kernel_match, parse_cuobjdump
from recforge.bench.records import LoaderBenchError
from recforge.bench.results import bench_document
from recforge.spec.bench import BenchOptions, BenchSpec


def _elf_listing(lib: str, fatbins: int, archs: list[int]) -> str:
    """``cuobjdump --list-elf`` of a library with ``fatbins`` embedded fat binaries."""
    n, lines = 0, []
    for _ in range(fatbins):
        for a in archs:
            n += 1
            lines.append(f"ELF file {n:>4}: {lib}.{n}.sm_{a}.cubin")
    return "\n".join(lines) + "\n"


# mxnet-cu112 1.9.1's libmxnet.so: SASS for sm_50 60 70 80 86; --list-ptx prints nothing
MXNET_CU112_ELF = _elf_listing("libmxnet", 3, [50, 60, 70, 80, 86])
MXNET_CU112_PTX = ""
# a library built with -gencode arch=compute_80,code=[sm_80,compute_80]
PTX80_ELF = _elf_listing("libfoo", 2, [80])
PTX80_PTX = "PTX file    1: libfoo.1.sm_80.ptx\nPTX file    2: libfoo.2.sm_80.ptx\n"

H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", 90, "nvidia-smi")
GPUS = {86: GpuInfo(0, "NVIDIA A10", 86, "nvidia-smi"),
        89: GpuInfo(0, "NVIDIA L4", 89, "nvidia-smi"), 90: H100}


def test_the_listings_parse_to_the_wheels_archs():
    assert parse_cuobjdump(MXNET_CU112_ELF, MXNET_CU112_PTX) == gpu_support.MXNET_CU112
    assert parse_cuobjdump(PTX80_PTX, PTX80_ELF) == {"elf": [80], "ptx": [80]}
    assert parse_cuobjdump("PTX file    1: x.1.compute_90a.ptx") == {"elf": [], "ptx": [90]}


@pytest.mark.parametrize(("cap", "mode", "arch"), [
    (86, "native", 86), (80, "native", 80),
    (89, "compatible", 86),  # L4 / L40S run the sm_86 code
    (87, "compatible", 86), (75, "compatible", 70), (61, "compatible", 60),
    (52, "compatible", 50),
    (90, "none", None), (100, "none", None), (120, "none", None),  # H100/H200, B200, RTX 50
    (35, "none", None),
])
def test_mxnet_cu112_on_each_capability(cap, mode, arch):
    m = kernel_match(parse_cuobjdump(MXNET_CU112_ELF, MXNET_CU112_PTX), cap)
    assert (m.mode, m.arch, m.runs) == (mode, arch, mode != "none")


def test_ptx_jits_upward_only_and_sass_stays_in_its_major():
    archs = parse_cuobjdump(PTX80_ELF, PTX80_PTX)
    assert kernel_match(archs, 90).mode == "ptx" and kernel_match(archs, 90).arch == 80
    assert "JIT-compiles compute_80 PTX" in kernel_match(archs, 120).sentence
    assert kernel_match(archs, 86).mode == "compatible"  # SASS sm_80 before the PTX
    assert kernel_match(archs, 75).mode == "none"  # compute_80 PTX does not JIT down
    assert kernel_match({"elf": [86], "ptx": []}, 80).mode == "none"  # not to a lower minor
    assert kernel_match({"elf": [86], "ptx": []}, 90).mode == "none"  # nor to another major
    assert kernel_match({"elf": [], "ptx": []}, 90).mode == "cpu_build"
    assert kernel_match(archs, None).mode == "no_gpu"


def test_probe_reads_nvidia_smi(monkeypatch):
    out = "0, NVIDIA H100 80GB HBM3, 9.0\n1, NVIDIA L4, 8.9\n"
    monkeypatch.setattr(gpu_support.subprocess, "run", lambda *a, **k: types.SimpleNamespace(
        stdout=out))
    assert gpu_support.probe_gpu(1) == GpuInfo(1, "NVIDIA L4", 89, "nvidia-smi")
    assert gpu_support.probe_gpu(0).describe() == (
        "GPU 0 (NVIDIA H100 80GB HBM3, compute capability 9.0)")
    assert gpu_support.probe_gpu(2) is None

    def missing(*a, **k):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(gpu_support.subprocess, "run", missing)
    monkeypatch.setattr(gpu_support, "_torch_gpus", lambda: [])
    assert gpu_support.probe_gpu(0) is None


@pytest.fixture
def host(monkeypatch):
    """A host whose GPU (None: none) and installed loaders the test sets."""
    state = {"gpu": None, "installed": {"torch": True, "dali": False}}
    monkeypatch.setattr(gpu_support, "probe_gpu", lambda gpu_id=0: state["gpu"])
    monkeypatch.setattr(gpu_support, "installed_loaders", lambda: state["installed"])
    monkeypatch.setattr(gpu_support, "mxnet_archs", lambda python: (
        gpu_support.MXNET_CU112, "assumed"))
    return state


@pytest.mark.parametrize(("cap", "picked"), [(86, "mxnet"), (89, "mxnet"), (90, "torch")])
def test_auto_picks_by_capability(host, cap, picked):
    host["gpu"] = GPUS[cap]
    choice = gpu_support.resolve_loader("auto", "auto", 0, "image_record_iter")
    assert choice.loader == picked
    assert choice.as_dict()["gpu"]["compute_capability"] == f"{cap // 10}.{cap % 10}"


def test_auto_without_torch_takes_dali_else_refuses(host):
    host.update(gpu=H100, installed={"torch": False, "dali": True})
    assert gpu_support.resolve_loader("auto", "gpu", 0, "detection").loader == "dali"
    host["installed"] = {"torch": False, "dali": False}
    with pytest.raises(LoaderBenchError, match=r"install the 'torch' extra"):
        gpu_support.resolve_loader("auto", "gpu", 0, "image_record_iter")


def test_auto_on_a_cpu_host_is_mxnet(host):
    choice = gpu_support.resolve_loader("auto", "auto", 0, "image_record_iter")
    assert (choice.loader, choice.why) == ("mxnet", "auto: MXNet's loader (no GPU on this host)")
    host["gpu"] = H100  # device: cpu never asks the GPU
    assert gpu_support.resolve_loader("auto", "cpu", 0, "segmentation").loader == "mxnet"


@pytest.mark.parametrize("loader", ["mxnet", "both", "all"])
def test_mxnet_on_gpu_sm90_is_refused_naming_gpu_and_fix(host, loader):
    host["gpu"] = H100
    with pytest.raises(LoaderBenchError) as err:
        gpu_support.resolve_loader(loader, "gpu", 0, "image_record_iter")
    msg = str(err.value)
    for part in ("NVIDIA H100 80GB HBM3", "compute capability 9.0", "bench.loader: torch",
                 "auto", "mxnet-cu120", "sm_90", "has sm [50, 60, 70, 80, 86], PTX []"):
        assert part in msg, (part, msg)
    # device: auto keeps MXNet's own fallback (a CPU run, stated in bench.json)
    assert gpu_support.resolve_loader(loader, "auto", 0, "image_record_iter").loader == loader


def test_the_benchmark_refuses_before_fetching(host):
    host["gpu"] = H100
    spec = BenchSpec(loader="mxnet", options={"device": "gpu"})
    with pytest.raises(LoaderBenchError, match="MXNet's kernels cannot run on GPU 0"):
        run_and_gate("s3://no-such-bucket/never/fetched", spec, "/dev/null/bench.json")


@pytest.mark.mxnet
def test_auto_on_this_cpu_host_runs_mxnet_as_before(host, tmp_path):
    gpu_check_torch = _load("gpu_check_torch")
    gpu_check_torch.make_dataset(tmp_path / "ds", 48)
    opts = BenchOptions(batch_size=16, warmup_batches=1, measure_batches=2, thread_grid=(),
                        preprocess_threads=1, decode_records=16, data_shape=(3, 64, 64))
    res = benchmark.run_benchmark(str(tmp_path / "ds"), opts, loader="auto")
    assert res["loader"] == "mx.io.ImageRecordIter" and res["device"]["kind"] == "cpu"
    assert res["loader_choice"] == {
        "requested": "auto", "measured": "mxnet", "gpu": None, "mxnet_kernels": None,
        "why": "auto: MXNet's loader (no GPU on this host)"}
    assert res["summary"]["images_per_sec"] > 0


def test_the_spec_takes_auto_and_torch():
    assert BenchSpec().loader == "auto"
    assert BenchSpec(loader="auto", options={"loader": "segmentation"}).loader == "auto"
    with pytest.raises(ValidationError, match="use bench.loader: mxnet or auto"):
        BenchSpec(loader="torch", options={"loader": "detection"})


class _FakeCuda:
    def __init__(self, n):
        self.n = n

    def is_available(self):
        return self.n > 0

    def device_count(self):
        return self.n

    def get_device_name(self, i):
        return "NVIDIA H200"

    def get_device_capability(self, i):
        return (9, 0)


def _fake_torch(n_gpus: int):
    return types.SimpleNamespace(cuda=_FakeCuda(n_gpus), __version__="2.11.0+cu130",
                                 version=types.SimpleNamespace(cuda="13.0"))


def test_torch_loader_decodes_on_the_gpu_when_there_is_one():
    dev = torch_loader.resolve_device("auto", 0, _fake_torch(1))
    assert (dev["kind"], dev["gpu_id"], dev["compute_capability"]) == ("gpu", 0, "9.0")
    assert "NVIDIA H200" in dev["statement"] and "nvJPEG" in dev["statement"]
    assert torch_loader.resolve_device("cpu", 0, _fake_torch(1))["kind"] == "cpu"
    assert torch_loader.resolve_device("auto", 0, _fake_torch(0))["kind"] == "cpu"
    with pytest.raises(LoaderBenchError, match="device=gpu requested but torch sees 0 GPU"):
        torch_loader.resolve_device("gpu", 0, _fake_torch(0))


def test_torch_loader_result_has_the_bench_json_layout(monkeypatch, tmp_path):
    _load("gpu_check_torch").make_dataset(tmp_path, 40)
    opts = BenchOptions(batch_size=8, thread_grid=(1, 2), preprocess_threads=2,
                        decode_records=8, data_shape=(3, 64, 64))
    monkeypatch.setattr(torch_loader, "_import_torch", lambda gpu=False: _fake_torch(0))
    monkeypatch.setattr(torch_loader, "reader_dataset", lambda root, o, encoded: "dataset")
    monkeypatch.setattr("recforge.bench.device.nprocs", lambda: 2)

    def run(torch, dataset, o, workers, device, rec_bytes, n):
        assert (dataset, device["kind"], n) == ("dataset", "cpu", 40)
        return torch_loader._run_result(
            workers, 0.5, 100.0 * workers, rec_bytes, n, [0.01, 0.02], 2, 0.2, o,
            {(8, 3, 64, 64)}, [{"label_min": 0.0, "label_max": 7.0}], [], None, None)

    monkeypatch.setattr(torch_loader, "timed_run", run)
    monkeypatch.setattr(torch_loader, "value_check", lambda *a: {
        "value_min": 0.0, "value_max": 255.0, "label_min": 0.0, "label_max": 7.0,
        "problems": []})
    doc = torch_loader.measure(str(tmp_path), tmp_path, opts, {}, None,
                                     datetime.now(UTC))
    layout = bench_document(prefix="", opts=opts, started=datetime.now(UTC), loader="",
                            host={}, device={}, dataset={}, bare_decode={}, image_sizes=None,
                            threads={}, runs=[], value_check={}, label_range=[],
                            recommendation={}, summary={}, problems=[], warnings=[])
    assert list(doc) == list(layout)
    assert doc["loader"] == f"{torch_loader.NAME} + {torch_loader.DECODE['cpu']}"
    assert doc["host"]["torch"] == "2.11.0+cu130"
    assert doc["threads"]["grid"] == [1, 2] and doc["recommendation"]["num_workers"] == 2
    assert doc["summary"]["images_per_sec"] == 200.0 and doc["summary"]["device"] == "cpu"
    assert doc["label_range"] == [0.0, 7.0] and doc["problems"] == []
    json.dumps(doc)


def test_torch_loader_refuses_other_tasks(monkeypatch, tmp_path):
    monkeypatch.setattr(torch_loader, "_import_torch", lambda gpu=False: _fake_torch(0))
    with pytest.raises(LoaderBenchError, match="measures classification splits"):
        torch_loader.measure("p", tmp_path, BenchOptions(loader="segmentation"), {},
                                   None, datetime.now(UTC))


def _load(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module



def test_torch_loader_times_a_real_dataloader_on_cpu(tmp_path):
    """recforge.readers.torch.dataset in a DataLoader (OpenCV decode in the workers)."""
    torch = pytest.importorskip("torch")

    _load("gpu_check_torch").make_dataset(tmp_path, 48)
    opts = BenchOptions(batch_size=8, warmup_batches=1, measure_batches=8, data_shape=(3, 64, 64),
                        device="cpu", max_check_batches=3)
    device = torch_loader.resolve_device("cpu", 0, torch)
    dataset = torch_loader.reader_dataset(tmp_path, opts, encoded=False)
    run = torch_loader.timed_run(torch, dataset, opts, 1, device, 1000, 48)
    assert run["window"]["batches"] == 8 and run["images_per_sec"] > 0  # 2 epochs of 6
    assert run["batches_seen"]["shapes"] == [[8, 3, 64, 64]] and run["problems"] == []
    assert (run["batches_seen"]["label_min"], run["batches_seen"]["label_max"]) == (0.0, 7.0)
    values = torch_loader.value_check(torch, dataset, opts, 1, device, 48)
    assert values["batches"] == 3 and values["dtypes"] == ["float32"]
    assert 0 <= values["value_min"] < values["value_max"] <= 255 and values["all_finite"]
