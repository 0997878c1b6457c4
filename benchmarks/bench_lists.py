"""The list layout's parser and join at ImageNet's size: rows per second and peak memory.

Writes two synthetic lists with ImageNet's keys to a temporary folder: a 1,281,167-row
``train.csv`` (``key,label``: ``train/n01440764/n01440764_10026.JPEG,n01440764``, 1,000
synsets) and a 50,000-row ``LOC_val_solution.csv`` (``ImageId,PredictionString``: the
stem ``ILSVRC2012_val_00000001`` and boxes ``n01751748 1 2 3 4 …``, read with
``label_token: first``; one ``source.columns`` serves both lists, so by position). Then,
each phase timed on its own and measured again under ``tracemalloc`` for its peak of
Python allocations:

* ``parse train.csv`` / ``parse val list``: ``lists.read_rows`` streamed to the end (what
  the parser holds while it reads: it must not grow with the file);
* ``flatten``: the whole layout (``lists.flatten``: the object index, both lists read and
  joined, the items) over the 1,331,167 listed objects with ``key_match: stem`` —
  what a build's flatten task holds beyond the listing it is given.

    PYTHONPATH=include .venv/bin/python benchmarks/bench_lists.py            # ImageNet size
    PYTHONPATH=include .venv/bin/python benchmarks/bench_lists.py --train 100000 --val 5000
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from recforge.layouts import lists
from recforge.spec import parse_spec

CLASSES = 1000


def wnids() -> list[str]:
    rng = random.Random(0)
    return sorted({f"n{rng.randrange(1_000_000, 15_000_000):08d}" for _ in range(CLASSES * 2)}
                  )[:CLASSES]


def write_lists(folder: Path, n_train: int, n_val: int) -> tuple[list[str], list[str]]:
    """train.csv and LOC_val_solution.csv; returns the train and val image keys."""
    synsets, rng = wnids(), random.Random(1)
    train_keys, val_keys = [], []
    with open(folder / "train.csv", "w") as f:
        f.write("key,label\n")
        for i in range(n_train):
            w = synsets[i % CLASSES]
            key = f"train/{w}/{w}_{10000 + i // CLASSES}.JPEG"
            train_keys.append(key)
            f.write(f"{key},{w}\n")
    with open(folder / "LOC_val_solution.csv", "w") as f:
        f.write("ImageId,PredictionString\n")
        for n in rng.sample(range(1, n_val + 1), n_val):  # rows in no order, as shipped
            w = synsets[rng.randrange(CLASSES)]
            val_keys.append(f"val/ILSVRC2012_val_{n:08d}.JPEG")
            f.write(f"ILSVRC2012_val_{n:08d},{w} 12 7 140 144 {w} 1 2 30 31 \n")
    return train_keys, val_keys


def measure(name: str, phase: Callable[[], int], out: list[dict]) -> None:
    """Time ``phase`` (returns its row count), then run it again under tracemalloc."""
    t0 = time.perf_counter()
    rows = phase()
    seconds = time.perf_counter() - t0
    tracemalloc.start()
    phase()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out.append({"phase": name, "rows": rows, "seconds": round(seconds, 2),
                "rows_per_s": round(rows / seconds), "peak_mib": round(peak / 2**20, 1)})
    print(f"{name:<18} {rows:>10,} rows {seconds:7.2f} s {rows / seconds:>12,.0f} rows/s "
          f"peak {peak / 2**20:8.1f} MiB", flush=True)


def run(n_train: int, n_val: int) -> list[dict]:
    out: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "imagenet"
        folder.mkdir()
        train_keys, val_keys = write_lists(folder, n_train, n_val)
        spec = parse_spec({
            "name": "imagenet", "task": "classification", "schedule": None,
            "source": {"uri": str(folder), "layout": "list", "lists": {
                "train": str(folder / "train.csv"),
                "val": str(folder / "LOC_val_solution.csv")},
                "columns": {"key": 0, "label": 1, "header": True, "label_token": "first",
                            "key_match": "stem"}},
            "splits": {"from": "source"}, "publish": {"uri": str(Path(tmp) / "out")}})
        print(f"train.csv {(folder / 'train.csv').stat().st_size / 2**20:.1f} MiB, "
              f"LOC_val_solution.csv "
              f"{(folder / 'LOC_val_solution.csv').stat().st_size / 2**20:.1f} MiB")

        def parse(uri: str, columns) -> Callable[[], int]:
            return lambda: sum(1 for _ in lists.read_rows(uri, columns))

        measure("parse train.csv", parse(str(folder / "train.csv"), spec.source.columns), out)
        measure("parse val list", parse(str(folder / "LOC_val_solution.csv"),
                                        spec.source.columns), out)
        objects = [{"key": k, "size": 110_000, "etag": f"{i:032x}"}
                   for i, k in enumerate(train_keys + val_keys)]
        del train_keys, val_keys

        def flatten() -> int:
            # the train list names its images by path; the val list by stem
            done = lists.flatten(objects, spec)
            assert len(done.items) == len(objects), (len(done.items), done.refused[:3])
            return len(objects)

        measure("flatten", flatten, out)
    print(f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=int, default=1_281_167)
    ap.add_argument("--val", type=int, default=50_000)
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args()
    results = run(args.train, args.val)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
