"""Benchmark: RGB colour mask → trainId conversion, class loop vs recforge's lookup table.

Generates Cityscapes-style colour masks (random polygons of the real label colours, shared
colours included) at 2048x1024, then in one run measures

1. conversion only, on decoded arrays: the usual loop over classes
   (``out[(img == colour).all(-1)] = value``) against ``MaskConverter`` (24-bit key +
   ``np.take``); MPix/s each and the ratio; outputs are checked equal;
2. end to end on files: recforge ``convert_file`` (read, decode, convert, encode, write)
   against the bare PNG read + write of the same files (decode the colour PNG, encode and
   write a single-channel PNG at the same compression), masks/s and the ratio.

Conversion times are medians of ``--repeat`` runs; end-to-end runs are interleaved per
file (bare and recforge alternate) and reported as best and median. Single process. Run:
``PYTHONPATH=include python benchmarks/bench_masks.py [--masks 3] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from recforge.segmentation.colormaps import load_colormap
from recforge.segmentation.masks import DecodedMask, MaskConverter, convert_file


def make_mask(width: int, height: int, seed: int) -> np.ndarray:
    """A BGR colour mask: a road/sky layout with random polygons of every Cityscapes label."""
    cm = load_colormap("cityscapes")
    labels = [lab for lab in cm.labels if lab.color is not None]
    rng = np.random.default_rng(seed)
    img = np.zeros((height, width, 3), np.uint8)
    img[: height // 3] = cm.label("sky").color[::-1]
    img[height // 2:] = cm.label("road").color[::-1]
    for i in range(120):
        lab = labels[i % len(labels)]
        cx, cy = rng.integers(0, width), rng.integers(0, height)
        r = rng.integers(10, max(11, width // 10))
        n = rng.integers(3, 9)
        ang = np.sort(rng.uniform(0, 2 * np.pi, n))
        pts = np.stack([cx + r * np.cos(ang), cy + r * np.sin(ang) * 0.6], -1).astype(np.int32)
        cv2.fillPoly(img, [pts], tuple(int(c) for c in lab.color[::-1]))
    return img


def class_loop(rgb: np.ndarray, table: dict, fill: int) -> np.ndarray:
    """The baseline: one full-image comparison per class colour."""
    out = np.full(rgb.shape[:2], fill, np.uint8)
    for colour, value in table.items():
        out[(rgb == colour).all(-1)] = value
    return out


def timed(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--masks", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--height", type=int, default=1024)
    ap.add_argument("--compression", type=int, default=1, help="PNG level for outputs")
    args = ap.parse_args(argv)

    conv = MaskConverter.from_config("cityscapes", target="trainId")
    table = conv.colormap.color_table("trainId")
    t = time.perf_counter()
    conv.color_lut()
    lut_ms = (time.perf_counter() - t) * 1e3
    masks = [make_mask(args.width, args.height, s) for s in range(args.masks)]
    mpix = args.width * args.height / 1e6
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"{args.masks} Cityscapes-style colour masks {args.width}x{args.height} "
          f"({mpix:.2f} MPix each), median of {args.repeat}; cpus={os.cpu_count()} "
          f"load={load[0]:.1f} (shared machine: numbers are noisy)")
    print(f"lookup table build (once per process): {lut_ms:.0f} ms")

    # 1. conversion only
    loop_s, rec_s = [], []
    for bgr in masks:
        rgb = np.ascontiguousarray(bgr[..., ::-1])
        s, base = timed(lambda rgb=rgb: class_loop(rgb, table, 255), max(1, args.repeat // 2))
        loop_s.append(s)
        s, res = timed(lambda bgr=bgr: conv.convert_decoded(DecodedMask(bgr, "bgr")).mask,
                       args.repeat)
        rec_s.append(s)
        if not np.array_equal(base, res):
            print("MISMATCH between the class loop and recforge", file=sys.stderr)
            return 1
    loop_rate = mpix / statistics.median(loop_s)
    rec_rate = mpix / statistics.median(rec_s)
    print(f"conversion  class loop ({len(table)} colours): {loop_rate:8.1f} MPix/s "
          f"({statistics.median(loop_s) * 1e3:7.1f} ms/mask)")
    print(f"conversion  recforge LUT:             {rec_rate:8.1f} MPix/s "
          f"({statistics.median(rec_s) * 1e3:7.1f} ms/mask)")
    print(f"conversion  speed-up: {rec_rate / loop_rate:.0f}x (outputs identical)")

    # 2. end to end on files
    with tempfile.TemporaryDirectory(prefix="bench-masks-") as tmp:
        tmp = Path(tmp)
        srcs = []
        for i, bgr in enumerate(masks):
            p = tmp / f"m{i}_gtFine_color.png"
            cv2.imwrite(str(p), bgr)
            srcs.append(p)
        results = [conv.convert_decoded(DecodedMask(b, "bgr")).mask for b in masks]
        params = [cv2.IMWRITE_PNG_COMPRESSION, args.compression]

        def bare(p, out):
            img = cv2.imread(str(p), cv2.IMREAD_COLOR)
            assert img is not None
            cv2.imwrite(str(tmp / f"{p.stem}_bare.png"), out, params)

        def forge(p, _out):
            convert_file(p, tmp / f"{p.stem}_trainIds.png", conv, args.compression)

        # interleaved per file, alternating which goes first, so load bursts on a shared
        # machine hit both; per method: the sum over files of each file's min and median
        times = {bare: [[] for _ in srcs], forge: [[] for _ in srcs]}
        for r in range(args.repeat + 1):
            for i, (p, out) in enumerate(zip(srcs, results, strict=True)):
                for fn in ((bare, forge) if (r + i) % 2 else (forge, bare)):
                    t = time.perf_counter()
                    fn(p, out)
                    if r:  # run 0 warms the page cache and lazy imports
                        times[fn][i].append(time.perf_counter() - t)
        n = len(srcs)
        stats = {fn: (sum(min(x) for x in ts), sum(statistics.median(x) for x in ts))
                 for fn, ts in times.items()}
        for fn, label in ((bare, "bare PNG read+write:  "), (forge, "recforge convert_file:")):
            best, med = stats[fn]
            print(f"end to end  {label}   {n / best:8.1f} masks/s ({best / n * 1e3:7.1f} "
                  f"ms/mask best, {med / n * 1e3:7.1f} median)")
        print(f"end to end  recforge / bare time: {stats[forge][0] / stats[bare][0]:.2f}x best, "
              f"{stats[forge][1] / stats[bare][1]:.2f}x median (target <= 1.3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
