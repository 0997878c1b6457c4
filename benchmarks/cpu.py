"""CPU seconds beside wall seconds, for the benchmarks that run whole commands.

A command's own CPU is what its processes used: itself and every child it waited for (the
pack workers, MXNet's process, ``im2rec.py``'s workers). The rest of the machine's CPU over
the same span is the local S3 server's (moto, or Ceph's gateway, OSD and monitor) on a
machine that runs nothing else: on AWS that work happens elsewhere. On N cores no schedule
finishes faster than (its own CPU + the server's) / N, so a wall time can be compared with
that floor, and a target below the floor can only be met with less work, not more overlap.
On a machine shared with other work, ``others`` counts that work too; a command run with
``server`` (a callable giving the local S3 server's CPU seconds, as :func:`pids_cpu` reads
them) also gets the server's own CPU, whatever else runs.

Linux only (``/proc``); elsewhere ``others`` and ``server`` are None.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple


class Spent(NamedTuple):
    """One command's wall seconds, its own CPU seconds (user + system, its waited-for
    children included), the rest of the machine's CPU seconds meanwhile and, where asked
    for, the local S3 server's processes' CPU seconds meanwhile."""
    wall: float
    cpu: float
    others: float | None
    server: float | None = None

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


def pids_cpu(pids: Iterable[int]) -> float | None:
    """CPU seconds (user + system, their waited-for children included) the running
    processes ``pids`` have spent so far (``/proc/<pid>/stat``), or None where none can be
    read. A server's daemons: read before and after a command, the difference is what
    they spent meanwhile, whatever else runs on the machine."""
    total, seen = 0, False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after "(comm)": state is field 3, utime stime cutime cstime are fields 14-17
        total += sum(int(x) for x in fields[11:15])
        seen = True
    return total / os.sysconf("SC_CLK_TCK") if seen else None


def _children_cpu() -> float:
    got = resource.getrusage(resource.RUSAGE_CHILDREN)
    return got.ru_utime + got.ru_stime


def run(cmd: list[str], server: Callable[[], float | None] | None = None,
        **kwargs) -> tuple[subprocess.CompletedProcess, Spent]:
    """``subprocess.run(cmd, **kwargs)`` and what it spent; ``server()``, where given, is
    read before and after (the S3 server's CPU seconds so far). Run one at a time: the
    children's CPU is read as a difference."""
    busy, cpu, t0 = machine_busy(), _children_cpu(), time.perf_counter()
    served = server() if server else None
    out = subprocess.run(cmd, **kwargs)
    wall = time.perf_counter() - t0
    cpu = _children_cpu() - cpu
    after, served_after = machine_busy(), server() if server else None
    others = None if busy is None or after is None else max(0.0, after - busy - cpu)
    spent_serving = None if served is None or served_after is None \
        else served_after - served
    return out, Spent(wall, cpu, others, spent_serving)
