"""Progress for long loops. In a log (Airflow tasks, a CLI whose stderr is not a terminal): at
most one line every ``every_s`` seconds, with done/total, the rate and the time left, so a task
log shows a living task without drowning in lines. On a terminal (:func:`use_bars`, which
``recforge build`` calls when stderr is a TTY): a tqdm bar instead, drawn by the process that
asked for bars; its forked workers stay quiet, their parent draws their progress."""

from __future__ import annotations

import logging
import os
import time

EVERY_S = 10.0  # seconds between progress lines (tests lower it)
_bars = {"pid": None}  # the process that draws bars, if any


def use_bars(on: bool = True) -> None:
    """Bars instead of lines from now on, drawn by this process (tqdm, on stderr)."""
    _bars["pid"] = os.getpid() if on else None


def drawing_bars() -> bool:
    return _bars["pid"] == os.getpid()


def quiet_worker() -> bool:
    """A worker forked from the process that draws bars: it reports through its parent."""
    return _bars["pid"] is not None and _bars["pid"] != os.getpid()


class Progress:
    """``update(n)`` after each item; logs ``<what>: done/total (pct), rate/s, ETA``."""

    def __init__(self, what: str, total: int | None, log: logging.Logger,
                 every_s: float | None = None, unit: str = "images"):
        self.what, self.total, self.log, self.unit = what, total, log, unit
        self.every_s = EVERY_S if every_s is None else every_s
        self.done = 0
        self.started = self._last = time.monotonic()
        self._bar = None
        if drawing_bars():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=what, unit=f" {unit}", dynamic_ncols=True)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            if self.total is not None and self.done >= self.total:
                self.close()
            return
        if quiet_worker():
            return
        now = time.monotonic()
        if now - self._last >= self.every_s and (self.total is None or self.done < self.total):
            self._last = now
            self.log.info("%s", self.line(now))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def line(self, now: float | None = None) -> str:
        elapsed = max((now or time.monotonic()) - self.started, 1e-9)
        rate = self.done / elapsed
        if not self.total:
            return f"{self.what}: {self.done} {self.unit}, {rate:.1f} {self.unit}/s"
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = f"{left:.0f} s" if left != float("inf") else "?"
        pct = 100.0 * self.done / self.total
        return (f"{self.what}: {self.done}/{self.total} {self.unit} ({pct:.0f}%), "
                f"{rate:.1f} {self.unit}/s, ETA {eta}")


def reset_peak_rss() -> bool:
    """Start this process's peak resident set (``VmHWM``) again from its current size, so
    :func:`peak_rss_mb` describes what follows (a pool worker packs shard after shard).
    Linux only (``/proc/self/clear_refs``); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float | None:
    """This process's peak resident set in MiB since it started or since
    :func:`reset_peak_rss` (Linux's ``VmHWM``; None elsewhere). Not ``ru_maxrss``: that
    keeps the high-water mark of the process it was forked from, through ``exec`` too."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None
