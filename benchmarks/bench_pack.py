"""MXNet's ``tools/im2rec.py`` vs ``recforge im2rec``: same ``.lst``, options and cores.

Generates realistic photo-like JPEGs from the photos scikit-image ships (no download):
a random crop of a real photo scaled to the target size, with a real texture (grass,
gravel, brick) blended in at native resolution and mild sensor noise, so the files have
the detail and JPEG entropy of camera photos rather than of smooth upscales. Sets:

* ``photos``: arbitrary sizes drawn at random, as cameras, crops and web images come
  (none aligned to 8 on purpose): half ImageNet-sized (each side 300-520 px), half
  1.0-1.6 MP (aspect 1.0-1.8, landscape or portrait); 1,000 images;
* ``mixed``: the older fixed sizes, half ImageNet-sized (500x375 ... 640x480), half
  1-2 MP (1280x960 ... 1600x1200);
* ``wide``: 2048x1024.

``NAME:N`` packs the first N images of a set (``photos:600``, ``wide:80``: the sets of the
whole-command targets). Or ``--data DIR`` packs your own folder.

Each repeat runs, one after the other on the same cores: MXNet's ``im2rec.py`` (from the
installed mxnet), ``python -m recforge.cli im2rec``, and a **bare loop** (a fork pool of
``--num-thread`` workers that read each file, ``cv2.imdecode`` it at the reduced scale
recforge would use, ``cv2.resize`` bilinear to im2rec's size and ``cv2.imencode`` it:
the practical limit, no framing, no checks, nothing written). Medians of the repeats.

* **steady img/s**: images per second while the output grows from 10 % to 90 % of its
  final size (the output file's size is polled every 5 ms; images = N x the bytes
  written in that interval / all bytes): interpreter start-up, imports, pool start, the
  pipeline's fill and drain are excluded for both tools alike. For the bare loop the
  same 10-90 % window over its results, in a pool already warm.
* **whole command**: wall time as a user times it, and the ratio im2rec / recforge.
* **peak PSS**: the largest sum of PSS over the process tree, sampled every 50 ms.
* **quality**: every record of both outputs (last repeat) is decoded and compared with
  an anti-aliased reference (full decode + Pillow Lanczos to the same size; and full
  decode + float ``INTER_AREA``) and with each other (PSNR, dB).

    PYTHONPATH=include python benchmarks/bench_pack.py --repeat 3   # ~5-8 min on 2 cores
    PYTHONPATH=include python benchmarks/bench_pack.py --quick      # ~1 min
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[1]
# MXNet's own tools/im2rec.py runs where MXNet lives: the MXNet environment
MX_PYTHON = os.environ.get("RECFORGE_MXNET_PYTHON") or str(REPO / ".venv-mxnet" / "bin" / "python")
MX_IM2REC = subprocess.run(
    [MX_PYTHON, "-c", "import importlib.util, os; print(os.path.join(importlib.util.find_spec("
     "'mxnet').submodule_search_locations[0], 'tools', 'im2rec.py'))"],
    capture_output=True, text=True, check=True).stdout.strip()
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "retina",
          "immunohistochemistry", "colorwheel", "cat")
TEXTURES = ("grass", "gravel", "brick")
SIZES = {
    "mixed": [(500, 375), (500, 333), (375, 500), (333, 500), (640, 480), (500, 500),
              (1280, 960), (1600, 1200), (1200, 1600), (1500, 1000), (1440, 1080), (1200, 900)],
    "wide": [(2048, 1024)],
}
COUNTS = {"photos": 1000, "mixed": 480, "wide": 240}
QUICK_COUNTS = {"photos": 200, "mixed": 96, "wide": 48}
DEFAULT_SETS = "photos,wide,photos:600,wide:80"
QUICK_SETS = "photos,wide,wide:48"


def photo_size(kind: str, i: int, rng: np.random.Generator) -> tuple[int, int]:
    """(w, h) of image ``i``: fixed lists for mixed/wide, random sizes for photos."""
    if kind != "photos":
        return SIZES[kind][i % len(SIZES[kind])]
    if i % 2 == 0:  # ImageNet-sized
        return int(rng.integers(300, 521)), int(rng.integers(300, 521))
    pixels, aspect = rng.uniform(1.0e6, 1.6e6), rng.uniform(1.0, 1.8)
    long, short = int(round(math.sqrt(pixels * aspect))), int(round(math.sqrt(pixels / aspect)))
    return (long, short) if rng.random() < 0.7 else (short, long)


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
    for i in range(count):
        w, h = photo_size(kind, i, rng)
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


def image_names(root: Path, limit: int | None = None) -> list[str]:
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                   if p.suffix.lower() in (".jpg", ".jpeg", ".png") and p.is_file())
    return names[:limit] if limit else names


def write_lst(path: Path, root: Path, limit: int | None = None) -> int:
    names = image_names(root, limit)
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


def run_tree(cmd: list[str], env: dict, outputs: list[Path] = ()) -> dict:
    """Run ``cmd``; wall seconds, peak PSS of the whole process tree (MiB), and the
    steady-state window: when the first and the last bytes reached the output file (the
    first existing of ``outputs``, polled every 5 ms) and the bytes written in it."""
    peak = 0
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    done = threading.Event()
    growth: list[tuple[float, int]] = []  # (time, size) at every change of size

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, sum(_pss_kib(p) for p in _tree(proc.pid)))
            done.wait(0.05)

    def poll():
        last = 0
        while not done.is_set():
            for path in outputs:
                try:
                    size = os.stat(path).st_size
                except OSError:
                    continue
                if size != last:
                    growth.append((time.perf_counter(), size))
                    last = size
                break
            done.wait(0.005)

    threads = [threading.Thread(target=f, daemon=True) for f in (sample, poll)]
    for t in threads:
        t.start()
    output = proc.communicate()[0]
    wall = time.perf_counter() - started
    done.set()
    for t in threads:
        t.join()
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{cmd[:3]} exited {proc.returncode}:\n{output[-3000:]}")
    out = {"wall": wall, "pss": peak / 1024, "tail": output[-500:]}
    if growth:
        out["window"] = steady_window(growth)
    return out


def steady_window(marks: list[tuple[float, float]]) -> tuple[float, float]:
    """(seconds, fraction of the work) between 10 % and 90 % of the output: the pipeline
    is full there (as many items in flight as it holds), so the output rate is the
    processing rate; the fill before and the drain after are left out, for every tool."""
    final = marks[-1][1]
    ta, sa = next((t, s) for t, s in marks if s >= 0.1 * final)
    tb, sb = next((t, s) for t, s in marks if s >= 0.9 * final)
    return tb - ta, (sb - sa) / final


# ---------------------------------------------------------------- the bare loop


_BARE: dict = {}


def _bare_one(name: str) -> int:
    """decode (reduced where recforge would) -> bilinear resize -> encode, nothing else."""
    from recforge.imaging import PackOptions, _reduced_flag, choose_scale, output_size, probe_size

    with open(os.path.join(_BARE["root"], name), "rb") as f:
        raw = f.read()
    data, size = np.frombuffer(raw, np.uint8), probe_size(raw)
    opts = PackOptions(resize=_BARE["resize"], upscale=True, rounding="floor")
    scale = choose_scale(size[1], size[0], opts) if size else 1
    img = cv2.imdecode(data, _reduced_flag(scale, 1))
    oh, ow = output_size(size[1], size[0], opts) if size else img.shape[:2]
    img = cv2.resize(img, (ow, oh), interpolation=cv2.INTER_LINEAR)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, _BARE["quality"]])
    return len(buf)


def bare_loop(root: Path, names: list[str], args) -> dict:
    """The practical limit: the same images, cores and sizes, in a warm fork pool."""
    import multiprocessing

    _BARE.update(root=str(root), resize=args.resize, quality=args.quality)
    cv2.setNumThreads(1)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.num_thread) as pool:
        pool.map(_bare_one, names[:args.num_thread * 2], chunksize=1)  # warm: imports
        t0 = time.perf_counter()
        marks = [(time.perf_counter(), i + 1)
                 for i, _ in enumerate(pool.imap(_bare_one, names, chunksize=8))]
        elapsed = time.perf_counter() - t0
    return {"wall": elapsed, "window": steady_window(marks), "pss": 0.0}


def commands(prefix: Path, root: Path, opts: list[str]) -> dict[str, list[str]]:
    return {
        "im2rec": [MX_PYTHON, MX_IM2REC, str(prefix["im2rec"]), str(root), *opts],
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
    scores = {"im2rec_vs_ref": [], "recforge_vs_ref": [], "im2rec_vs_area": [],
              "recforge_vs_area": []}
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
        area = cv2.resize(src.astype(np.float32), (x.shape[1], x.shape[0]),
                          interpolation=cv2.INTER_AREA)
        scores["im2rec_vs_area"].append(psnr(x, area))
        scores["recforge_vs_area"].append(psnr(y, area))
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


def bench_set(name: str, root: Path, limit: int | None, work: Path, args, env: dict) -> dict:
    label = f"{name}:{limit}" if limit else name
    prefixes = {t: work / label.replace(":", "_") / t / name for t in ("im2rec", "recforge")}
    for t in prefixes:
        shutil.rmtree(prefixes[t].parent, ignore_errors=True)
        prefixes[t].parent.mkdir(parents=True)
        n = write_lst(Path(f"{prefixes[t]}.lst"), root, limit)
    names = image_names(root, limit)
    opts = ["--resize", str(args.resize), "--quality", str(args.quality),
            "--num-thread", str(args.num_thread), *args.extra]
    cmds = commands(prefixes, root, opts)
    outputs = {t: [Path(f"{p}.rec.partial"), Path(f"{p}.rec")] for t, p in prefixes.items()}
    runs: dict[str, list] = {t: [] for t in ("im2rec", "recforge", "bare")}
    for _ in range(args.repeat):
        for tool in runs:
            if tool == "bare":
                r = bare_loop(root, names, args)
            else:
                for ext in (".rec", ".idx"):
                    Path(f"{prefixes[tool]}{ext}").unlink(missing_ok=True)
                r = run_tree(cmds[tool], env, outputs[tool])
            secs, frac = r.get("window", (float("nan"), 0.0))
            r["steady"] = n * frac / secs if secs > 0 else float("nan")
            runs[tool].append(r)
            print(f"  {label:<11} {tool:<9} whole {r['wall']:7.2f} s  steady "
                  f"{r['steady']:6.1f} img/s  peak PSS {r['pss']:6.0f} MiB", flush=True)
    med = statistics.median
    result = {"set": label, "images": n, "options": opts, "repeat": args.repeat}
    for tool, rs in runs.items():
        result[tool] = {"wall_s": round(med(r["wall"] for r in rs), 3),
                        "all_wall_s": [round(r["wall"], 3) for r in rs],
                        "steady_img_per_s": round(med(r["steady"] for r in rs), 1),
                        "all_steady": [round(r["steady"], 1) for r in rs],
                        "peak_pss_mib": round(max(r["pss"] for r in rs))}
    im, rf, bare = result["im2rec"], result["recforge"], result["bare"]
    result["whole_ratio"] = round(im["wall_s"] / rf["wall_s"], 2)
    result["steady_ratio"] = round(rf["steady_img_per_s"] / im["steady_img_per_s"], 2)
    result["steady_vs_bare"] = round(rf["steady_img_per_s"] / bare["steady_img_per_s"], 3)
    result["bare_vs_im2rec"] = round(bare["steady_img_per_s"] / im["steady_img_per_s"], 2)
    if not args.no_quality:
        result["quality"] = quality(root, Path(f"{prefixes['im2rec']}.lst"), prefixes)
    return result


def report(results: list[dict]) -> str:
    lines = [f"{'set':<12}{'images':>7}{'whole s im2rec/rf':>19}{'ratio':>7}"
             f"{'steady img/s im2rec/rf/bare':>29}{'rf/im2rec':>10}{'rf/bare':>8}"
             f"{'peak PSS MiB':>14}{'PSNR Lanczos':>14}{'PSNR area':>13}"]
    for r in results:
        q = r.get("quality")
        im, rf, bare = r["im2rec"], r["recforge"], r["bare"]
        line = (f"{r['set']:<12}{r['images']:>7}{im['wall_s']:>10.2f}/{rf['wall_s']:<8.2f}"
                f"{r['whole_ratio']:>6}x"
                f"{im['steady_img_per_s']:>13}/{rf['steady_img_per_s']}/"
                f"{bare['steady_img_per_s']:<8}{r['steady_ratio']:>9}x"
                f"{100 * r['steady_vs_bare']:>7.1f}%"
                f"{im['peak_pss_mib']:>7}/{rf['peak_pss_mib']:<6}")
        if q:
            line += (f"{q['im2rec_vs_ref']:>7}/{q['recforge_vs_ref']:<6}"
                     f"{q['im2rec_vs_area']:>6}/{q['recforge_vs_area']:<6}"
                     + ("" if q["same_headers_and_order"] and q["same_sizes"]
                        else "  MISMATCH"))
        lines.append(line)
    lines.append(f"(medians of {results[0]['repeat']} runs; steady: 10-90 % of the output "
                 "written; PSNR: im2rec/recforge vs full decode + Lanczos / float area, dB)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sets, one repeat")
    p.add_argument("--sets", help="comma list of NAME or NAME:N (first N images); NAME in "
                   f"photos, mixed, wide; default {DEFAULT_SETS} ({QUICK_SETS} with --quick)")
    p.add_argument("--data", type=Path, help="pack this folder instead of generated sets")
    p.add_argument("--count", type=int, help="images generated per set")
    p.add_argument("--repeat", type=int, help="runs per tool (medians); default 3, quick 1")
    p.add_argument("--num-thread", type=int, default=len(os.sched_getaffinity(0)),
                   help="worker processes for both tools (default: the cores)")
    p.add_argument("--resize", type=int, default=256)
    p.add_argument("--quality", type=int, default=95)
    p.add_argument("--no-quality", action="store_true", help="skip the PSNR pass")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/recforge-bench"))
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("extra", nargs="*", help="more options for both tools (after --)")
    args = p.parse_args(argv)
    args.repeat = args.repeat or (1 if args.quick else 3)
    env = {**os.environ, "PYTHONPATH": str(REPO / "include")}
    if args.data:
        sets = [("data", args.data, None)]
    else:
        sets = []
        for spec in (args.sets or (QUICK_SETS if args.quick else DEFAULT_SETS)).split(","):
            name, _, limit = spec.partition(":")
            sets.append((name, args.workdir / "data" / name, int(limit) if limit else None))
    print(f"bench_pack: {args.num_thread} worker(s) each, --resize {args.resize} --quality "
          f"{args.quality}, {args.repeat} run(s) per tool, {os.cpu_count()} CPUs visible",
          flush=True)
    results = []
    for name, root, limit in sets:
        if not args.data:
            count = args.count or (QUICK_COUNTS if args.quick else COUNTS)[name]
            count = max(count, limit or 0)
            t0 = time.perf_counter()
            generate(root, name, count)
            size = sum(f.stat().st_size for f in root.glob("*.jpg"))
            print(f"  {name}: {count} images, {size / 1e6:.1f} MB "
                  f"(ready in {time.perf_counter() - t0:.1f} s)", flush=True)
        results.append(bench_set(name, root, limit, args.workdir / "runs", args, env))
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
