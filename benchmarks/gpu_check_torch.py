"""The GPU check for a GPU machine without MXNet, DALI or a network: the PyTorch loader.

Needs Python with torch (a CUDA build), torchvision, OpenCV and numpy, and this checkout
(``include/`` on the path; no pydantic, boto3 or Airflow is imported). Builds a small
classification split of synthetic photos with recforge's own writer
(``recforge.format.recordio``) in a temporary folder, then measures on the GPU:

- the PyTorch loader (``recforge.bench.torch_loader``: ``recforge.readers.torch.dataset`` in a
  ``DataLoader``, nvJPEG decode with ``torchvision.io.decode_jpeg(device="cuda")``), swept
  over ``num_workers``;
- the bare decode bound: nvJPEG on the GPU alone (the records in memory, batched), beside
  one CPU core's ``cv2.imdecode``;

and prints img/s, GPU memory, the GPU's name and compute capability, what
``bench.loader: auto`` would measure there, and which loaders cannot run there and why
(MXNet: mxnet-cu112's kernels by CUDA's rules, ``recforge.bench.gpu_support``; DALI: not
installed). ``--dry-run`` runs the same path on the CPU (OpenCV decode in the workers).

    PYTHONPATH=include python benchmarks/gpu_check_torch.py [--out gpu_check_torch.json]
    PYTHONPATH=include python benchmarks/gpu_check_torch.py --dry-run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "include") not in sys.path:
    sys.path.insert(0, str(REPO / "include"))

from recforge.bench import gpu_support  # noqa: E402
from recforge.bench.records import LoaderBenchError  # noqa: E402


@dataclass
class CheckOptions:
    """The loader settings of the check (``BenchOptions``' fields the PyTorch loader reads;
    a plain class: no pydantic on the GPU machine)."""

    split: str = "train"
    loader: str = "image_record_iter"
    batch_size: int = 64
    data_shape: tuple[int, int, int] = (3, 224, 224)
    rand_crop: bool = True
    rand_mirror: bool = True
    resize: int = -1
    shuffle: bool = True
    seed: int = 0
    prefetch_buffer: int = 4
    warmup_batches: int = 5
    measure_batches: int = 30
    max_seconds_per_run: float = 60.0
    max_check_batches: int = 8
    label_width: int = 1
    device: str = "gpu"
    gpu_id: int = 0


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


def _smi_used_mib(gpu_id: int) -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--id={gpu_id}", "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
        return int(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def host_facts(dry_run: bool, gpu_id: int = 0) -> dict:
    """torch's view of the machine, and the GPU (None in a dry run or without one)."""
    facts: dict = {"mode": "dry run (CPU)" if dry_run else "gpu", "torch": None,
                   "torchvision": None, "torch_cuda": None, "gpu": None,
                   "compute_capability": None, "gpu_memory_used_mib_at_start": None}
    if importlib.util.find_spec("torch") is not None:
        import torch

        facts.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
    if importlib.util.find_spec("torchvision") is not None:
        from importlib.metadata import version

        facts["torchvision"] = version("torchvision")
    gpu = None if dry_run else gpu_support.probe_gpu(gpu_id)
    if gpu is not None:
        facts.update(gpu=gpu.name, compute_capability=gpu_support.capability_str(
            gpu.capability), gpu_memory_used_mib_at_start=_smi_used_mib(gpu_id))
    return facts | {"_gpu": gpu}


def not_run_here(gpu) -> dict[str, str]:
    """The loaders that cannot run on this machine, each with why."""
    out = {}
    cap = gpu.capability if gpu else None
    match = gpu_support.kernel_match(gpu_support.MXNET_CU112, cap)
    why = []
    if importlib.util.find_spec("mxnet") is None:
        why.append("not installed")
    if gpu is not None and not match.runs:
        why.append(f"{gpu_support.MXNET_CU112_NAME} on {gpu.describe()}: {match.sentence}")
    if why:
        out["mxnet"] = "; ".join(why)
    if not gpu_support.installed_loaders()["dali"]:
        out["dali"] = "not installed (nvidia.dali cannot be imported)"
    return out


def auto_pick(gpu, dry_run: bool) -> dict:
    """What ``bench.loader: auto`` measures on this machine (with mxnet-cu112's kernels)."""
    try:
        choice = gpu_support.choose_loader(
            "auto", "cpu" if dry_run else "gpu", "image_record_iter", gpu,
            gpu_support.MXNET_CU112, gpu_support.installed_loaders())
    except LoaderBenchError as exc:
        return {"measured": None, "why": str(exc)}
    return {"measured": choice.loader, "why": choice.why}


