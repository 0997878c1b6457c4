"""A whole night at ImageNet's shape, end to end: generated photos in 1,000 class folders on
Ceph RGW, built by ``recforge build`` and by the real DAG on the Celery tier, at two sizes;
per-stage wall, CPU and peak memory, S3 requests per image, the checklist and the report,
and each stage's time extrapolated to 1.28 M and 10 M images.

    PYTHONPATH=include RECFORGE_MXNET_PYTHON=$PWD/.venv-mxnet/bin/python \\
        .venv/bin/python benchmarks/bench_night.py            # 200,000 + 20,000 images
    ... benchmarks/bench_night.py --count 2000 --small 500    # a smoke run, ~5 min
    ... benchmarks/bench_night.py --skip-dag                  # the CLI only

Steps: generate the photos (``night_data``: small real JPEGs, 64-256 px, cached under
``.bench/night_photos``) and a few quarantinable objects; start a throwaway Ceph RGW
(``tests.common.rgw``) and PUT them with a thread pool, once per size (``raw-<n>/``); run
``recforge build --workers 2`` (``night_cli``: a stopwatch per stage) on each size; start the
Celery tier (``night_cluster``: api-server, scheduler, dag-processor, 2 Celery workers on the
machine's PostgreSQL and Redis, pack pool of 2 slots), trigger one unmeasured 100-image
warm-up run, then the DAG on each size, each task's CPU and peak RSS read from ``/proc``
while it runs. S3 requests are the gateway's own
count (``perf dump``: ``rgw.req``) over the run. Each run publishes under a prefix of its own,
deleted afterwards unless ``--keep``. Writes ``night.json`` and ``night.md`` to ``--out``;
exits 1 when the DAG takes more than 1.25x the CLI at a size both ran.

Extrapolation: per stage and path, ``seconds = fixed + per_image * n`` fitted through the
sizes run (least squares; two sizes: the line through both), then evaluated at 1.28 M and
10 M. It assumes each stage stays linear and the machine stays the same (2 cores here).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "include"), str(REPO), str(REPO / "benchmarks")]

import night_data  # noqa: E402

from recforge import stages, storage  # noqa: E402
from recforge.format import names  # noqa: E402

BUCKET = "night"
NAME = "night"
WORKERS = 2
TARGETS = (1_280_000, 10_000_000)
RATIO_LIMIT = 1.25
WARMUP = 100  # images of the DAG's unmeasured first run (cold workers)


def spec_doc(size: int) -> dict:
    """The night's spec: ImageNet's val share, the product's pack defaults, auto shards."""
    return {
        "name": f"{NAME}_{size}", "schedule": None,
        "source": {"uri": f"s3://{BUCKET}/raw-{size}"},
        "publish": {"uri": f"s3://{BUCKET}/pub", "allowed": [f"s3://{BUCKET}/pub/"]},
        "splits": {"val_ratio": 0.04, "seed": 7},
        "pack": {"resize": 256, "quality": 95, "shard_size": "auto"},
        "bench": {"options": {"batch_size": 32, "data_shape": [3, 224, 224],
                              "measure_batches": 20, "thread_grid": []},
                  "floors": {"cpu": {"min_images_per_sec": 1}}},
        "quality": {"severity": {"near_duplicates": "warn", "class_balance": "warn"}},
    }


def rgw_requests(state_dir: str) -> int | None:
    """The gateway's request count so far (``perf dump``'s ``rgw.req``)."""
    sock = Path(state_dir) / "run" / "client.rgw.asok"
    out = subprocess.run(["ceph", "--admin-daemon", str(sock), "perf", "dump"],
                         capture_output=True, text=True, timeout=30)
    if out.returncode:
        return None
    dump = json.loads(out.stdout)
    return next((v["req"] for k, v in dump.items() if k.startswith("rgw") and "req" in v),
                None)


