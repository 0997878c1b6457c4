"""The content-addressed cache of packed chunks and shards, in S3 next to the staging runs:
``<staging>/cache/<dataset>/chunks/<chunk hash>/chunk.bin`` and ``…/shards/<shard hash>/``.

A **chunk** (about eight records, ``plan.chunk_split``) is one object: its ``.rec`` bytes,
then its record manifest and quarantine entries as JSON, then a trailer with both lengths
and the SHA-256 of the rest; its name is the hash of its ordered rows (key, ETag, label,
record key, …) and of every option that affects bytes (``fingerprint``). A **shard** entry
holds a whole pack task's outputs plus ``entry.json`` (each file's size and S3 ETag, written
last). Pack reuses an unchanged shard with server-side copies, and builds a changed shard
from its cached chunks, fetching and packing only the chunks that changed. Anything that
does not verify (checksum, size, ETag) is re-packed and written again, never trusted.

``prune`` keeps the entries the last N published versions were built from (each version
carries ``cache_keys.json``); published versions are copies, so pruning never breaks one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby
from pathlib import Path

from recforge import quarantine, releases, storage
from recforge.format import names
from recforge.incremental import fingerprint
from recforge.run import Run, cache_uri
from recforge.spec import DatasetSpec

log = logging.getLogger(__name__)
CHUNKS, SHARDS, ENTRY, CHUNK = "chunks", "shards", "entry.json", "chunk.bin"
TRAILER = struct.Struct("<QQ32s")  # rec length, json length, sha256(rec + json)


class CacheCorrupt(ValueError):
    """A cache object that does not verify: it is re-packed, never used."""


def chunks(rows: list[dict]) -> list[list[dict]]:
    """A shard's rows → its chunks (consecutive rows of one ``chunk`` number)."""
    return [list(g) for _, g in groupby(rows, key=lambda r: r["chunk"])]


def mark_known(shards: dict[str, list[dict]], opts_hash: str, known: set[str]) -> list[str]:
    """Every cache entry a plan uses (``chunks/<h>``, ``shards/<h>``: ``cache_keys.json``);
    each row's ``cache`` hint says whether ``known`` (the latest version's entries) has its
    shard (``"shard"``) or its chunk (``"chunk"``), so pack asks the cache only for what
    should be there. A hint is never trusted: what is fetched is verified."""
    out = set()
    for rows in shards.values():
        shard = f"{SHARDS}/{fingerprint.shard_hash(rows, opts_hash)}"
        out.add(shard)
        for c in chunks(rows):
            entry = f"{CHUNKS}/{fingerprint.chunk_hash(c, opts_hash)}"
            out.add(entry)
            hint = "shard" if shard in known else "chunk" if entry in known else None
            for r in c:
                r["cache"] = hint
    return sorted(out)


def known_entries(version_uri: str | None) -> set[str]:
    """The cache entries a published version was built from (empty if none or unknown)."""
    uri = storage.join(version_uri, names.CACHE_KEYS) if version_uri else None
    return set(storage.read_json(uri)["entries"]) if uri and storage.exists(uri) else set()


# ---- chunks: one object each
def encode_chunk(rec: bytes, records: list[dict], quarantined: str) -> bytes:
    meta = json.dumps({"records": records, "quarantine": quarantined},
                      sort_keys=True).encode("utf-8")
    return rec + meta + TRAILER.pack(len(rec), len(meta), hashlib.sha256(rec + meta).digest())


