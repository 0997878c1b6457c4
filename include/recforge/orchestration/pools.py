"""The Airflow pools the DAGs use, declared once beside the DAG.

Tasks in a pool that does not exist are never scheduled, so whatever starts an Airflow for
these DAGs (compose's init, ``recforge demo``, the Celery test tier) creates them from here.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Pool:
    name: str
    slots: int
    description: str


PACK = Pool("recforge_pack", 16, "recforge pack shards")  # = pack tasks one run may run at once
GPU_BENCH = Pool("recforge_gpu_bench", 1, "recforge loader benchmarks on GPU workers")
POOLS = (PACK, GPU_BENCH)


def ensure_pools(env: dict, airflow: str = "airflow") -> None:
    """Create (or resize) every pool with ``airflow pools set``."""
    for pool in POOLS:
        subprocess.run([airflow, "pools", "set", pool.name, str(pool.slots), pool.description],
                       env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
