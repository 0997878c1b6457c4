"""``recforge demo``: the embedded default, end to end through the real Airflow DAG.

1. Uses the S3 endpoint in ``AWS_ENDPOINT_URL`` if set, else starts the local S3 server
   (moto, loopback, detached; it keeps running afterwards so the published files stay
   browsable — the command to stop it is printed).
2. Uploads the generated sample dataset (``recforge.dev.sampledata``) to the demo spec's source.
3. Runs ``airflow dags test recforge__demo_classification`` with ``AIRFLOW_HOME=.airflow``
   (SQLite) and this repo's ``dags/``.
4. Prints where the dataset was published, the counts per split and the quarantine
   report, and copies the published version to ``.demo/published/`` for local inspection.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from recforge import releases, storage
from recforge.dev import detection_sample, s3server, sampledata
from recforge.format import names
from recforge.kinds import kind
from recforge.orchestration import pools
from recforge.spec import load_spec

DEMO_SPEC = "demo_classification"


def airflow_env(repo: Path, extra: dict | None = None) -> dict:
    """Environment for running the repo's DAGs with a local Airflow home (SQLite)."""
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(repo / ".airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(repo / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "RECFORGE_SPECS_DIR": env.get("RECFORGE_SPECS_DIR", str(repo / "include" / "datasets")),
    })
    env.update(extra or {})
    return env


def airflow_bin() -> str:
    candidate = Path(sys.executable).with_name("airflow")
    return str(candidate) if candidate.exists() else "airflow"


