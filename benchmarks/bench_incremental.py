"""Incremental nightly rebuilds: a full build, then a no-change night, 1 % changed, 1 % added
and 1 % removed, each one ``recforge build`` (the CLI, a fresh process: the same code path
as any night) against the local S3 server (``recforge.dev.s3server``).

The dataset is ``recforge.dev.sampledata`` (crops, flips, rotations and colour jitter of the
photos scikit-image ships, short sides 180-720 px, JPEG and PNG, nested class folders, a
few bad objects): 14 classes x ``--per-class`` images (default 360: 5,040 images). The
changes are spread at random over the dataset. Prints each night's wall time and its ratio
to the full build, and how many chunks each night packed.

    PYTHONPATH=include python benchmarks/bench_incremental.py                  # ~4 min on 2 cores
    PYTHONPATH=include python benchmarks/bench_incremental.py --per-class 1440 # 20,160: ~10 min
    PYTHONPATH=include python benchmarks/bench_incremental.py --per-class 40   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))

from recforge import storage  # noqa: E402
from recforge.dev import s3server, sampledata  # noqa: E402

BUCKET = "bench-incremental"
TARGETS = {"no change": 0.05, "1 % changed": 0.15}


def spec_doc(shard_size: int) -> dict:
    return {
        "name": "bench", "schedule": None,
        "source": {"uri": f"s3://{BUCKET}/raw"},
        "publish": {"uri": f"s3://{BUCKET}/datasets"},
        "splits": {"val_ratio": 0.1, "seed": 7},
        "pack": {"resize": 256, "quality": 95, "shard_size": shard_size},
        "bench": {"options": {"batch_size": 32, "data_shape": [3, 224, 224],
                              "measure_batches": 10, "thread_grid": []},
                  "floors": {"cpu": {"min_images_per_sec": 1}}},
        # the samples are crops of one photo per class: near-duplicates across splits
        "quality": {"severity": {"near_duplicates": "warn"}},
    }


def _generate_part(args: tuple[int, int]) -> dict[str, bytes]:
    n, part = args
    objects = sampledata.generate(n, seed=part)
    if part == 0:
        return objects
    # later parts: their own folder per class, and no second copy of the bad objects
    return {f"{k.split('/', 1)[0]}/part{part}/{k.split('/', 1)[1]}": v
            for k, v in objects.items() if "/" in k and k not in sampledata.BAD_OBJECTS}


def generate(per_class: int, workers: int) -> dict[str, bytes]:
    """The sample dataset, ``per_class`` images per class, generated in ``workers``
    processes (each part its own seed and sub-folder): the same kind of photos, faster."""
    parts = max(1, min(workers, per_class // 40))
    sizes = [per_class // parts + (i < per_class % parts) for i in range(parts)]
    with ProcessPoolExecutor(parts) as pool:
        out: dict[str, bytes] = {}
        for objects in pool.map(_generate_part, zip(sizes, range(parts), strict=True)):
            out.update(objects)
    return out


def build(spec: Path, env: dict, workers: int) -> tuple[float, dict]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "recforge.cli", "build", str(spec), "--json",
                          "--workers", str(workers)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(f"recforge build failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout[out.stdout.index("\n{") + 1:])
    return wall, result


def packed_chunks(result: dict) -> str:
    if result.get("no_change"):
        return "no shard planned"
    shards = result["pack"]
    packed = sum(s.get("chunks_packed", 0) for s in shards)
    total = sum(s.get("chunks", 0) for s in shards)
    reused = sum(1 for s in shards if s.get("reused"))
    return f"{packed}/{total} chunks packed, {reused}/{len(shards)} shards reused whole"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-class", type=int, default=360, help="images per class (14 classes)")
    ap.add_argument("--shard-size", type=int, default=500)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--fraction", type=float, default=0.01)
    args = ap.parse_args()

    rng = random.Random(12)
    with s3server.running_server() as endpoint, tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, **s3server.DEV_CREDENTIALS,
               "PYTHONPATH": str(REPO / "include")}
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, **s3server.DEV_CREDENTIALS})
        storage.ensure_bucket(f"s3://{BUCKET}")
        objects = generate(args.per_class, args.workers)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda kv: storage.put_bytes(f"s3://{BUCKET}/raw/{kv[0]}", kv[1]),
                          objects.items()))
        n = len(objects)
        spec = Path(tmp) / "bench.yaml"
        spec.write_text(yaml.safe_dump(spec_doc(args.shard_size)))
        images = sorted(k for k in objects
                        if k.endswith((".jpg", ".png")) and k not in sampledata.BAD_OBJECTS)
        del objects
        k = max(1, round(args.fraction * len(images)))
        extra = sampledata.generate(max(1, -(-3 * k // len(sampledata.CLASSES))), seed=99)
        extra = [(key, data) for key, data in extra.items() if key.endswith(".jpg")
                 and key not in sampledata.BAD_OBJECTS and data]
        replacements, additions = extra[:k], extra[k:2 * k]  # distinct photos each
        print(f"{n} objects ({len(images)} images), {args.workers} pack workers, changes of "
              f"{k} images ({args.fraction:.0%})")

        def put(key: str, data: bytes) -> None:
            storage.put_bytes(f"s3://{BUCKET}/raw/{key}", data)

        nights = {
            "full build": lambda: None,
            "no change": lambda: None,
            "1 % changed": lambda: [put(key, data) for key, (_, data) in zip(
                rng.sample(images, k), replacements, strict=True)],
            "1 % added": lambda: [put(f"{key.split('/')[0]}/added/{i}.jpg", data)
                                  for i, (key, data) in enumerate(additions)],
            "1 % removed": lambda: [storage.s3_client().delete_object(
                Bucket=BUCKET, Key=f"raw/{key}") for key in rng.sample(images, k)],
        }
        full = None
        for name, change in nights.items():
            change()
            wall, result = build(spec, env, args.workers)
            full = full or wall
            target = TARGETS.get(name)
            verdict = "" if target is None else (
                f"  target <= {target:.0%}: {'met' if wall / full <= target else 'MISSED'}")
            print(f"{name:<12} {wall:7.1f} s  {wall / full:6.1%} of full  "
                  f"{packed_chunks(result)}{verdict}", flush=True)
            print("             stages: " + ", ".join(
                f"{stage} {s:.1f} s" for stage, s in result.get("seconds", {}).items()),
                flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
