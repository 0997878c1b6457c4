"""The content-addressed cache of packed shards, in S3 next to the staging runs:
``<staging>/cache/<dataset>/shards/<shard hash>/``.

A **shard entry** holds a whole pack task's outputs plus ``entry.json`` (written last: each
file's size and S3 ETag, and the shard's **chunk index**). A chunk (about two records,
``plan.chunk_split``) is the unit of reuse: its name is the hash of its ordered rows (key,
ETag, label, record key, …) and of every option that affects bytes (``fingerprint``); the
index gives each chunk's byte range in the entry's ``part.rec``, the SHA-256 of those
bytes, its record manifest and its quarantine entries.

An entry is where its shard's bytes live: a run's ``shard.json`` points at it (``files_at``)
and merge composes from there, so an unchanged shard costs one verified listing and no
copy. A changed shard is built from the
chunks the previous version already packed: each planned row names the previous shard
whose key range holds it (``mark_known``), pack reads those shards' indexes and fetches the
unchanged chunks' bytes in a few coalesced ranged GETs of their ``part.rec`` (not one GET
per chunk), and packs only the chunks it found nowhere. Anything that does not verify
(a chunk's SHA-256, a file's size or ETag) is re-packed, never trusted. The new entry's
``part.rec`` is assembled and checked locally as always, but its upload copies the runs of
fetched chunks that lie back to back in one previous ``part.rec`` on the store
(``UploadPartCopy``, pinned to the ETag that entry recorded) where a run can be a part of
5 MiB or more, and sends the rest (``reusable``, ``storage.Reusable``). A shard none of
whose chunks came from the cache (a fresh build) keeps the files its one pack wrote
(``adopt``: byte for byte what assembling them would write, its chunks hashed as pack
wrote them).

``prune`` keeps the entries the last N published versions were built from (each version
carries ``cache_keys.json``); published versions are copies, so pruning never breaks one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby
from pathlib import Path
from typing import NamedTuple

from recforge import quarantine, releases, storage
from recforge.format import names
from recforge.incremental import fingerprint
from recforge.run import Run, cache_uri
from recforge.spec import DatasetSpec

log = logging.getLogger(__name__)
SHARDS, ENTRY = "shards", "entry.json"
CHUNK_INDEX = "chunks.json"  # pack's local chunk index, folded into entry.json
REUSABLE = "reusable.json"  # pack's local list of part.rec runs the store already holds
WHOLE = "shard"  # a row's cache hint: its whole shard is in the cache


def chunks(rows: list[dict]) -> list[list[dict]]:
    """A shard's rows → its chunks (consecutive rows of one ``chunk`` number)."""
    return [list(g) for _, g in groupby(rows, key=lambda r: r["chunk"])]


def mark_known(shards: dict[str, list[dict]], opts_hash: str, previous: dict) -> dict:
    """This plan's ``cache_keys.json``: the entries it uses (what ``prune`` keeps) and each
    shard's split and key range (what tomorrow's plan looks chunks up in). Each row gets a
    ``cache`` hint from ``previous`` (the latest version's ``cache_keys.json``): ``"shard"``
    when its whole shard is cached, else the hash of the previous shard whose key range
    holds the row's key (where an unchanged chunk of it was packed), else None. A hint is
    never trusted: what is fetched is verified."""
    known = set(previous.get("entries", ()))
    ranges: dict[str, tuple[list[int], list[tuple[int, str]]]] = {}
    for split, first, last, h in sorted(previous.get(SHARDS, ())):
        firsts, rest = ranges.setdefault(split, ([], []))
        firsts.append(first)
        rest.append((last, h))

    def holder(split: str, key: int) -> str | None:
        firsts, rest = ranges.get(split, ((), ()))
        i = bisect_right(firsts, key) - 1
        return rest[i][1] if i >= 0 and rest[i][0] >= key else None

    entries, index = [], []
    for rows in shards.values():
        if not rows:
            continue
        h = fingerprint.shard_hash(rows, opts_hash)
        entries.append(f"{SHARDS}/{h}")
        index.append([rows[0]["split"], rows[0]["record_key"], rows[-1]["record_key"], h])
        whole = f"{SHARDS}/{h}" in known
        for r in rows:
            r["cache"] = WHOLE if whole else holder(r["split"], r["record_key"])
    return {"entries": sorted(entries), SHARDS: sorted(index)}


