"""Record keys that depend only on their source key, and content-defined chunks and shards
that survive change (no S3 needed)."""

from __future__ import annotations

import random

import pytest

from recforge.incremental import plan as cdc
from recforge.stages import split

IDS = {f"c{i}": i for i in range(10)}


def _items(n: int, prefix: str = "") -> list[dict]:
    return [{"source_key": f"c{i % 10}/{prefix}{i:06d}.jpg", "class_name": f"c{i % 10}",
             "etag": "e0", "name": f"c{i % 10}/{prefix}{i:06d}.jpg"} for i in range(n)]


def _plan(items, shard_size=100, max_shards=None):
    return split.plan([dict(i) for i in items], IDS, 0.1, 0.0, 7, shard_size, max_shards)


def _units(plan: dict, what: str) -> set[tuple]:
    """Each shard (or chunk) as the tuple of its rows' identities: a unit that is in both
    plans is reused from the cache; one that is not is re-packed."""
    out = set()
    for rows in plan.values():
        groups = [rows] if what == "shard" else [
            [r for r in rows if r["chunk"] == c] for c in dict.fromkeys(r["chunk"] for r in rows)]
        out |= {tuple((r["source_key"], r["etag"], r["split"]) for r in g) for g in groups}
    return out


def test_keys_are_63_bit_hashes_that_never_shift():
    keys = cdc.assign_keys([i["source_key"] for i in _items(5000)], seed=7)
    assert len(set(keys.values())) == 5000 and all(0 <= k < 2**63 for k in keys.values())
    fewer = cdc.assign_keys([i["source_key"] for i in _items(5000)[::2]], seed=7)
    assert all(keys[k] == v for k, v in fewer.items())
    assert cdc.assign_keys(["a/1.jpg"], seed=8)["a/1.jpg"] != keys.get("a/1.jpg", 0)


def test_a_key_collision_is_resolved_deterministically(monkeypatch):
    real = cdc.record_key
    monkeypatch.setattr(cdc, "record_key", lambda key, seed, attempt=0: 42 if attempt == 0
                        else real(key, seed, attempt))
    one = cdc.assign_keys(["b.jpg", "a.jpg", "c.jpg"], seed=0)
    assert one == cdc.assign_keys(["c.jpg", "a.jpg", "b.jpg"], seed=0)
    assert one["a.jpg"] == 42 and len(set(one.values())) == 3  # the first in key order wins


def test_shards_average_the_shard_size_within_min_and_max():
    plan = _plan(_items(50_000), shard_size=500)
    sizes = [len(r) for r in plan.values()]
    lo, hi = cdc.bounds(500)
    last = {max(sid for sid in plan if sid.startswith(s)) for s in ("train", "val")}
    assert all(s <= hi for s in sizes)
    assert all(len(rows) >= lo for sid, rows in plan.items() if sid not in last)
    assert 350 <= sum(sizes) / len(sizes) <= 650
    for rows in plan.values():  # each shard is a run of increasing keys
        assert [r["record_key"] for r in rows] == sorted(r["record_key"] for r in rows)


@pytest.mark.parametrize("change", ["added", "changed", "removed"])
def test_one_percent_changed_repacks_only_what_holds_it(change):
    """The goal: 1 % of images changed, spread at random → at most 3 % of the cache units
    (chunks) re-packed, and the pack tasks (shards) that re-plan without holding a change
    (boundary spill) at most 3 % of the shards."""
    n = 40_000
    base = _items(n)
    rnd = random.Random(change)
    picked = set(rnd.sample(range(n), n // 100))
    if change == "added":
        after = base + _items(n // 100, prefix="new-")
    elif change == "changed":
        after = [{**it, "etag": "e1"} if i in picked else it for i, it in enumerate(base)]
    else:
        after = [it for i, it in enumerate(base) if i not in picked]
    before_plan, after_plan = _plan(base, 500), _plan(after, 500)
    chunks_before, chunks_after = _units(before_plan, "chunk"), _units(after_plan, "chunk")
    repacked = len(chunks_after - chunks_before) / len(chunks_after)
    assert repacked <= 0.03, f"{repacked:.1%} of chunks re-packed"

    ident = lambda rows: {(r["source_key"], r["etag"]) for r in rows}  # noqa: E731
    touched = {k for k, _ in ident(after) ^ ident(base)}
    shards_after = _units(after_plan, "shard")
    new_shards = shards_after - _units(before_plan, "shard")
    spill = [s for s in new_shards if not any(k in touched for k, _, _ in s)]
    if change == "removed":  # a shard that lost a record holds no changed key any more
        removed = {base[i]["source_key"] for i in picked}
        old_shards = _units(before_plan, "shard") - shards_after
        spill = [s for s in old_shards if not any(k in removed for k, _, _ in s)]
    assert len(spill) <= 0.03 * len(shards_after), f"{len(spill)} shards moved for nothing"


def test_the_map_limit_grows_shards_and_keeps_every_chunk():
    items = _items(20_000)
    free, capped = _plan(items, 100), _plan(items, 100, max_shards=20)
    assert len(free) > 20 and len(capped) <= 20
    assert _units(free, "chunk") == _units(capped, "chunk")  # nothing to re-pack
    keys = lambda p: sorted(r["record_key"] for rows in p.values() for r in rows)  # noqa: E731
    assert keys(free) == keys(capped)
