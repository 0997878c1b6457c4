"""What changed since the latest published version: objects added, changed (same key, new
ETag) and removed, and classes added and removed, against the ``source_manifest.jsonl`` and
``classes.json`` that version was built from."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable

from recforge import releases, storage
from recforge.format import names
from recforge.spec import DatasetSpec

log = logging.getLogger(__name__)
EXAMPLES = 10  # keys quoted per kind of change (the counts are always complete)


def diff_listings(before: Iterable[dict], now: Iterable[dict]) -> dict:
    """``{added, changed, removed}``: counts and the first keys of each, by key and ETag.
    The listings may be streams: only one key → ETag map of each is held, never the rows
    or a sorted copy of every key."""
    old = {r["key"]: r.get("etag") for r in before}
    new = {r["key"]: r.get("etag") for r in now}
    kinds = {"added": lambda: (k for k in new if k not in old),
             "changed": lambda: (k for k in new if k in old and new[k] != old[k]),
             "removed": lambda: (k for k in old if k not in new)}
    return {kind: {"count": sum(1 for _ in keys()),
                   "examples": heapq.nsmallest(EXAMPLES, keys())}
            for kind, keys in kinds.items()}


def previous_version(spec: DatasetSpec) -> tuple[str, str] | None:
    """``(version, uri)`` of the latest published version, or None."""
    latest = releases.read_latest(spec)
    return (latest["version"], latest["uri"]) if latest else None


def detect(spec: DatasetSpec, listing: Iterable[dict], classes: list[str]) -> dict:
    """The change document of a run: against the latest published version, or everything
    added when there is none."""
    prev = previous_version(spec)
    before, before_classes, manifest = [], [], {}
    if prev:
        version, uri = prev
        before = storage.iter_jsonl(storage.join(uri, names.SOURCE_MANIFEST))
        before_classes = storage.read_json(storage.join(uri, names.CLASSES)).get("classes", [])
        manifest = storage.read_json(storage.join(uri, names.MANIFEST))
    doc = {"previous_version": prev[0] if prev else None,
           "previous_uri": prev[1] if prev else None,
           "previous_content_id": manifest.get("content_id"),
           "objects": diff_listings(before, listing),
           "classes": {"added": sorted(set(classes) - set(before_classes)),
                       "removed": sorted(set(before_classes) - set(classes))}}
    o = doc["objects"]
    log.info("changes since %s: %d added, %d changed, %d removed objects; classes added %s, "
             "removed %s", doc["previous_version"] or "(no published version)",
             o["added"]["count"], o["changed"]["count"], o["removed"]["count"],
             doc["classes"]["added"], doc["classes"]["removed"])
    return doc


def headline(doc: dict | None) -> str | None:
    """One line for an alert or a report: what changed since which version."""
    if not doc:
        return None
    o = doc["objects"]
    since = doc.get("previous_version") or "nothing published"
    line = (f"since {since}: {o['added']['count']} added, {o['changed']['count']} changed, "
            f"{o['removed']['count']} removed")
    added, removed = doc["classes"]["added"], doc["classes"]["removed"]
    if doc.get("previous_version") and (added or removed):
        line += f"; classes added {added}, removed {removed}"
    return line


def run_headline(changes_uri: str) -> str | None:
    """The headline of a run's ``split/changes.json`` (``Run.changes``), if it has one."""
    return headline(storage.read_json(changes_uri)) if storage.exists(changes_uri) else None
