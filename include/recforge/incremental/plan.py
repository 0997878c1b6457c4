"""Record keys and content-defined chunks and shards.

A record key is a 63-bit hash of the seed and the source key, so it never shifts when other
images come and go; a split's ``.idx`` is in key order (a seeded pseudo-random order, so an
un-shuffled reader does not see one class at a time). Chunks (the cache's unit, about
:data:`CHUNK_AVG` records) and shards (a pack task's unit, about ``pack.shard_size``) end
where a hash of the last record's key meets a condition, with min/max sizes, so a change
moves only the boundaries next to it: the other chunks and shards keep their records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

KEY_BITS = 63  # MXNet reads keys as size_t / uint64 (.idx, record header); JSON/pandas int64
CHUNK_AVG = 2  # records per cache chunk on average: 1 % changed re-packs ~2 % of records


def _h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def record_key(source_key: str, seed: int, attempt: int = 0) -> int:
    """The record key of a source key: a 63-bit hash (``attempt`` > 0 after a collision)."""
    suffix = f"#{attempt}" if attempt else ""
    return _h64(f"record:{seed}:{source_key}{suffix}") >> (64 - KEY_BITS)


def assign_keys(source_keys: Sequence[str], seed: int) -> dict[str, int]:
    """source key → record key, unique over the whole dataset. A collision (about n²/2⁶⁴) is
    resolved deterministically: in source-key order, a later key re-hashes with ``#1``,
    ``#2``… until its key is free."""
    out: dict[str, int] = {}
    taken: set[int] = set()
    for key in sorted(source_keys):
        attempt = 0
        k = record_key(key, seed)
        while k in taken:
            attempt += 1
            k = record_key(key, seed, attempt)
        taken.add(k)
        out[key] = k
    return out


def cut_points(keys: Sequence[int], avg: int, min_size: int, max_size: int, salt: str,
               weights: Sequence[int] | None = None, unit: int = 1) -> list[int]:
    """End indices of content-defined segments of ``keys``, sizes counted in ``weights``
    (1 per key by default; ``unit`` is a weight's nominal size): a segment ends after a key
    whose hash is 0 mod ``(avg - min) / unit + 1`` once it holds ``min_size``, and always at
    ``max_size``. Expected size ≈ ``avg``; each cut depends only on the keys since the last
    one, so a change moves the cuts next to it and no others."""
    weights = weights or [1] * len(keys)
    steps = max(1, round((avg - min_size) / unit)) + 1
    ends, size = [], 0
    for i, (k, w) in enumerate(zip(keys, weights, strict=True)):
        size += w
        if size >= max_size or (size >= min_size and _h64(f"{salt}:{k}") % steps == 0):
            ends.append(i + 1)
            size = 0
    if keys and (not ends or ends[-1] != len(keys)):
        ends.append(len(keys))
    return ends


def bounds(avg: int) -> tuple[int, int]:
    """(min, max) segment size for an average: a quarter and four times."""
    return max(1, avg // 4), max(2, 4 * avg)


def chunk_avg(shard_size: int) -> int:
    """Chunks stay well inside a shard: tiny test shards get tiny chunks."""
    return max(1, min(CHUNK_AVG, shard_size // 4))


def chunk_split(rows: list[dict], shard_size: int) -> list[list[dict]]:
    """One split's rows (with record keys) → content-defined chunks in key order; rows get
    their ``chunk`` number. The chunk size follows ``pack.shard_size`` only, never the map
    limit, so growing shards for Airflow keeps every chunk in the cache."""
    rows = sorted(rows, key=lambda r: r["record_key"])
    avg = chunk_avg(shard_size)
    lo, hi = bounds(avg)
    ends = cut_points([r["record_key"] for r in rows], avg, lo, hi, "chunk")
    chunks = [rows[a:b] for a, b in zip([0, *ends], ends, strict=False)]
    for n, chunk in enumerate(chunks):
        for row in chunk:
            row["chunk"] = n
    return chunks


def shards_of(chunks: list[list[dict]], avg: int, unit: int) -> list[list[dict]]:
    """Chunks → content-defined shards of whole chunks (each a list of rows), about ``avg``
    records each."""
    lo, hi = bounds(avg)
    ends = cut_points([c[-1]["record_key"] for c in chunks], avg, lo, hi, "shard",
                      weights=[len(c) for c in chunks], unit=unit)
    return [[r for c in chunks[a:b] for r in c] for a, b in zip([0, *ends], ends, strict=False)]


def fit_shards(chunks: dict[str, list[list[dict]]], size: int, unit: int,
               max_shards: int | None) -> tuple[dict[str, list[list[dict]]], int]:
    """Shards of every split's chunks with average ``size``; the average grows (×1.5, so
    deterministically) until the count is within ``max_shards``. Returns the shards per
    split and the average used."""
    while True:
        planned = {s: shards_of(c, size, unit) for s, c in chunks.items()}
        if max_shards is None or sum(len(v) for v in planned.values()) <= max_shards:
            return planned, size
        size = max(size + 1, size * 3 // 2)
