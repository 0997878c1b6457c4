"""The GPU check's measuring half (``benchmarks/gpu_check.sh`` installs, then runs this).

Builds a small classification dataset of synthetic photos, runs the loader benchmark with
MXNet's ``ImageRecordIter`` (in the MXNet environment) and DALI's ``fn.readers.mxnet`` side by
side on the requested device, and prints img/s, GPU memory and how MXNet's CUDA kernels run on
this GPU: natively (the wheel ships machine code for its compute capability), through PTX
(the driver JIT-compiles the newest PTX the wheel ships at or below it), or not at all.

    python benchmarks/gpu_check.py --device gpu [--images 2048] [--out gpu_check.json]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
KIND = {1: "ptx", 2: "elf"}


def fatbin_archs(path: str | os.PathLike) -> dict[str, list[int]]:
    """The CUDA code a shared library ships: ``{"elf": [sm...], "ptx": [compute...]}``, read
    from the fat binaries embedded in it (header: magic, version, header size, fat size;
    each entry: kind, header size, payload size, ..., arch)."""
    found: dict[str, set[int]] = {"elf": set(), "ptx": set()}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos = m.find(FATBIN_MAGIC)
        while pos != -1:
            if pos + 16 <= len(m):
                _, _, hsize, fsize = struct.unpack_from("<IHHQ", m, pos)
                entry, end = pos + hsize, min(pos + hsize + fsize, len(m))
                while 0 < hsize and entry + 32 <= end:
                    kind, _, ehsize, size = struct.unpack_from("<HHIQ", m, entry)
                    arch = struct.unpack_from("<I", m, entry + 28)[0]
                    if kind not in KIND or ehsize < 32 or not 10 <= arch <= 200:
                        break
                    found[KIND[kind]].add(arch)
                    entry += ehsize + size
            pos = m.find(FATBIN_MAGIC, pos + 4)
    return {k: sorted(v) for k, v in found.items()}


def kernel_mode(archs: dict[str, list[int]], capability: int | None) -> str:
    """How this GPU runs the library's kernels, in one sentence."""
    if not archs["elf"] and not archs["ptx"]:
        return "no CUDA code in the library (a CPU build)"
    if capability is None:
        return f"no GPU to match (the library ships sm {archs['elf']}, PTX {archs['ptx']})"
    if capability in archs["elf"]:
        return f"native: machine code for sm_{capability} is in the library"
    ptx = [a for a in archs["ptx"] if a <= capability]
    if ptx:
        return (f"through PTX: no sm_{capability} machine code (has {archs['elf']}); the driver "
                f"JIT-compiles compute_{max(ptx)} PTX (slow first start, cached after)")
    return (f"none: no sm_{capability} code and no PTX at or below it (has sm {archs['elf']}, "
            f"PTX {archs['ptx']}): MXNet's kernels cannot run on this GPU")


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


def make_dataset(root: Path, images: int, classes: int = 8) -> None:
    """Synthetic photos (smooth gradients + noise, 320-480 px), packed as a train split."""
    import cv2
    import numpy as np

    from recforge.format import recordio

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    with recordio.RecordWriter(root / "train.rec", root / "train.idx") as w:
        for i in range(images):
            h, wd = int(rng.integers(320, 481)), int(rng.integers(320, 481))
            base = np.linspace(0, 255, wd, dtype=np.float32)[None, :, None]
            img = np.clip(base + rng.normal(0, 25, (h, wd, 3)), 0, 255).astype(np.uint8)
            ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
            w.write(i, recordio.pack_image_record(float(i % classes), i, buf.tobytes()))
    (root / "classes.json").write_text(json.dumps({"num_classes": classes}))


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
    mode = kernel_mode(archs, facts.get("compute_capability"))
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
