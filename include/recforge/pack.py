"""Stage 5, pack: one shard of planned items → a shard ``.rec``/``.idx``/``.lst``.

Objects are fetched by a small thread pool (S3 GETs are I/O-bound), at most a bounded
window ahead, while the calling process decodes/encodes in order with the packing engine
(``recforge.imaging``, the same code as ``recforge im2rec``), so output is deterministic
and memory stays flat however large the shard. Undecodable, truncated, corrupt or
oversized images go to the shard's quarantine list with the reason; the shard never
fails because of one bad image. Outputs are uploaded under deterministic names, so a
retried shard overwrites itself.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from recforge import phash, quarantine, recordio, storage
from recforge.imaging import ImageRejected, PackOptions, process
from recforge.quarantine import QuarantineEntry
from recforge.run import Run

log = logging.getLogger(__name__)
SHARD_FILES = ("part.rec", "part.idx", "part.lst", "records.jsonl", "quarantine.jsonl")


def lst_line(record_key: int, label: float | list[float], path: str) -> str:
    """One ``.lst`` line exactly as im2rec writes it: index, float label(s), path."""
    labels = label if isinstance(label, list) else [label]
    return f"{record_key}\t" + "".join(f"{float(x):f}\t" for x in labels) + f"{path}\n"


def _fetch(uri: str) -> bytes | Exception:
    try:
        return storage.get_bytes(uri)
    except Exception as exc:  # reported per object by the caller
        return exc


def _prefetch(uris: list[str], pool: ThreadPoolExecutor, ahead: int) -> Iterator:
    """Fetch results in order, never more than ``ahead`` objects in memory."""
    window: collections.deque = collections.deque()
    for uri in uris:
        window.append(pool.submit(_fetch, uri))
        if len(window) >= ahead:
            yield window.popleft().result()
    while window:
        yield window.popleft().result()


def _fetch_reason(exc: Exception) -> str:
    missing = isinstance(exc, FileNotFoundError) or "NoSuchKey" in repr(exc) or \
        "Not Found" in repr(exc)
    return "missing" if missing else "read_error"


def pack_items(rows: list[dict], source_uri: str, opts: PackOptions, workdir: Path,
               stage: str = "pack", fetch_threads: int = 8) -> dict:
    """Pack planned rows into ``workdir/part.*``; returns counts. Pure local output."""
    refused: list[QuarantineEntry] = []
    manifest: list[dict] = []
    started = time.monotonic()
    uris = [storage.join(source_uri, r["source_key"]) for r in rows]
    with recordio.RecordWriter(workdir / "part.rec", workdir / "part.idx") as writer, \
            open(workdir / "part.lst", "w", encoding="utf-8") as lst, \
            ThreadPoolExecutor(fetch_threads) as pool:
        fetched = _prefetch(uris, pool, ahead=4 * fetch_threads)
        for n, (row, data) in enumerate(zip(rows, fetched, strict=True), 1):
            key = row["source_key"]
            if isinstance(data, Exception):
                refused.append(QuarantineEntry(key, stage, _fetch_reason(data),
                                               repr(data)[:300]))
                continue
            try:
                img = process(data, opts)
            except ImageRejected as exc:
                refused.append(QuarantineEntry(key, stage, exc.reason, exc.detail))
                log.warning("quarantined %s: %s (%s)", key, exc.reason, exc.detail)
                continue
            payload = recordio.pack_image_record(float(row["label"]), row["record_key"], img.data)
            offset = writer.write(row["record_key"], payload)
            lst.write(lst_line(row["record_key"], row["label"], row["name"]))
            manifest.append({
                "key": row["record_key"], "split": row["split"], "offset": offset,
                "length": len(payload), "height": img.height, "width": img.width,
                "channels": img.channels, "label": row["label"], "class_name": row["class_name"],
                "name": row["name"], "source_key": key, "source_etag": row["etag"],
                "source_sha256": hashlib.sha256(data).hexdigest(), "decode_status": "ok",
                "phash": phash.dhash_encoded(img.data),
            })
            if n % 200 == 0:
                rate = n / max(time.monotonic() - started, 1e-9)
                log.info("packed %d/%d images (%.0f img/s)", n, len(rows), rate)
    storage.write_jsonl(str(workdir / "records.jsonl"), manifest)
    (workdir / "quarantine.jsonl").write_bytes(quarantine.dumps(refused))
    return {"packed": len(manifest), "quarantined": len(refused)}


def pack_shard(run: Run, shard_id: str) -> dict:
    rows = storage.read_jsonl(run.shard_plan(shard_id))
    opts = PackOptions.from_spec(run.spec.pack)
    with tempfile.TemporaryDirectory(prefix=f"recforge-{shard_id}-") as tmp:
        work = Path(tmp)
        counts = pack_items(rows, run.spec.source.uri, opts, work)
        for name in SHARD_FILES:
            storage.upload(work / name, run.shard_output(shard_id, name))
    log.info("shard %s: packed %d, quarantined %d", shard_id, counts["packed"],
             counts["quarantined"])
    return {"shard": shard_id, **counts}
