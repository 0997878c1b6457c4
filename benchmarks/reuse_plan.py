"""What a rewritten shard's upload sends, by record size and change rate: the arithmetic of
``storage.plan_reusing`` (S3's 5 MiB part rule, parts in byte order) over synthetic shards,
no store needed. A night that changes a fraction of the images rewrites every shard holding
one; the runs of unchanged chunks between changes are what the store can copy, and every
part sent between two copies must hold 5 MiB too, so small records and dense changes leave
little to copy.

Records' sizes are log-normal around the mean given (sigma 0.5), chunks hold two records
(``incremental.plan.CHUNK_AVG``), changed records are spread at random, and a changed
record's whole chunk is packed again. Prints the share of a rewritten shard's bytes its
upload sends, the median over ``--trials`` shards.

    PYTHONPATH=include python benchmarks/reuse_plan.py
    PYTHONPATH=include python benchmarks/reuse_plan.py --records 4800 --sizes 110
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from recforge.storage import Reusable, plan_reusing  # noqa: E402


def sent_share(records: int, mean_kb: float, fraction: float, rng: random.Random) -> float:
    """The share of one rewritten shard's bytes that its upload sends."""
    sizes = [max(1, int(rng.lognormvariate(0, 0.5) * mean_kb * 1000 / 1.133))
             for _ in range(records)]  # e^(sigma^2/2) = 1.133: the mean is mean_kb
    chunks = [sum(sizes[i:i + 2]) for i in range(0, records, 2)]
    changed = {i // 2 for i in range(records) if rng.random() < fraction}
    changed.add(rng.randrange(len(chunks)))  # a rewritten shard holds at least one change
    runs, at = [], 0
    for i, size in enumerate(chunks):
        if i not in changed:
            if runs and runs[-1].start + runs[-1].length == at:
                runs[-1] = runs[-1]._replace(length=runs[-1].length + size)
            else:
                runs.append(Reusable(at, size, "previous", at, "etag"))
        at += size
    pieces = plan_reusing(at, runs)
    return sum(p[2] for p in pieces if p[0] == "send") / at if pieces else 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, nargs="+", default=[500, 4800],
                    help="records per shard (500: the benchmarks' shards; 4,800: auto at "
                         "ImageNet size)")
    ap.add_argument("--sizes", type=float, nargs="+", default=[30, 110, 400],
                    help="mean record size, kB (30: photos resized to 256; 110: ImageNet; "
                         "400: full-size photos)")
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.001, 0.01, 0.05])
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print("share of a rewritten shard's bytes that its upload sends (the rest is copied "
          "on the store)")
    print(f"{'records':>8} {'mean kB':>8} {'shard MB':>9} " +
          " ".join(f"{f:>8.1%}" for f in args.fractions))
    for records in args.records:
        for mean in args.sizes:
            shares = [statistics.median(sent_share(records, mean, f, rng)
                                        for _ in range(args.trials)) for f in args.fractions]
            print(f"{records:>8} {mean:>8.0f} {records * mean / 1000:>9.0f} " +
                  " ".join(f"{s:>8.0%}" for s in shares))
    return 0


if __name__ == "__main__":
    sys.exit(main())