def previous_plan(version_uri: str | None) -> dict:
    """A published version's ``cache_keys.json`` (empty if none or unknown)."""
    uri = storage.join(version_uri, names.CACHE_KEYS) if version_uri else None
    return storage.read_json(uri) if uri and storage.exists(uri) else {}


def _refusable(row: dict) -> list[str]:
    """The keys a row's quarantine entries are filed under: its image, its annotation."""
    return [k for k in (row["source_key"], row.get("annotation_key")) if k]


class Span(NamedTuple):
    """A chunk's bytes left where pack wrote them (``path``, from ``start``): assembling a
    shard streams them, so a pack task never holds its shard's ``.rec`` in memory.
    ``sha256``: theirs, where pack hashed them as it wrote them."""
    path: Path
    start: int
    length: int
    sha256: str | None = None


EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()  # a chunk whose every image was refused


def pieces(data: bytes | Span, size: int = 1 << 20) -> Iterator[bytes]:
    """A chunk's bytes, in pieces of at most ``size``."""
    if isinstance(data, bytes):
        yield data
        return
    with open(data.path, "rb") as f:
        f.seek(data.start)
        left = data.length
        while left:
            piece = f.read(min(size, left))
            if not piece:
                raise OSError(f"{data.path} ends {left} bytes before its chunk does")
            left -= len(piece)
            yield piece


def split_packed(workdir: Path, groups: list[list[dict]], packed: dict | None = None
                 ) -> list[tuple[Span, list[dict], str]]:
    """A pack of several chunks' rows in one go → each chunk's (its span of ``part.rec``,
    records with chunk-relative offsets, quarantine text), by the records' keys and the
    entries' keys. ``packed``: what the pack returned; its ``records`` and ``refused``
    (the rows and entries it wrote, still in memory) are used rather than read back, and
    its ``chunk_sha256`` (by the rows' ``chunk``) become the spans' ``sha256``."""
    path = workdir / names.rec(names.SHARD_PART)
    size = path.stat().st_size
    packed = packed or {}
    rows = packed.get("records")
    entries = packed.get("refused")
    records = {r["key"]: r for r in (rows if rows is not None else
                                     storage.read_jsonl(str(workdir / names.RECORDS)))}
    refused: dict[str, list] = {}  # an image's entry, and those of its annotation's parts
    for e in (entries if entries is not None else
              quarantine.loads((workdir / names.QUARANTINE).read_bytes())):
        refused.setdefault(e.source_key, []).append(e)
    ends = sorted(r["offset"] for r in records.values()) + [size]
    end_of = {o: ends[i + 1] for i, o in enumerate(ends[:-1])}
    digests = packed.get("chunk_sha256")
    out = []
    for group in groups:
        mine = [records[r["record_key"]] for r in group if r["record_key"] in records]
        start = mine[0]["offset"] if mine else 0
        stop = end_of[mine[-1]["offset"]] if mine else 0
        if digests is None:  # a pack that kept no digests: adopt reads the file
            sha = None
        else:
            sha = digests.get(group[0].get("chunk")) if mine else EMPTY_SHA256
        out.append((Span(path, start, stop - start, sha),
                    [{**r, "offset": r["offset"] - start} for r in mine],
                    quarantine.dumps([e for r in group for k in _refusable(r)
                                      for e in refused.get(k, [])]).decode("utf-8")))
    return out


