"""The ``merge`` task: shard outputs → one ``<split>.rec``/``.idx``/``.lst`` per split (and
``<split>_mask.rec``/``.idx`` where the shards carry masks), plus the dataset-wide record
manifest, quarantine report, reconciled counts and ``checksums.json``.

Generic over task kinds and moving no image bytes: each split's ``.rec`` (and mask
``.rec``) is composed from the shards' ``part.rec`` in shard order by
``storage.compose`` — on S3 a multipart upload of server-side ``UploadPartCopy`` pieces,
so only shards under 5 MiB pass through this task; locally a plain concatenation. The
``.idx`` offsets are shifted by the shard sizes that pack recorded in ``shard.json``, so no
``.rec`` is read. Shards hold contiguous record-key ranges, so the keys stay increasing.
The small files (``.idx``, ``.lst``, ``records.jsonl``) stream through a shard at a time,
``READ_THREADS`` shards' files fetched ahead (a thousand shards' files read one by one were
minutes of round trips on S3); no list of records is ever held, and the accounting keeps
one set of keys. The counts must
reconcile exactly — every listed object is packed (the keys each record accounts for: its
image, its mask, its VOC annotation; a COCO or list file that flatten used), quarantined, or
set aside as no part of the dataset (``not_used.jsonl``, published when not empty), once —
or the run fails here, before anything can be published. A refused object of an annotation
(an entry with a ``part``) is reported, not accounted: its image is.

The dataset is written where it will be published (``run_state.out``): merge first claims the
run's version folder (``recforge.claims``; after proving the store honours conditional
writes) and composes into it, so publish moves no dataset bytes — one server-side pass per
version. The folder is invisible to readers until publish writes its manifest; a killed
merge leaves only an unpublished folder this run owns, which the next attempt overwrites.
A dry run, or staging and publish on different stores, writes to staging ``out/`` instead.

``merge/checksums.json``, written last, lists every file merge wrote: a composed ``.rec`` as
its parts in order (each shard's size and SHA-256 as pack computed them when it wrote the
shard) and the ETag the store gave it, every other file with its whole-file SHA-256.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import logging
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from recforge import claims, quarantine, run_state, storage
from recforge.errors import ReconciliationError, ValidationFailed
from recforge.format import names
from recforge.format.names import SPLITS
from recforge.progress import Progress
from recforge.run import Run

log = logging.getLogger(__name__)
# the source objects one record stands for: its image, its mask, its VOC annotation
ACCOUNTED_KEYS = ("source_key", "mask_key", "annotation_key")
READ_THREADS = 8  # shards' small files read at once: ~6 GETs a shard, ~1,000 shards at scale
COMPOSING = 4  # .rec composes at once (each COMPOSE_THREADS copies); more wait their turn


class Reconciler:
    """Exact accounting by key, streamed: ``account`` each packed or refused key, then
    ``finish`` with the listing. Holds one set of keys, never the records."""

    def __init__(self):
        self.seen: set[str] = set()
        self.twice: set[str] = set()
        self.packed = 0
        self.refused = 0
        self.not_used = 0

    def account(self, key: str, refused: bool = False, not_used: bool = False) -> None:
        if key in self.seen:
            self.twice.add(key)
        self.seen.add(key)
        if refused:
            self.refused += 1
        elif not_used:
            self.not_used += 1
        else:
            self.packed += 1

    def record(self, row: dict) -> None:
        """Account the source keys one record stands for: its image, and its mask if any."""
        for k in ACCOUNTED_KEYS:
            if row.get(k):
                self.account(row[k])

    def finish(self, listed: Iterable[str]) -> dict:
        """Counts, or ``ReconciliationError`` naming the first offenders (once: it consumes
        the keys)."""
        unknown, lost, n = self.seen, [], 0  # what is left once the listing is struck off
        for key in listed:
            n += 1
            if key in unknown:
                unknown.discard(key)
            else:
                lost.append(key)
        if self.twice or lost or unknown:
            twice, lost, unknown = sorted(self.twice), sorted(set(lost)), sorted(unknown)
            raise ReconciliationError(
                f"counts do not reconcile: {len(lost)} listed object(s) neither packed, "
                f"quarantined nor set aside {lost[:5]}, {len(twice)} counted twice "
                f"{twice[:5]}, {len(unknown)} not in the listing {unknown[:5]}"
            )
        return {"listed": n, "packed": self.packed, "quarantined": self.refused,
                **({"not_used": self.not_used} if self.not_used else {})}


def reconcile(listed: Iterable[str], packed: Iterable[str], refused: Iterable[str]) -> dict:
    """Exact accounting by key; raises naming the first offenders."""
    acc = Reconciler()
    for k in packed:
        acc.account(k)
    for k in refused:
        acc.account(k, refused=True)
    return acc.finish(listed)


@dataclass(frozen=True)
class Shard:
    """One pack task's output: its folder and ``shard.json``'s file sizes and checksums."""

    uri: str
    files: dict[str, dict]
    masks: bool

    def file(self, name: str) -> str:
        return storage.join(self.uri, name)

    @classmethod
    def read(cls, uri: str) -> Shard:
        meta_uri = storage.join(uri, names.SHARD_META)
        if not storage.exists(meta_uri):
            raise ValidationFailed(
                f"{meta_uri} is missing: the shard was packed by a recforge that wrote no "
                "checksums, or its upload did not finish; clear its pack task and run it again")
        meta = storage.read_json(meta_uri)  # files_at: a cache entry holds the files
        return cls(meta.get("files_at") or uri, meta["files"], bool(meta.get("masks")))

    @classmethod
    def of_folder(cls, folder: Path) -> Shard:
        """A shard folder written locally (no ``shard.json``): checksums computed here."""
        masks = (folder / names.rec(names.SHARD_PART, mask=True)).exists()
        return cls(str(folder), {n: storage.file_digest(folder / n)
                                 for n in names.shard_files(masks)}, masks)


def read_shards(uris: list[str], threads: int | None = None) -> list[Shard]:
    """``Shard.read`` of each, ``threads`` (default ``READ_THREADS``) at a time, in order."""
    with ThreadPoolExecutor(threads or READ_THREADS) as pool:
        return list(pool.map(Shard.read, uris))


def each_object(uris: Iterable[str], threads: int | None = None) -> Iterator[bytes]:
    """The bytes of each object in order, ``threads`` (default ``READ_THREADS``) GETs in
    flight and a bounded window ahead (``storage.prefetch``): a thousand shards' small files
    are a thousand round trips each, which one at a time cost minutes on S3. A failed read
    raises, as a serial one does."""
    threads, uris = threads or READ_THREADS, list(uris)
    for uri, data in zip(uris, storage.prefetch(uris, threads, ahead=2 * threads),
                         strict=True):
        if isinstance(data, Exception):
            data.add_note(f"merge: reading {uri}")  # the error keeps its type (retry policy)
            raise data
        yield data


def _lines(data: bytes) -> list[bytes]:
    """``storage.iter_lines`` of bytes already read: split on ``\n`` only."""
    lines = data.split(b"\n")
    return lines[:-1] if lines and not lines[-1] else lines


def merge_split(shards: list[Shard], out: str, split: str, tmp: Path,
                records: storage.HashingWriter, accounting: Reconciler,
                threads: int | None = None, composing: ThreadPoolExecutor | None = None
                ) -> tuple[int, dict, list[Future]]:
    """Write ``out/<split>.*`` (+ ``<split>_mask.*`` when every shard has masks) from the
    shards, in order, and append their records (offsets shifted) to ``records``; returns
    the record count, the checksums of the files written and the ``.rec`` composes still
    running in ``composing`` (each a future of its checksums entry; with no executor they
    are done). The offsets come from the shard sizes pack recorded, so the small files — one
    stream of every shard's ``.idx``, ``.lst`` and records in the order they are written,
    ``threads`` read at a time (:func:`each_object`) — flow while the store composes the
    ``.rec``."""
    part = names.SHARD_PART
    masks = bool(shards) and all(s.masks for s in shards)
    kinds = (False, True) if masks else (False,)
    checksums: dict[str, dict] = {}
    bases: dict[bool, list[int]] = {}
    composes: list[Future] = []
    # one stream of every small file, in the order they are written: the next file's
    # reads start while this one's are written and uploaded, not after
    small = each_object([s.file(names.idx(part, mask)) for mask in kinds for s in shards]
                        + [s.file(names.lst(part)) for s in shards]
                        + [s.file(names.RECORDS) for s in shards], threads)
    with contextlib.closing(small):  # an error stops the reads ahead
        def one_per_shard() -> Iterator[bytes]:
            """The stream's next file of each shard."""
            return itertools.islice(small, len(shards))

        for mask in kinds:
            pieces = [s.files[names.rec(part, mask)] for s in shards]
            sizes = [p["size"] for p in pieces]
            bases[mask] = storage.part_offsets(sizes)
            rec = storage.join(out, names.rec(split, mask))
            job = functools.partial(_compose_rec, [s.file(names.rec(part, mask)) for s in shards],
                                    rec, pieces)
            composes.append(composing.submit(job) if composing is not None else _done(job()))
            with storage.HashingWriter(tmp / names.idx(split, mask)) as idx:
                for data, base in zip(one_per_shard(), bases[mask], strict=True):
                    for line in _lines(data):
                        if line.strip():
                            key, offset = line.split(b"\t")
                            idx.write(b"%s\t%d\n" % (key, int(offset) + base))
            checksums[idx_name := names.idx(split, mask)] = idx.digest()
            _upload_and_drop(tmp / idx_name, out, checksums[idx_name])
        with storage.HashingWriter(tmp / names.lst(split)) as lst:
            for data in one_per_shard():
                lst.write(data)
        checksums[names.lst(split)] = lst.digest()
        _upload_and_drop(tmp / names.lst(split), out, checksums[names.lst(split)])
        count = 0
        for i, data in enumerate(one_per_shard()):
            for line in _lines(data):
                if not line.strip():
                    continue
                row = json.loads(line)
                row["offset"] += bases[False][i]
                if masks and "mask_offset" in row:
                    row["mask_offset"] += bases[True][i]
                records.write((storage.jsonl_line(row) + "\n")
                              .encode("utf-8"))
                accounting.record(row)
                count += 1
        return count, checksums, composes


