"""The ``split`` task: assign each item to train/val/test by a hash of its source key (or
keep the split its source gave it: ``splits.from: source``), and plan the pack shards.

Hash-based assignment is stable under growth: an image never moves between train and val
when new images arrive, so yesterday's validation set never leaks into today's training
set. Each item gets its final record key here — a 63-bit hash of the seed and its source
key, so keys never shift as images come and go — and the split's record order is key
order (a deterministic shuffle). Shards are cut by content (``recforge.incremental.plan``)
so a change re-packs only the shards that hold it, and can be packed anywhere, in any
order. The run's content id and changes since the latest version are decided here: a run
whose content equals the latest version's plans no shard at all ("no changes").
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Iterable

from recforge import storage
from recforge.errors import PlanTooLarge
from recforge.format.names import SPLITS
from recforge.incremental import cache, changes, fingerprint
from recforge.incremental import plan as cdc
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


def shard_size_within(counts: dict[str, int], shard_size: int, max_shards: int | None) -> int:
    """The smallest shard size >= ``shard_size`` that plans ``counts`` (records per split)
    into at most ``max_shards`` shards in all (Airflow maps at most ``max_map_length`` tasks).

    Only shard boundaries move: record keys and order are fixed before sharding, so the
    merged splits are the same bytes whatever the shard size."""
    def shards(size: int) -> int:
        return _shards(counts, size)

    splits = sum(1 for n in counts.values() if n)
    if max_shards is None or shards(shard_size) <= max_shards:
        return shard_size
    if max_shards < splits:
        raise PlanTooLarge(
            f"{splits} non-empty splits need at least {splits} pack tasks, but this "
            f"deployment maps at most {max_shards} ([core] max_map_length); raise "
            "AIRFLOW__CORE__MAX_MAP_LENGTH")
    lo, hi = shard_size, max(counts.values())  # shards(hi) == splits <= max_shards
    while lo < hi:  # shards(size) never grows with size: the smallest size that fits
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if shards(mid) <= max_shards else (mid + 1, hi)
    return lo


# ``pack.shard_size: auto``. A pack task pays ~3.7 s of Airflow start-up (process, imports,
# API round trips) whatever it holds, so a shard should hold far more work than that.
PACK_IMAGES_PER_SECOND = 40  # one pack task's assumed rate: S3 read + decode + resize + encode
MIN_TASK_SECONDS = 30  # at least this much work per task: start-up stays ~10 % of it
AUTO_MIN_SHARD = PACK_IMAGES_PER_SECOND * MIN_TASK_SECONDS  # 1,200 images
AUTO_WAVES = 8  # at most ~this many rounds of shards per slot: the night's start-ups are bounded
# auto: a pack task holds several shards, at most ~15 min of work at the assumed rate
AUTO_TASK_MAX_IMAGES = PACK_IMAGES_PER_SECOND * 15 * 60  # 36,000 images


def _shards(counts: dict[str, int], size: int) -> int:
    return sum(-(-n // size) for n in counts.values() if n)


def auto_shard_size(counts: dict[str, int], slots: int | None) -> int:
    """``pack.shard_size: auto``: the shard size for ``counts`` (records per split) and
    ``slots`` pack tasks at once.

    ``AUTO_MIN_SHARD`` · 2^k, the smallest step that keeps the tasks within ``AUTO_WAVES``
    rounds per slot, stepped down while that leaves a slot idle (never below
    ``AUTO_MIN_SHARD``). Doubling steps keep the size stable: it moves only when the data
    doubles, and then unchanged chunks are reused from the cache, not re-packed."""
    slots = max(1, slots or 1)
    total = sum(counts.values())
    want = max(AUTO_MIN_SHARD, -(-total // (slots * AUTO_WAVES)))
    size = AUTO_MIN_SHARD
    while size < want:
        size *= 2
    while size > AUTO_MIN_SHARD and _shards(counts, size) < slots:
        size //= 2
    return size


def resolve_shard_size(shard_size: int | str, counts: dict[str, int], slots: int | None) -> int:
    """The spec's ``pack.shard_size``, with ``auto`` sized by :func:`auto_shard_size`."""
    return auto_shard_size(counts, slots) if shard_size == "auto" else int(shard_size)


