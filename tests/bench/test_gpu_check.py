"""The one-command GPU check: its CPU dry run passes end to end here, and the reading of a
library's CUDA code (native machine code, PTX for the driver to JIT, or none) is exact."""

from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
from pathlib import Path

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