def assemble(parts: list[tuple[bytes | Span, list[dict], str]], hashes: list[str],
             out: Path, verified: dict[int, str] | None = None) -> dict:
    """Chunks, in order → ``out/part.rec/.idx/.lst``, ``records.jsonl``, the quarantine and
    the chunk index (``chunks.json``), byte for byte what packing the whole shard at once
    writes. ``verified``: part number → the SHA-256 its bytes were just checked against
    (fetched chunks), not computed again, as a span's own ``sha256`` is not. The result's
    ``rec`` is ``part.rec``'s size and SHA-256, hashed as it was written."""
    part = names.SHARD_PART
    verified = verified or {}
    manifest, refused, index, base = [], [], [], 0
    with storage.HashingWriter(out / names.rec(part)) as rec, \
            open(out / names.idx(part), "w", encoding="ascii", newline="\n") as idx, \
            open(out / names.lst(part), "w", encoding="utf-8") as lst:
        for i, ((data, records, quarantined), h) in enumerate(zip(parts, hashes, strict=True)):
            known = verified.get(i) or (data.sha256 if isinstance(data, Span) else None)
            digest, length = (None if known else hashlib.sha256()), 0
            for piece in pieces(data):
                rec.write(piece)
                if digest is not None:
                    digest.update(piece)
                length += len(piece)
            for r in records:
                r = {**r, "offset": r["offset"] + base}
                idx.write(f"{r['key']}\t{r['offset']}\n")
                lst.write(names.lst_line(r["key"], r["label"], r["name"]))
                manifest.append(r)
            refused.append(quarantined)
            index.append({"hash": h, "start": base, "length": length,
                          "sha256": known or digest.hexdigest(),
                          "records": records, "quarantine": quarantined})
            base += length
    storage.write_jsonl(str(out / names.RECORDS), manifest)
    text = "".join(refused)
    (out / names.QUARANTINE).write_text(text, encoding="utf-8")
    (out / CHUNK_INDEX).write_text(json.dumps(index), encoding="utf-8")
    return {"packed": len(manifest), "quarantined": len(quarantine.loads(text.encode())),
            "rec": rec.digest()}


def tiled(parts: list[tuple[bytes | Span, list[dict], str]], path: Path) -> bool:
    """Whether the chunks are spans of ``path`` that follow one another from its first byte
    to its last: one pack of the whole shard in chunk order, whose files are then already
    what :func:`assemble` would write."""
    base = 0
    for data, _, _ in parts:
        if not isinstance(data, Span) or data.path != path:
            return False
        if data.length and data.start != base:
            return False
        base += data.length
    return bool(parts) and base == path.stat().st_size


# pack's files in a packed folder that are, for a tiled pack, the shard's own
ADOPTED = (names.rec(names.SHARD_PART), names.idx(names.SHARD_PART),
           names.lst(names.SHARD_PART), names.RECORDS)


def adopt(parts: list[tuple[Span, list[dict], str]], hashes: list[str], packed: Path,
          out: Path, rec: dict | None = None) -> dict:
    """:func:`assemble`'s outputs for a :func:`tiled` pack, byte for byte, without writing
    the shard again: pack's ``part.rec``/``.idx``/``.lst`` and ``records.jsonl`` hold every
    record in chunk order at the offsets assemble would give them, so they are moved into
    ``out``; the quarantine is written in assemble's order. The chunk index takes each
    span's ``sha256`` and the result's ``rec`` is ``rec`` (``part.rec``'s size and SHA-256),
    as pack hashed them while writing; without them ``part.rec`` is read once to hash each
    chunk and the whole file."""
    if rec is None or any(span.sha256 is None for span, _, _ in parts):
        parts, rec = _hash_spans(parts)
    index, refused, base = [], [], 0
    for (span, records, quarantined), h in zip(parts, hashes, strict=True):
        refused.append(quarantined)
        index.append({"hash": h, "start": base, "length": span.length,
                      "sha256": span.sha256, "records": records,
                      "quarantine": quarantined})
        base += span.length
    for name in ADOPTED:
        (packed / name).replace(out / name)
    text = "".join(refused)
    (out / names.QUARANTINE).write_text(text, encoding="utf-8")
    (out / CHUNK_INDEX).write_text(json.dumps(index), encoding="utf-8")
    return {"packed": sum(len(r) for _, r, _ in parts),
            "quarantined": len(quarantine.loads(text.encode())),
            "rec": {"size": rec["size"], "sha256": rec["sha256"]}}


