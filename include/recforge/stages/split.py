"""The ``split`` task: assign each item to train/val/test by a hash of its source key, and
plan the pack shards.

Hash-based assignment is stable under growth: an image never moves between train and val
when new images arrive, so yesterday's validation set never leaks into today's training
set. Record order inside a split is a seeded hash order (a deterministic shuffle), and
each item gets its final record key here, so shards can be packed anywhere, in any order.
"""

from __future__ import annotations

import hashlib
import logging

from recforge import storage
from recforge.format.names import SPLITS
from recforge.run import Run

log = logging.getLogger(__name__)


def unit_hash(text: str, seed: int, salt: str) -> float:
    """A deterministic number in [0, 1) for a string."""
    digest = hashlib.sha256(f"{salt}:{seed}:{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_split(source_key: str, val_ratio: float, test_ratio: float, seed: int) -> str:
    h = unit_hash(source_key, seed, "split")
    if h < val_ratio:
        return "val"
    if h < val_ratio + test_ratio:
        return "test"
    return "train"


def shard_id(split: str, n: int) -> str:
    return f"{split}-{n:05d}"


def plan(items: list[dict], ids: dict[str, int], val_ratio: float, test_ratio: float,
         seed: int, shard_size: int) -> dict[str, list[dict]]:
    """shard id → planned records (with split, label, record key), in record-key order."""
    by_split: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for item in items:
        split = assign_split(item["source_key"], val_ratio, test_ratio, seed)
        # segmentation pairs have no image-level class: their label is the mask (0 here)
        label = ids[item["class_name"]] if item.get("class_name") else 0
        by_split[split].append({**item, "split": split, "label": label})
    shards: dict[str, list[dict]] = {}
    for split, rows in by_split.items():
        rows.sort(key=lambda r: (unit_hash(r["source_key"], seed, "order"), r["source_key"]))
        for i, row in enumerate(rows):
            row["record_key"] = i
        for n, start in enumerate(range(0, len(rows), shard_size)):
            shards[shard_id(split, n)] = rows[start:start + shard_size]
    return shards


def split(run: Run) -> dict:
    """Plans every shard in staging; returns the shard ids (mapped over by the DAG) and the
    planned records per split."""
    spec = run.spec
    items = storage.read_jsonl(run.items)
    ids = storage.read_json(run.classes)["ids"]
    shards = plan(items, ids, spec.splits.val_ratio, spec.splits.test_ratio, spec.splits.seed,
                  spec.pack.shard_size)
    for sid, rows in shards.items():
        storage.write_jsonl(run.shard_plan(sid), rows)
    counts = {s: sum(len(r) for k, r in shards.items() if k.startswith(s + "-")) for s in SPLITS}
    storage.write_json(run.shard_list, {"shards": sorted(shards), "planned": counts})
    log.info("split: %s in %d shards", counts, len(shards))
    return {"shards": sorted(shards), "planned": counts}
