"""Airflow's share of a build: the same photos through the real DAG on a fresh ``airflow
standalone`` (LocalExecutor, 2 task slots) and through ``recforge build``, side by side.

Each build gets a publish root of its own (the incremental cache lives under it), so no run
reuses another's shards. Prints the wall time of each, the DAG/CLI ratio, per-task start-up
(a task's start to its first recforge log line), queue waits and scheduler gaps (a
stage's first start minus the last end of the stages it waits for), and each stage's span
in the DAG beside its time in the CLI, for ``pack.shard_size`` 500 and ``auto`` (or the
``--shards`` asked for); medians of ``--repeat`` runs.

    PYTHONPATH=include RECFORGE_MXNET_PYTHON=$PWD/.venv-mxnet/bin/python \\
        .venv/bin/python benchmarks/bench_dag.py              # 5,000 photos, 3 repeats
    ... benchmarks/bench_dag.py --quick --count 600           # one repeat, a smoke check
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "include"), str(REPO)]

from benchmarks.bench_pack import generate  # noqa: E402
from recforge import stages, storage  # noqa: E402
from recforge.dev import s3server  # noqa: E402
from tests.e2e.cluster import ready_api  # noqa: E402

BUCKET = "bench-dag"
CLASSES = 5
SLOTS = 2
PASSWORD = "bench-dag-pw"
# the DAG's stages in order; a stage starts when the ones it waits for have ended
CHAIN = ("ingest", "flatten", "remap_labels", "split", "pack", "merge", "validate",
         "benchmark", "quality_gate", "publish")
SHARDS = {"fixed": 500, "auto": "auto"}


def spec_doc(name: str, shard_size: int | str) -> dict:
    return {
        "name": name, "schedule": None,
        "source": {"uri": f"s3://{BUCKET}/raw"},
        "publish": {"uri": f"s3://{BUCKET}/pub-template"},
        "splits": {"val_ratio": 0.1, "seed": 7},
        "pack": {"resize": 256, "quality": 95, "shard_size": shard_size},
        "bench": {"options": {"batch_size": 32, "data_shape": [3, 224, 224],
                              "measure_batches": 10, "thread_grid": []},
                  "floors": {"cpu": {"min_images_per_sec": 1}}},
        "quality": {"severity": {"near_duplicates": "warn", "class_balance": "warn"}},
    }


def upload(photos: Path) -> int:
    files = sorted(photos.glob("*.jpg"))

    def put(i_path):
        i, path = i_path
        storage.put_bytes(f"s3://{BUCKET}/raw/c{i % CLASSES}/{path.name}", path.read_bytes())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, enumerate(files)))
    return len(files)


def airflow_env(home: Path, port: int, specs: Path, endpoint: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": str(REPO / "include"),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(SLOTS),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(SLOTS),
        "RECFORGE_PACK_POOL_SLOTS": str(SLOTS),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex,
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
        "RECFORGE_SPECS_DIR": str(specs),
        "AWS_ENDPOINT_URL": endpoint, **s3server.DEV_CREDENTIALS,
    })
    return env


@contextlib.contextmanager
def standalone(home: Path, env: dict, dag_id: str):
    (home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    logs = home / "logs_proc"
    logs.mkdir()
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], env=env,
                   check=True, capture_output=True)
    out = open(logs / "standalone.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).with_name("airflow")), "standalone"],
                            env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        yield ready_api(f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}", PASSWORD, dag_id,
                        {"standalone": proc}, logs)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out.close()


def _ts(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def first_work_line(home: Path, dag_id: str, run_id: str, ti: dict) -> float | None:
    """The timestamp of the task log's first recforge line: where the stage's work starts."""
    folder = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={ti['task_id']}"
    if ti.get("map_index", -1) >= 0:
        folder = folder / f"map_index={ti['map_index']}"
    for log in sorted(folder.glob("attempt=*.log"))[-1:]:
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                row = json.loads(line)
                if str(row.get("logger", "")).startswith("recforge"):
                    return _ts(row["timestamp"])
    return None


def dag_run(api, home: Path, dag_id: str, publish: str) -> dict:
    t0 = time.perf_counter()
    status, run = api.call("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                           {"logical_date": None, "conf": {"publish_uri": publish}})
    assert status == 200, run
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}"
    while (state := api.call("GET", path)[1].get("state")) not in ("success", "failed"):
        time.sleep(0.5)
    wall = time.perf_counter() - t0
    tis = api.call("GET", f"{path}/taskInstances?limit=500")[1]["task_instances"]
    if state != "success":
        raise SystemExit(f"DAG run {state}: " + json.dumps(
            [(t["task_id"], t["map_index"], t["state"]) for t in tis]))
    startups, waits = [], []
    for t in tis:
        start, work = _ts(t["start_date"]), first_work_line(home, dag_id, run["dag_run_id"], t)
        if start and work:
            startups.append(work - start)
        if start and t.get("queued_when"):
            waits.append(start - _ts(t["queued_when"]))
    by_stage = {s: [t for t in tis if t["task_id"] == s and t["start_date"]] for s in CHAIN}
    gaps = []
    chain = [s for s in CHAIN if by_stage[s]]
    for nxt, needs in stages.upstream("classification").items():
        ran = [s for s in needs if by_stage.get(s)]
        # a stage beside another shares its gap: counted once
        if by_stage.get(nxt) and ran and not stages.stage(nxt).beside:
            gaps.append(min(_ts(t["start_date"]) for t in by_stage[nxt])
                        - max(_ts(t["end_date"]) for s in ran for t in by_stage[s]))
    run_span = _ts(tis[0]["end_date"]) and (max(_ts(t["end_date"]) for t in tis if t["end_date"])
                                            - min(_ts(t["start_date"]) for t in tis
                                                  if t["start_date"]))
    busy = sum(t["duration"] or 0 for t in tis)
    spans = {s: max(_ts(t["end_date"]) for t in by_stage[s])
             - min(_ts(t["start_date"]) for t in by_stage[s]) for s in chain}
    return {"wall": wall, "tasks": len(tis), "pack_tasks": len(by_stage["pack"]), "spans": spans,
            "startup": statistics.median(startups) if startups else float("nan"),
            "startup_sum": sum(startups), "queue_wait": statistics.median(waits) if waits
            else float("nan"), "gaps": sum(gaps), "span": run_span, "busy": busy}


def cli_build(spec: Path, env: dict, publish: str) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "recforge.cli", "build", str(spec), "--json",
                          "--workers", str(SLOTS), "--publish", publish], env=env,
                         capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(f"recforge build failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout[out.stdout.index("\n{") + 1:])
    return {"wall": wall, "shards": len(result["split"]["shards"]),
            "stages": sum(result["seconds"].values()), "seconds": result["seconds"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=5000, help="generated photos")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one repeat")
    ap.add_argument("--photos", type=Path, default=REPO / ".bench" / "dag_photos")
    ap.add_argument("--shards", nargs="+", choices=sorted(SHARDS), default=list(SHARDS),
                    help="the pack.shard_size settings to run (default: both)")
    args = ap.parse_args()
    kinds = {k: SHARDS[k] for k in args.shards}
    repeat = 1 if args.quick else args.repeat
    generate(args.photos, "photos", args.count)
    with s3server.running_server() as endpoint, tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, **s3server.DEV_CREDENTIALS})
        storage.ensure_bucket(f"s3://{BUCKET}")
        n = upload(args.photos)
        specs = home / "specs"
        specs.mkdir()
        for kind, size in kinds.items():
            (specs / f"bench_{kind}.yaml").write_text(
                yaml.safe_dump(spec_doc(f"bench_{kind}", size)))
        env = airflow_env(home / "airflow", s3server.free_port(), specs, endpoint)
        (home / "airflow").mkdir()
        rows: dict[str, dict[str, list[dict]]] = {k: {"dag": [], "cli": []} for k in kinds}
        with standalone(home / "airflow", env, f"recforge__bench_{next(iter(kinds))}") as api:
            for i in range(repeat):
                for kind in kinds:
                    tag = uuid.uuid4().hex[:8]
                    rows[kind]["dag"].append(dag_run(
                        api, home / "airflow", f"recforge__bench_{kind}",
                        f"s3://{BUCKET}/dag-{kind}-{tag}"))
                    rows[kind]["cli"].append(cli_build(
                        specs / f"bench_{kind}.yaml", env, f"s3://{BUCKET}/cli-{kind}-{tag}"))
                    print(f"  repeat {i + 1} {kind}: DAG {rows[kind]['dag'][-1]['wall']:.1f} s,"
                          f" CLI {rows[kind]['cli'][-1]['wall']:.1f} s", flush=True)
    print(f"\n{n} photos, {CLASSES} classes, {SLOTS} task slots (LocalExecutor) / "
          f"--workers {SLOTS}, median of {repeat}")
    print(f"{'shards':<7} {'tasks/shards':>12} {'DAG s':>7} {'CLI s':>7} {'DAG/CLI':>8} "
          f"{'start-up':>9} {'start-ups':>10} {'queue':>6} {'gaps':>6} {'task-s':>7}")
    for kind in kinds:
        def med(key: str, side: str, kind: str = kind) -> float:
            return statistics.median(r[key] for r in rows[kind][side])

        dag, cli = med("wall", "dag"), med("wall", "cli")
        print(f"{kind:<7} {int(med('pack_tasks', 'dag')):>5} / {int(med('shards', 'cli')):<4}"
              f" {dag:>7.1f} {cli:>7.1f} {dag / cli:>7.2f}x {med('startup', 'dag'):>8.2f}s "
              f"{med('startup_sum', 'dag'):>9.1f}s {med('queue_wait', 'dag'):>5.2f}s "
              f"{med('gaps', 'dag'):>5.1f}s {med('busy', 'dag'):>6.1f}s")
    print(f"\n{'stage':<13} " + " ".join(f"{k + ' DAG':>10} {k + ' CLI':>10}" for k in kinds))
    for stage in CHAIN:
        cells = []
        for kind in kinds:
            dag = [r["spans"][stage] for r in rows[kind]["dag"] if stage in r["spans"]]
            cli = [r["seconds"].get(stage) for r in rows[kind]["cli"]]
            cells += [f"{statistics.median(dag):>9.1f}s" if dag else f"{'-':>10}",
                      f"{statistics.median(cli):>9.1f}s" if None not in cli else f"{'-':>10}"]
        print(f"{stage:<13} " + " ".join(cells))
    print("stage: DAG, the first task's start to the last one's end; CLI, recforge build's own "
          "timing (the benchmark runs beside validate and quality_gate in both; the CLI's "
          "quality_gate is the checklist's start to the end of both)")
    print("tasks/shards: the DAG's pack tasks / the shards planned (auto: a task packs "
          "several)")
    print("start-up: median of a task's start to its first recforge log line; start-ups: "
          "their sum per run; queue: median queued → started; gaps: sum over the DAG of a "
          "stage's first start minus the last end of the stages it waits for (a stage beside "
          "others has none of its own); task-s: summed task durations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