def _hash_spans(parts: list[tuple[Span, list[dict], str]]
                ) -> tuple[list[tuple[Span, list[dict], str]], dict]:
    """The spans with their ``sha256``, read from their file, and the whole file's digest
    (the spans tile it)."""
    whole, size, hashed = hashlib.sha256(), 0, []
    for span, records, quarantined in parts:
        digest = hashlib.sha256()
        for piece in pieces(span):
            whole.update(piece)
            digest.update(piece)
        size += span.length
        hashed.append((span._replace(sha256=digest.hexdigest()), records, quarantined))
    return hashed, {"size": size, "sha256": whole.hexdigest()}


class Source(NamedTuple):
    """Where a previous shard packed a chunk: its ``part.rec`` (``rec``, with the ETag its
    entry recorded) and the chunk's index entry there."""
    rec: str
    chunk: dict
    etag: str | None


def _source_index(run: Run, sources: list[str], threads: int) -> dict[str, Source]:
    """chunk hash → its :class:`Source`, over the previous shards ``sources``; a source that
    is gone or unreadable adds nothing."""
    def read(h: str) -> tuple[str, dict | None]:
        entry = run.cache(SHARDS, h)
        try:
            return entry, storage.read_json(storage.join(entry, ENTRY))
        except Exception as exc:  # noqa: BLE001 - a missing/garbled entry is a cache miss
            if storage.is_transient(exc):
                raise
            log.info("cache shard %s unreadable (%s: %s): its chunks are re-packed", entry,
                     type(exc).__name__, exc)
            return entry, None

    part = names.rec(names.SHARD_PART)
    found: dict[str, Source] = {}
    with ThreadPoolExecutor(max(1, min(threads, len(sources)))) as pool:
        for entry, doc in pool.map(read, sources):
            etag = ((doc or {}).get("files", {}).get(part) or [None, None])[1]
            for c in (doc or {}).get("chunks", ()):
                found.setdefault(c["hash"], Source(storage.join(entry, part), c, etag))
    return found


def _fetch_chunks(wanted: dict[int, Source], threads: int
                  ) -> dict[int, tuple[bytes, list[dict], str]]:
    """Chunk number → (rec bytes, records, quarantine text), read in coalesced ranged GETs
    of the source ``part.rec`` files and verified by SHA-256; a chunk that does not verify
    is left out (re-packed)."""
    chunk_ids = list(wanted)

    def cut(members: list[int], got) -> list[tuple[int, bytes]]:
        if isinstance(got, Exception):
            if storage.is_transient(got):
                raise got
            # a pruned source is a cache miss
            log.info("cache %s unreadable (%s): re-packing its chunks",
                     wanted[chunk_ids[members[0]]][0], got)
            return []
        return [(chunk_ids[m], data) for m, data in zip(members, got, strict=True)]

    out, n_reads = {}, 0
    for got in storage.read_spans([(u, c["start"], c["length"]) for u, c, _ in wanted.values()],
                                  cut, max(1, threads)):
        n_reads += 1
        for i, data in got:
            doc = wanted[i][1]
            if len(data) != doc["length"] or hashlib.sha256(data).hexdigest() != doc["sha256"]:
                log.warning("cache chunk %s in %s is corrupt (checksum does not match): "
                            "re-packing it", doc["hash"][:12], wanted[i][0])
                continue
            out[i] = (data, doc["records"], doc["quarantine"])
    log.info("cache: %d chunks in %d ranged reads", len(out), n_reads)
    return out


