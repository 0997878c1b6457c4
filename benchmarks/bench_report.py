"""The dataset report at ImageNet size: time and peak memory of ``build_report`` on a
synthetic records.jsonl (1,000 classes, uniform dHashes, no .rec files: the thumbnails are
skipped, the rest of the report is built in full).

    PYTHONPATH=include .venv/bin/python benchmarks/bench_report.py [--records 1280000]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import resource
import tempfile
import time
from pathlib import Path


def synthetic(root: Path, n: int, classes: int = 1000, seed: int = 0) -> None:
    rng = random.Random(seed)
    names = [f"n{i:08d}" for i in range(classes)]
    with open(root / "records.jsonl", "w") as f:
        for i in range(n):
            c, h = rng.randrange(classes), rng.getrandbits(64)
            f.write(json.dumps({
                "channels": 3, "class_name": names[c], "decode_status": "ok", "height": 256,
                "key": i, "label": c, "length": 40000, "name": f"{names[c]}/x_{i}.JPEG",
                "offset": i * 40008, "phash": f"{h:016x}", "source_etag": f"{h:032x}",
                "source_key": f"{names[c]}/x_{i}.JPEG", "source_sha256": f"{h:064x}",
                "split": "val" if rng.random() < 0.04 else "train",
                "width": rng.randrange(256, 600)}, sort_keys=True) + "\n")
    (root / "classes.json").write_text(json.dumps({"classes": names, "num_classes": classes}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_280_000)
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # one warning per missing thumbnail
    from recforge.report import build_report

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        synthetic(root, args.records)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        out = build_report(str(root), root / "report.html")
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"{args.records:,} records: report built in {seconds:.1f} s, "
              f"{out.stat().st_size / 1024:.0f} KB; peak RSS {peak / 1024:.0f} MiB "
              f"(before building: {before / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
