"""The report's near-duplicates section: how many pairs, and the closest, in a fixed order."""

from __future__ import annotations

import numpy as np

from recforge import phash
from recforge.report.sections.near_duplicates import NEAR_DUP_PAIRS, _pairs


def _records(rng, split: str, n: int, base: list[int], start: int) -> list[dict]:
    """``n`` records whose hashes are a few bit flips from one of the ``base`` hashes:
    many pairs across splits, many at the same distance (ties on bits apart)."""
    out = []
    for i in range(n):
        h = base[i % len(base)]
        for bit in rng.choice(64, size=int(rng.integers(0, 3)), replace=False):
            h ^= 1 << int(bit)
        out.append({"split": split, "key": start + int(rng.integers(0, 40)),
                    "phash": f"{h:016x}"})
    return out


def _every_pair(by_split: dict[str, list[dict]], threshold: int) -> list:
    """Every pair by brute force, in the order the section promises: bits apart, then the
    first record's split and key, then search order (first record, then second)."""
    pairs = []
    splits = sorted(by_split)
    for i, a in enumerate(splits):
        for b in splits[i + 1:]:
            for ra in by_split[a]:
                for rb in by_split[b]:
                    d = phash.hamming(ra["phash"], rb["phash"])
                    if d <= threshold:
                        pairs.append((d, ra, rb))
    pairs.sort(key=lambda p: (p[0], p[1]["split"], p[1]["key"]))
    return pairs


def test_the_closest_pairs_and_the_count_are_those_of_every_pair():
    rng = np.random.default_rng(11)
    base = [int(rng.integers(0, 1 << 62)) for _ in range(5)]
    by_split = {"train": _records(rng, "train", 120, base, 0),
                "val": _records(rng, "val", 40, base, 1000),
                "test": _records(rng, "test", 30, base, 2000)}
    want = _every_pair(by_split, 4)
    assert len(want) > 20 * NEAR_DUP_PAIRS  # far more pairs than the section shows
    assert len({p[0] for p in want[:NEAR_DUP_PAIRS + 1]}) == 1  # the cut falls in a tie
    total, closest = _pairs(by_split, 4)
    assert total == len(want)
    assert [(d, id(a), id(b)) for d, a, b in closest] == \
        [(d, id(a), id(b)) for d, a, b in want[:NEAR_DUP_PAIRS]]


def test_string_keys_sort_as_text():
    rng = np.random.default_rng(3)
    base = [int(rng.integers(0, 1 << 62)) for _ in range(3)]
    by_split = {s: [{**r, "key": f"k{r['key']}"} for r in _records(rng, s, 30, base, o)]
                for s, o in (("train", 0), ("val", 100))}
    want = _every_pair(by_split, 3)
    total, closest = _pairs(by_split, 3)
    assert total == len(want)
    assert [(d, id(a), id(b)) for d, a, b in closest] == \
        [(d, id(a), id(b)) for d, a, b in want[:NEAR_DUP_PAIRS]]


def test_no_pairs():
    by_split = {"train": [{"split": "train", "key": 0, "phash": "0" * 16}],
                "val": [{"split": "val", "key": 1, "phash": "f" * 16}]}
    assert _pairs(by_split, 4) == (0, [])
