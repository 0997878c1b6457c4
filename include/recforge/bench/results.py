"""What both loaders' results share: the ``bench.json`` schema, latency numbers, the pick.

The ImageRecordIter benchmark and the segmentation loader write the same result layout, so
floors, the quality gate and ``bench.json`` work unchanged for either; the pieces they
compute alike live here, below both.
"""

from __future__ import annotations

import math

SCHEMA = "recforge.bench/1"

# Two settings within this fraction of the best throughput are "equal": prefer fewer threads,
# they leave cores to the training process.
TIE_FRACTION = 0.03


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), without importing numpy."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def recommend(runs: list[dict]) -> dict:
    """The fastest setting; among settings within TIE_FRACTION of it, the fewest threads."""
    best = max(r["images_per_sec"] for r in runs)
    ok = [r for r in runs if r["images_per_sec"] >= best * (1 - TIE_FRACTION)]
    pick = min(ok, key=lambda r: (r["effective_threads"], -r["images_per_sec"]))
    return {
        "preprocess_threads": pick["effective_threads"],
        "images_per_sec": pick["images_per_sec"],
        "p99_ms": pick["latency_ms"]["p99"],
        "why": (f"fastest measured setting (within {TIE_FRACTION:.0%} of the best, fewest "
                "threads); values above the cap are not useful: MXNet lowers them silently"),
    }
