"""The page: the sections a dataset's task kind has (``sections.SECTIONS``), assembled into
one self-contained HTML file with its stylesheet (``page.css``) inline."""

from __future__ import annotations

import logging
import time
from functools import cache
from html import escape
from importlib.resources import files
from pathlib import Path

from recforge.report.inputs import load
from recforge.report.records import Records
from recforge.report.sections import renderer, sections_for
from recforge.report.sections.context import Context, where_of

log = logging.getLogger(__name__)


@cache
def css() -> str:
    """The page's stylesheet, ``page.css`` of this package."""
    return files(__package__).joinpath("page.css").read_text(encoding="utf-8")


def build_report(prefix: str, out_path: str | Path, *, previous: str | None = None,
                 about: dict | None = None, docs_href: str | None = None,
                 seed: int = 0) -> Path:
    """Write ``report.html`` for the dataset at ``prefix`` (local or S3) to ``out_path``.

    ``previous``: the prefix of the version to diff against (default: the one the version's
    manifest names, if any). ``about``: manifest fields (dataset, version, run_id, spec,
    content_id, previous_uri) for a prefix that has no manifest yet — the pipeline builds the
    report before publishing — plus ``uri``, the version it will be published as (what the
    report names as its location), and ``blocked``, the failed checks when the quality gate
    failed (then the report names the staging prefix, and says it was not published).
    ``docs_href``: the link to the Data Docs (default: ``quality/`` next to the report)."""
    started = time.monotonic()
    inp = load(prefix)
    from_version = inp.manifest is not None
    if inp.manifest is None and about:
        inp.manifest = {k: v for k, v in about.items() if k not in ("uri", "blocked")}
    where = where_of(inp, about, from_version)
    ctx = Context(inp, Records(inp), where, inp.kind,
                  previous=previous or (inp.manifest or {}).get("previous_uri"),
                  docs_href=docs_href, seed=seed)
    title = (inp.manifest or {}).get("dataset") or (inp.quality or {}).get("dataset") \
        or "dataset"
    version = (inp.manifest or {}).get("version") or "staging"
    if where.blocked:
        version += " (not published)"
    shown = sections_for(ctx.kind.name)
    nav = "".join(f'<a href="#{s.sid}">{s.heading}</a>' for s in shown)
    sections = "".join(f'<section id="{s.sid}"><h2>{s.heading}</h2>{renderer(s)(ctx)}</section>'
                       for s in shown)
    banner = (f'<p class="banner"><b>Not published.</b> The quality gate failed '
              f"({escape(', '.join(where.blocked))}): this report and the dataset stay in "
              f"staging at <code>{escape(where.uri)}</code>; see the checklist below.</p>"
              if where.blocked else "")
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width,initial-scale=1"><title>{escape(title)} {version} '
            f'— recforge report</title><style>\n{css()}</style></head><body><header><h1>'
            f'{escape(title)} <small>{escape(version)}</small></h1><p>recforge dataset report '
            f'· {len(inp.records):,} records</p></header><nav>{nav}</nav>{banner}{sections}'
            "</body></html>")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    # the path is a temporary file when the pipeline builds it: where it is published is
    # the caller's to say
    log.info("report: built (%.0f KB, %.1f s)", out.stat().st_size / 1024,
             time.monotonic() - started)
    log.debug("report: written to %s", out)
    return out
