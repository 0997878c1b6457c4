"""The whole ``recforge build`` vs MXNet's ``tools/im2rec.py``, side by side in one run.

On N photo-like JPEGs (``bench_pack.generate(..., "photos", N)``: half ImageNet-sized, half
1.0-1.6 MP) in a folder per class, each round runs, taking turns on the same cores:

* (a) MXNet's ``tools/im2rec.py`` whole command (``--resize 256 --quality 95
  --num-thread W``) from a ``.lst`` this script writes;
* (b) ``recforge im2rec`` whole command, same ``.lst`` and options;
* (c) ``recforge build`` with a local source folder and a local publish root;
* (d) ``recforge build`` through a local S3 server: Ceph RGW (``tests.common.rgw``) when
  it starts here, else moto (``recforge dev-s3``); the report says which.

Every build is a fresh dataset (a new publish root and staging), so the shard cache never
makes it free. Reported: medians of ``--repeat`` rounds of each whole command, its ratio to
im2rec.py, its CPU seconds and the S3 server's beside it (``cpu``: on these cores no
schedule goes below their sum over the core count, the "floor" column), each build's
per-stage seconds (``recforge build --json``'s ``seconds``), the
pack stage's rate (images / pack seconds) next to ``recforge im2rec``'s, the largest pack
task's peak memory and the S3 requests per image. ``--shard-size 5000`` packs all the photos
in one task, for the memory of a 5,000-image shard.

``--profile`` instead runs the pack stage's own loop (``stages.pack.pack_items``) on the
photos from a local folder under cProfile and prints ms per image per step.

    PYTHONPATH=include .venv/bin/python benchmarks/bench_build.py              # 5,000, 3 rounds
    PYTHONPATH=include .venv/bin/python benchmarks/bench_build.py --quick      # 300, 1 round
    PYTHONPATH=include .venv/bin/python benchmarks/bench_build.py --profile --count 1000
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_pack  # noqa: E402 - the generator and MXNet's im2rec.py live there
import cpu  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CLASSES = ("cat", "dog", "fox", "owl")
OPTS = ["--resize", "256", "--quality", "95"]


def dataset(root: Path, count: int) -> Path:
    """The photos in a folder per class (hard links into the generated set)."""
    flat = root / f"photos-{count}"
    bench_pack.generate(flat, "photos", count)
    tree = root / f"classes-{count}"
    done = root / f"classes-{count}.complete"  # outside the tree: not a source object
    if not done.exists():
        shutil.rmtree(tree, ignore_errors=True)
        for i, name in enumerate(bench_pack.image_names(flat)):
            d = tree / CLASSES[i % len(CLASSES)]
            d.mkdir(parents=True, exist_ok=True)
            os.link(flat / name, d / name)
        done.touch()
    return tree


def spec_doc(source: str, publish: str, shard_size: int) -> dict:
    return {
        "name": "benchbuild", "schedule": None,
        "source": {"uri": source}, "publish": {"uri": publish},
        "splits": {"val_ratio": 0.1, "seed": 7},
        "pack": {"resize": 256, "quality": 95, "shard_size": shard_size},
        "bench": {"options": {"batch_size": 32, "data_shape": [3, 224, 224],
                              "measure_batches": 10, "thread_grid": []},
                  "floors": {"cpu": {"min_images_per_sec": 1}}},
        "quality": {"severity": {"near_duplicates": "warn"}},
    }


def timed(cmd: list[str], env: dict) -> tuple[cpu.Spent, str]:
    out, spent = cpu.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{cmd[:4]} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return spent, out.stdout


def build(spec: Path, env: dict, workers: int, source: str, publish: str
          ) -> tuple[cpu.Spent, dict]:
    spent, out = timed([sys.executable, "-m", "recforge.cli", "build", str(spec), "--json",
                        "--progress", "lines", "--workers", str(workers), "--source", source,
                        "--publish", publish], env)
    return spent, json.loads(out[out.index("\n{") + 1:])


def s3_server(work: Path) -> tuple[str, dict, object]:
    """A throwaway local Ceph RGW (``tests.common.rgw``) with the bucket ``bench``."""
    state = str(work / "rgw")
    out = subprocess.run([sys.executable, "-m", "tests.common.rgw", "start", state], cwd=REPO,
                         check=True, capture_output=True, text=True, timeout=300).stdout
    env = dict(line.split("=", 1) for line in out.splitlines()
               if "=" in line and not line.startswith("#"))

    def stop() -> None:
        subprocess.run([sys.executable, "-m", "tests.common.rgw", "stop", state], cwd=REPO,
                       capture_output=True)

    return "Ceph RGW", env, stop


def upload_tree(tree: Path, uri: str, env: dict) -> None:
    code = ("import sys, boto3; from pathlib import Path; from recforge import storage\n"
            "boto3.client('s3').create_bucket(Bucket='bench')\n"
            "root = Path(sys.argv[1])\n"
            "for p in sorted(root.rglob('*.jpg')):\n"
            "    storage.put_bytes(storage.join(sys.argv[2], p.relative_to(root).as_posix()),"
            " p.read_bytes())\n")
    subprocess.run([sys.executable, "-c", code, str(tree), uri], env=env, check=True)


def profile(tree: Path, count: int) -> None:
    """cProfile of the pack stage's loop over a local source: ms per image per step."""
    from recforge.imaging import PackOptions
    from recforge.stages.pack import pack_items

    rows = [{"source_key": p.relative_to(tree).as_posix(), "record_key": i, "label": 0,
             "name": p.name, "split": "train", "etag": "x", "class_name": "c"}
            for i, p in enumerate(sorted(tree.rglob("*.jpg")))]
    opts = PackOptions(resize=256, quality=95)
    with tempfile.TemporaryDirectory() as d:
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.runcall(pack_items, rows, str(tree), opts, Path(d))
        wall = time.perf_counter() - t0
    import resource
    stats = pstats.Stats(prof)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak:.0f} MiB")
    print(f"pack_items over {len(rows)} photos: {wall:.1f} s, {1000 * wall / len(rows):.2f} "
          "ms/image (one process)")
    print(f"{'step':<48}{'ms/image (cumulative)':>22}")
    for (file, _, fn), (_, _, _, cum, _) in sorted(stats.stats.items(),
                                                  key=lambda kv: -kv[1][3])[:25]:
        print(f"{Path(file).name + ':' + fn:<48}{1000 * cum / len(rows):>22.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shard-size", type=int, default=500,
                    help="images per pack task (the spec default; large ones idle a worker)")
    ap.add_argument("--quick", action="store_true", help="300 photos, 1 round")
    ap.add_argument("--no-s3", action="store_true", help="skip the build through local S3")
    ap.add_argument("--profile", action="store_true", help="profile pack_items, then exit")
    ap.add_argument("--data-root", default=str(Path(tempfile.gettempdir()) / "recforge-bench"))
    args = ap.parse_args(argv)
    if args.quick:
        args.count, args.repeat = 300, 1
    tree = dataset(Path(args.data_root), args.count)
    if args.profile:
        profile(tree, args.count)
        return 0
    env = {"RECFORGE_MXNET_PYTHON": bench_pack.MX_PYTHON, **os.environ,
           "PYTHONPATH": str(REPO / "include")}
    runs: dict[str, list] = {}
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        work = Path(tmp)
        lst = work / "photos.lst"
        names = [p.relative_to(tree).as_posix() for p in sorted(tree.rglob("*.jpg"))]
        lst.write_text("".join(f"{i}\t{CLASSES.index(n.split('/')[0])}\t{n}\n"
                               for i, n in enumerate(names)))
        s3 = None
        if not args.no_s3:
            kind, s3env, stop = s3_server(work)
            s3 = (kind, {**env, **s3env}, stop)
            upload_tree(tree, "s3://bench/raw", s3[1])
        try:
            for r in range(args.repeat):
                out = work / f"r{r}"
                out.mkdir()
                spec = out / "bench.yaml"
                spec.write_text(yaml.safe_dump(spec_doc(str(tree), str(out / "pub"),
                                                        args.shard_size)))
                for prefix in ("im2rec", "recforge"):
                    shutil.copy(lst, out / f"{prefix}.lst")
                th = ["--num-thread", str(args.workers)]
                runs.setdefault("a im2rec.py", []).append((timed(
                    [bench_pack.MX_PYTHON, bench_pack.MX_IM2REC, str(out / "im2rec"),
                     str(tree) + "/", *OPTS, *th], env)[0], None))
                runs.setdefault("b recforge im2rec", []).append((timed(
                    [sys.executable, "-m", "recforge.cli", "im2rec", str(out / "recforge"),
                     str(tree), *OPTS, *th], env)[0], None))
                runs.setdefault("c build local", []).append(build(
                    spec, env, args.workers, str(tree), str(out / "pub")))
                if s3:
                    runs.setdefault(f"d build {s3[0]}", []).append(build(
                        spec, s3[1], args.workers, "s3://bench/raw", f"s3://bench/pub{r}")
                    )
        finally:
            if s3:
                s3[2]()
    base = statistics.median(w.wall for w, _ in runs["a im2rec.py"])
    cores = os.cpu_count() or 1
    print(f"{args.count} photos, --resize 256 --quality 95, {args.workers} workers, "
          f"median of {args.repeat} round(s), {cores} cores")
    print(f"{'command':<22}{'wall s':>8}{'x im2rec.py':>13}{'CPU s':>8}{'server CPU s':>14}"
          f"{'floor x':>9}  per-stage s / pack img/s")
    for name, got in runs.items():
        wall = statistics.median(w.wall for w, _ in got)
        own = statistics.median(w.cpu for w, _ in got)
        others = [w.others for w, _ in got if w.others is not None]
        # beside a local build or im2rec.py the rest of the machine is noise (in the floor)
        server = (statistics.median(others) if others and name.startswith("d build")
                  else None)
        floor = statistics.median(w.floor(cores) for w, _ in got) / base
        line = (f"{name:<22}{wall:>8.1f}{wall / base:>13.2f}{own:>8.1f}"
                f"{'' if server is None else f'{server:.1f}':>14}{floor:>9.2f}")
        if got[0][1] is not None:
            secs = {k: statistics.median(g[1]["seconds"].get(k, 0) for g in got)
                    for k in got[0][1]["seconds"]}
            pack = secs.get("pack") or 0
            line += "  " + " ".join(f"{k}={v:.1f}" for k, v in secs.items())
            if pack:
                line += f"  pack {args.count / pack:.0f} img/s"
            shards = [s for g in got for s in g[1]["pack"]]
            peaks = [s["peak_rss_mb"] for s in shards if s.get("peak_rss_mb")]
            requests = sum(n for s in shards for n in s.get("s3_requests", {}).values())
            if peaks:
                line += f"; peak per pack task {max(peaks):.0f} MiB"
            if requests:
                line += f"; {requests / (args.count * len(got)):.3f} S3 requests per image"
        else:
            line += f"  {args.count / wall:.0f} img/s whole command"
        print(line)
    print("CPU s: the command's processes (user + system); server CPU s: the rest of the "
          "machine meanwhile (the local S3 server); floor x: (both) / cores, over "
          "im2rec.py's wall time: no schedule on these cores goes below it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