def pack_shard(run: Run, rows: list[dict], work: Path,
               pack_chunk: Callable[[list[dict], Path], dict], fetch_threads: int = 8) -> dict:
    """Build a shard in ``work`` from its chunks: those the previous shards (the rows'
    ``cache`` hints; a whole cached shard that did not verify is its own source) hold are
    fetched and verified, the others packed in one pass with
    ``pack_chunk(rows, dir)`` (its result may carry the ``records`` and ``refused`` it
    wrote: :func:`split_packed`). Returns counts, how many chunks were packed and ``rec``
    (``part.rec``'s size and SHA-256, hashed as it was written or read to index it)."""
    opts = fingerprint.options_hash(run.spec)
    groups = chunks(rows)
    hashes = [fingerprint.chunk_hash(g, opts) for g in groups]
    own = fingerprint.shard_hash(rows, opts)  # a whole shard that failed to verify
    sources = sorted({own if r["cache"] == WHOLE else r["cache"] for r in rows
                      if r.get("cache")})
    index = _source_index(run, sources, fetch_threads) if sources else {}
    wanted = {i: index[h] for i, h in enumerate(hashes) if h in index}
    found = _fetch_chunks(wanted, fetch_threads)
    parts: list = [found.get(i) for i in range(len(groups))]
    misses = [i for i, p in enumerate(parts) if p is None]
    d = work / "packed"
    got: dict = {}
    if misses:  # one pass over all missing chunks: one prefetch window
        d.mkdir()
        got = pack_chunk([r for i in misses for r in groups[i]], d)
        for i, part in zip(misses, split_packed(d, [groups[i] for i in misses], got),
                           strict=True):
            parts[i] = part
    if not found and tiled(parts, d / names.rec(names.SHARD_PART)):
        # packed whole, in order: already the shard
        counts = adopt(parts, hashes, d, work, got.get("rec"))
    else:
        counts = assemble(parts, hashes, work, {i: wanted[i].chunk["sha256"] for i in found})
    runs = reusable(parts, {i: wanted[i] for i in found})
    (work / REUSABLE).write_text(json.dumps(runs), encoding="utf-8")
    return {**counts, "chunks": len(groups), "chunks_packed": len(misses)}


def reusable(parts: list[tuple[bytes | Span, list[dict], str]], sources: dict[int, Source]
             ) -> list[storage.Reusable]:
    """The runs of the assembled ``part.rec`` that are contiguous bytes of one previous
    ``part.rec`` (consecutive chunks fetched from consecutive ranges of it): what its upload
    can copy on the store instead of sending. Only verified chunks count, each pinned to
    the ETag its source's entry recorded."""
    runs: list[storage.Reusable] = []
    base = 0
    for i, (data, _, _) in enumerate(parts):
        length = len(data) if isinstance(data, bytes) else data.length
        src = sources.get(i)
        if src is not None and src.etag and length:
            last = runs[-1] if runs else None
            if (last is not None and (last.source, last.etag) == (src.rec, src.etag)
                    and last.start + last.length == base
                    and last.source_start + last.length == src.chunk["start"]):
                runs[-1] = last._replace(length=last.length + length)
            else:
                runs.append(storage.Reusable(base, length, src.rec, src.chunk["start"],
                                             src.etag))
        base += length
    return runs


# ---- shards: a folder of the pack task's outputs, entry.json last
def shard_entry(run: Run, rows: list[dict]) -> str:
    """The cache entry of a shard's rows (under this run's options)."""
    return run.cache(SHARDS, fingerprint.shard_hash(rows, fingerprint.options_hash(run.spec)))


def reuse_shard(run: Run, rows: list[dict], files: tuple[str, ...],
                entry: str | None = None) -> dict | None:
    """An unchanged shard's ``entry.json`` when its files verify (size and ETag as
    recorded), else None. Nothing is copied: the run's ``shard.json`` points at the entry.
    ``entry``: ``shard_entry(run, rows)``, when the caller has it."""
    if not rows or rows[0].get("cache") != WHOLE:
        return None
    entry = entry or shard_entry(run, rows)
    try:
        doc = storage.read_json(storage.join(entry, ENTRY))
    except Exception as exc:  # noqa: BLE001 - a missing/garbled entry is a cache miss
        if storage.is_transient(exc):
            raise
        log.info("cache shard %s unreadable (%s): re-packing it", entry, type(exc).__name__)
        return None
    found = {o.key: (o.size, o.etag) for o in storage.list_objects(entry)}
    bad = [f for f in files if tuple(doc.get("files", {}).get(f, ())) != found.get(f)]
    if bad or "meta" not in doc:
        log.warning("cache shard %s does not verify (%s): re-packing it", entry,
                    bad or "no meta")
        return None
    return doc