def split_packed(workdir: Path, groups: list[list[dict]]) -> list[tuple[bytes, list[dict], str]]:
    """A pack of several chunks' rows in one go → each chunk's (rec bytes, records with
    chunk-relative offsets, quarantine text), by the records' keys and the entries' keys."""
    rec = (workdir / names.rec(names.SHARD_PART)).read_bytes()
    records = {r["key"]: r for r in storage.read_jsonl(str(workdir / names.RECORDS))}
    refused = {e.source_key: e for e in quarantine.loads(
        (workdir / names.QUARANTINE).read_bytes())}
    ends = sorted(r["offset"] for r in records.values()) + [len(rec)]
    end_of = {o: ends[i + 1] for i, o in enumerate(ends[:-1])}
    out = []
    for group in groups:
        mine = [records[r["record_key"]] for r in group if r["record_key"] in records]
        start = mine[0]["offset"] if mine else 0
        stop = end_of[mine[-1]["offset"]] if mine else 0
        out.append((rec[start:stop], [{**r, "offset": r["offset"] - start} for r in mine],
                    quarantine.dumps([refused[r["source_key"]] for r in group
                                      if r["source_key"] in refused]).decode("utf-8")))
    return out


def decode_chunk(blob: bytes) -> tuple[bytes, list[dict], str]:
    """``(rec bytes, records, quarantine text)`` of a chunk object; raises CacheCorrupt."""
    if len(blob) < TRAILER.size:
        raise CacheCorrupt("shorter than its trailer")
    n_rec, n_meta, digest = TRAILER.unpack(blob[-TRAILER.size:])
    body = blob[:-TRAILER.size]
    if n_rec + n_meta != len(body) or hashlib.sha256(body).digest() != digest:
        raise CacheCorrupt("checksum or lengths do not match")
    meta = json.loads(body[n_rec:])
    return body[:n_rec], meta["records"], meta["quarantine"]


def assemble(parts: list[tuple[bytes, list[dict], str]], out: Path) -> dict:
    """Chunks, in order → ``out/part.rec/.idx/.lst``, ``records.jsonl`` and the quarantine,
    byte for byte what packing the whole shard at once writes."""
    part = names.SHARD_PART
    manifest, refused, base = [], [], 0
    with open(out / names.rec(part), "wb") as rec, \
            open(out / names.idx(part), "w", encoding="ascii", newline="\n") as idx, \
            open(out / names.lst(part), "w", encoding="utf-8") as lst:
        for data, records, quarantined in parts:
            rec.write(data)
            for r in records:
                r = {**r, "offset": r["offset"] + base}
                idx.write(f"{r['key']}\t{r['offset']}\n")
                lst.write(names.lst_line(r["key"], r["label"], r["name"]))
                manifest.append(r)
            refused.append(quarantined)
            base += len(data)
    storage.write_jsonl(str(out / names.RECORDS), manifest)
    text = "".join(refused)
    (out / names.QUARANTINE).write_text(text, encoding="utf-8")
    return {"packed": len(manifest), "quarantined": len(quarantine.loads(text.encode()))}


def pack_shard(run: Run, rows: list[dict], work: Path,
               pack_chunk: Callable[[list[dict], Path], dict], fetch_threads: int = 8) -> dict:
    """Build a shard in ``work`` from its chunks: cached ones are fetched and verified, the
    others packed with ``pack_chunk(rows, dir)`` and stored. Returns counts and hit/miss."""
    opts = fingerprint.options_hash(run.spec)
    groups = chunks(rows)
    uris = [run.cache(CHUNKS, fingerprint.chunk_hash(g, opts), CHUNK) for g in groups]
    hinted = [i for i, g in enumerate(groups) if g[0].get("cache")]
    parts: list = [None] * len(groups)
    for i, blob in zip(hinted, storage.prefetch([uris[i] for i in hinted], fetch_threads),
                       strict=True):
        if isinstance(blob, Exception):
            if storage.is_transient(blob):
                raise blob
            log.info("cache chunk %s is gone (pruned?): re-packing it", uris[i])
            continue
        try:
            parts[i] = decode_chunk(blob)
        except CacheCorrupt as exc:
            log.warning("cache chunk %s is corrupt (%s): re-packing it", uris[i], exc)
    misses = [i for i, p in enumerate(parts) if p is None]
    if misses:  # one pass over all missing chunks: one prefetch window, then parallel PUTs
        d = work / "packed"
        d.mkdir()
        pack_chunk([r for i in misses for r in groups[i]], d)
        for i, part in zip(misses, split_packed(d, [groups[i] for i in misses]), strict=True):
            parts[i] = part
        with ThreadPoolExecutor(fetch_threads) as pool:
            list(pool.map(lambda i: storage.put_bytes(uris[i], encode_chunk(*parts[i])), misses))
    counts = assemble(parts, work)
    return {**counts, "chunks": len(groups), "chunks_packed": len(misses)}