def _compose_rec(parts: list[str], dest: str, pieces: list[dict]) -> dict[str, dict]:
    """Compose one ``.rec`` and return its ``checksums.json`` entry: its parts in order and
    the ETag the store gave it."""
    storage.compose(parts, dest, [p["size"] for p in pieces])
    composed = storage.head(dest)
    return {dest.rsplit("/", 1)[-1]: {
        "size": sum(p["size"] for p in pieces), "etag": composed.etag if composed else None,
        "parts": [{"size": p["size"], "sha256": p["sha256"]} for p in pieces]}}


def _done(value) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def account_beside_items(run: Run, accounting: Reconciler, digest=None
                         ) -> tuple[dict, Counter]:
    """Account what flatten kept beside the items: the files it read whole (COCO instances,
    list files: ``used``) and the objects it set aside (not bad data: ``not_used``, whose
    bytes ``digest`` sees on the way); returns flatten's ``annotation_files`` document and
    the set-aside count by reason."""
    flattened: dict = {}
    if storage.exists(run.annotation_files):
        flattened = storage.read_json(run.annotation_files)
        for key in flattened["used"]:
            accounting.account(key)
    set_aside: Counter = Counter()
    if storage.exists(run.not_used):
        for line in storage.iter_lines(run.not_used, digest):
            if line.strip():
                row = json.loads(line)
                accounting.account(row["key"], not_used=True)
                set_aside[row["reason"]] += 1
    return flattened, set_aside


