"""The GPU checks: ``gpu_check.sh``'s CPU dry run (MXNet and DALI) and
``gpu_check_torch.py``'s (the offline GPU machine's) pass end to end here, and the reading of a
library's CUDA code (native machine code, compatible machine code, PTX for the driver to JIT,
or none) follows CUDA's rules."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


def _fatbin(entries: list[tuple[int, int]]) -> bytes:
    """A fat binary as nvcc embeds it: header, then (kind, arch) entries with payloads."""
    body = b""
    for kind, arch in entries:
        payload = b"\0" * 40
        head = struct.pack("<HHIQII", kind, 0x0101, 64, len(payload), 0, 0)
        head += struct.pack("<HHI", 0, 0, arch) + b"\0" * (64 - 32)  # arch at byte 28
        body += head + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_fatbin_archs_and_the_kernel_mode(tmp_path):
    lib = tmp_path / "libfake.so"
    lib.write_bytes(b"\x7fELF" + b"x" * 100 + _fatbin([(2, 52), (2, 80), (1, 80)]) + b"y" * 50
                    + _fatbin([(2, 86)]))
    archs = gpu_check.fatbin_archs(lib)
    assert archs == {"elf": [52, 80, 86], "ptx": [80]}
    assert gpu_check.kernel_mode(archs, 86).startswith("native: machine code for sm_86")
    assert gpu_check.kernel_mode(archs, 90).startswith("through PTX: no sm_90")
    assert "compute_80" in gpu_check.kernel_mode(archs, 90)
    assert gpu_check.kernel_mode({"elf": [52], "ptx": []}, 90).startswith("none:")
    assert gpu_check.kernel_mode({"elf": [], "ptx": []}, 90).endswith("(a CPU build)")


@pytest.mark.mxnet  # gpu_check.sh's dry run: MXNet and DALI in the MXNet environment
def test_the_cpu_dry_run_passes(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--cpu", "--images", "160",
                           "--batches", "3", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mxnet"] == "1.9.1" and report["dali"]
    assert report["mxnet_kernels"] == "no CUDA code in the library (a CPU build)"
    assert report["mxnet_images_per_sec"] > 0 and report["dali_images_per_sec"] > 0
    assert report["problems"] == []
    assert "mxnet_images_per_sec" in proc.stdout


def test_gpu_check_reads_an_l4_as_compatible_and_an_h100_as_none():
    cu112 = {"elf": [50, 60, 70, 80, 86], "ptx": []}
    assert gpu_check.kernel_mode(cu112, 89).startswith(
        "compatible: no sm_89 machine code, but this 8.9 GPU runs the sm_86 code")
    assert gpu_check.kernel_mode(cu112, 90).startswith("none: no machine code for major 9")
    assert gpu_check.kernel_mode(cu112, 120).startswith("none:")


HEAVY = ("pydantic", "yaml", "boto3", "botocore", "airflow")


def _torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


def test_the_torch_gpu_check_dry_run(tmp_path):
    """The offline GPU machine's check, on the CPU: a split written by recforge's writer, the
    bare decode bound, what auto picks, which loaders cannot run and why."""
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check_torch.py", "--dry-run",
                           "--images", "96", "--batch-size", "16", "--batches", "2",
                           "--workers", "1", "--out", str(out)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO / "include")},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "dry run (CPU)" and report["gpu"] is None
    assert report["images"] == 96 and report["problems"] == []
    assert report["bare_decode_cpu_one_core_images_per_sec"] > 0
    assert report["bare_decode_gpu_nvjpeg_images_per_sec"] is None
    assert report["bench_loader_auto"] == {"measured": "mxnet",
                                           "why": "auto: MXNet's loader (device=cpu)"}
    if importlib.util.find_spec("mxnet") is None:
        assert report["not_run_here"]["mxnet"] == "not installed"
    if importlib.util.find_spec("nvidia.dali") is None:
        assert report["not_run_here"]["dali"].startswith("not installed")
    if _torch_installed():
        assert report["torch_loader"]["ran"] and report["torch_loader_images_per_sec"] > 0
    else:
        assert report["torch_loader"] == {"ran": False, "why": "torch is not installed"}
    assert "bench_loader_auto" in proc.stdout


def test_the_torch_gpu_check_imports_no_service_dependencies(tmp_path):
    """On the GPU machine there is no pydantic, PyYAML, boto3 or Airflow."""
    code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import gpu_check_torch as g; "
            f"rc = g.main(['--dry-run', '--images', '32', '--batch-size', '8', '--batches', "
            f"'1', '--workers', '1']); print(json.dumps([rc, sorted({{m.split('.')[0] for m "
            f"in sys.modules}} & set({list(HEAVY)!r}))]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO / "include")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [0, []]


def test_the_mxnet_cu112_listing_on_a_gpu_machine_is_explained():
    check = _load_torch_check()
    h100 = check.gpu_support.GpuInfo(0, "NVIDIA H100 80GB HBM3", 90, "nvidia-smi")
    why = check.not_run_here(h100)
    assert "mxnet-cu112 1.9.1 on GPU 0 (NVIDIA H100 80GB HBM3, compute capability 9.0): " \
        "none: no machine code for major 9" in why["mxnet"]
    assert check.not_run_here(check.gpu_support.GpuInfo(0, "NVIDIA L4", 89, "x")).get(
        "mxnet", "").find("compute capability") == -1
    picked = check.auto_pick(h100, dry_run=False)
    expected = "torch" if _torch_installed() else (
        "dali" if importlib.util.find_spec("nvidia.dali") else None)
    assert picked["measured"] == expected, picked


def _load_torch_check():
    spec = importlib.util.spec_from_file_location(
        "gpu_check_torch", REPO / "benchmarks" / "gpu_check_torch.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check_torch"] = module
    spec.loader.exec_module(module)
    return module
