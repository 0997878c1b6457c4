"""The Changes section: the records added, removed and changed against the previous version,
and the class counts that changed, counted as the task kind counts a class (:data:`COUNTS`):
records, or objects."""

from __future__ import annotations

from collections import Counter
from html import escape

from recforge.report.diff import SHOWN, VersionDiff, diff_records
from recforge.report.inputs import ReportInputs, read_contents
from recforge.report.sections.context import Context
from recforge.report.sections.markup import table


class RecordCounts:
    """Records per class: the diff's own class counts."""

    what = "Class counts"
    head = ["class", "before", "now", "change"]
    previous_objects: Counter | None = None  # nothing to count while reading the previous

    def counts(self, inp: ReportInputs, d: VersionDiff) -> dict[str, tuple[int, int]]:
        return d.class_counts


class ObjectCounts:
    """Objects per class: the previous version's counted while its labels stream by."""

    what = "Objects per class"
    head = ["class", "objects before", "objects now", "change"]

    def __init__(self):
        self.previous_objects: Counter = Counter()

    def counts(self, inp: ReportInputs, d: VersionDiff) -> dict[str, tuple[int, int]]:
        names_, was = inp.class_names, self.previous_objects
        now = Counter(int(c) for c in inp.objects.class_ids)
        return {names_[c] if c < len(names_) else str(c): (was.get(c, 0), now.get(c, 0))
                for c in sorted(was.keys() | now.keys())}


# task kind → how its class counts are counted
COUNTS: dict[str, type[RecordCounts] | type[ObjectCounts]] = {
    "classification": RecordCounts,
    "segmentation": RecordCounts,
    "detection": ObjectCounts,
}


def render(ctx: Context) -> str:
    inp, previous = ctx.inp, ctx.previous
    if not previous:
        return '<p class="muted">No previous version to compare with (first version).</p>'
    counted = COUNTS[ctx.kind.name]()
    try:
        d = diff_records(read_contents(previous, counted.previous_objects), inp.records,
                         previous)
    except Exception as exc:
        return f'<p class="muted">Previous version {escape(previous)} unreadable: ' \
               f'{escape(str(exc))}</p>'
    parts = [f"<p>Against <code>{escape(previous)}</code>: <b>{len(d.added):,}</b> added, "
             f"<b>{len(d.removed):,}</b> removed, <b>{len(d.changed):,}</b> changed (same key, "
             "new content).</p>"]
    for title, keys in (("added", d.added), ("removed", d.removed), ("changed", d.changed)):
        if keys:
            parts.append(f"<p>{title}: " + ", ".join(f"<code>{escape(k)}</code>"
                                                    for k in keys[:SHOWN])
                         + (f" … and {len(keys) - SHOWN:,} more" if len(keys) > SHOWN else "")
                         + "</p>")
    changed = [[escape(c), f"{a:,}", f"{b:,}", f"{b - a:+,}"]
               for c, (a, b) in counted.counts(inp, d).items() if a != b]
    parts.append(table(counted.head, changed, {1, 2, 3}) if changed
                 else f'<p class="muted">{counted.what} unchanged.</p>')
    return "".join(parts)