def run_dag_test(dag_id: str, env: dict, conf: dict | None = None,
                 log_path: Path | None = None) -> tuple[bool, str]:
    """``airflow dags test`` in a subprocess; returns (succeeded, output).

    ``dags test`` can exit 0 for a failed run, so success is read from its final
    ``DagRun Finished ... state=...`` line too.
    """
    home = Path(env["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "airflow.db").exists():
        subprocess.run([airflow_bin(), "db", "migrate"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pools.ensure_pools(env, airflow_bin())
    cmd = [airflow_bin(), "dags", "test", dag_id]
    if conf:
        cmd += ["-c", json.dumps(conf)]
    proc = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    if log_path:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(proc.stdout)
    finished = [ln for ln in proc.stdout.splitlines() if "DagRun Finished" in ln]
    ok = proc.returncode == 0 and bool(finished) and "state=success" in finished[-1]
    return ok, proc.stdout


def run_demo(repo: Path, port: int = 9000, per_class: int = 40,
             task: str = "classification") -> int:
    """The embedded default end to end: local S3 server, sample data, the real DAG via
    ``airflow dags test``; prints where the dataset was published. Returns an exit code.
    ``task`` detection runs ``demo_detection`` on the VOC sample instead."""
    repo = Path(repo).resolve()
    state = repo / ".demo"
    if os.environ.get("AWS_ENDPOINT_URL"):
        endpoint = os.environ["AWS_ENDPOINT_URL"]
        print(f"using the S3 endpoint from AWS_ENDPOINT_URL: {endpoint}")
        local_server = False
    else:
        for k, v in s3server.DEV_CREDENTIALS.items():
            os.environ.setdefault(k, v)
        endpoint, started_now = s3server.start_detached(state, port)
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        print(f"{'started the' if started_now else 'reusing the running'} local S3 server at "
              f"{endpoint} (state in {state})")
        local_server = True

    name = DEMO_SPEC if task == "classification" else "demo_detection"
    spec = load_spec(repo / "include" / "datasets" / f"{name}.yaml")
    storage.ensure_bucket(spec.source.uri)
    storage.ensure_bucket(spec.publish.uri)
    storage.delete_prefix(spec.source.uri)
    if kind(spec.task).boxes:  # annotated scenes in the spec's layout
        n = detection_sample.upload(spec.source.uri, spec.source.layout, count=per_class)
        bad = len(detection_sample.BAD_OBJECTS[spec.source.layout])
    else:
        n = sampledata.upload(spec.source.uri, per_class=per_class)
        bad = len(sampledata.BAD_OBJECTS)
    print(f"uploaded {n} sample objects ({bad} deliberately bad) to {spec.source.uri}")

    print(f"running the DAG: airflow dags test {spec.dag_id} (log: .demo/dag_test.log) ...")
    ok, output = run_dag_test(spec.dag_id, airflow_env(repo), log_path=state / "dag_test.log")
    if not ok:
        print("\n".join(output.splitlines()[-40:]))
        print(f"DAG run FAILED; full log in {state / 'dag_test.log'}", file=sys.stderr)
        return 1

    latest = releases.read_latest(spec)
    version_uri = latest["uri"]
    summary = storage.read_json(storage.join(version_uri, names.SUMMARY))
    local = state / "published" / spec.name / latest["version"]
    for obj in storage.list_objects(version_uri):
        storage.download(storage.join(version_uri, obj.key), local / obj.key)

    print(f"\npublished: {version_uri}")
    print(f"  latest:  {releases.latest_uri(spec)} -> {latest['version']}")
    print(f"  local copy: {local}")
    print(f"listed {summary['listed']} = packed {summary['packed']} + quarantined "
          f"{summary['quarantined']}" + (f" (and {summary['objects_quarantined']} refused "
                                         "object(s) of packed images)"
                                         if summary.get("objects_quarantined") else ""))
    for split, count in summary["splits"].items():
        print(f"  {split:<5} {count:>6} records")
    bench = json.loads((local / names.BENCH).read_text())["summary"]
    print(f"loader benchmark ({bench['device']}): {bench['images_per_sec']:.0f} img/s with "
          f"preprocess_threads={bench['preprocess_threads']}; bare decode of the same records "
          f"{bench['bare_decode_images_per_sec']:.0f} img/s/thread (bench.json)")
    checks = json.loads((local / names.QUALITY_DIR / names.QUALITY_RESULT).read_text())["checks"]
    by_status: dict[str, list[str]] = {}
    for name, check in checks.items():
        by_status.setdefault(check["status"], []).append(name)
    print("quality checklist: " + ", ".join(
        f"{len(v)} {k}" + (f" ({', '.join(v)})" if k != "passed" else "")
        for k, v in sorted(by_status.items())))
    print(f"  Data Docs: {local / names.QUALITY_DIR / 'index.html'}")
    print(f"report: {local / names.REPORT}")
    print(f"  open it in a browser: {(local / names.REPORT).resolve().as_uri()}")
    print("quarantined:")
    for e in storage.parse_jsonl((local / names.QUARANTINE).read_bytes()):
        print(f"  {e['source_key']:<32} {e['reason']:<22} {e['detail']}")
    if local_server:
        print("\n" + next_steps(endpoint, version_uri, repo))
    return 0


def _recforge_command() -> str:
    """How to call ``recforge`` from here: this interpreter's script (relative to the current
    folder when under it, as ``.venv/bin/recforge``), else ``recforge`` on the PATH."""
    script = Path(sys.executable).with_name("recforge")
    if not script.exists():
        return "recforge"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def next_steps(endpoint: str, version_uri: str, repo: Path, recforge: str | None = None) -> str:
    """What to run next against the local S3 server the demo leaves running: the variables a
    fresh shell needs first (the dev server's placeholder credentials; without them every
    command exits 2 with "no S3 credentials"), then the commands, then how to stop it."""
    cmd = recforge or _recforge_command()
    env = " ".join(f"{k}={v}" for k, v in {"AWS_ENDPOINT_URL": endpoint,
                                           **s3server.DEV_CREDENTIALS}.items())
    state = Path(repo) / ".demo"
    stop = f"{cmd} dev-s3 stop --state-dir {state}"
    if (Path(repo) / "Makefile").exists():
        make = "make" if Path(repo).resolve() == Path.cwd() else f"make -C {repo}"
        stop = f"{make} stop-demo   (or: {stop})"
    return "\n".join([
        f"the local S3 server keeps running at {endpoint}; to look at the dataset from "
        "another shell,",
        "first point it at the server (placeholder credentials: the dev server accepts any):",
        f"  export {env}",
        "then:",
        f"  {cmd} validate {version_uri}",
        f"  {cmd} verify {version_uri}",
        f"stop the server: {stop}",
    ])
