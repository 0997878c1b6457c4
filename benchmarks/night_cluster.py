"""The Celery tier for the night benchmark: api-server, scheduler, dag-processor and ``workers``
Celery workers (each on queues ``default`` and ``gpu``) on the machine's PostgreSQL and Redis,
started the way ``tests/e2e/cluster.py`` starts the test tier, with a specs folder of the
caller's; and :class:`TaskSampler`, which reads each task process's CPU and peak memory
from ``/proc`` while it runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import uuid
from pathlib import Path

from recforge.dev import demo, s3server
from recforge.orchestration import pools
from tests.e2e.cluster import ADMIN_PASSWORD, cluster_env, ready_api, stop_stack

TICK = os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def celery_tier(home: Path, database: str, specs: Path, dag_id: str, workers: int = 2,
                concurrency: int = 2, pack_slots: int = 2):
    """Start the stack in ``home`` (the S3 endpoint must be in the environment); yields
    ``{"api", "procs", "logs", "home", "pids"}`` once ``dag_id`` is parsed. Pack tasks share the
    pool ``recforge_pack`` of ``pack_slots``, as ``recforge build --workers`` shares cores."""
    (home / "passwords.json").write_text(json.dumps({"admin": ADMIN_PASSWORD}))
    port = s3server.free_port()
    redis_db = int(uuid.uuid4().int % 14) + 1
    env = {**cluster_env(home, database, specs, port, redis_db, concurrency),
           "RECFORGE_PACK_POOL_SLOTS": str(pack_slots)}
    airflow = demo.airflow_bin()
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    pools.ensure_pools(env, airflow)
    logs = home / "logs_proc"
    logs.mkdir()
    names = [f"cpu-{chr(97 + i)}" for i in range(workers)]
    commands = {
        "api-server": [airflow, "api-server", "--port", str(port)],
        "scheduler": [airflow, "scheduler"],
        "dag-processor": [airflow, "dag-processor"],
        **{name: [airflow, "celery", "worker", "--queues", "default,gpu", "--concurrency",
                  str(concurrency), "--celery-hostname", f"{name}@%h", "--skip-serve-logs"]
           for name in names},
    }
    procs = {}
    for name, cmd in commands.items():
        out = open(logs / f"{name}.log", "wb")
        procs[name] = subprocess.Popen(cmd, env={**env, "RECFORGE_WORKER_NAME": name},
                                       stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
    try:
        api = ready_api(f"http://127.0.0.1:{port}", ADMIN_PASSWORD, dag_id, procs, logs)
        yield {"api": api, "procs": procs, "logs": logs, "home": home,
               "pids": [p.pid for p in procs.values()]}
    finally:
        stop_stack(procs, redis_db)


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process itself) of ``pid``."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class TaskSampler(threading.Thread):
    """Every ``period`` seconds: each process under ``roots`` (the tier's processes), its
    parent, CPU seconds and peak RSS (``VmHWM``) so far, kept after it ends. A task's
    figures (:meth:`task`) are those of Airflow's task process (the task instance's
    ``pid``) and everything it started (the MXNet loader); :meth:`cpu` is the whole tier's
    CPU so far. A process loses at most ``period`` seconds of CPU between its last reading
    and its end."""

    def __init__(self, roots: list[int], period: float = 0.5):
        super().__init__(daemon=True, name="night-sampler")
        self.roots, self.period = set(roots), period
        self.seen: dict[int, dict] = {}
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._halt.wait(self.period):
            self.sample()

    def sample(self) -> None:
        parents = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                got = _stat(int(entry.name))
                if got:
                    parents[int(entry.name)] = got
        for pid, (ppid, cpu) in parents.items():
            up, hops = pid, 0
            while up not in self.roots and up in parents and hops < 12:
                up, hops = parents[up][0], hops + 1
            if up in self.roots:
                with self._lock:
                    row = self.seen.setdefault(pid, {"ppid": ppid, "cpu": 0.0, "hwm": 0.0})
                    row["cpu"] = max(row["cpu"], cpu)
                    row["hwm"] = max(row["hwm"], _hwm_mb(pid) or 0.0)

    def cpu(self) -> dict[int, float]:
        """Each process's CPU seconds so far (ended ones: their last reading)."""
        self.sample()
        with self._lock:
            return {pid: row["cpu"] for pid, row in self.seen.items()}

    def task(self, pid: int | None) -> dict:
        """CPU seconds (summed) and peak RSS (the largest process's) of ``pid``'s tree."""
        with self._lock:
            if pid not in self.seen:
                return {}
            tree = {pid}
            grew = True
            while grew:
                more = {p for p, row in self.seen.items() if row["ppid"] in tree} - tree
                grew, tree = bool(more), tree | more
            return {"cpu": sum(self.seen[p]["cpu"] for p in tree),
                    "peak_rss_mb": max(self.seen[p]["hwm"] for p in tree)}

    def stop(self) -> None:
        self._halt.set()
        self.join(5)

