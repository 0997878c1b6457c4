"""CPU seconds beside wall seconds, for the benchmarks that run whole commands.

A command's own CPU is what its processes used: itself and every child it waited for (the
pack workers, MXNet's process, ``im2rec.py``'s workers). The rest of the machine's CPU over
the same span is the local S3 server's (moto, or Ceph's gateway, OSD and monitor) on a
machine that runs nothing else: on AWS that work happens elsewhere. On N cores no schedule
finishes faster than (its own CPU + the server's) / N, so a wall time can be compared with
that floor, and a target below the floor can only be met with less work, not more overlap.

Linux only (``/proc/stat``); elsewhere ``others`` is None.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from typing import NamedTuple


class Spent(NamedTuple):
    """One command's wall seconds, its own CPU seconds (user + system, its waited-for
    children included) and the rest of the machine's CPU seconds meanwhile."""
    wall: float
    cpu: float
    others: float | None

    def floor(self, cores: int | None = None) -> float:
        """The least wall time ``cores`` cores (this machine's by default) allow for the
        CPU work the command and the rest of the machine did."""
        return (self.cpu + (self.others or 0.0)) / (cores or os.cpu_count() or 1)


def machine_busy() -> float | None:
    """CPU seconds every core has spent not idle since boot (``/proc/stat``), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal: idle and iowait are not busy
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    got = resource.getrusage(resource.RUSAGE_CHILDREN)
    return got.ru_utime + got.ru_stime


def run(cmd: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, Spent]:
    """``subprocess.run(cmd, **kwargs)`` and what it spent. Run one at a time: the
    children's CPU is read as a difference."""
    busy, cpu, t0 = machine_busy(), _children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, **kwargs)
    wall = time.perf_counter() - t0
    cpu = _children_cpu() - cpu
    after = machine_busy()
    others = None if busy is None or after is None else max(0.0, after - busy - cpu)
    return out, Spent(wall, cpu, others)
