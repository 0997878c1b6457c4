"""The Summary section: what the version is, where it lives, what it holds (a task kind's
own rows from :data:`KIND_ROWS`: a detection dataset's objects) and how to load it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from html import escape

from recforge import storage
from recforge.format import names
from recforge.report.inputs import ReportInputs
from recforge.report.origin import accounting, by_reason, split_origin
from recforge.report.sections.context import Context, Where
from recforge.report.sections.loading import load_snippet


def _in_split_order(items):
    """(split, value) pairs in names.SPLITS order, any other split after them."""
    return sorted(items, key=lambda kv: (names.SPLITS.index(kv[0]) if kv[0] in names.SPLITS
                                         else len(names.SPLITS), str(kv[0])))


def _no_rows(inp: ReportInputs) -> list[tuple[str, str]]:
    return []


def _object_rows(inp: ReportInputs) -> list[tuple[str, str]]:
    """Summary rows of a detection dataset: its objects, negatives and refused objects."""
    objs, s = inp.objects, inp.summary
    negatives = len(objs.negatives())
    rows = [("objects", f"{objs.count:,} in {objs.images:,} images"
             + (f", {objs.difficult:,} of them difficult" if objs.difficult else "")),
            ("negatives (no object)", f"{negatives:,}")]
    if objs.unreadable:
        rows.append(("labels not in the detection layout", f"{objs.unreadable:,} records"))
    parts = [e for e in inp.quarantine if e.get("part")]
    refused = s.get("objects_quarantined", len(parts))
    reasons = s.get("objects_quarantined_by_reason") or Counter(e.get("reason") for e in parts)
    rows.append(("objects quarantined", f"{refused:,}" + (f" ({by_reason(reasons)})"
                                                          if refused and reasons else "")))
    return rows


# task kind → the summary rows only its datasets have (after the accounting)
KIND_ROWS: dict[str, Callable[[ReportInputs], list[tuple[str, str]]]] = {
    "classification": _no_rows,
    "segmentation": _no_rows,
    "detection": _object_rows,
}


def _location(version: str | None, where: Where) -> tuple[str, str]:
    """The version row and the location row."""
    if where.blocked:
        return (f"{version or '—'}: NOT published (the quality gate failed)",
                f"unpublished: {where.uri} — the quality gate failed "
                f"({', '.join(where.blocked)}), so no version was published; this report "
                "and the dataset stay in that folder, invisible to readers (no manifest), "
                "until a later publish removes it")
    if where.published:
        return version or "—", where.uri
    return version or "not published", f"{where.uri} (not a published version)"


def render(ctx: Context) -> str:
    inp, where = ctx.inp, ctx.where
    m = inp.manifest or {}
    spec = m.get("spec") or {}
    s = inp.summary
    sizes = [(r["width"], r["height"]) for r in inp.records if "width" in r]
    per_split = Counter(r.get("split") for r in inp.records)
    version_row, location = _location(m.get("version"), where)
    rows = [
        ("dataset", m.get("dataset") or (inp.quality or {}).get("dataset") or "—"),
        ("version", version_row),
        ("content id", m.get("content_id") or "—"),  # the run's (stages.split), not ours
        ("run", m.get("run_id") or (inp.quality or {}).get("run") or "—"),
        ("built", m.get("published_at") or (inp.bench or {}).get("created_at") or "—"),
        ("task", m.get("task") or ctx.kind.name),
        ("source", (spec.get("source") or {}).get("uri", "—")),
        ("location", location),
        ("records", ", ".join(f"{k} {v:,}" for k, v in _in_split_order(per_split.items()))
         or "0"),
        ("splits", split_origin(spec) or "—"),
        ("classes", f"{len(inp.class_names):,}"),
        ("listed = packed + quarantined + not used", accounting(s) or "—"),
    ]
    if s.get("not_used"):
        rows.append(("not used (set aside, not bad data)",
                     f"{s['not_used']:,}: objects of the download that are no part of this "
                     f"dataset, listed in {names.NOT_USED} and under Quarantine"))
    rows += KIND_ROWS[ctx.kind.name](inp)
    if sizes:
        ws, hs = sorted(w for w, _ in sizes), sorted(h for _, h in sizes)
        rows.append(("image size (W×H) min / median / max",
                     f"{ws[0]}×{hs[0]} / {ws[len(ws) // 2]}×{hs[len(hs) // 2]} / "
                     f"{ws[-1]}×{hs[-1]}"))
    pack = spec.get("pack")
    if pack:
        rows.append(("pack options", ", ".join(f"{k}={v}" for k, v in pack.items())))
    if where.published:
        rows += [("report", storage.join(where.uri, names.REPORT)),
                 ("Data Docs", storage.join(where.uri, names.QUALITY_DIR, "index.html")),
                 ("latest", f"{where.latest} (names the newest published version)")]
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    if where.published:
        body += (f"<tr><td>load it</td><td>{load_snippet(inp, ctx.kind, where.uri)}"
                 + ('<span class="muted">s3:// links do not open in a browser: '
                    f"<code>recforge report {escape(where.uri)} --open</code> opens this "
                    "report.</span>" if storage.is_s3(where.uri) else "")
                 + "</td></tr>")
    return f'<table class="kv">{body}</table>'
