"""The Checklist section: every check of the quality checklist, its severity in words, its
status (warn shown as warn), what it observed and, for one that did not pass, what it means."""

from __future__ import annotations

from html import escape

from recforge.format import names
from recforge.quality.verdict import gate_status, gate_verdict
from recforge.report.advice import explain, severity_words
from recforge.report.origin import splits_from_source
from recforge.report.sections.context import Context
from recforge.report.sections.markup import table
from recforge.spec.quality import CHECKS

STATUS_CLASS = {"passed": "pass", "warning": "warn", "failed": "fail", "not run": "skip",
                "off": "skip"}


def render(ctx: Context) -> str:
    inp, docs_href = ctx.inp, ctx.docs_href
    q = inp.quality
    if not q:
        return '<p class="muted">The checklist has not run for this prefix.</p>'
    verdict = gate_verdict(q, subject="")
    cls = STATUS_CLASS[gate_status(q)]
    rows = []
    from_source = splits_from_source((inp.manifest or {}).get("spec"))
    order = {c.name: i for i, c in enumerate(CHECKS)}
    for name, c in sorted(q.get("checks", {}).items(), key=lambda kv: order.get(kv[0], 99)):
        status = c.get("status", "")
        shown = {"passed": "pass", "warning": "warn", "failed": "fail"}.get(status, status)
        ev = "".join(f"<br><span class='muted'>{escape(e)}</span>"
                     for e in c.get("evidence", [])[:3]) if status in ("failed", "warning") \
            else ""
        if status in ("failed", "warning"):
            words = explain(name, status, c.get("severity", ""),
                            splits_from_source=from_source)
            ev += f'<span class="advice">{escape(words)}</span>'
        rows.append([escape(str(c.get("item", ""))), f"<b>{escape(name)}</b><br>"
                     f"<span class='muted'>{escape(c.get('title', ''))}</span>",
                     f'<span class="nw">{escape(severity_words(c.get("severity", "")))}</span>',
                     f'<span class="{STATUS_CLASS.get(status, "skip")} nw">{escape(shown)}</span>',
                     escape(str(c.get("observed", ""))) + ev])
    return (f'<p>Checklist <span class="{cls}">{escape(verdict)}</span>. Detailed evidence: '
            f'<a href="{escape(docs_href or names.QUALITY_DIR + "/index.html")}">Data Docs</a>.'
            "</p>"
            + table(["item", "check", "if it fails", "status", "observed"], rows))
