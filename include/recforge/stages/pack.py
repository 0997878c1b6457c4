"""The ``pack`` task, mapped over the shards (a task packs one, or with ``auto`` a few in
turn): one shard of planned items → a shard ``part.rec``/``.idx``/``.lst`` (segmentation: +
the aligned ``part_mask.rec``/``.idx``), its record manifest and its quarantine list.

Objects stream through ``storage.prefetch`` (parallel GETs, a bounded window ahead, in
order) while this process decodes/encodes with the packing engine (``recforge.imaging``,
the same code as ``recforge im2rec``), so output is deterministic and memory stays flat
however large the shard. Undecodable, truncated, corrupt or oversized images go to the
shard's quarantine list with the reason; the shard never fails because of one bad image.
The shard is checked structurally before upload, and ``shard.json`` (uploaded last) records
each file's size and SHA-256, which merge composes from and publish verifies against. A
classification or detection shard's files live in its cache entry (``shard.json``'s ``files_at``);
segmentation shards upload theirs beside ``shard.json``. Outputs go under deterministic
names, so a retried shard overwrites itself.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

import cv2

from recforge import crash_isolation, phash, quarantine, storage
from recforge.detection.records import DetectionLabels
from recforge.errors import ValidationFailed
from recforge.format import names, recordio
from recforge.format.paired import validate_mask_split
from recforge.format.validate import validate_split
from recforge.imaging import (
    EncodedImage,
    ImageRejected,
    PackOptions,
    decode,
    packing_process,
    process_hashed,
)
from recforge.incremental import cache
from recforge.kinds import kind, kind_of
from recforge.progress import Progress, peak_rss_mb, reset_peak_rss
from recforge.quarantine import QuarantineEntry
from recforge.run import Run
from recforge.segmentation.pack import SegPackOptions, pack_pair_rows

log = logging.getLogger(__name__)
# (row, source bytes, record image) → (label, extra manifest fields, refused annotation parts)
Labeller = Callable[[dict, bytes, EncodedImage], tuple[float | list[float], dict,
                                                       list[QuarantineEntry]]]
# what a classification shard's cache entry holds (its home: merge composes from there)
CACHED_FILES = names.shard_files()


def pack_items(rows: list[dict], source_uri: str, opts: PackOptions, workdir: Path,
               stage: str = "pack", fetch_threads: int = 8,
               processor: Callable[[bytes], EncodedImage] | None = None,
               labels: Labeller | None = None, keep: bool = False) -> dict:
    """Pack planned rows into ``workdir/part.*``; returns counts. Pure local output.
    ``processor`` (default: ``imaging.process_hashed`` in this process) turns source bytes
    into the record image and its dHash; an ``IsolatedProcessor`` runs it in a child
    process. ``labels`` (default: the row's class id) gives a record's label, its extra
    manifest fields and the parts of its annotation it refused
    (``detection.records.DetectionLabels``). ``keep``: the result also holds the record
    manifest rows (``records``) and quarantine entries (``refused``) it wrote, ``part.rec``'s
    size and SHA-256 (``rec``) and each chunk's SHA-256 by the rows' ``chunk``
    (``chunk_sha256``), hashed as the bytes were written, so the shard cache splits and
    indexes them without reading them back."""
    refused: list[QuarantineEntry] = []
    manifest: list[dict] = []
    progress = Progress(f"{stage} {workdir.name}", len(rows), log)
    part = names.SHARD_PART
    uris = (storage.join(source_uri, r["source_key"]) for r in rows)
    with recordio.RecordWriter(workdir / names.rec(part), workdir / names.idx(part),
                               hashed=keep) as writer, \
            open(workdir / names.lst(part), "w", encoding="utf-8") as lst:
        fetched = storage.prefetch(uris, fetch_threads)
        for row, data in zip(rows, fetched, strict=True):
            progress.update()
            key = row["source_key"]
            try:
                if isinstance(data, Exception):
                    raise ImageRejected(*quarantine.fetch_reason(data))
                img = (processor(data) if processor is not None
                       else process_hashed(data, opts))
                label, extra, parts = (labels(row, data, img) if labels is not None
                                       else (float(row["label"]), {}, []))
            except ImageRejected as exc:
                refused.append(QuarantineEntry(key, stage, exc.reason, exc.detail))
                if row.get("annotation_key"):  # its VOC file goes with it, as a mask does
                    refused.append(QuarantineEntry(row["annotation_key"], stage, exc.reason,
                                                   f"the annotation of {key}: {exc.detail}"))
                refused += getattr(exc, "parts", [])
                log.warning("quarantined %s: %s (%s)", key, exc.reason, exc.detail)
                continue
            refused += parts
            payload = recordio.pack_image_record(label, row["record_key"], img.data)
            offset = writer.write(row["record_key"], payload, row.get("chunk"))
            lst.write(names.lst_line(row["record_key"], label, row["name"]))
            manifest.append({
                "key": row["record_key"], "split": row["split"], "offset": offset,
                "length": len(payload), "height": img.height, "width": img.width,
                "channels": img.channels, "label": label, "class_name": row.get("class_name"),
                "name": row["name"], "source_key": key, "source_etag": row["etag"],
                "source_sha256": storage.sha256_hex(data), "decode_status": "ok",
                "phash": img.phash or phash.dhash_encoded(img.data), **extra,
            })
    storage.write_jsonl(str(workdir / names.RECORDS), manifest)
    (workdir / names.QUARANTINE).write_bytes(quarantine.dumps(refused))
    counts = {"packed": len(manifest), "quarantined": len(refused)}
    if not keep:
        return counts
    return {**counts, "records": manifest, "refused": refused, "rec": writer.digest(),
            "chunk_sha256": writer.group_digests()}


def check_shard(work: Path, num_classes: int | None, masks: bool, shard_id: str,
                detection: bool = False) -> int:
    """The structural check of the shard just written (header-only scan of ``part.rec``
    against ``part.idx``/``.lst``, labels, ids; the mask stream's alignment): a shard that
    fails it is never uploaded, so merge can compose shards without reading them."""
    part = names.SHARD_PART
    report = validate_split(work, part, num_classes, detection)
    fails = report.failures
    if masks:
        fails += validate_mask_split(work, part, check_pixels=False)
    if fails:
        raise ValidationFailed(f"shard {shard_id} failed its structural check: " +
                               "; ".join(fails[:5]))
    return report.records


def describe_shard(run: Run, shard_id: str, work: Path, masks: bool,
                   digests: dict[str, dict] | None = None) -> dict:
    """Check the shard in ``work`` and return its ``shard.json``: record count and each
    file's size and SHA-256 (merge composes from them, publish verifies against them);
    ``digests``: those already known, hashed as the file was written."""
    classes = storage.read_json(run.classes)
    records = check_shard(work, classes.get("num_classes"), masks, shard_id,
                          kind_of(classes).boxes)
    known = digests or {}
    return {"shard": shard_id, "records": records, "masks": masks,
            "files": {name: known.get(name) or storage.file_digest(work / name)
                      for name in names.shard_files(masks=masks)}}


def upload_shard(run: Run, shard_id: str, work: Path, masks: bool) -> None:
    """Check the shard in ``work`` and upload it, ``shard.json`` last: merge takes the sizes
    and checksums from it, and its presence means the shard is whole. The files are moved
    there (a local store takes them without a copy)."""
    meta = describe_shard(run, shard_id, work, masks)
    for name, digest in meta["files"].items():
        storage.upload(work / name, run.shard_output(shard_id, name), sha256=digest["sha256"],
                       move=True)
    storage.write_json(run.shard_output(shard_id, names.SHARD_META), meta)


def pack(run: Run, shard_id: str) -> dict:
    """Pack one shard. An attempt marker lives beside ``shard.json`` while it runs and is
    removed however the attempt ends in Python (success or an exception); one still there
    at the start means the previous attempt died without an error — a decoder crash, the
    memory limit, a kill — so this attempt decodes each image in a child process
    (``recforge.crash_isolation``) and quarantines the one that kills it. It runs as a
    packing process (``imaging.packing_process``: freed memory kept for the next image,
    OpenCV on this thread alone, the shards being the parallelism).

    The result states what the shard cost: ``peak_rss_mb`` (this process's peak resident
    set while it packed; Linux), ``s3_requests`` (by operation, retries included) and
    ``s3_bytes`` (body bytes this process moved: ``down``, ``up``; server-side copies move
    none)."""
    reset_peak_rss()
    before, moved = storage.request_counts(), storage.transferred()
    with crash_isolation.attempt_marker(run.shard_output(shard_id, names.PACK_ATTEMPT),
                                        f"shard {shard_id}") as isolated, packing_process():
        result = _pack(run, shard_id, isolated)
    after = storage.request_counts()
    requests = {op: n - before.get(op, 0) for op, n in sorted(after.items())
                if n > before.get(op, 0)}
    moved = storage.transferred().minus(moved)
    return {**result, "peak_rss_mb": peak_rss_mb(), "s3_requests": requests,
            "s3_bytes": {"down": moved.down, "up": moved.up}}


def _pack(run: Run, shard_id: str, isolated: bool) -> dict:
    spec = run.spec
    masks = kind(spec.task).masks
    with tempfile.TemporaryDirectory(prefix=f"recforge-{shard_id}-") as tmp:
        work = Path(tmp)
        if masks:
            rows = storage.read_jsonl(run.converted_masks(shard_id))
            opts = SegPackOptions.from_spec(spec.pack, spec.segmentation.mask_compression)
            with contextlib.ExitStack() as stack:  # the masks are the staged, converted ones
                decode_image = (stack.enter_context(crash_isolation.IsolatedProcessor(
                    opts.image, target=decode)) if isolated else None)
                counts = pack_pair_rows(rows, spec.source.uri, work, opts,
                                        decode_image=decode_image)
            # the pairs the mask stage refused travel in this shard's quarantine, so merge
            # reads one quarantine list per shard whatever the task
            refused = storage.get_bytes(run.mask_quarantine(shard_id))
            shard_quarantine = work / names.QUARANTINE
            shard_quarantine.write_bytes(refused + shard_quarantine.read_bytes())
            upload_shard(run, shard_id, work, masks=True)
        else:
            rows = storage.read_jsonl(run.shard_plan(shard_id))
            counts = pack_cached(run, shard_id, rows, work, isolated)
            if counts.get("reused"):
                return {"shard": shard_id, **counts}
    log.info("shard %s: packed %d, quarantined %d (%d in all; OpenCV threads %d)", shard_id,
             counts["packed"], counts["quarantined"], len(rows), cv2.getNumThreads())
    return {"shard": shard_id, **counts}


def labeller(run: Run, opts: PackOptions) -> Labeller | None:
    """What labels the spec's records: the row's class id (None), or for detection the
    annotation's boxes checked against the image (``detection.records``)."""
    if not kind(run.spec.task).boxes:
        return None
    return DetectionLabels(storage.read_json(run.classes)["ids"], run.spec.detection, opts)


def pack_cached(run: Run, shard_id: str, rows: list[dict], work: Path,
                isolated: bool = False) -> dict:
    """Classification and detection through the shard cache (``recforge.incremental.cache``):
    the shard's bytes live in its cache entry and the run's ``shard.json`` points there
    (``files_at``). An unchanged shard that verifies costs nothing more (``reused``); a
    changed one is built from the previous shards' chunks, packing only the chunks that
    changed, and uploaded as its entry."""
    entry = cache.shard_entry(run, rows)
    reused = cache.reuse_shard(run, rows, CACHED_FILES, entry)
    if reused is not None:
        meta, counts = reused["meta"], {**reused["counts"], "reused": True}
        log.info("shard %s: unchanged, reused from the cache (%d records)", shard_id,
                 counts["packed"])
    else:
        opts = PackOptions.from_spec(run.spec.pack)
        labels = labeller(run, opts)
        with contextlib.ExitStack() as stack:
            processor = (stack.enter_context(crash_isolation.IsolatedProcessor(
                opts, target=process_hashed)) if isolated else None)
            counts = cache.pack_shard(run, rows, work, lambda chunk, d: pack_items(
                chunk, run.spec.source.uri, opts, d, processor=processor, labels=labels,
                keep=True))
        rec = counts.pop("rec")  # hashed as the shard was written or indexed
        meta = describe_shard(run, shard_id, work, masks=False,
                              digests={names.rec(names.SHARD_PART): rec})
        entry = cache.write_entry(run, rows, work, CACHED_FILES, meta, counts, entry)
        log.info("shard %s: %d of %d chunks packed, the rest from the cache", shard_id,
                 counts["chunks_packed"], counts["chunks"])
    storage.write_json(run.shard_output(shard_id, names.SHARD_META),
                       {**meta, "shard": shard_id, "files_at": entry})
    return counts
