"""What a dataset is on disk: every file name of a packed split, a shard and a version.

One spelling per name; stages, the checklist, the benchmark and the readers all take their
names from here. A split is ``<split>.rec/.idx/.lst``; a segmentation split adds the aligned
``<split>_mask.rec/.idx`` (same keys, same order).
"""

from __future__ import annotations

SPLITS = ("train", "val", "test")
MASK_SUFFIX = "_mask"  # <split>_mask.rec: the masks aligned with <split>.rec

# a packed shard (one pack task's output), before merge
SHARD_PART = "part"
RECORDS = "records.jsonl"  # one row per record: key, offset, length, size, label, provenance
QUARANTINE = "quarantine.jsonl"  # every object not packed, with its reason and fix
SHARD_META = "shard.json"  # written last by pack: size + SHA-256 of each file above
PACK_ATTEMPT = "pack_attempt.json"  # beside shard.json while a pack attempt runs
MASKS_ATTEMPT = "convert_attempt.json"  # beside a shard's converted masks, likewise

# a version (and a run's out/, which is published as it is)
CLASSES = "classes.json"
SOURCE_MANIFEST = "source_manifest.jsonl"
SUMMARY = "summary.json"
NOT_USED = "not_used.jsonl"  # listed objects set aside as no part of the dataset (not bad
#                              data: a captions file beside COCO's instances), with why
BENCH = "bench.json"
QUALITY_DIR = "quality"  # Data Docs site + quality.json
QUALITY_RESULT = "quality.json"
REPORT = "report.html"  # the dataset report people look at
MANIFEST = "manifest.json"  # written last: a version exists once this does
CHECKSUMS = "checksums.json"  # {"files": {name: {size, sha256} | {size, parts}}}: what a
#                               stage wrote (merge's is out/checksums.json, written last by
#                               merge: size + SHA-256 of every file it wrote); publish checks it
CLAIM = "_claim.json"  # a version's owner (run id) while it is being published
LATEST = "latest.json"  # next to the versions: points at the newest complete one
CACHE_KEYS = "cache_keys.json"  # the shard-cache entries a version was built from (prune)


def rec(name: str, mask: bool = False) -> str:
    return f"{name}{MASK_SUFFIX if mask else ''}.rec"


def idx(name: str, mask: bool = False) -> str:
    return f"{name}{MASK_SUFFIX if mask else ''}.idx"


def lst(name: str) -> str:
    return f"{name}.lst"


def quarantine_tsv(name: str) -> str:
    """``recforge im2rec``'s report of the ``.lst`` items it did not pack (next to its output)."""
    return f"{name}.quarantine.tsv"


# its columns: the .lst line number, the .lst index (empty when unreadable), the path, and why
QUARANTINE_TSV_COLUMNS = ("line", "key", "path", "reason", "detail", "fix")


def split_files(split: str, masks: bool = False) -> tuple[str, ...]:
    """The files of one packed split (or shard part), images first."""
    files = (rec(split), idx(split), lst(split))
    return files + (rec(split, True), idx(split, True)) if masks else files


def shard_files(masks: bool = False) -> tuple[str, ...]:
    """Everything a pack task uploads for its shard."""
    return (*split_files(SHARD_PART, masks), RECORDS, QUARANTINE)


def lst_line(record_key: int, label: float | list[float], path: str) -> str:
    """One ``.lst`` line exactly as im2rec writes it: index, float label(s), path."""
    labels = label if isinstance(label, list) else [label]
    return f"{record_key}\t" + "".join(f"{float(x):f}\t" for x in labels) + f"{path}\n"
