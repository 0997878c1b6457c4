"""A full distributed Airflow for the Celery-tier tests: api-server, scheduler, dag-processor and
three Celery workers (two on queue ``default``, one on ``gpu``) on the machine's PostgreSQL and
Redis, with the simple auth manager (user ``admin``, password from a passwords file).

The fixtures that start it live in ``tests/e2e/conftest.py``; the REST API tests and the UI
test share one running stack (starting one costs minutes).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import yaml

from recforge import storage
from recforge.dev import demo, s3server
from recforge.orchestration import pools
from tests.common.sources import SMALL_BENCH

REPO = Path(__file__).resolve().parents[2]
PG = os.environ.get("RECFORGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
REDIS = os.environ.get("RECFORGE_TEST_REDIS", "redis://127.0.0.1:6379")
WORKERS = {"cpu-a": "default", "cpu-b": "default", "gpu-a": "gpu"}
ADMIN_PASSWORD = "admin-test-pw"


def services_up() -> str | None:
    """None when PostgreSQL and Redis answer, else why not."""
    try:
        import psycopg2
        import redis

        psycopg2.connect(f"{PG}/postgres", connect_timeout=3).close()
        redis.Redis.from_url(REDIS, socket_connect_timeout=3).ping()
    except Exception as exc:  # pragma: no cover - depends on the machine
        return f"{type(exc).__name__}: {exc}"
    return None


@contextlib.contextmanager
def scratch_database():
    """A fresh PostgreSQL database, dropped afterwards; yields its name."""
    import psycopg2

    name = f"recforge_ci_{uuid.uuid4().hex[:10]}"
    conn = psycopg2.connect(f"{PG}/postgres")
    conn.autocommit = True
    conn.cursor().execute(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        conn.cursor().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.close()


class Api:
    def __init__(self, base: str):
        self.base, self.token = base, None

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        req = urllib.request.Request(self.base + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raw = exc.read() or b"{}"
            try:
                return exc.code, json.loads(raw)
            except ValueError:  # a plain-text error page (500 "Internal Server Error")
                return exc.code, {"detail": raw.decode(errors="replace")}

    def login(self, user: str, password: str) -> None:
        status, body = self.call("POST", "/auth/token", {"username": user, "password": password})
        assert status in (200, 201), body
        self.token = body["access_token"]


def wait_for(what: str, check, timeout: float, procs: dict, logs: Path):
    """Poll ``check`` every 2 s until it returns something truthy; fail early when one of the
    cluster's processes exits, and after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, p in procs.items():
            if p.poll() is not None:
                tail = (logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"{name} exited with {p.returncode} while waiting for "
                                     f"{what}:\n{tail}")
        got = check()
        if got:
            return got
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def ready_api(base: str, password: str, dag_id: str, procs: dict, logs: Path,
              timeout: float = 240) -> Api:
    """Wait for the api-server at ``base``, log in as ``admin`` and wait until ``dag_id`` is
    parsed; returns the logged-in :class:`Api`."""
    api = Api(base)

    def api_up():
        try:
            return api.call("GET", "/api/v2/monitor/health")[0] == 200
        except OSError:
            return False

    wait_for("the api-server", api_up, timeout, procs, logs)
    api.login("admin", password)
    wait_for("the DAG to be parsed", lambda: api.call("GET", f"/api/v2/dags/{dag_id}")[0] == 200,
             timeout, procs, logs)
    return api


def dump_logs(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}"
                     for p in sorted(logs.glob("*.log")))


def stop_stack(procs: dict, redis_db: int) -> None:
    """Stop the tier's processes (SIGTERM, SIGKILL after 30 s) and empty its Redis db."""
    for p in procs.values():
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    import redis

    redis.Redis.from_url(f"{REDIS}/{redis_db}").flushdb()


def cluster_env(home: Path, database: str, specs: Path, port: int, redis_db: int,
                concurrency: int = 2) -> dict:
    """The environment of every process of the Celery tier: Airflow's home, PostgreSQL
    ``database``, Redis db ``redis_db``, the api-server on ``port``, the specs folder."""
    db_url = f"{PG.replace('postgresql://', 'postgresql+psycopg2://')}/{database}"
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "recforge.orchestration.workers.worker_hostname",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
        "AIRFLOW__CELERY__BROKER_URL": f"{REDIS}/{redis_db}",
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{PG}/{database}",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(concurrency),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
        "RECFORGE_SPECS_DIR": str(specs),
    }


@contextlib.contextmanager
def running_cluster(database: str, home: Path):
    """Start the stack in ``home`` on ``database`` (the S3 endpoint must already be in the
    environment); yields ``{"api", "base", "bucket", "procs", "logs"}`` once the DAG
    ``recforge__pets`` is parsed."""
    specs = home / "specs"
    specs.mkdir()
    bucket = f"celery-{uuid.uuid4().hex[:8]}"
    storage.s3_client().create_bucket(Bucket=bucket)
    (specs / "pets.yaml").write_text(yaml.safe_dump({
        "name": "pets", "schedule": None,
        "source": {"uri": f"s3://{bucket}/raw"}, "publish": {"uri": f"s3://{bucket}/datasets"},
        "splits": {"val_ratio": 0.25, "seed": 1}, "pack": {"resize": 40, "shard_size": 8},
        "bench": SMALL_BENCH,
    }))
    (home / "passwords.json").write_text(json.dumps({"admin": ADMIN_PASSWORD}))
    port = s3server.free_port()
    redis_db = int(uuid.uuid4().int % 14) + 1
    env = cluster_env(home, database, specs, port, redis_db)
    airflow = str(Path(sys.executable).with_name("airflow"))
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    pools.ensure_pools(env, demo.airflow_bin())
    logs = home / "logs_proc"
    logs.mkdir()
    commands = {
        "api-server": [airflow, "api-server", "--port", str(port)],
        "scheduler": [airflow, "scheduler"],
        "dag-processor": [airflow, "dag-processor"],
        **{name: [airflow, "celery", "worker", "--queues", queue, "--concurrency", "2",
                  "--celery-hostname", f"{name}@%h", "--skip-serve-logs"]
           for name, queue in WORKERS.items()},
    }
    procs = {}
    for name, cmd in commands.items():
        penv = {**env, "RECFORGE_WORKER_NAME": name}
        out = open(logs / f"{name}.log", "wb")
        procs[name] = subprocess.Popen(cmd, env=penv, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        api = ready_api(base, ADMIN_PASSWORD, "recforge__pets", procs, logs)
        yield {"api": api, "base": base, "bucket": bucket, "procs": procs, "logs": logs}
    finally:
        stop_stack(procs, redis_db)
