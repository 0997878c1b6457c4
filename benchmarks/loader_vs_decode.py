"""Loader throughput vs the bare-decode limit on ~500 packed 256-px JPEG records.

Builds a split the way the pack stage does (sample photos → short side 256 → JPEG q95 →
RecordIO), then runs ``recforge.bench.run_benchmark`` with the usual training settings
(batch 64, 3x224x224, rand_crop + rand_mirror). Prints the table; ``--out`` keeps bench.json.
``--engine all`` measures DALI's and the PyTorch loader beside MXNet's in the same run, on
the same window (each that is installed; torch is an optional extra: a CPU build in a
folder of its own on ``PYTHONPATH`` is enough).

    PYTHONPATH=include python benchmarks/loader_vs_decode.py --repeat 3
    pip install --target .torch-cpu torch==2.13.0   # once; torch alone, no torchvision needed
    PYTHONPATH=include:.torch-cpu .venv/bin/python benchmarks/loader_vs_decode.py --engine all
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path

from recforge.bench import format_table, run_benchmark
from recforge.bench.floors import save_results
from recforge.dev import sampledata
from recforge.format import recordio
from recforge.imaging import ImageRejected, PackOptions, process
from recforge.spec.bench import BenchOptions


def build_split(root: Path, per_class: int, seed: int = 0) -> int:
    """Pack sample photos into ``root/train.rec/.idx``; returns the record count."""
    opts = PackOptions(resize=256, quality=95, upscale=True)
    objects = sampledata.generate(per_class=per_class, seed=seed)
    classes = sorted(sampledata.CLASSES)
    n = 0
    with recordio.RecordWriter(root / "train.rec", root / "train.idx") as w:
        for key, data in sorted(objects.items()):
            cls = key.split("/", 1)[0]
            if cls not in classes:
                continue
            try:
                img = process(data, opts)
            except ImageRejected:
                continue  # the sample's deliberately bad objects
            w.write(n, recordio.pack_image_record(float(classes.index(cls)), n, img.data))
            n += 1
    (root / "classes.json").write_text(json.dumps({"num_classes": len(classes),
                                                   "classes": classes}))
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-class", type=int, default=36, help="14 classes; 36 → 504 records")
    ap.add_argument("--repeat", type=int, default=1, help="run the benchmark this many times")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--grid", default="1,2,4")
    ap.add_argument("--out", help="write the last bench.json here")
    ap.add_argument("--engine", default="mxnet", choices=["mxnet", "dali", "both", "all", "torch"],
                    help="whose loader (all: DALI's and PyTorch's beside MXNet's)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="recforge-bench-") as tmp:
        root = Path(tmp)
        n = build_split(root, args.per_class)
        size = (root / "train.rec").stat().st_size
        print(f"packed {n} records, {size / 1e6:.1f} MB ({size / n / 1e3:.1f} kB/record)")
        opts = BenchOptions(
            batch_size=64, data_shape=(3, 224, 224), rand_crop=True, rand_mirror=True,
            thread_grid=tuple(int(x) for x in args.grid.split(",")), warmup_batches=5,
            measure_batches=args.batches, decode_records=n)
        for i in range(args.repeat):
            results = run_benchmark(str(root), opts, loader=args.engine)
            print(f"\n=== run {i + 1}/{args.repeat}")
            print(format_table(results))
        if args.out:
            save_results(results, args.out)


if __name__ == "__main__":
    main()
