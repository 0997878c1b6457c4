"""The GPU check's measuring half (``benchmarks/gpu_check.sh`` installs, then runs this).

Builds a small classification dataset of synthetic photos, runs the loader benchmark with
MXNet's ``ImageRecordIter`` (in the MXNet environment) and DALI's ``fn.readers.mxnet`` side by
side on the requested device, and prints img/s, GPU memory and how MXNet's CUDA kernels run on
this GPU by CUDA's rules (``recforge.bench.gpu_support``): natively (machine code for its
compute capability), compatible (machine code of the same major version, lower minor: an
sm_89 L4 runs sm_86 code), through PTX (the driver JIT-compiles the newest PTX at or below
it), or not at all (mxnet-cu112 on sm_90 and later) — then MXNet's loader is not run, and
what ``bench.loader: auto`` measures there is printed instead. For a GPU machine without
MXNet and DALI: ``benchmarks/gpu_check_torch.py``.

    python benchmarks/gpu_check.py --device gpu [--images 2048] [--out gpu_check.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check_torch import make_dataset  # noqa: E402  (the same synthetic split)

from recforge.bench.gpu_support import (  # noqa: E402
    fatbin_archs,
    kernel_match,
    kernel_mode,
)

__all__ = ["fatbin_archs", "kernel_mode", "main", "make_dataset"]

def mxnet_library(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import importlib.util, pathlib; print(pathlib.Path(importlib.util."
         "find_spec('mxnet').origin).parent / 'libmxnet.so')"],
        capture_output=True, text=True, check=True).stdout.strip()


def gpu_facts() -> dict:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version,"
                              "memory.total,memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {"gpu": None}
    name, cap, driver, total, used = (x.strip() for x in out.splitlines()[0].split(","))
    major, minor = cap.split(".")
    return {"gpu": name, "compute_capability": int(major) * 10 + int(minor), "driver": driver,
            "memory_total_mib": int(total), "memory_used_mib_at_start": int(used)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "gpu"], default="gpu")
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--out", help="write the results here as JSON")
    args = p.parse_args(argv)

    from recforge.bench import environment, run_benchmark
    from recforge.spec.bench import BenchOptions

    started = time.perf_counter()
    facts = gpu_facts() if args.device == "gpu" else {"gpu": None}
    mx_python = environment.mxnet_python()
    archs = fatbin_archs(mxnet_library(mx_python))
    match = kernel_match(archs, facts.get("compute_capability"))
    mode = match.sentence
    if facts.get("gpu") and not match.runs:
        print(f"gpu_check: MXNet's loader cannot run here ({mode}); bench.loader: auto "
              "measures another loader: run benchmarks/gpu_check_torch.py", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="recforge-gpu-check-") as tmp:
        make_dataset(Path(tmp) / "ds", args.images)
        opts = BenchOptions(batch_size=64, data_shape=(3, 224, 224), device=args.device,
                            warmup_batches=5, measure_batches=args.batches,
                            thread_grid=(2, 4, 8), preprocess_threads=4, decode_records=256)
        res = run_benchmark(str(Path(tmp) / "ds"), opts, loader="both")
    report = {
        "device_requested": args.device, **facts, "mxnet_python": mx_python,
        "mxnet": res["host"].get("mxnet"), "mxnet_features": res["host"].get("mxnet_features"),
        "mxnet_cuda_code": archs, "mxnet_kernels": mode,
        "mxnet_device": res["device"]["statement"],
        "mxnet_images_per_sec": res["summary"]["images_per_sec"],
        "mxnet_gpu_memory_peak_bytes": res["summary"]["gpu_memory_peak_bytes"],
        "mxnet_preprocess_threads": res["summary"]["preprocess_threads"],
        "dali": res["dali"]["host"]["dali"], "dali_device": res["dali"]["device"]["statement"],
        "dali_images_per_sec": res["dali"]["summary"]["images_per_sec"],
        "dali_num_threads": res["dali"]["summary"]["preprocess_threads"],
        "bare_decode_images_per_sec": res["summary"]["bare_decode_images_per_sec"],
        "problems": res["problems"] + [f"DALI: {x}" for x in res["dali"]["problems"]],
        "images": args.images, "seconds": round(time.perf_counter() - started, 1),
    }
    if args.device == "gpu" and facts.get("gpu"):
        report["memory_used_mib_at_end"] = gpu_facts().get("memory_used_mib_at_start")
    for k, v in report.items():
        print(f"{k:32} {v}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