def published(version: str | None) -> dict:
    """The published version's checklist (``quality/quality.json``) and report size."""
    if not version:
        return {"version": None, "checklist": None, "report_bytes": None}
    quality = storage.read_json(storage.join(version, names.QUALITY_DIR, names.QUALITY_RESULT))
    report = storage.head(storage.join(version, names.REPORT))
    manifest = storage.read_json(storage.join(version, "manifest.json"))
    summary = manifest.get("summary", {})
    return {"version": version,
            "checklist": {k: quality.get(k) for k in ("ok", "failed", "warned")},
            "report_bytes": report.size if report else None,
            "listed": summary.get("listed"), "packed": summary.get("packed"),
            "quarantined": summary.get("quarantined")}


# ---------------------------------------------------------------- the CLI


def cli_run(spec: Path, size: int, out: Path, rgw_dir: str) -> dict:
    publish = f"s3://{BUCKET}/pub/cli-{size}-{uuid.uuid4().hex[:6]}"
    stats = out / f"cli-{size}.json"
    env = {**os.environ, "NIGHT_CLI_OUT": str(stats), "PYTHONPATH": str(REPO / "include")}
    before = rgw_requests(rgw_dir)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "night_cli.py"), "build",
                           str(spec), "--json", "--workers", str(WORKERS), "--publish", publish,
                           "--progress", "lines"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (out / f"cli-{size}.log").write_text(done.stdout + "\n--- stderr\n" + done.stderr)
    if done.returncode:
        raise SystemExit(f"recforge build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout[done.stdout.index("\n{") + 1:])
    measured = json.loads(stats.read_text())
    requests = (rgw_requests(rgw_dir) or 0) - (before or 0)
    pack = result.get("pack") or []
    shard_requests = sum(n for s in pack for n in (s.get("s3_requests") or {}).values())
    row = {"path": "cli", "size": size, "wall": wall, "cpu": measured["cpu_total"],
           "stages": {k: {**v, "seconds": result["seconds"].get(k)}
                      for k, v in measured["stages"].items()},
           "pack_tasks": len(result["split"]["pack_tasks"]), "shards": len(pack),
           "s3_requests": requests, "pack_s3_requests": shard_requests,
           "summary_line": done.stdout[:done.stdout.index("\n{")].strip(),
           **published((result.get("publish") or {}).get("uri"))}
    row["s3_requests_per_image"] = requests / max(row["listed"] or size, 1)
    if not ARGS.keep:
        storage.delete_prefix(publish)
    return row


# ---------------------------------------------------------------- the DAG


def _ts(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def failed_logs(home: Path, dag_id: str, run_id: str, tis: list[dict]) -> str:
    """The tails of the failed tasks' logs."""
    out = []
    for t in tis:
        if t["state"] == "failed":
            folder = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / (
                f"task_id={t['task_id']}")
            for log in sorted(folder.rglob("attempt=*.log"))[-1:]:
                out.append(f"\n--- {t['task_id']}\n" + log.read_text(errors="replace")[-3000:])
    return "".join(out)


def dag_run(tier: dict, sampler, size: int, rgw_dir: str) -> dict:
    api, dag_id = tier["api"], f"recforge__{NAME}_{size}"
    publish = f"s3://{BUCKET}/pub/dag-{size}-{uuid.uuid4().hex[:6]}"
    before, cpu_before = rgw_requests(rgw_dir), sampler.cpu()
    t0 = time.perf_counter()
    status, run = api.call("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                           {"logical_date": None, "conf": {"publish_uri": publish}})
    if status != 200:
        raise SystemExit(f"trigger refused ({status}): {run}")
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}"
    while (state := api.call("GET", path)[1].get("state")) not in ("success", "failed"):
        time.sleep(1)
    wall = time.perf_counter() - t0
    time.sleep(2 * sampler.period)
    tier_cpu = sum(c - cpu_before.get(p, 0.0) for p, c in sampler.cpu().items())
    requests = (rgw_requests(rgw_dir) or 0) - (before or 0)
    tis = api.call("GET", f"{path}/taskInstances?limit=1000")[1]["task_instances"]
    if state != "success":
        raise SystemExit(f"DAG run {state}: " + json.dumps(
            [(t["task_id"], t["map_index"], t["state"]) for t in tis])
            + failed_logs(tier["home"], dag_id, run["dag_run_id"], tis))
    per: dict[str, dict] = {}
    for t in tis:
        if not t.get("start_date"):
            continue
        got = sampler.task(t.get("pid"))
        row = per.setdefault(t["task_id"], {"starts": [], "ends": [], "task_s": 0.0,
                                            "cpu": 0.0, "peak_rss_mb": 0.0, "tasks": 0,
                                            "sampled": 0})
        row["starts"].append(_ts(t["start_date"]))
        row["ends"].append(_ts(t["end_date"]))
        row["task_s"] += t.get("duration") or 0.0
        row["cpu"] += got.get("cpu", 0.0)
        row["peak_rss_mb"] = max(row["peak_rss_mb"], got.get("peak_rss_mb", 0.0))
        row["tasks"] += 1
        row["sampled"] += bool(got)
    stage_rows = {k: {"wall": max(v["ends"]) - min(v["starts"]), "task_s": v["task_s"],
                      "cpu": v["cpu"], "peak_rss_mb": v["peak_rss_mb"] or None,
                      "tasks": v["tasks"], "sampled": v["sampled"]} for k, v in per.items()}
    version = None
    latest = f"{publish}/{NAME}_{size}/latest.json"
    if storage.exists(latest):
        version = storage.read_json(latest)["uri"]
    row = {"path": "dag", "size": size, "wall": wall, "run_id": run["dag_run_id"],
           "cpu": tier_cpu, "task_cpu": sum(v["cpu"] for v in stage_rows.values()),
           "stages": stage_rows,
           "tasks": len(tis), "pack_tasks": stage_rows.get("pack", {}).get("tasks"),
           "s3_requests": requests, **published(version)}
    row["s3_requests_per_image"] = requests / max(row["listed"] or size, 1)
    if not ARGS.keep:
        storage.delete_prefix(publish)
    return row


def dag_runs(home: Path, specs: Path, sizes: list[int], rgw_dir: str, warmup: bool
             ) -> tuple[list, dict]:
    """The Celery tier up, an unmeasured warm-up run (a fresh worker's first tasks pay
    imports and cold caches: ~10 s, which would land on the small size), then the DAG at
    each size; returns the rows and the tier's start-up and warm-up seconds."""
    from night_cluster import TaskSampler, celery_tier

    from tests.e2e.cluster import scratch_database, services_up

    why = services_up()
    if why:
        raise SystemExit(f"PostgreSQL/Redis not answering: {why}")
    rows, times = [], {"tier_s": None, "dag_warmup_s": None}
    t0 = time.perf_counter()
    with scratch_database() as db, celery_tier(home, db, specs, f"recforge__{NAME}_{sizes[0]}",
                                               workers=WORKERS) as tier:
        times["tier_s"] = time.perf_counter() - t0
        print(f"Celery tier up in {times['tier_s']:.0f} s", flush=True)
        sampler = TaskSampler(tier["pids"], period=0.5)
        sampler.start()
        try:
            if warmup:
                warm = dag_run(tier, sampler, min(WARMUP, sizes[-1]), rgw_dir)
                times["dag_warmup_s"] = warm["wall"]
                print(f"  DAG warm-up ({warm['size']} images, not measured): "
                      f"{warm['wall']:.1f} s", flush=True)
            for size in sizes:
                rows.append(dag_run(tier, sampler, size, rgw_dir))
                print(f"  DAG {size:,}: {rows[-1]['wall']:.1f} s", flush=True)
        finally:
            sampler.stop()
    return rows, times


# ---------------------------------------------------------------- fit and report


def fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """(fixed, per_image) of the least-squares line through ``points`` (n, seconds)."""
    if len({n for n, _ in points}) < 2:
        return None
    mx = sum(n for n, _ in points) / len(points)
    my = sum(s for _, s in points) / len(points)
    slope = (sum((n - mx) * (s - my) for n, s in points)
             / sum((n - mx) ** 2 for n, _ in points))
    return my - slope * mx, slope


def stage_order(rows: list[dict]) -> list[str]:
    known = [s.task_id for s in stages.stages_for("classification")]
    seen = {k for r in rows for k in r["stages"]}
    return [s for s in known if s in seen] + sorted(seen - set(known))


def extrapolate(rows: list[dict]) -> list[dict]:
    out = []
    for path in ("cli", "dag"):
        mine = [r for r in rows if r["path"] == path]
        for stage in [*stage_order(mine), "(total)"]:
            pts = [(r["size"], r["wall"] if stage == "(total)" else r["stages"][stage]["wall"])
                   for r in mine if stage == "(total)" or stage in r["stages"]]
            line = fit(pts)
            if line:
                fixed, slope, flat = *line, line[1] < 0
                if flat:  # shrank with size: noise over a fixed cost, not a saving
                    fixed, slope = max(s for _, s in pts), 0.0
                out.append({"path": path, "stage": stage, "fixed_s": fixed,
                            "per_image_ms": slope * 1e3, "flat": flat,
                            **{str(n): fixed + slope * n for n in TARGETS}})
    return out


def _f(v, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def markdown(result: dict) -> str:
    rows, setup = result["runs"], result["setup"]
    lines = [f"# recforge night benchmark ({result['started']})", "",
             f"{setup['count']:,} + {setup['small']:,} generated JPEGs, {night_data.CLASSES} "
             f"classes, {len(night_data.bad_objects(b'xx'))} quarantinable objects; "
             f"{os.cpu_count()} cores; `recforge build --workers {WORKERS}`, the DAG on "
             f"{WORKERS} Celery workers (pack pool {WORKERS} slots).", "",
             f"- generate: {setup['generate_s']:.1f} s ({setup['generated_mb']:.0f} MB"
             f"{', reused' if setup['generate_reused'] else ''})",
             *(f"- upload raw-{u['size']}: {u['objects']:,} objects in {u['seconds']:.1f} s "
               f"({u['objects'] / max(u['seconds'], 1e-9):.0f} PUT/s)" for u in setup["uploads"]),
             f"- Ceph RGW up in {setup['rgw_s']:.0f} s; Celery tier up in "
             f"{_f(setup.get('tier_s'), '.0f')} s; the DAG's unmeasured warm-up run "
             f"{_f(setup.get('dag_warmup_s'), '.0f')} s", "",
             "| path | images | wall s | CPU s | stage CPU s | S3 req/image | listed | packed "
             "| quarantined | checklist | report KB | pack tasks |", "|" + "---|" * 12]
    for r in rows:
        c = r.get("checklist") or {}
        check = "-" if not c else ("passed" if c.get("ok") else f"FAILED {c.get('failed')}") + (
            f" (warn: {', '.join(c['warned'])})" if c.get("warned") else "")
        lines.append(f"| {r['path']} | {r['size']:,} | {r['wall']:.1f} | {r['cpu']:.1f} | "
                     f"{r.get('task_cpu', r['cpu']):.1f} | {r['s3_requests_per_image']:.2f} | "
                     f"{r.get('listed')} | {r.get('packed')} "
                     f"| {r.get('quarantined')} | {check} | "
                     f"{_f(r['report_bytes'] and r['report_bytes'] / 1024, '.0f')} | "
                     f"{r.get('pack_tasks')} |")
    for size, ratio in result["ratios"].items():
        verdict = "ok" if ratio <= RATIO_LIMIT else f"OVER {RATIO_LIMIT}x"
        lines.append(f"\nDAG / CLI at {int(size):,} images: **{ratio:.2f}x** ({verdict})")
    for size in sorted({r["size"] for r in rows}):
        at = {r["path"]: r for r in rows if r["size"] == size}
        lines += ["", f"## Stages at {size:,} images", "",
                  "| stage | CLI wall s | CLI CPU s | CLI peak MiB | DAG span s | DAG task-s "
                  "| DAG CPU s | DAG peak MiB | DAG tasks |", "|" + "---|" * 9]
        for stage in stage_order(list(at.values())):
            c = at.get("cli", {}).get("stages", {}).get(stage, {})
            d = at.get("dag", {}).get("stages", {}).get(stage, {})
            shared = "*" if c.get("cpu_shared") else ""
            lines.append(f"| {stage} | {_f(c.get('wall'))} | {_f(c.get('cpu'))}{shared} | "
                         f"{_f(c.get('peak_rss_mb'), '.0f')} | {_f(d.get('wall'))} | "
                         f"{_f(d.get('task_s'))} | {_f(d.get('cpu'))} | "
                         f"{_f(d.get('peak_rss_mb'), '.0f')} | {d.get('tasks', '-')} |")
    lines += ["", "## Extrapolation (seconds = fixed + per-image x n, fitted per stage)", "",
              "| path | stage | fixed s | per image ms | " + " | ".join(
                  f"at {n / 1e6:g} M" for n in TARGETS) + " |", "|" + "---|" * (4 + len(TARGETS))]
    for e in result["extrapolation"]:
        lines.append(f"| {e['path']} | {e['stage']} | {e['fixed_s']:.1f} | "
                     f"{e['per_image_ms']:.3f}{' (flat)' if e['flat'] else ''} | " + " | ".join(
                         f"{e[str(n)] / 60:.1f} min" for n in TARGETS) + " |")
    lines += ["", "CPU s: the CLI's process and its children; the DAG's whole Celery tier "
              "(api-server, scheduler, dag-processor, workers, task processes) over the run. "
              "Stage CPU s: the CLI's, the DAG's task processes and what they started.",
              "", "CLI stages: `recforge build`'s own wall time per stage (pack: the pool of "
              "shards), CPU of the process and the children it reaped over the stage (* : the "
              "stage overlapped another, validate / benchmark / quality_gate run side by side, "
              "so it includes theirs), peak RSS of the process since the stage began (pack: "
              "the largest shard's own). DAG stages: span "
              "= first task start to last task end; task-s = summed task durations; CPU and "
              "peak RSS of each task process read from /proc every 0.5 s (summed / max). S3 "
              "requests: the gateway's own count over the run, divided by the images listed. "
              "The extrapolation assumes each stage stays linear on this machine; a stage "
              "whose time shrank with size is shown flat (its largest time, no per-image "
              "cost). Below ~10,000 images the fixed costs (start-up, imports, the loader "
              "benchmark's fixed batches) drown the per-image ones: fit on 20,000+."]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=200_000, help="images of the full run")
    ap.add_argument("--small", type=int, default=20_000,
                    help="images of the second size for the fit (0: only --count)")
    ap.add_argument("--skip-dag", action="store_true", help="no Celery tier, no DAG runs")
    ap.add_argument("--skip-cli", action="store_true", help="no recforge build runs")
    ap.add_argument("--no-warmup", action="store_true",
                    help=f"skip the DAG's unmeasured first run ({WARMUP} images)")
    ap.add_argument("--keep", action="store_true",
                    help="keep each run's published prefix, the gateway (left running, state "
                    "and stop command in --out) and the Airflow home with its task logs")
    ap.add_argument("--out", type=Path, default=None,
                    help="folder for night.json / night.md (default .bench/night/<time>)")
    ap.add_argument("--cache", type=Path, default=REPO / ".bench" / "night_photos",
                    help="where generated photos are kept for the next run")
    ap.add_argument("--upload-threads", type=int, default=32, help="parallel PUTs")
    return ap.parse_args(argv)


def prepare(tmp: Path, sizes: list[int], rgw) -> tuple[dict, Path]:
    """Generate, upload once per size, write the specs; returns the setup record and the
    specs folder."""
    gen = night_data.generate(ARGS.cache, ARGS.count)
    print(f"generated {ARGS.count:,} images ({gen['bytes'] / 2**20:.0f} MB) in "
          f"{gen['seconds']:.1f} s{' (reused)' if gen['reused'] else ''}", flush=True)
    storage.ensure_bucket(f"s3://{BUCKET}")
    uploads = []
    if not (ARGS.skip_dag or ARGS.no_warmup):
        sizes = sorted({*sizes, min(WARMUP, ARGS.count)})
    for size in sizes:
        files = night_data.files_of(gen["folder"], size)
        up = night_data.upload(files, gen["folder"], f"s3://{BUCKET}/raw-{size}",
                               ARGS.upload_threads)
        uploads.append({"size": size, **up})
        print(f"uploaded raw-{size}: {up['objects']:,} objects in {up['seconds']:.1f} s",
              flush=True)
    specs = tmp / "specs"
    specs.mkdir()
    for size in sizes:
        (specs / f"{NAME}_{size}.yaml").write_text(yaml.safe_dump(spec_doc(size)))
    setup = {"count": ARGS.count, "small": ARGS.small, "generate_s": gen["seconds"],
             "generate_reused": gen["reused"], "generated_mb": gen["bytes"] / 2**20,
             "uploads": uploads, "rgw_s": rgw.started_s}
    return setup, specs


def run_all(tmp: Path, rgw, sizes: list[int], out: Path) -> tuple[dict, list[dict]]:
    """Upload, then the CLI at each size, then the DAG at each size."""
    os.environ.update(rgw.env())
    setup, specs = prepare(tmp, sizes, rgw)
    rows: list[dict] = []
    if not ARGS.skip_cli:
        for size in sizes:
            rows.append(cli_run(specs / f"{NAME}_{size}.yaml", size, out, rgw.state_dir))
            print(f"  CLI {size:,}: {rows[-1]['wall']:.1f} s", flush=True)
    if not ARGS.skip_dag:
        (tmp / "airflow").mkdir(exist_ok=True)
        dag_rows, times = dag_runs(tmp / "airflow", specs, sizes, rgw.state_dir,
                                   not ARGS.no_warmup)
        setup.update(times)
        rows += dag_rows
    return setup, rows


def main(argv: list[str] | None = None) -> int:
    global ARGS
    ARGS = parse_args(argv)
    from tests.common import rgw as rgw_mod

    why = rgw_mod.unavailable()
    if why:
        raise SystemExit(why)
    began = time.perf_counter()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = ARGS.out or REPO / ".bench" / "night" / stamp
    out.mkdir(parents=True, exist_ok=True)
    sizes = sorted({ARGS.count, *([ARGS.small] if ARGS.small else [])})
    with contextlib.ExitStack() as stack:
        tmp = out / "work" if ARGS.keep else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="recforge-night-")))
        tmp.mkdir(exist_ok=True)
        if ARGS.keep:  # left running: python -m tests.common.rgw stop <out>/work/rgw
            rgw = rgw_mod.start(tmp / "rgw")
            (out / "rgw.env").write_text("".join(f"{k}={v}\n" for k, v in rgw.env().items()))
        else:
            rgw = stack.enter_context(rgw_mod.running_rgw(tmp / "rgw"))
        setup, rows = run_all(tmp, rgw, sizes, out)
    by = {(r["path"], r["size"]): r for r in rows}
    ratios = {str(s): by["dag", s]["wall"] / by["cli", s]["wall"] for s in sizes
              if ("dag", s) in by and ("cli", s) in by}
    result = {"started": stamp, "setup": setup, "runs": rows, "ratios": ratios,
              "extrapolation": extrapolate(rows),
              "total_s": time.perf_counter() - began}
    (out / "night.json").write_text(json.dumps(result, indent=1, default=str))
    md = markdown(result)
    (out / "night.md").write_text(md)
    print("\n" + md)
    print(f"whole benchmark: {result['total_s']:.0f} s; written to {out}")
    if ARGS.keep:
        print(f"gateway left running ({out / 'rgw.env'}); stop it with "
              f"python -m tests.common.rgw stop {tmp / 'rgw'}")
    return 0 if all(r <= RATIO_LIMIT for r in ratios.values()) else 1


ARGS: argparse.Namespace

if __name__ == "__main__":
    raise SystemExit(main())
