"""What changed against the previous version: images added, removed and changed (same key,
new content), and the class counts before and after."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

SHOWN = 20  # keys listed per kind; the counts are always complete


@dataclass
class VersionDiff:
    previous: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    class_counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # name → (was, now)


def _content(r: dict) -> str | None:
    return r.get("source_sha256") or r.get("source_etag")


def diff_records(previous: list[dict], current: list[dict], previous_name: str) -> VersionDiff:
    before = {r["source_key"]: r for r in previous}
    now = {r["source_key"]: r for r in current}
    out = VersionDiff(previous_name)
    out.added = sorted(now.keys() - before.keys())
    out.removed = sorted(before.keys() - now.keys())
    out.changed = sorted(k for k in now.keys() & before.keys()
                         if _content(now[k]) != _content(before[k]))
    was = Counter(r.get("class_name") for r in previous if r.get("class_name"))
    is_ = Counter(r.get("class_name") for r in current if r.get("class_name"))
    out.class_counts = {c: (was.get(c, 0), is_.get(c, 0)) for c in sorted(was.keys() | is_.keys())}
    return out
