"""The ``merge`` task: shard outputs → one ``<split>.rec``/``.idx``/``.lst`` per split (and
``<split>_mask.rec``/``.idx`` where the shards carry masks), plus the dataset-wide record
manifest, quarantine report and reconciled counts.

Generic over task kinds: every stream a shard carries (images, and masks when present) is
concatenated in shard order with its ``.idx`` offsets shifted (``recordio.concat_indexed``).
Shards hold contiguous record-key ranges, so the keys stay increasing. Each shard is
downloaded once. The counts must reconcile exactly — every listed object is packed (the
keys each record accounts for: its image, and its mask) or quarantined, once — or the run
fails here, before anything can be published.
"""

from __future__ import annotations

import logging
import tempfile
from collections import Counter
from pathlib import Path

from recforge import quarantine, storage
from recforge.errors import ReconciliationError
from recforge.format import names, recordio
from recforge.format.names import SPLITS
from recforge.progress import Progress
from recforge.run import Run

log = logging.getLogger(__name__)
ACCOUNTED_KEYS = ("source_key", "mask_key")  # the source objects one record stands for


def accounted_keys(records: list[dict]) -> list[str]:
    """Source keys the records account for: each record's image, and its mask if any."""
    return [r[k] for r in records for k in ACCOUNTED_KEYS if r.get(k)]


def merge_split(shard_dirs: list[Path], out: Path, split: str) -> list[dict]:
    """Concatenate local shard dirs into ``out/<split>.*`` (+ ``<split>_mask.*`` when every
    shard has masks); returns the records with their offsets shifted."""
    part = names.SHARD_PART
    masks = bool(shard_dirs) and all((d / names.rec(part, mask=True)).exists()
                                     for d in shard_dirs)
    bases = recordio.concat_indexed(
        [(d / names.rec(part), d / names.idx(part)) for d in shard_dirs],
        out / names.rec(split), out / names.idx(split))
    mask_bases = recordio.concat_indexed(
        [(d / names.rec(part, mask=True), d / names.idx(part, mask=True)) for d in shard_dirs],
        out / names.rec(split, mask=True), out / names.idx(split, mask=True)) if masks \
        else [None] * len(shard_dirs)
    records: list[dict] = []
    with open(out / names.lst(split), "w", encoding="utf-8") as lst:
        for d, base, mask_base in zip(shard_dirs, bases, mask_bases, strict=True):
            lst.write((d / names.lst(part)).read_text(encoding="utf-8"))
            for r in storage.read_jsonl(str(d / names.RECORDS)):
                r["offset"] += base
                if mask_base is not None and "mask_offset" in r:
                    r["mask_offset"] += mask_base
                records.append(r)
    return records


def reconcile(listed: list[str], packed: list[str], refused: list[str]) -> dict:
    """Exact accounting by key; raises naming the first offenders."""
    seen = Counter(packed) + Counter(refused)
    twice = sorted(k for k, n in seen.items() if n > 1)
    lost = sorted(set(listed) - set(seen))
    unknown = sorted(set(seen) - set(listed))
    if twice or lost or unknown:
        raise ReconciliationError(
            f"counts do not reconcile: {len(lost)} listed object(s) neither packed nor "
            f"quarantined {lost[:5]}, {len(twice)} counted twice {twice[:5]}, "
            f"{len(unknown)} not in the listing {unknown[:5]}"
        )
    return {"listed": len(listed), "packed": len(packed), "quarantined": len(refused)}


def _download_shard(run: Run, shard_id: str, dest: Path) -> None:
    prefix = run.shard_output(shard_id, "")
    for obj in storage.list_objects(prefix):
        if obj.key != "plan.jsonl":
            storage.download(storage.join(prefix, obj.key), dest / obj.key)


def run_changes(run: Run) -> dict:
    """``{"changes": …}`` for summary.json: what changed since the latest version (split)."""
    return {"changes": storage.read_json(run.changes)} if storage.exists(run.changes) else {}


def merge(run: Run) -> dict:
    shard_ids = storage.read_json(run.shard_list)["shards"]
    all_records: list[dict] = []
    entries = []
    for stage in ("ingest", "flatten"):
        entries += quarantine.loads(storage.get_bytes(run.stage_quarantine(stage)))
    per_split: dict[str, int] = {}
    progress = Progress("merge", len(shard_ids), log, unit="shards")
    with tempfile.TemporaryDirectory(prefix="recforge-merge-") as tmp:
        tmp = Path(tmp)
        out = tmp / "out"
        out.mkdir()
        for split in SPLITS:
            mine = [s for s in shard_ids if s.startswith(split + "-")]
            if not mine:
                continue
            dirs = []
            for sid in mine:
                _download_shard(run, sid, tmp / sid)
                progress.update()
                entries += quarantine.loads((tmp / sid / names.QUARANTINE).read_bytes())
                dirs.append(tmp / sid)
            records = merge_split(dirs, out, split)
            per_split[split] = len(records)
            all_records += records
            for path in sorted(out.iterdir()):
                storage.upload(path, run.output(path.name))
                path.unlink()
            for d in dirs:
                for f in d.iterdir():
                    f.unlink()
            log.info("merge: %s has %d records", split, len(records))
    listed = [r["key"] for r in storage.read_jsonl(run.source_manifest)]
    counts = reconcile(listed, accounted_keys(all_records), [e.source_key for e in entries])
    storage.write_json(run.output(names.CLASSES), storage.read_json(run.classes))
    # the listing travels with the dataset, so `recforge check` can account per object later
    storage.copy(run.source_manifest, run.output(names.SOURCE_MANIFEST))
    storage.write_jsonl(run.output(names.RECORDS), all_records)
    storage.put_bytes(run.output(names.QUARANTINE), quarantine.dumps(
        sorted(entries, key=lambda e: e.source_key)))
    summary = {**counts, "splits": per_split,
               "quarantined_by_reason": dict(Counter(e.reason for e in entries)),
               **run_changes(run)}
    storage.write_json(run.output(names.SUMMARY), summary)
    log.info("merge: listed %d = packed %d + quarantined %d; splits %s", counts["listed"],
             counts["packed"], counts["quarantined"], per_split)
    return summary