def pack_tasks(sizes: dict[str, int], slots: int | None, max_tasks: int | None = None,
               auto: bool = False) -> list[list[str]]:
    """The shards each pack task packs, one after the other, given ``sizes`` (records per
    shard): the task with the most records first, and in each task its largest shard first,
    so the longest work starts first and a slot is not left with it at the end.

    A fixed ``pack.shard_size`` is one shard a task: the spec's "images per pack task".
    ``auto`` groups the shards into as few rounds of ``slots`` tasks as keep each task within
    ``AUTO_TASK_MAX_IMAGES`` (one round for most nights), balanced by records (each shard to
    the task with the fewest so far, largest shard first), at most ``max_tasks``: on
    Airflow each further round of tasks costs a scheduling gap, while the shards stay the
    cache's and merge's unit whatever the task count."""
    order = sorted(sizes, key=lambda s: (-sizes[s], s))
    if not auto:
        return [[s] for s in order]
    slots = max(1, slots or 1)
    rounds = max(1, -(-sum(sizes.values()) // (slots * AUTO_TASK_MAX_IMAGES)))
    n = min(len(order), slots * rounds, max_tasks or len(order))
    tasks: list[list[str]] = [[] for _ in range(n)]
    loads = [0] * n
    for sid in order:
        k = min(range(n), key=lambda i: (loads[i], i))
        tasks[k].append(sid)
        loads[k] += sizes[sid]
    return sorted(tasks, key=lambda t: (-sum(sizes[s] for s in t), t[0]))


def plan(items: Iterable[dict], ids: dict[str, int], val_ratio: float, test_ratio: float,
         seed: int, shard_size: int | str, max_shards: int | None = None,
         slots: int | None = None) -> dict[str, list[dict]]:
    """shard id → planned records (with split, label, record key, chunk), in record-key
    order; content-defined shards averaging ``shard_size`` (``auto``: sized for ``slots``
    pack tasks at once), at most ``max_shards`` of them (the average grows when needed).

    ``items`` may be a stream (``storage.iter_jsonl``): only the planned rows are held, with
    repeated strings (keys, class names, a name equal to its source key) held once."""
    by_split: dict[str, list[dict]] = {s: [] for s in SPLITS}
    shared: dict[str, str] = {}
    for item in items:  # a source split (splits.from: source) is kept as the source gave it
        split = item.get("split") or assign_split(item["source_key"], val_ratio, test_ratio,
                                                  seed)
        # segmentation pairs have no image-level class: their label is the mask (0 here)
        label = ids[item["class_name"]] if item.get("class_name") else 0
        # json.loads makes new key strings per row: interned, every row shares one of each
        row = {sys.intern(k): v for k, v in item.items()}
        row.update(split=split, label=label)
        if "objects" in row:  # detection: the ids its boxes get (part of the cache key)
            row["object_ids"] = [ids[o[0]] for o in row["objects"]]
        if isinstance(row.get("class_name"), str):
            row["class_name"] = shared.setdefault(row["class_name"], row["class_name"])
        if row.get("name") == row["source_key"]:
            row["name"] = row["source_key"]
        by_split[split].append(row)
    keys = cdc.assign_keys([r["source_key"] for rows in by_split.values() for r in rows], seed)
    for rows in by_split.values():
        for row in rows:
            row["record_key"] = keys[row["source_key"]]
    del keys
    counts = {s: len(r) for s, r in by_split.items()}
    shard_size = resolve_shard_size(shard_size, counts, slots)
    size = shard_size_within(counts, shard_size, max_shards)
    chunks = {s: cdc.chunk_split(rows, shard_size) for s, rows in by_split.items() if rows}
    planned, _ = cdc.fit_shards(chunks, size, cdc.chunk_avg(shard_size), max_shards)
    return {shard_id(s, n): rows for s, shards in planned.items()
            for n, rows in enumerate(shards)}



def split(run: Run) -> dict:
    """Plans every shard in staging; returns the shard ids, the shards of each pack task
    (``pack_tasks``, mapped over by the DAG, largest first) and the planned records per
    split."""
    spec = run.spec
    items = storage.iter_jsonl(run.items)  # streamed: at 10 M items, no list of them
    ids = storage.read_json(run.classes)["ids"]
    shards = plan(items, ids, spec.splits.val_ratio, spec.splits.test_ratio, spec.splits.seed,
                  spec.pack.shard_size, run.max_shards, run.slots)
    counts = {s: sum(len(r) for k, r in shards.items() if k.startswith(s + "-")) for s in SPLITS}
    content = decide_content(run, shards)
    if content["no_change"]:
        shards = {}  # nothing to pack, merge or publish: the run ends here, green
        log.info("split: no changes since %s (content id %s); nothing to build — trigger "
                 "with force_rebuild to build anyway", content["previous_version"],
                 content["content_id"][:12])
    if shards:  # published with the version: what `recforge cache prune` keeps for it
        previous = cache.previous_plan(content["previous_uri"])
        storage.write_json(run.cache_keys,
                           cache.mark_known(shards, content["options_hash"], previous))
    for sid, rows in shards.items():
        storage.write_jsonl(run.shard_plan(sid), rows)
    tasks = pack_tasks({sid: len(rows) for sid, rows in shards.items()}, run.slots,
                       run.max_shards, spec.pack.shard_size == "auto")
    storage.write_json(run.shard_list, {"shards": sorted(shards), "planned": counts,
                                        "pack_tasks": tasks})
    log.info("split: %s in %d shards, %d pack tasks", counts, len(shards), len(tasks))
    return {"shards": sorted(shards), "pack_tasks": tasks, "planned": counts,
            "no_change": content["no_change"], "content_id": content["content_id"]}


def decide_content(run: Run, shards: dict[str, list[dict]]) -> dict:
    """The run's content id and changes (kept in staging); ``no_change`` when the content id
    equals the latest published version's and ``force_rebuild`` is off."""
    classes = storage.read_json(run.classes)["classes"]
    opts = fingerprint.options_hash(run.spec)
    rows = [r for rs in shards.values() for r in rs]
    cid = fingerprint.content_id(rows, classes, opts)
    found = changes.detect(run.spec, storage.iter_jsonl(run.source_manifest), classes)
    storage.write_json(run.changes, found)
    same = cid == found["previous_content_id"]
    content = {"content_id": cid, "options_hash": opts, "no_change": same and not
               run.force_rebuild, "same_as_previous": same, "force_rebuild": run.force_rebuild,
               "previous_version": found["previous_version"],
               "previous_uri": found["previous_uri"]}
    storage.write_json(run.content, content)
    return content
