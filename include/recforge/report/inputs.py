"""What the report reads from a dataset prefix (a run's ``out/`` or a published version)."""

from __future__ import annotations

import sys
from array import array
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice

from recforge import storage
from recforge.format import names
from recforge.kinds import KINDS, Kind, kind, kind_of
from recforge.report.objects import Objects, label_objects

# the record columns the report uses; the rest of records.jsonl is not kept in memory
RECORD_COLUMNS = ("key", "split", "offset", "length", "height", "width", "label", "class_name",
                  "source_key", "phash", "mask_offset", "mask_length", "class_pixels")
INTERNED = ("split", "class_name")  # few distinct values: one string object each
NOT_USED_KEPT = 1000  # the first rows of not_used.jsonl the report keeps (summary.json counts all)


@dataclass
class ReportInputs:
    prefix: str
    records: list[Record]
    summary: dict = field(default_factory=dict)
    classes: dict = field(default_factory=dict)
    quarantine: list[dict] = field(default_factory=list)
    not_used: list[dict] = field(default_factory=list)  # not_used.jsonl's first rows
    manifest: dict | None = None  # only a published version has one
    bench: dict | None = None
    quality: dict | None = None  # the checklist's result (quality/quality.json)
    splits: list[str] = field(default_factory=list)

    @property
    def kind(self) -> Kind:
        """The dataset's task kind (``recforge.kinds``): the one ``classes.json`` or the manifest
        names. Where neither names one (a run's ``out/`` holds no manifest, and only boxes
        are named in ``classes.json``), records paired with masks, or classes naming an
        ignore index, make it the kind with masks."""
        named = kind_of(self.classes, self.manifest)
        if named == kind(None) and ("ignore_index" in self.classes
                                    or any("mask_offset" in r for r in self.records)):
            return next(k for k in KINDS.values() if k.masks)
        return named

    @cached_property
    def objects(self) -> Objects | None:
        """Every record's boxes in one array (kinds whose labels are boxes; computed once)."""
        return Objects.of(self.records) if self.kind.boxes else None

    @property
    def class_names(self) -> list[str]:
        return list(self.classes.get("classes") or [])

    def rec_uri(self, split: str, mask: bool = False) -> str:
        return storage.join(self.prefix, names.rec(split, mask=mask))


def _optional_json(prefix: str, name: str, present: set[str]):
    return storage.read_json(storage.join(prefix, name)) if name in present else None


class Record:
    """One record's report columns in slots: a dict per record would cost ~5x the memory at
    ImageNet size. Reads like a dict (``r["key"]``, ``r.get``, ``"mask_offset" in r``)."""

    __slots__ = (*RECORD_COLUMNS, "content")

    def __init__(self, row: dict):
        for k in self.__slots__:
            v = row.get(k)
            setattr(self, k, sys.intern(v) if k in INTERNED and isinstance(v, str) else v)

    def __getitem__(self, k: str):
        v = getattr(self, k)
        if v is None:
            raise KeyError(k)
        return v

    def get(self, k: str, default=None):
        v = getattr(self, k, None)
        return default if v is None else v

    def __contains__(self, k: str) -> bool:
        return getattr(self, k, None) is not None


def content_of(row: dict) -> str | None:
    """A short fingerprint of the record's source bytes (SHA-256, else the ETag): enough to
    tell a changed image, a sixth of the memory of the full digests."""
    full = row.get("source_sha256") or row.get("source_etag")
    return full[:16] if full else None


def read_records(prefix: str, boxes: bool = False) -> list[Record]:
    """``records.jsonl`` streamed line by line, keeping only the report's columns (and the
    source fingerprint as ``content``). ``boxes`` (detection labels): each label list (4 + 6
    floats an object) is kept as a float32 ``array``, a sixth of the memory of a list of
    floats."""
    out = []
    for row in storage.iter_jsonl(storage.join(prefix, names.RECORDS)):
        row["content"] = content_of(row)
        if boxes and isinstance(row.get("label"), list):
            row["label"] = array("f", row["label"])
        out.append(Record(row))
    return out


def read_contents(prefix: str, objects: Counter | None = None
                  ) -> dict[str, tuple[str | None, str | None]]:
    """source key → (content fingerprint, class) of a version: all the diff needs of it.
    ``objects``: a Counter that gets the version's objects per class id (detection labels),
    counted while streaming, no label kept."""
    out = {}
    for row in storage.iter_jsonl(storage.join(prefix, names.RECORDS)):
        out[row["source_key"]] = (content_of(row), row.get("class_name"))
        if objects is not None:
            objects.update(int(c) for c in label_objects(row.get("label"))[:, 0])
    return out


def load(prefix: str) -> ReportInputs:
    present = {o.key for o in storage.list_objects(prefix)}
    if names.RECORDS not in present:
        raise FileNotFoundError(
            f"{prefix} holds no {names.RECORDS}, so it is no packed dataset: give a "
            "published version (.../<name>/<version>), a dataset prefix (.../<name>: its "
            "latest version) or a run's out/ prefix")
    quality_result = storage.join(names.QUALITY_DIR, names.QUALITY_RESULT)
    classes = _optional_json(prefix, names.CLASSES, present) or {}
    manifest = _optional_json(prefix, names.MANIFEST, present)
    records = read_records(prefix, kind_of(classes, manifest).boxes)
    return ReportInputs(
        prefix=prefix, records=records,
        summary=_optional_json(prefix, names.SUMMARY, present) or {},
        classes=classes,
        quarantine=(storage.read_jsonl(storage.join(prefix, names.QUARANTINE))
                    if names.QUARANTINE in present else []),
        not_used=(list(islice(storage.iter_jsonl(storage.join(prefix, names.NOT_USED)),
                              NOT_USED_KEPT)) if names.NOT_USED in present else []),
        manifest=manifest,
        bench=_optional_json(prefix, names.BENCH, present),
        quality=_optional_json(prefix, quality_result, present),
        splits=[s for s in names.SPLITS if names.rec(s) in present],
    )