def torch_loader_run(root: Path, opts: CheckOptions, workers: list[int]) -> dict:
    """The PyTorch loader swept over ``workers``: the best run's numbers, or why it did not
    run."""
    if importlib.util.find_spec("torch") is None:
        return {"ran": False, "why": "torch is not installed"}
    from recforge.bench import torch_loader
    from recforge.bench.records import count_records

    try:
        torch = torch_loader._import_torch(gpu=opts.device == "gpu")
        device = torch_loader.resolve_device(opts.device, opts.gpu_id, torch)
        dataset = torch_loader.reader_dataset(root, opts, encoded=device["kind"] == "gpu")
    except LoaderBenchError as exc:
        return {"ran": False, "why": str(exc)}
    rec = root / "train.rec"
    n = count_records(root / "train.idx")
    runs = [torch_loader.timed_run(torch, dataset, opts, w, device, rec.stat().st_size, n)
            for w in workers]
    best = max(runs, key=lambda r: r["images_per_sec"])
    values = torch_loader.value_check(torch, dataset, opts, best["effective_threads"],
                                      device, n)
    return {"ran": True, "device": device["statement"], "device_kind": device["kind"],
            "images_per_sec": best["images_per_sec"],
            "num_workers": best["effective_threads"],
            "by_num_workers": {r["effective_threads"]: r["images_per_sec"] for r in runs},
            "latency_p99_ms": best["latency_ms"]["p99"],
            "time_to_first_batch_s": best["time_to_first_batch_s"],
            "gpu_memory_peak_bytes": max((r["gpu_memory_peak_bytes"] or 0 for r in runs),
                                         default=0) if device["kind"] == "gpu" else None,
            "value_range": [values["value_min"], values["value_max"]],
            "label_range": [values["label_min"], values["label_max"]],
            "problems": [p for r in runs for p in r["problems"]] + values["problems"]}


def nvjpeg_bound(root: Path, gpu_id: int, batch: int, min_seconds: float = 1.0) -> dict:
    """nvJPEG alone: the split's JPEGs in memory, decoded on the GPU ``batch`` at a time."""
    import torch
    from torchvision.io import decode_jpeg

    from recforge.format import recordio

    datas = [torch.frombuffer(bytearray(recordio.unpack_image_record(p)[1]), dtype=torch.uint8)
             for _, p in recordio.iter_records(root / "train.rec")]
    dev = f"cuda:{gpu_id}"
    decode_jpeg(datas[:batch], device=dev)  # nvJPEG's start-up, untimed
    torch.cuda.synchronize(gpu_id)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_seconds:
        for i in range(0, len(datas), batch):
            done += len(decode_jpeg(datas[i:i + batch], device=dev))
        torch.cuda.synchronize(gpu_id)
    return {"images_per_sec": round(done / (time.perf_counter() - t0), 1), "batch": batch}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="the same path on the CPU")
    p.add_argument("--images", type=int, default=1024)
    p.add_argument("--batches", type=int, default=30, help="measured batches per run")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", default="2,4,8", help="DataLoader num_workers to sweep")
    p.add_argument("--gpu-id", type=int, default=0)
    p.add_argument("--out", help="write the results here as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from recforge.bench.device import nprocs
    from recforge.bench.records import bare_decode

    started = time.perf_counter()
    facts = host_facts(args.dry_run, args.gpu_id)
    gpu = facts.pop("_gpu")
    opts = CheckOptions(batch_size=args.batch_size, measure_batches=args.batches,
                        device="cpu" if args.dry_run else "gpu", gpu_id=args.gpu_id)
    workers = sorted({min(int(w), nprocs()) for w in args.workers.split(",")})
    problems = []
    if not args.dry_run and gpu is None:
        problems.append("no GPU found (nvidia-smi, torch.cuda): run with --dry-run on a "
                        "machine without one")
    with tempfile.TemporaryDirectory(prefix="recforge-gpu-check-") as tmp:
        root = Path(tmp) / "ds"
        make_dataset(root, args.images)
        cpu = bare_decode(root / "train.rec", args.images)
        loader = torch_loader_run(root, opts, workers)
        gpu_bound = (nvjpeg_bound(root, args.gpu_id, args.batch_size)
                     if gpu is not None and loader.get("device_kind") == "gpu" else None)
    if loader["ran"]:
        problems += loader["problems"]
    elif not (args.dry_run and loader["why"] == "torch is not installed"):
        problems.append(f"PyTorch loader: {loader['why']}")
    report = {
        **facts, "images": args.images, "batch_size": args.batch_size,
        "torch_loader": loader,
        "torch_loader_images_per_sec": loader.get("images_per_sec"),
        "bare_decode_gpu_nvjpeg_images_per_sec": gpu_bound and gpu_bound["images_per_sec"],
        "bare_decode_cpu_one_core_images_per_sec": cpu["images_per_sec"],
        "bench_loader_auto": auto_pick(gpu, args.dry_run),
        "not_run_here": not_run_here(gpu),
        "gpu_memory_used_mib_at_end": None if gpu is None else _smi_used_mib(args.gpu_id),
        "problems": problems, "seconds": round(time.perf_counter() - started, 1),
    }
    for k, v in report.items():
        print(f"{k:40} {v}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
