"""Progress lines for long loops: at most one every ``every_s`` seconds, with done/total,
the rate and the time left, so a task log shows a living task without drowning in lines."""

from __future__ import annotations

import logging
import time

EVERY_S = 10.0  # seconds between progress lines (tests lower it)


class Progress:
    """``update(n)`` after each item; logs ``<what>: done/total (pct), rate/s, ETA``."""

    def __init__(self, what: str, total: int | None, log: logging.Logger,
                 every_s: float | None = None, unit: str = "images"):
        self.what, self.total, self.log, self.unit = what, total, log, unit
        self.every_s = EVERY_S if every_s is None else every_s
        self.done = 0
        self.started = self._last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every_s and (self.total is None or self.done < self.total):
            self._last = now
            self.log.info("%s", self.line(now))

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