def write_entry(run: Run, rows: list[dict], work: Path, files: tuple[str, ...], meta: dict,
                counts: dict, entry: str | None = None) -> str:
    """Upload the shard in ``work`` as its cache entry (files in parallel, ``part.rec``'s
    runs that ``pack_shard`` found on the store copied there; then ``entry.json``: sizes,
    ETags, ``shard.json``'s contents, counts and the chunk index ``assemble`` left in
    ``work``); returns the entry's URI (``entry``: ``shard_entry(run, rows)``, when the
    caller has it)."""
    entry = entry or shard_entry(run, rows)
    listed = work / REUSABLE  # runs of part.rec the store holds: copied there, not sent
    runs = ([storage.Reusable(*r) for r in json.loads(listed.read_text(encoding="utf-8"))]
            if listed.exists() else [])
    rec = names.rec(names.SHARD_PART)
    known = meta.get("files", {})  # hashed as pack wrote them: not read again to upload
    with ThreadPoolExecutor(len(files)) as pool:  # moved: a local entry takes the files
        list(pool.map(lambda f: storage.upload(
            work / f, storage.join(entry, f), runs if f == rec else (),
            sha256=(known.get(f) or {}).get("sha256"), move=True), files))
    found = {o.key: [o.size, o.etag] for o in storage.list_objects(entry)}
    storage.write_json(storage.join(entry, ENTRY), {
        "files": {f: found[f] for f in files}, "meta": meta,
        "counts": {k: counts[k] for k in ("packed", "quarantined")},
        "chunks": json.loads((work / CHUNK_INDEX).read_text(encoding="utf-8"))},
        indent=None)  # every record of the shard: read by pack only
    return entry


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


PRUNE_MIN_AGE_H = 48.0  # entries written since are kept: a running build composes from them


def prune(spec: DatasetSpec, keep_versions: int, dry_run: bool = False,
          min_age_hours: float = PRUNE_MIN_AGE_H) -> dict:
    """Delete the cache entries none of the last ``keep_versions`` published versions was
    built from and nothing wrote in the last ``min_age_hours`` (a build in progress merges
    from the entries it packed or reused). Published versions hold copies, so none of them
    breaks."""
    if keep_versions < 1:
        raise ValueError("keep at least 1 version (the latest is what tomorrow builds on)")
    kept = published_versions(spec)[-keep_versions:]
    used: set[str] = set()
    for version, _ in kept:
        uri = releases.version_uri(spec, version, names.CACHE_KEYS)
        if storage.exists(uri):
            used |= set(storage.read_json(uri)["entries"])
    root = cache_uri(spec)
    newest: dict[str, float] = {}
    for o in storage.list_objects(root):
        e = "/".join(o.key.split("/")[:2])
        newest[e] = max(newest.get(e, 0.0), o.modified or 0.0)
    entries = sorted(newest)
    young = time.time() - min_age_hours * 3600
    stale = [e for e in entries if e not in used and newest[e] < young]
    if not dry_run:
        for e in stale:
            storage.delete_prefix(storage.join(root, e))
    log.info("cache prune %s: %d entries, %d used by versions %s, %s %d", spec.name,
             len(entries), len(entries) - len(stale), [v for v, _ in kept],
             "would delete" if dry_run else "deleted", len(stale))
    return {"entries": len(entries), "kept": len(entries) - len(stale), "deleted": len(stale),
            "versions": [v for v, _ in kept], "dry_run": dry_run,
            "min_age_hours": min_age_hours}
