"""What the report reads from a dataset prefix (a run's ``out/`` or a published version)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from recforge import storage
from recforge.format import names

# the record columns the report uses; the rest of records.jsonl is not kept in memory
RECORD_COLUMNS = ("key", "split", "offset", "length", "height", "width", "label", "class_name",
                  "source_key", "source_etag", "source_sha256", "phash", "mask_offset",
                  "mask_length", "class_pixels")


@dataclass
class ReportInputs:
    prefix: str
    records: list[dict]
    summary: dict = field(default_factory=dict)
    classes: dict = field(default_factory=dict)
    quarantine: list[dict] = field(default_factory=list)
    manifest: dict | None = None  # only a published version has one
    bench: dict | None = None
    quality: dict | None = None  # the checklist's result (quality/quality.json)
    splits: list[str] = field(default_factory=list)

    @property
    def segmentation(self) -> bool:
        return "ignore_index" in self.classes or any("mask_offset" in r for r in self.records)

    @property
    def class_names(self) -> list[str]:
        return list(self.classes.get("classes") or [])

    def rec_uri(self, split: str, mask: bool = False) -> str:
        return storage.join(self.prefix, names.rec(split, mask=mask))


def _optional_json(prefix: str, name: str, present: set[str]):
    return storage.read_json(storage.join(prefix, name)) if name in present else None


def read_records(prefix: str) -> list[dict]:
    """``records.jsonl`` with only the report's columns (streamed line by line)."""
    out = []
    for line in storage.get_bytes(storage.join(prefix, names.RECORDS)).splitlines():
        if line.strip():
            row = json.loads(line)
            out.append({k: row[k] for k in RECORD_COLUMNS if k in row})
    return out


def load(prefix: str) -> ReportInputs:
    present = {o.key for o in storage.list_objects(prefix)}
    if names.RECORDS not in present:
        raise FileNotFoundError(
            f"{storage.join(prefix, names.RECORDS)} does not exist: a report needs a packed "
            "dataset; point at a published version or a run's out/ prefix")
    quality_result = storage.join(names.QUALITY_DIR, names.QUALITY_RESULT)
    records = read_records(prefix)
    return ReportInputs(
        prefix=prefix, records=records,
        summary=_optional_json(prefix, names.SUMMARY, present) or {},
        classes=_optional_json(prefix, names.CLASSES, present) or {},
        quarantine=(storage.read_jsonl(storage.join(prefix, names.QUARANTINE))
                    if names.QUARANTINE in present else []),
        manifest=_optional_json(prefix, names.MANIFEST, present),
        bench=_optional_json(prefix, names.BENCH, present),
        quality=_optional_json(prefix, quality_result, present),
        splits=[s for s in names.SPLITS if names.rec(s) in present],
    )
