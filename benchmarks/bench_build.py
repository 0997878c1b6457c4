"""The whole ``recforge build`` vs MXNet's ``tools/im2rec.py``, side by side in one run.

On N photo-like JPEGs (``bench_pack.generate(..., "photos", N)``: half ImageNet-sized, half
1.0-1.6 MP) in a folder per class, each round runs, taking turns on the same cores:

* (a) MXNet's ``tools/im2rec.py`` whole command (``--resize 256 --quality 95
  --num-thread W``) from a ``.lst`` this script writes;
* (b) ``recforge im2rec`` whole command, same ``.lst`` and options;
* (c) ``recforge build`` with a local source folder and a local publish root;
* (d) ``recforge build`` through a local S3 server: Ceph RGW (``tests.common.rgw``) when
  it starts here, else moto (``recforge dev-s3``), or the one ``--s3`` names; the report
  says which.

Every build is a fresh dataset (a new publish root and staging), so the shard cache never
makes it free. Each command's output is removed once it is measured (through S3: from the
server), so its writeback never runs beside the next command. Reported: medians of
``--repeat`` rounds of each whole command, its ratio to im2rec.py, its CPU seconds and the
S3 server's beside it (``cpu``: on these cores no schedule goes below their sum over the
core count, the "floor" column), each build's per-stage seconds (``recforge build
--json``'s ``seconds``), the pack stage's rate (images / pack seconds) next to ``recforge
im2rec``'s, the largest pack task's peak memory and the S3 requests per image.
``--shard-size 5000`` packs all the photos in one task, for the memory of a 5,000-image
shard.

``--sizes N1,N2`` measures what grows with the data apart from fixed start-up: each round
runs (a), (c) and (d) (and (b) with ``--with-recforge-im2rec``) at N1 photos, then at N2 (the
N1 set is the first N1 of the N2 set), taking turns on the same cores. The builds' loader
window (``bench.max_bytes``) and re-read sample (``quality.decode_sample``) are set below
the smaller size (``CAPS``), as an ImageNet-sized night is past the defaults, so they count
as fixed (``--full-caps``: the defaults, which grow between 2,000 and 10,000 photos). Per
command it reports the CPU seconds at each size (medians of the rounds), the **marginal CPU
per image** ``(CPU(N2) - CPU(N1)) / (N2 - N1)``, the **fixed CPU** ``CPU(N1) - N1 x
marginal``, each marginal over im2rec.py's and, through S3, the server's processes' CPU
apart (read from ``/proc/<pid>/stat`` of the gateway's daemons or moto's process, so other
work on a shared machine stays out of it): a Markdown table, then a JSON document
(``--json-out`` writes it to a file too). A command's CPU is its whole process tree
(``RUSAGE_CHILDREN``: the pack workers, the MXNet process of the loader benchmark,
im2rec.py's workers, all waited for).

``--profile`` instead runs the pack stage's own loop (``stages.pack.pack_items``) on the
photos from a local folder under cProfile and prints ms per image per step.

    PYTHONPATH=include .venv/bin/python benchmarks/bench_build.py              # 5,000, 3 rounds
    PYTHONPATH=include .venv/bin/python benchmarks/bench_build.py --quick      # 300, 1 round
    PYTHONPATH=include .venv/bin/python benchmarks/bench_build.py --sizes 2000,10000
    PYTHONPATH=include .venv/bin/python benchmarks/bench_build.py --sizes 100,300 --repeat 1
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
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_pack  # noqa: E402 - the generator and MXNet's im2rec.py live there
import cpu  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CLASSES = ("cat", "dog", "fox", "owl")
OPTS = ["--resize", "256", "--quality", "95"]


def dataset(root: Path, count: int, pool: int | None = None) -> Path:
    """The photos in a folder per class (hard links into the generated set): the first
    ``count`` of ``pool`` (default ``count``) generated ones, so a smaller set is a prefix
    of a larger one (the generator draws image after image from one seed)."""
    pool = max(pool or count, count)
    flat = root / f"photos-{pool}"
    bench_pack.generate(flat, "photos", pool)
    tree = root / (f"classes-{count}" if pool == count else f"classes-{count}-of-{pool}")
    done = tree.with_name(tree.name + ".complete")  # outside the tree: not a source object
    if not done.exists():
        shutil.rmtree(tree, ignore_errors=True)
        for i, name in enumerate(bench_pack.image_names(flat)[:count]):
            d = tree / CLASSES[i % len(CLASSES)]
            d.mkdir(parents=True, exist_ok=True)
            os.link(flat / name, d / name)
        done.touch()
    return tree


def write_lst(tree: Path, path: Path) -> None:
    """The ``.lst`` both im2rec commands read: index, class, path under ``tree``."""
    names = [p.relative_to(tree).as_posix() for p in sorted(tree.rglob("*.jpg"))]
    path.write_text("".join(f"{i}\t{CLASSES.index(n.split('/')[0])}\t{n}\n"
                            for i, n in enumerate(names)))


# --sizes: the loader's window and the checklist's re-read sample, set where both sizes are
# past them, as an ImageNet-sized night is past the defaults (1 GiB, ~27,000 of these
# photos; 1,000 records a split): then neither adds to the marginal, and their full-size
# cost is in the fixed CPU of a real night, not in the per-image one here
CAPS = {"max_bytes": 16 << 20, "decode_sample": 100}


def spec_doc(source: str, publish: str, shard_size: int, capped: bool = False) -> dict:
    doc = {
        "name": "benchbuild", "schedule": None,
        "source": {"uri": source}, "publish": {"uri": publish},
        "splits": {"val_ratio": 0.1, "seed": 7},
        "pack": {"resize": 256, "quality": 95, "shard_size": shard_size},
        "bench": {"options": {"batch_size": 32, "data_shape": [3, 224, 224],
                              "measure_batches": 10, "thread_grid": []},
                  "floors": {"cpu": {"min_images_per_sec": 1}}},
        "quality": {"severity": {"near_duplicates": "warn"}},
    }
    if capped:
        doc["bench"]["options"]["max_bytes"] = CAPS["max_bytes"]
        doc["quality"]["decode_sample"] = CAPS["decode_sample"]
    return doc


class S3Server(NamedTuple):
    """A running local S3 server: its name, the environment that points clients at it,
    how to stop it and how much CPU its processes have spent so far (``cpu.pids_cpu``)."""
    kind: str
    env: dict
    stop: Callable[[], None]
    cpu: Callable[[], float | None]


def timed(cmd: list[str], env: dict, server: S3Server | None = None
          ) -> tuple[cpu.Spent, str]:
    out, spent = cpu.run(cmd, env=env, capture_output=True, text=True,
                         server=server.cpu if server else None)
    if out.returncode:
        raise SystemExit(f"{cmd[:4]} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return spent, out.stdout


def build(spec: Path, env: dict, workers: int, source: str, publish: str,
          server: S3Server | None = None) -> tuple[cpu.Spent, dict]:
    spent, out = timed([sys.executable, "-m", "recforge.cli", "build", str(spec), "--json",
                        "--progress", "lines", "--workers", str(workers), "--source", source,
                        "--publish", publish], env, server)
    return spent, json.loads(out[out.index("\n{") + 1:])


def pid_files_cpu(files: list[Path]) -> Callable[[], float | None]:
    """The CPU seconds so far of the processes whose pid (first word) is in ``files``."""
    def spent() -> float | None:
        pids = [int(f.read_text().split()[0]) for f in files if f.exists()]
        return cpu.pids_cpu(pids)
    return spent


def rgw_server(work: Path) -> S3Server | str:
    """A throwaway local Ceph RGW (``tests.common.rgw``), or why it did not start."""
    state = work / "rgw"
    got = subprocess.run([sys.executable, "-m", "tests.common.rgw", "start", str(state)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    if got.returncode:
        return (got.stderr or got.stdout).strip()[-300:]
    env = dict(line.split("=", 1) for line in got.stdout.splitlines()
               if "=" in line and not line.startswith("#"))
    return S3Server("Ceph RGW", env, lambda: subprocess.run(
        [sys.executable, "-m", "tests.common.rgw", "stop", str(state)], cwd=REPO,
        capture_output=True), pid_files_cpu([state / "run" / f"{d}.pid" for d in
                                             ("client.rgw", "osd.0", "mon.a")]))


def moto_server(work: Path) -> S3Server:
    """moto (``recforge dev-s3``), detached: its own process, not this one's child."""
    from recforge.dev.s3server import DEV_CREDENTIALS, free_port

    state, port = work / "moto", free_port()
    base = {**os.environ, "PYTHONPATH": str(REPO / "include")}
    cli = [sys.executable, "-m", "recforge.cli", "dev-s3"]
    subprocess.run([*cli, "start", "--state-dir", str(state), "--port", str(port)], env=base,
                   check=True, capture_output=True)
    return S3Server("moto", {**DEV_CREDENTIALS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"},
                    lambda: subprocess.run([*cli, "stop", "--state-dir", str(state)], env=base,
                                           capture_output=True),
                    pid_files_cpu([state / "s3.pid"]))


def s3_server(work: Path, kind: str = "auto") -> S3Server:
    """Ceph RGW (:func:`rgw_server`) where it starts here, else moto (:func:`moto_server`);
    ``kind`` ``rgw`` or ``moto``: that one. The bucket is made by :func:`upload_tree`."""
    if kind == "moto":
        return moto_server(work)
    got = rgw_server(work)
    if kind == "rgw" and not isinstance(got, S3Server):
        raise SystemExit(f"Ceph RGW did not start: {got}")
    if isinstance(got, S3Server):
        return got
    print(f"Ceph RGW did not start ({got}); using moto", file=sys.stderr)
    return moto_server(work)


def upload_tree(tree: Path, uri: str, env: dict) -> None:
    code = ("import sys, boto3; from pathlib import Path; from recforge import storage\n"
            "s3 = boto3.client('s3')\n"
            "if 'bench' not in [b['Name'] for b in s3.list_buckets()['Buckets']]:\n"
            "    s3.create_bucket(Bucket='bench')\n"
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


def drop(out: Path, *names: str) -> None:
    """Remove a command's local output once it is measured: a round writes gigabytes, and
    left in the page cache, still dirty, their writeback would run on the cores the next
    commands are measured on, more for each command than the one before it."""
    for name in names:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def one_round(out: Path, tree: Path, lst: Path, env: dict, args, s3: S3Server | None,
              s3_source: str, s3_publish: str) -> dict[str, tuple[cpu.Spent, dict | None]]:
    """Each command once, in turn, on the photos of ``tree``: what each spent (and a
    build's ``--json``), by command name. ``out``: a fresh folder for this round."""
    out.mkdir(parents=True)
    spec = out / "bench.yaml"
    capped = bool(args.sizes) and not args.full_caps
    spec.write_text(yaml.safe_dump(spec_doc(str(tree), str(out / "pub"), args.shard_size,
                                            capped)))
    for prefix in ("im2rec", "recforge"):
        shutil.copy(lst, out / f"{prefix}.lst")
    th = ["--num-thread", str(args.workers)]
    got: dict[str, tuple[cpu.Spent, dict | None]] = {}
    got["a im2rec.py"] = (timed([bench_pack.MX_PYTHON, bench_pack.MX_IM2REC,
                                 str(out / "im2rec"), str(tree) + "/", *OPTS, *th], env)[0],
                          None)
    drop(out, "im2rec.rec", "im2rec.idx")
    if not args.sizes or args.with_recforge_im2rec:
        got["b recforge im2rec"] = (timed([sys.executable, "-m", "recforge.cli", "im2rec",
                                           str(out / "recforge"), str(tree), *OPTS, *th],
                                          env)[0], None)
        drop(out, "recforge.rec", "recforge.idx")
    got["c build local"] = build(spec, env, args.workers, str(tree), str(out / "pub"))
    drop(out, "pub")
    if s3:
        got[f"d build {s3.kind}"] = build(spec, s3.env, args.workers, s3_source, s3_publish,
                                          s3)
        drop_s3(s3_publish, s3.env)
    return got


def drop_s3(uri: str, env: dict) -> None:
    """:func:`drop` for a build through S3: its published version, cache and staging, which
    the server would otherwise keep (moto in its memory, Ceph on this machine's disk)."""
    subprocess.run([sys.executable, "-c", "import sys; from recforge import storage; "
                    "storage.delete_prefix(sys.argv[1])", uri], env=env, check=True)


def report(runs: dict[str, list], args) -> None:
    """The one-size table: medians of the rounds, each command beside im2rec.py."""
    base = statistics.median(w.wall for w, _ in runs["a im2rec.py"])
    cores = os.cpu_count() or 1
    print(f"{args.count} photos, --resize 256 --quality 95, {args.workers} workers, "
          f"median of {args.repeat} round(s), {cores} cores")
    print(f"{'command':<22}{'wall s':>8}{'x im2rec.py':>13}{'CPU s':>8}{'server CPU s':>14}"
          f"{'floor x':>9}  per-stage s / pack img/s")
    for name, got in runs.items():
        wall = statistics.median(w.wall for w, _ in got)
        own = statistics.median(w.cpu for w, _ in got)
        # the server's own processes where they are known; else the rest of the machine
        # (beside a local build or im2rec.py the rest of the machine is noise, in the floor)
        others = [w.others if w.server is None else w.server for w, _ in got
                  if w.server is not None or w.others is not None]
        server = (statistics.median(others) if others and name.startswith("d build")
                  else None)
        floor = statistics.median(w.floor(cores) for w, _ in got) / base
        line = (f"{name:<22}{wall:>8.1f}{wall / base:>13.2f}{own:>8.1f}"
                f"{'' if server is None else f'{server:.1f}':>14}{floor:>9.2f}")
        if got[0][1] is not None:
            line += build_details(got, args.count)
        else:
            line += f"  {args.count / wall:.0f} img/s whole command"
        print(line)
    print("CPU s: the command's processes (user + system); server CPU s: the local S3 "
          "server's processes meanwhile (else the rest of the machine); floor x: (CPU s + the "
          "rest of the machine's) / cores, over im2rec.py's wall time: no schedule on these "
          "cores goes below it")


def build_details(got: list, count: int) -> str:
    """A build's per-stage seconds, pack rate, largest pack task and S3 requests/image."""
    secs = {k: statistics.median(g[1]["seconds"].get(k, 0) for g in got)
            for k in got[0][1]["seconds"]}
    pack = secs.get("pack") or 0
    line = "  " + " ".join(f"{k}={v:.1f}" for k, v in secs.items())
    if pack:
        line += f"  pack {count / pack:.0f} img/s"
    shards = [s for g in got for s in g[1]["pack"]]
    peaks = [s["peak_rss_mb"] for s in shards if s.get("peak_rss_mb")]
    requests = sum(n for s in shards for n in s.get("s3_requests", {}).values())
    if peaks:
        line += f"; peak per pack task {max(peaks):.0f} MiB"
    if requests:
        line += f"; {requests / (count * len(got)):.3f} S3 requests per image"
    return line


def line_fit(n1: int, y1: float, n2: int, y2: float) -> tuple[float, float]:
    """``(per image, fixed)`` of the line through ``(n1, y1)`` and ``(n2, y2)``."""
    per = (y2 - y1) / (n2 - n1)
    return per, y1 - n1 * per


def marginal_summary(runs: dict[str, dict[int, list[cpu.Spent]]], sizes: list[int],
                     args, s3_kind: str | None) -> dict:
    """CPU at each size, marginal CPU per image and fixed CPU per command (medians of the
    rounds), each marginal over im2rec.py's; through S3 the server's apart."""
    n1, n2 = sizes

    def med(spent: list[cpu.Spent], what: str) -> float | None:
        got = [getattr(w, what) for w in spent if getattr(w, what) is not None]
        return statistics.median(got) if got else None

    commands: dict[str, dict] = {}
    for name, by_size in runs.items():
        row: dict = {}
        for what, key in (("cpu", "cpu_s"), ("wall", "wall_s"), ("server", "server_cpu_s")):
            at = {n: med(by_size[n], what) for n in sizes}
            if None in at.values():
                continue
            per, fixed = line_fit(n1, at[n1], n2, at[n2])
            prefix = key[:-2]  # cpu / wall / server_cpu
            row[key] = {str(n): round(v, 3) for n, v in at.items()}
            row[f"{prefix}_marginal_ms_per_image"] = round(1000 * per, 3)
            row[f"{prefix}_fixed_s"] = round(fixed, 3)
        if "server_cpu_marginal_ms_per_image" in row:
            row["total_cpu_marginal_ms_per_image"] = round(
                row["cpu_marginal_ms_per_image"] + row["server_cpu_marginal_ms_per_image"], 3)
        commands[name] = row
    base = commands["a im2rec.py"]["cpu_marginal_ms_per_image"]
    for row in commands.values():
        for key in ("cpu_marginal_ms_per_image", "total_cpu_marginal_ms_per_image"):
            if key in row and base > 0:
                row[key.replace("_ms_per_image", "_x_im2rec")] = round(row[key] / base, 3)
    return {"sizes": sizes, "repeat": args.repeat, "workers": args.workers,
            "cores": os.cpu_count(), "shard_size": args.shard_size, "s3_server": s3_kind,
            "options": " ".join(OPTS), "commands": commands,
            "caps": None if args.full_caps else {
                "bench.max_bytes": CAPS["max_bytes"],
                "quality.decode_sample": CAPS["decode_sample"],
                "why": "past both sizes, as an ImageNet-sized night is past the defaults "
                       "(1 GiB, 1,000 records a split): what grows at that size"},
            "notes": "cpu: the command's process tree (user + system, waited-for children: "
                     "workers, the MXNet process); server_cpu: the local S3 server's "
                     "processes; marginal = (at N2 - at N1) / (N2 - N1); fixed = at N1 - "
                     "N1 x marginal; medians of the rounds"}


def marginal_markdown(doc: dict) -> str:
    """The summary as a Markdown table (CPU per image first)."""
    n1, n2 = doc["sizes"]
    lines = [f"| command | marginal CPU ms/image | x im2rec.py | fixed CPU s | CPU s at {n1:,} "
             f"| CPU s at {n2:,} | S3 server marginal CPU ms/image |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, row in doc["commands"].items():
        server = row.get("server_cpu_marginal_ms_per_image")
        ratio = row.get("cpu_marginal_x_im2rec")
        lines.append(
            f"| {name[2:]} | {row['cpu_marginal_ms_per_image']:.2f} | "
            f"{'' if ratio is None else f'{ratio:.2f}'} | {row['cpu_fixed_s']:.1f} | "
            f"{row['cpu_s'][str(n1)]:.1f} | {row['cpu_s'][str(n2)]:.1f} | "
            f"{'' if server is None else f'{server:.2f}'} |")
    return "\n".join(lines)


def marginal(args, env: dict) -> dict:
    """``--sizes N1,N2``: each round runs every command at each size in turn."""
    sizes = sorted(args.sizes)
    trees = {n: dataset(Path(args.data_root), n, max(sizes)) for n in sizes}
    runs: dict[str, dict[int, list[cpu.Spent]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        work = Path(tmp)
        for n in sizes:
            write_lst(trees[n], work / f"photos-{n}.lst")
        s3 = None if args.no_s3 else s3_server(work, args.s3)
        try:
            if s3:
                s3 = s3._replace(env={**env, **s3.env})
                for n in sizes:
                    upload_tree(trees[n], f"s3://bench/raw-{n}", s3.env)
            for r in range(args.repeat):
                for n in sizes:
                    got = one_round(work / f"r{r}-n{n}", trees[n], work / f"photos-{n}.lst",
                                    env, args, s3, f"s3://bench/raw-{n}",
                                    f"s3://bench/pub{r}-{n}")
                    for name, (spent, _) in got.items():
                        runs.setdefault(name, {m: [] for m in sizes})[n].append(spent)
                    print(f"round {r + 1}/{args.repeat}, {n} photos: " + ", ".join(
                        f"{k[2:]} {w.cpu:.1f} s CPU" for k, (w, _) in got.items()),
                        file=sys.stderr)
        finally:
            if s3:
                s3.stop()
    return marginal_summary(runs, sizes, args, s3.kind if s3 else None)


def emit(table: str, doc: dict, json_out: str | None) -> None:
    """Print a Markdown table, then its JSON document; ``json_out``: that file too."""
    print(table)
    text = json.dumps(doc, indent=2)
    print(text)
    if json_out:
        Path(json_out).write_text(text + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")],
                    help="two sizes N1,N2: CPU per image that grows with the data (marginal) "
                         "apart from fixed start-up; a JSON document and a Markdown table")
    ap.add_argument("--json-out", help="with --sizes: write the JSON document here too")
    ap.add_argument("--with-recforge-im2rec", action="store_true",
                    help="with --sizes: also `recforge im2rec`")
    ap.add_argument("--full-caps", action="store_true",
                    help="with --sizes: the spec's own loader window (bench.max_bytes) and "
                         "re-read sample (quality.decode_sample), which then still grow "
                         "between the sizes; default: both set below the smaller size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shard-size", type=int, default=500,
                    help="images per pack task (the spec default; large ones idle a worker)")
    ap.add_argument("--quick", action="store_true", help="300 photos, 1 round")
    ap.add_argument("--no-s3", action="store_true", help="skip the build through local S3")
    ap.add_argument("--s3", choices=["auto", "rgw", "moto"], default="auto",
                    help="the local S3 server: Ceph RGW where it starts (auto), or that one")
    ap.add_argument("--profile", action="store_true", help="profile pack_items, then exit")
    ap.add_argument("--data-root", default=str(Path(tempfile.gettempdir()) / "recforge-bench"))
    args = ap.parse_args(argv)
    if args.quick:
        args.count, args.repeat = 300, 1
    env = {"RECFORGE_MXNET_PYTHON": bench_pack.MX_PYTHON, **os.environ,
           "PYTHONPATH": str(REPO / "include")}
    if args.sizes:
        if len(args.sizes) != 2 or len(set(args.sizes)) != 2 or min(args.sizes) < 1:
            ap.error("--sizes takes two different sizes, as 2000,10000")
        doc = marginal(args, env)
        emit(marginal_markdown(doc), doc, args.json_out)
        return 0
    tree = dataset(Path(args.data_root), args.count)
    if args.profile:
        profile(tree, args.count)
        return 0
    runs: dict[str, list] = {}
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        work = Path(tmp)
        write_lst(tree, work / "photos.lst")
        s3 = None if args.no_s3 else s3_server(work, args.s3)
        try:
            if s3:
                s3 = s3._replace(env={**env, **s3.env})
                upload_tree(tree, "s3://bench/raw", s3.env)
            for r in range(args.repeat):
                got = one_round(work / f"r{r}", tree, work / "photos.lst", env, args, s3,
                                "s3://bench/raw", f"s3://bench/pub{r}")
                for name, value in got.items():
                    runs.setdefault(name, []).append(value)
        finally:
            if s3:
                s3.stop()
    report(runs, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
