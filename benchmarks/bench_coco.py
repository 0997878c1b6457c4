"""COCO instances parsing, side by side: recforge's streaming ``detection.coco.parse``
against the ad-hoc way (``json.load`` of the whole file, then the annotations grouped by
image into dicts), on a synthetic instances file written here: ``--boxes`` annotations,
``--per-image`` a image, 80 categories, float boxes, a ``--polygon-points`` polygon each
(COCO's ``segmentation``, which neither side uses but both must read past) and COCO's
image fields (license, URLs, capture date). Each side runs in a process of its own, with
the same imports, and reports wall time and peak RSS (``ru_maxrss``); both consume every
image's boxes, and their box checksums must agree.

    PYTHONPATH=include .venv/bin/python benchmarks/bench_coco.py [--boxes 1000000]
        [--per-image 5] [--polygon-points 8] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

CATEGORIES = 80


def write_instances(path: Path, boxes: int, per_image: int, points: int, seed: int = 0
                    ) -> int:
    """A COCO instances file (annotations first, as some exporters write it); returns the
    number of images."""
    rng = np.random.default_rng(seed)
    images = -(-boxes // per_image)
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"info": {"description": "recforge benchmark", "version": "1.0"}, '
                '"licenses": [{"id": 1, "name": "CC BY 4.0", "url": "https://example.org"}], '
                '"annotations": [')
        done = 0
        while done < boxes:
            n = min(100_000, boxes - done)
            ids = np.arange(done, done + n)
            x, y = rng.uniform(0, 560, n).round(2), rng.uniform(0, 400, n).round(2)
            w, h = rng.uniform(1, 80, n).round(2), rng.uniform(1, 80, n).round(2)
            cats = rng.integers(1, CATEGORIES + 1, n)
            crowd = (rng.random(n) < 0.01).astype(int)
            poly = rng.uniform(0, 1, (n, 2 * points)).round(3)
            rows = []
            for i in range(n):
                seg = ", ".join(f"{x[i] + poly[i, k] * w[i]:.2f}" if k % 2 == 0 else
                                f"{y[i] + poly[i, k] * h[i]:.2f}" for k in range(2 * points))
                rows.append(f'{{"segmentation": [[{seg}]], "area": {w[i] * h[i]:.4f}, '
                            f'"iscrowd": {crowd[i]}, "image_id": {ids[i] // per_image + 1}, '
                            f'"bbox": [{x[i]}, {y[i]}, {w[i]}, {h[i]}], '
                            f'"category_id": {cats[i]}, "id": {ids[i] + 1}}}')
            f.write(("," if done else "") + ",".join(rows))
            done += n
        f.write('], "images": [')
        f.write(",".join(
            f'{{"license": 1, "file_name": "{i:012d}.jpg", "coco_url": '
            f'"http://images.example.org/train/{i:012d}.jpg", "height": 480, "width": 640, '
            f'"date_captured": "2013-11-14 17:02:52", "flickr_url": '
            f'"http://farm.example.org/{i}/{i:012d}_z.jpg", "id": {i}}}'
            for i in range(1, images + 1)))
        f.write('], "categories": [')
        f.write(",".join(json.dumps({"supercategory": "thing", "id": c, "name": f"class {c}"})
                         for c in range(1, CATEGORIES + 1)))
        f.write("]}")
    return images


def run_recforge(path: Path) -> tuple[int, int, float]:
    from recforge.detection import coco

    images = boxes = 0
    checksum = 0.0
    for _name, annotation in coco.parse(path, "annotations/instances_train.json"):
        images += 1
        boxes += len(annotation.objects)
        checksum += sum(o[3] for o in annotation.objects)  # xmax
    return images, boxes, checksum


def run_json_load(path: Path) -> tuple[int, int, float]:
    """What ad-hoc scripts do: load the tree, index images and categories, group the
    annotations by image, then walk the images."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    categories = {c["id"]: c["name"] for c in doc["categories"]}
    by_image = defaultdict(list)
    for a in doc["annotations"]:
        by_image[a["image_id"]].append(a)
    images = boxes = 0
    checksum = 0.0
    for entry in doc["images"]:
        objects = []
        for a in sorted(by_image.get(entry["id"], ()), key=lambda a: a["id"]):
            x, y, w, h = a["bbox"]
            objects.append([categories[a["category_id"]], x, y, x + w, y + h,
                            1 if a.get("iscrowd") else 0, f"annotation {a['id']}"])
        images += 1
        boxes += len(objects)
        checksum += sum(o[3] for o in objects)
    return images, boxes, checksum


def child(side: str, path: Path) -> None:
    import ijson  # noqa: F401  - the same imports on both sides: the baseline

    import recforge.detection.coco  # noqa: F401
    import recforge.stages.ingest  # noqa: F401

    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    images, boxes, checksum = (run_recforge if side == "recforge" else run_json_load)(path)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"images": images, "boxes": boxes, "checksum": round(checksum, 2),
                      "seconds": seconds, "peak_kib": peak, "baseline_kib": baseline}))


def measure(side: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", side, str(path)],
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boxes", type=int, default=1_000_000)
    ap.add_argument("--per-image", type=int, default=5)
    ap.add_argument("--polygon-points", type=int, default=8)
    ap.add_argument("--keep", type=Path, help="write the file here and keep it")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--write", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.write:
        print(write_instances(args.write, args.boxes, args.per_image, args.polygon_points))
        return 0
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-coco-") as tmp:
        path = args.keep or Path(tmp) / "instances_train.json"
        started = time.perf_counter()
        # written by a child: a child started from a large process inherits its peak RSS
        # across exec (Linux's ru_maxrss), and the measuring children start from this one
        images = int(subprocess.run(
            [sys.executable, __file__, "--write", str(path), "--boxes", str(args.boxes),
             "--per-image", str(args.per_image), "--polygon-points", str(args.polygon_points)],
            stdout=subprocess.PIPE, text=True, check=True).stdout)
        size_mb = os.path.getsize(path) / 1e6
        print(f"{path.name}: {size_mb:,.0f} MB, {args.boxes:,} boxes on {images:,} images "
              f"({args.per_image} an image, {args.polygon_points}-point polygons), "
              f"{CATEGORIES} categories; written in {time.perf_counter() - started:.0f} s")
        rows = [("recforge coco.parse (stream)", measure("recforge", path)),
                ("json.load + group by image", measure("json", path))]
    print(f"  {'parser':<30} {'MB':>6} {'boxes':>10} {'seconds':>8} {'boxes/s':>10} "
          f"{'peak MiB':>9} {'baseline MiB':>13}")
    for name, r in rows:
        print(f"  {name:<30} {size_mb:>6.0f} {r['boxes']:>10,} {r['seconds']:>8.1f} "
              f"{r['boxes'] / r['seconds']:>10,.0f} {r['peak_kib'] / 1024:>9.0f} "
              f"{r['baseline_kib'] / 1024:>13.0f}")
    ours, theirs = rows[0][1], rows[1][1]
    grown = [(r["peak_kib"] - r["baseline_kib"]) / 1024 for r in (ours, theirs)]
    print(f"  json.load / recforge: {theirs['seconds'] / ours['seconds']:.2f}x the time, "
          f"{theirs['peak_kib'] / ours['peak_kib']:.1f}x the peak RSS "
          f"({grown[1] / max(grown[0], 1):.1f}x above the baseline: {grown[1]:,.0f} against "
          f"{grown[0]:,.0f} MiB)")
    same = (ours["images"], ours["boxes"], ours["checksum"]) == \
        (theirs["images"], theirs["boxes"], theirs["checksum"])
    print(f"  same images, boxes and box checksum: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
