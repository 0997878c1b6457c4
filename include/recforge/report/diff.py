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


def diff_records(previous: dict[str, tuple[str | None, str | None]], current: list[dict],
                 previous_name: str) -> VersionDiff:
    """``previous``: source key → (content, class) of the earlier version (``read_contents``);
    ``current``: this version's records (with ``content``)."""
    now = {r["source_key"]: r for r in current}
    out = VersionDiff(previous_name)
    out.added = sorted(now.keys() - previous.keys())
    out.removed = sorted(previous.keys() - now.keys())
    out.changed = sorted(k for k in now.keys() & previous.keys()
                         if now[k].get("content") != previous[k][0])
    was = Counter(c for _, c in previous.values() if c)
    is_ = Counter(r.get("class_name") for r in current if r.get("class_name"))
    out.class_counts = {c: (was.get(c, 0), is_.get(c, 0)) for c in sorted(was.keys() | is_.keys())}
    return out