def _upload_and_drop(path: Path, out: str, digest: dict) -> None:
    """Upload a file merge wrote and hashed as it wrote it (``digest``), then let it go."""
    storage.upload(path, storage.join(out, path.name), sha256=digest["sha256"], move=True)
    path.unlink(missing_ok=True)


def _listed_keys(uri: str, digest) -> Iterable[str]:
    for line in storage.iter_lines(uri, digest):
        if line.strip():
            yield json.loads(line)["key"]


def _put(run: Run, name: str, data: bytes, checksums: dict) -> None:
    storage.put_bytes(run_state.output(run, name), data)
    checksums[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def run_changes(run: Run) -> dict:
    """``{"changes": …}`` for summary.json: what changed since the latest version (split)."""
    return {"changes": storage.read_json(run.changes)} if storage.exists(run.changes) else {}


def choose_out(run: Run) -> str:
    """Claim the run's version folder and make it the dataset's home (``run_state.out``), or
    staging ``out/`` where the run does not compose in place. A version already published
    is never written into: by another run it raises ``VersionExistsError``, and by this run
    too (re-running merge after publish would change a published version)."""
    version, out = None, run.uri("out")
    if run.composes_in_version:
        version = run_state.version(run)
        out = claims.claim_version(run.run_id, run.spec, version).target
    run_state.set_out(run, version)
    log.info("merge: composing into %s", out)
    return out


def merge(run: Run) -> dict:
    """Compose the splits; ``merge/checksums.json`` (written last) records every file."""
    storage.delete(run.checksums("merge"))  # a killed attempt leaves none for publish to trust
    choose_out(run)
    before = storage.transferred()
    shard_ids = storage.read_json(run.shard_list)["shards"]
    accounting = Reconciler()
    entries = []
    for stage in ("ingest", "flatten"):
        entries += quarantine.loads(storage.get_bytes(run.stage_quarantine(stage)))
    per_split: dict[str, int] = {}
    checksums: dict[str, dict] = {}
    progress = Progress("merge", len(shard_ids), log, unit="shards")
    # every split's .rec composes on the store while this thread streams the small files
    with tempfile.TemporaryDirectory(prefix="recforge-merge-") as tmp, \
            ThreadPoolExecutor(COMPOSING, thread_name_prefix="recforge-compose") as composing:
        tmp = Path(tmp)
        composes: list[Future] = []
        with storage.HashingWriter(tmp / names.RECORDS) as records:
            for split in SPLITS:
                mine = [s for s in shard_ids if s.startswith(split + "-")]
                if not mine:
                    continue
                shards = read_shards([run.shard_output(sid, "") for sid in mine])
                for data in each_object(s.file(names.QUARANTINE) for s in shards):
                    entries += quarantine.loads(data)
                per_split[split], written, running = merge_split(
                    shards, run_state.out(run), split, tmp, records, accounting,
                    composing=composing)
                checksums.update(written)
                composes += running
                progress.update(len(mine))
                log.info("merge: %s has %d records from %d shards", split, per_split[split],
                         len(mine))
        checksums[names.RECORDS] = records.digest()
        _upload_and_drop(tmp / names.RECORDS, run_state.out(run), checksums[names.RECORDS])
        for done in composes:  # a failed compose raises here, before checksums.json
            checksums.update(done.result())
    for e in entries:
        if not e.is_part:  # a refused object of an annotation: its image is accounted
            accounting.account(e.source_key, refused=True)
    not_used_digest = hashlib.sha256()
    flattened, set_aside = account_beside_items(run, accounting, not_used_digest)
    used = flattened.get("used", [])
    listing = hashlib.sha256()
    counts = accounting.finish(_listed_keys(run.source_manifest, listing))
    # the listing travels with the dataset, so `recforge check` can account per object later
    storage.copy(run.source_manifest, run_state.output(run, names.SOURCE_MANIFEST))
    checksums[names.SOURCE_MANIFEST] = {"size": storage.size_of(run.source_manifest),
                                        "sha256": listing.hexdigest()}
    _put(run, names.CLASSES, storage.json_bytes(storage.read_json(run.classes)), checksums)
    _put(run, names.QUARANTINE, quarantine.dumps(sorted(entries, key=lambda e: e.source_key)),
         checksums)
    if set_aside:  # copied on the store, hashed as it was read for the accounting
        storage.copy(run.not_used, run_state.output(run, names.NOT_USED))
        checksums[names.NOT_USED] = {"size": storage.size_of(run.not_used),
                                     "sha256": not_used_digest.hexdigest()}
    parts = [e for e in entries if e.is_part]
    summary = {**counts, "splits": per_split,
               **({"not_used_by_reason": dict(set_aside)} if set_aside else {}),
               **({"used": sorted(used)} if used else {}),
               **flattened.get("counts", {}),  # the layout's, e.g. COCO's crowd_dropped
               "quarantined_by_reason": dict(Counter(e.reason for e in entries
                                                     if not e.is_part)),
               **({"objects_quarantined": len(parts), "objects_quarantined_by_reason":
                   dict(Counter(e.reason for e in parts))} if parts else {}),
               **run_changes(run)}
    _put(run, names.SUMMARY, storage.json_bytes(summary), checksums)
    if storage.exists(run.cache_keys):  # split's record of the shard cache, if any
        _put(run, names.CACHE_KEYS, storage.get_bytes(run.cache_keys), checksums)
    storage.write_json(run.checksums("merge"), {"files": checksums})
    moved = storage.transferred().minus(before)
    log.info("merge: listed %d = packed %d + quarantined %d + not used %d; splits %s",
             counts["listed"], counts["packed"], counts["quarantined"],
             counts.get("not_used", 0), per_split)
    log.info("merge: moved %d bytes down (%d of them .rec), %d bytes up", moved.down,
             moved.down_by_suffix.get(".rec", 0), moved.up)
    return {**summary, "transfer": {"down": moved.down, "up": moved.up,
                                    "down_rec": moved.down_by_suffix.get(".rec", 0)}}
