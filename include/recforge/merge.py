"""Stage 6, merge: shard outputs → one ``<split>.rec``/``.idx``/``.lst`` per split, plus the
dataset-wide record manifest, quarantine report and reconciled counts.

Shards hold contiguous record-key ranges, so concatenating them in shard order keeps the
keys increasing; each shard's ``.idx`` offsets are shifted by the bytes already written.
The counts must reconcile exactly — every listed object is packed or quarantined, once —
or the run fails here, before anything can be published.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from recforge import quarantine, storage
from recforge.run import SPLITS, Run

log = logging.getLogger(__name__)


class ReconciliationError(RuntimeError):
    """Some listed object is neither packed nor quarantined, or is counted twice."""


def merge_split(shard_dirs: list[Path], out: Path, split: str) -> list[dict]:
    """Concatenate local shard dirs into ``out/<split>.*``; returns the shifted records."""
    records: list[dict] = []
    base = 0
    with open(out / f"{split}.rec", "wb") as rec, open(out / f"{split}.idx", "w") as idx, \
            open(out / f"{split}.lst", "w", encoding="utf-8") as lst:
        for d in shard_dirs:
            with open(d / "part.rec", "rb") as part:
                shutil.copyfileobj(part, rec, 1 << 20)
            for line in (d / "part.idx").read_text().splitlines():
                key, off = line.split("\t")
                idx.write(f"{key}\t{int(off) + base}\n")
            lst.write((d / "part.lst").read_text(encoding="utf-8"))
            for r in storage.read_jsonl(str(d / "records.jsonl")):
                r["offset"] += base
                records.append(r)
            base = rec.tell()
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


def merge(run: Run) -> dict:
    shard_ids = storage.read_json(run.shard_list)["shards"]
    segmentation = run.spec.task == "segmentation"
    if segmentation:
        from recforge import segstages
    all_records: list[dict] = []
    entries = []
    for stage in ("ingest", "flatten"):
        entries += quarantine.loads(storage.get_bytes(run.stage_quarantine(stage)))
    if segmentation:
        entries += segstages.mask_stage_quarantine(run, shard_ids)
    per_split: dict[str, int] = {}
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
                d = tmp / sid
                for name in ("part.rec", "part.idx", "part.lst", "records.jsonl",
                             "quarantine.jsonl"):
                    storage.download(run.shard_output(sid, name), d / name)
                entries += quarantine.loads((d / "quarantine.jsonl").read_bytes())
                dirs.append(d)
            records = merge_split(dirs, out, split)
            if segmentation:  # <split>_mask.rec: same keys, same order as <split>.rec
                n_masks = segstages.merge_mask_split(run, split, mine, tmp)
                if n_masks != len(records):
                    raise ReconciliationError(
                        f"{split}: {len(records)} image records but {n_masks} mask records")
            per_split[split] = len(records)
            all_records += records
            for d in dirs:
                shutil.rmtree(d)
            for ext in ("rec", "idx", "lst"):
                storage.upload(out / f"{split}.{ext}", run.output(f"{split}.{ext}"))
            log.info("merge: %s has %d records", split, len(records))
        listed = [r["key"] for r in storage.read_jsonl(run.source_manifest)]
        packed = (segstages.packed_keys(all_records) if segmentation
                  else [r["source_key"] for r in all_records])
        counts = reconcile(listed, packed, [e.source_key for e in entries])
    storage.write_json(run.output("classes.json"), storage.read_json(run.classes))
    # the listing travels with the dataset, so `recforge check` can account per object later
    storage.copy(run.source_manifest, run.output("source_manifest.jsonl"))
    storage.write_jsonl(run.output("records.jsonl"), all_records)
    storage.put_bytes(run.output("quarantine.jsonl"), quarantine.dumps(
        sorted(entries, key=lambda e: e.source_key)))
    summary = {**counts, "splits": per_split,
               "quarantined_by_reason": dict(Counter(e.reason for e in entries))}
    storage.write_json(run.output("summary.json"), summary)
    log.info("merge: listed %d = packed %d + quarantined %d; splits %s", counts["listed"],
             counts["packed"], counts["quarantined"], per_split)
    return summary
