"""MXNet's ``tools/im2rec.py`` vs ``recforge im2rec``: same ``.lst``, options and cores.

Generates realistic photo-like JPEGs from the photos scikit-image ships (no download):
a random crop of a real photo scaled to the target size, with a real texture (grass,
gravel, brick) blended in at native resolution and mild sensor noise, so the files have
the detail and JPEG entropy of camera photos rather than of smooth upscales. Two sets:

* ``mixed``: half ImageNet-sized (500x375, 500x333, 375x500, 333x500, 640x480, 500x500),
  half 1-2 MP (1280x960, 1600x1200, 1200x1600, 1500x1000, 1440x1080, 1200x900);
* ``wide``: 2048x1024.

Or ``--data DIR`` packs your own folder (every .jpg/.jpeg/.png below it).

Each tool runs as its own process tree (``python im2rec.py`` from the installed mxnet,
``python -m recforge.cli im2rec``), alternating, ``--repeat`` times; the best wall time
counts (the machine may be shared and noisy: all runs are printed). Start-up time
(interpreter + imports) is measured on an empty ``.lst`` and reported separately, so
``img/s`` is given both for the whole command and for the packing alone. Peak memory
is the largest sum of PSS over the process tree, sampled every 50 ms. Quality: every
record of both outputs is decoded and compared with an anti-aliased reference (full
decode + Pillow Lanczos to the same size) and with each other (PSNR, dB).

    PYTHONPATH=include python benchmarks/bench_pack.py            # ~2-4 min on 2 cores
    PYTHONPATH=include python benchmarks/bench_pack.py --quick    # ~30 s
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[1]
MX_IM2REC = os.path.join(importlib.util.find_spec("mxnet").submodule_search_locations[0],
                         "tools", "im2rec.py")
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "retina",
          "immunohistochemistry", "colorwheel", "cat")
TEXTURES = ("grass", "gravel", "brick")
SIZES = {
    "mixed": [(500, 375), (500, 333), (375, 500), (333, 500), (640, 480), (500, 500),
              (1280, 960), (1600, 1200), (1200, 1600), (1500, 1000), (1440, 1080), (1200, 900)],
    "wide": [(2048, 1024)],
}
COUNTS = {"mixed": 480, "wide": 240}
QUICK_COUNTS = {"mixed": 96, "wide": 48}


# ---------------------------------------------------------------- data


def _load(name: str) -> np.ndarray | None:
    import skimage.data

    fn = getattr(skimage.data, name, None)
    if fn is None:
        return None
    img = fn()
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[..., :3][..., ::-1])


def generate(out: Path, kind: str, count: int, seed: int = 0) -> None:
    """``count`` photo-like JPEGs of the ``kind`` sizes into ``out`` (reused if present)."""
    marker = out / f".complete-{count}-{seed}"
    if marker.exists():
        return
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    photos = [p for p in map(_load, PHOTOS) if p is not None]
    textures = [t for t in map(_load, TEXTURES) if t is not None]
    sizes = SIZES[kind]
    for i in range(count):
        w, h = sizes[i % len(sizes)]
        p = photos[rng.integers(len(photos))]
        ph, pw = p.shape[:2]
        s = rng.uniform(0.55, 1.0)
        ch, cw = int(ph * s), int(pw * s)
        y, x = rng.integers(0, ph - ch + 1), rng.integers(0, pw - cw + 1)
        img = cv2.resize(p[y:y + ch, x:x + cw], (w, h), interpolation=cv2.INTER_CUBIC)
        img = img.astype(np.float32)
        t = textures[rng.integers(len(textures))]
        tile = np.tile(t, (h // t.shape[0] + 1, w // t.shape[1] + 1, 1))[:h, :w]
        img += (tile.astype(np.float32) - tile.mean()) * rng.uniform(0.1, 0.3)
        img += rng.normal(0, rng.uniform(1.5, 3.0), img.shape).astype(np.float32)
        img = np.clip(img, 0, 255).astype(np.uint8)
        q = int(rng.integers(88, 96))
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, q])
        (out / f"{kind}_{i:05d}.jpg").write_bytes(buf.tobytes())
    marker.touch()


def write_lst(path: Path, root: Path) -> int:
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                   if p.suffix.lower() in (".jpg", ".jpeg", ".png") and p.is_file())
    path.write_text("".join(f"{i}\t{i % 10:f}\t{n}\n" for i, n in enumerate(names)))
    return len(names)


# ---------------------------------------------------------------- running


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_tree(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """(wall seconds, peak PSS of the whole process tree in MiB, output tail)."""
    peak = 0
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, sum(_pss_kib(p) for p in _tree(proc.pid)))
            done.wait(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    output = proc.communicate()[0]
    wall = time.perf_counter() - started
    done.set()
    t.join()
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{cmd[:3]} exited {proc.returncode}:\n{output[-3000:]}")
    return wall, peak / 1024, output[-500:]


def commands(prefix: Path, root: Path, opts: list[str]) -> dict[str, list[str]]:
    return {
        "im2rec": [sys.executable, MX_IM2REC, str(prefix["im2rec"]), str(root), *opts],
        "recforge": [sys.executable, "-m", "recforge.cli", "im2rec", str(prefix["recforge"]),
                     str(root), *opts],
    }


# ---------------------------------------------------------------- quality


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def quality(root: Path, lst: Path, prefixes: dict[str, Path]) -> dict:
    from PIL import Image

    from recforge.format import recordio

    names = {int(line.split("\t")[0]): line.rstrip("\n").split("\t")[-1]
             for line in lst.read_text().splitlines()}
    recs = {tool: [recordio.unpack_image_record(p)
                   for _, p in recordio.iter_records(f"{prefix}.rec")]
            for tool, prefix in prefixes.items()}
    a, b = recs["im2rec"], recs["recforge"]
    same = ([h for h, _ in a] == [h for h, _ in b])
    scores = {"im2rec_vs_ref": [], "recforge_vs_ref": []}
    mse_between, identical = [], 0
    sizes_equal = True
    for (ha, ia), (_, ib) in zip(a, b, strict=True):
        x = cv2.imdecode(np.frombuffer(ia, np.uint8), cv2.IMREAD_COLOR)
        y = cv2.imdecode(np.frombuffer(ib, np.uint8), cv2.IMREAD_COLOR)
        sizes_equal &= x.shape == y.shape
        src = cv2.imread(str(root / names[ha.id]), cv2.IMREAD_COLOR)
        ref = Image.fromarray(src[..., ::-1]).resize((x.shape[1], x.shape[0]), Image.LANCZOS)
        ref = np.asarray(ref)[..., ::-1]
        scores["im2rec_vs_ref"].append(psnr(x, ref))
        scores["recforge_vs_ref"].append(psnr(y, ref))
        if x.shape == y.shape:
            mse_between.append(np.mean((x.astype(np.float64) - y) ** 2))
            identical += ia == ib
    # vs the reference: mean of per-image PSNR. Between the tools many records can be
    # identical (infinite PSNR), so that one is the PSNR of the pooled MSE.
    pooled = float(np.mean(mse_between)) if mse_between else 0.0
    return {"records": len(a), "same_headers_and_order": same, "same_sizes": sizes_equal,
            **{k: round(float(np.mean(v)), 2) for k, v in scores.items()},
            "recforge_vs_im2rec": round(10 * math.log10(255.0 ** 2 / pooled), 2) if pooled
            else 99.0, "identical_records": int(identical)}


# ---------------------------------------------------------------- main


def bench_set(name: str, root: Path, work: Path, args, env: dict) -> dict:
    prefixes = {t: work / name / t / name for t in ("im2rec", "recforge")}
    empty = {t: work / name / t / "empty" for t in prefixes}
    for t in prefixes:
        shutil.rmtree(prefixes[t].parent, ignore_errors=True)
        prefixes[t].parent.mkdir(parents=True)
        n = write_lst(Path(f"{prefixes[t]}.lst"), root)
        Path(f"{empty[t]}.lst").write_text("")
    opts = ["--resize", str(args.resize), "--quality", str(args.quality),
            "--num-thread", str(args.num_thread), *args.extra]
    startup = {t: min(run_tree(c, env)[0] for _ in range(2))
               for t, c in commands(empty, root, opts).items()}
    for t in prefixes:
        for ext in (".rec", ".idx"):
            Path(f"{empty[t]}{ext}").unlink(missing_ok=True)
    runs: dict[str, list] = {t: [] for t in prefixes}
    cmds = commands(prefixes, root, opts)
    for _ in range(args.repeat):
        for tool in ("im2rec", "recforge"):
            wall, pss, _ = run_tree(cmds[tool], env)
            runs[tool].append((wall, pss))
            print(f"  {name:<6} {tool:<9} {wall:7.2f} s  {n / wall:6.1f} img/s  "
                  f"peak PSS {pss:6.0f} MiB", flush=True)
    result = {"set": name, "images": n, "options": opts, "startup_s": startup}
    for tool, rs in runs.items():
        best = min(w for w, _ in rs)
        result[tool] = {"best_wall_s": round(best, 3), "all_wall_s": [round(w, 3) for w, _ in rs],
                        "img_per_s": round(n / best, 1),
                        "img_per_s_excl_startup": round(n / max(best - startup[tool], 1e-9), 1),
                        "peak_pss_mib": round(max(p for _, p in rs))}
    result["ratio"] = round(result["recforge"]["img_per_s"] / result["im2rec"]["img_per_s"], 2)
    result["ratio_excl_startup"] = round(result["recforge"]["img_per_s_excl_startup"]
                                         / result["im2rec"]["img_per_s_excl_startup"], 2)
    result["quality"] = quality(root, Path(f"{prefixes['im2rec']}.lst"), prefixes)
    return result


def report(results: list[dict]) -> str:
    lines = [f"{'set':<7}{'images':>7}{'im2rec img/s':>14}{'recforge img/s':>16}{'ratio':>7}"
             f"{'(excl. start-up)':>18}{'peak PSS MiB':>16}{'PSNR vs ref':>16}"
             f"{'rf vs im2rec':>14}{'identical':>12}"]
    for r in results:
        q = r["quality"]
        lines.append(
            f"{r['set']:<7}{r['images']:>7}{r['im2rec']['img_per_s']:>14}"
            f"{r['recforge']['img_per_s']:>16}{r['ratio']:>6}x"
            f"{r['ratio_excl_startup']:>17}x"
            f"{r['im2rec']['peak_pss_mib']:>8}/{r['recforge']['peak_pss_mib']:<7}"
            f"{q['im2rec_vs_ref']:>8}/{q['recforge_vs_ref']:<7}{q['recforge_vs_im2rec']:>14}"
            f"{q['identical_records']:>6}/{q['records']}"
            + ("" if q["same_headers_and_order"] and q["same_sizes"] else "  MISMATCH"))
    lines.append("(peak PSS and PSNR vs ref: im2rec/recforge; start-up: "
                 + ", ".join(f"{r['set']} {r['startup_s']['im2rec']:.2f}/"
                             f"{r['startup_s']['recforge']:.2f} s" for r in results) + ")")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sets, one repeat (~30 s)")
    p.add_argument("--sets", default="mixed,wide", help="comma list of: mixed, wide")
    p.add_argument("--data", type=Path, help="pack this folder instead of generated sets")
    p.add_argument("--count", type=int, help="images per generated set")
    p.add_argument("--repeat", type=int, help="runs per tool (best counts); default 2, quick 1")
    p.add_argument("--num-thread", type=int, default=len(os.sched_getaffinity(0)),
                   help="worker processes for both tools (default: the cores)")
    p.add_argument("--resize", type=int, default=256)
    p.add_argument("--quality", type=int, default=95)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/recforge-bench"))
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("extra", nargs="*", help="more options for both tools (after --)")
    args = p.parse_args(argv)
    args.repeat = args.repeat or (1 if args.quick else 2)
    env = {**os.environ, "PYTHONPATH": str(REPO / "include")}
    sets = [("data", args.data)] if args.data else [
        (s, args.workdir / "data" / s) for s in args.sets.split(",")]
    print(f"bench_pack: {args.num_thread} worker(s) each, --resize {args.resize} --quality "
          f"{args.quality}, {args.repeat} run(s) per tool, {os.cpu_count()} CPUs visible",
          flush=True)
    results = []
    for name, root in sets:
        if not args.data:
            count = args.count or (QUICK_COUNTS if args.quick else COUNTS)[name]
            t0 = time.perf_counter()
            generate(root, name, count)
            size = sum(f.stat().st_size for f in root.glob("*.jpg"))
            print(f"  {name}: {count} images, {size / 1e6:.1f} MB "
                  f"(ready in {time.perf_counter() - t0:.1f} s)", flush=True)
        results.append(bench_set(name, root, args.workdir / "runs", args, env))
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
