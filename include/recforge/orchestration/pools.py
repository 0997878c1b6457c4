"""The Airflow pools the DAGs use, declared once in ``pools.json`` beside this module.

``pools.json`` is in the format of ``airflow pools import``, so any Airflow gets them with

    airflow pools import include/recforge/orchestration/pools.json

(compose's ``airflow-init``, ``recforge demo`` and the Celery test tier do exactly that). A
pool that was never created is harmless: :mod:`recforge.orchestration.policy` moves the
task to ``default_pool`` at run time and says so in the scheduler log; the per-run caps
(``max_active_tis_per_dagrun``) keep holding. ``python -m recforge.orchestration.pools``
prints the file with the sizes from ``RECFORGE_PACK_POOL_SLOTS`` /
``RECFORGE_GPU_BENCH_POOL_SLOTS`` when they are set (compose sizes its pools that way).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

POOLS_FILE = Path(__file__).with_name("pools.json")
IMPORT_COMMAND = f"airflow pools import {POOLS_FILE}"


@dataclass(frozen=True)
class Pool:
    name: str
    slots: int
    description: str

    @property
    def slots_env(self) -> str:
        """The variable that resizes it where the file is imported with overrides."""
        return f"{self.name.upper()}_POOL_SLOTS"  # RECFORGE_PACK_POOL_SLOTS


def _load() -> dict[str, Pool]:
    raw = json.loads(POOLS_FILE.read_text(encoding="utf-8"))
    return {name: Pool(name, int(v["slots"]), v["description"]) for name, v in raw.items()}


_POOLS = _load()
PACK = _POOLS["recforge_pack"]  # slots = pack tasks one run may run at once
GPU_BENCH = _POOLS["recforge_gpu_bench"]
POOLS = tuple(_POOLS.values())
NAMES = frozenset(_POOLS)


def import_document(env: dict | None = None) -> dict:
    """``pools.json``, resized by ``RECFORGE_<POOL>_POOL_SLOTS`` where ``env`` sets them."""
    env = os.environ if env is None else env
    return {p.name: {"slots": int(env.get(p.slots_env) or p.slots),
                     "description": p.description, "include_deferred": False}
            for p in POOLS}


def ensure_pools(env: dict, airflow: str = "airflow") -> None:
    """Create (or resize) every pool with ``airflow pools import``."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(import_document(env), f)
    try:
        subprocess.run([airflow, "pools", "import", f.name], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        os.unlink(f.name)


if __name__ == "__main__":
    json.dump(import_document(), sys.stdout, indent=4)
    print()