# ---- shards: a folder of the pack task's outputs, entry.json last
def _shard_entry(run: Run, rows: list[dict]) -> str:
    return run.cache(SHARDS, fingerprint.shard_hash(rows, fingerprint.options_hash(run.spec)))


def reuse_shard(run: Run, shard_id: str, rows: list[dict], files: tuple[str, ...]) -> dict | None:
    """Copy an unchanged shard's cached outputs (server-side) to this run's shard output and
    return its counts; None when it is not cached or does not verify."""
    entry = _shard_entry(run, rows)
    if not rows or rows[0].get("cache") != "shard" or not storage.exists(
            storage.join(entry, ENTRY)):
        return None
    doc = storage.read_json(storage.join(entry, ENTRY))
    found = {o.key: (o.size, o.etag) for o in storage.list_objects(entry)}
    bad = [f for f in files if tuple(doc["files"].get(f, ())) != found.get(f)]
    if bad:
        log.warning("cache shard %s does not verify (%s): re-packing it", entry, bad)
        return None
    for f in files:
        storage.copy(storage.join(entry, f), run.shard_output(shard_id, f))
    return doc["counts"]


def store_shard(run: Run, shard_id: str, rows: list[dict], files: tuple[str, ...],
                counts: dict) -> None:
    """Copy this run's shard outputs into the cache (server-side), ``entry.json`` last."""
    entry = _shard_entry(run, rows)
    for f in files:
        storage.copy(run.shard_output(shard_id, f), storage.join(entry, f))
    found = {o.key: [o.size, o.etag] for o in storage.list_objects(entry)}
    storage.write_json(storage.join(entry, ENTRY), {
        "files": {f: found[f] for f in files}, "shard": shard_id, "run_id": run.run_id,
        "counts": {k: counts[k] for k in ("packed", "quarantined")}})


# ---- prune
def published_versions(spec: DatasetSpec) -> list[tuple[str, dict]]:
    """``(version, manifest)`` of every published version, oldest first."""
    root = releases.dataset_root(spec)
    found = []
    for obj in storage.list_objects(root):
        version, _, rest = obj.key.partition("/")
        if rest == names.MANIFEST:
            found.append((version, storage.read_json(storage.join(root, obj.key))))
    return sorted(found, key=lambda vm: (vm[1].get("published_at", ""), vm[0]))


def prune(spec: DatasetSpec, keep_versions: int, dry_run: bool = False) -> dict:
    """Delete the cache entries none of the last ``keep_versions`` published versions was
    built from. Published versions hold copies, so none of them breaks."""
    if keep_versions < 1:
        raise ValueError("keep at least 1 version (the latest is what tomorrow builds on)")
    kept = published_versions(spec)[-keep_versions:]
    used: set[str] = set()
    for version, _ in kept:
        uri = releases.version_uri(spec, version, names.CACHE_KEYS)
        if storage.exists(uri):
            used |= set(storage.read_json(uri)["entries"])
    root = cache_uri(spec)
    entries = sorted({"/".join(o.key.split("/")[:2]) for o in storage.list_objects(root)})
    stale = [e for e in entries if e not in used]
    if not dry_run:
        for e in stale:
            storage.delete_prefix(storage.join(root, e))
    log.info("cache prune %s: %d entries, %d used by versions %s, %s %d", spec.name,
             len(entries), len(entries) - len(stale), [v for v, _ in kept],
             "would delete" if dry_run else "deleted", len(stale))
    return {"entries": len(entries), "kept": len(entries) - len(stale), "deleted": len(stale),
            "versions": [v for v, _ in kept], "dry_run": dry_run}
