"""Finishing the Data Docs site: self-contained, offline, and warn shown as warn.

GX's pages load Bootstrap, jQuery, bootstrap-table, Vega and Font Awesome from ~20 CDN URLs,
and its index page draws its table with JavaScript, so offline the index is blank. After
GX has built the site, :func:`finish_site` rewrites it:

* every page loses its ``<script>``, ``<link>`` and ``<style>`` tags, GX's top bar, footers
  and logo, and links to other sites (their text stays); it gets one small inline
  stylesheet (:data:`CSS`) that styles the Bootstrap classes GX's markup uses, icons as
  Unicode characters, "Show more info" as a CSS ``:target`` toggle and the "Failed only"
  filter as a CSS ``:has()`` rule: no page makes a network request or needs JavaScript;
* ``index.html`` is written as static HTML: the gate's verdict, one row per validation page
  (status, suite, run, time, expectations, checks) and the checklist;
* a validation page whose failed expectations all belong to ``warn``-severity checks says
  "Status: Warning" (and those rows show a warning icon); each validation page starts with
  recforge's verdict for the checks it holds;
* ``static/`` (fonts, GIFs, logos: ~4 MB that no page needs any more) is removed.

Relative links that point at no file in the site are unwrapped, but for the link to the
dataset report (``report_href``) that recforge adds to every page's bar and to the index:
the site is the dataset's ``quality/`` folder, the report sits beside it and is written
after the site. The inputs are the checklist's ``checks`` (see :mod:`recforge.quality.gx`)
and one :class:`SuitePage` per validation page. Standard library only: this module imports
nothing from the package.
"""

from __future__ import annotations

import datetime
import html
import logging
import posixpath
import re
import shutil
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from recforge.quality.verdict import FAILED, PASSED, WARNING
from recforge.quality.verdict import verdict as verdict_sentence

log = logging.getLogger(__name__)

TABLE_LEVEL = "Table-Level Expectations"  # GX's section for expectations without a column
STATUS_TEXT = {"passed": "Succeeded", "warning": "Warning", "failed": "Failed",
               "not run": "Not run", "off": "Off"}
STATUS_ICON = {"passed": "fa-check-circle text-success", "warning":
               "fa-exclamation-triangle text-warning", "failed": "fa-times text-danger",
               "not run": "fa-minus text-muted", "off": "fa-minus text-muted"}
URL_ATTRS = {"href", "src", "srcset", "action", "formaction", "poster", "data", "background",
             "cite", "manifest", "ping"}
DROP = {"script", "style", "link", "title", "footer", "noscript", "iframe", "object", "embed"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr"}

CSS = """\
:root{color-scheme:light}*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,
sans-serif;color:#212529;background:#fff}
a{color:#0b5cad}h1{font-size:1.45rem;margin:.4rem 0 .8rem}h2{font-size:1.2rem;margin:1.4rem 0 .5rem}
h4{font-size:1.1rem;margin:.3rem 0}h5{font-size:1rem;margin:0}
h6,.h6{font-size:.9rem;font-weight:600;margin:0}.lead{color:#555}.m-0{margin:0}
.rf-bar{display:flex;flex-wrap:wrap;gap:.3rem 1rem;align-items:baseline;padding:.6rem 1.5rem;
border-bottom:1px solid #dee2e6;background:#f8f9fa}.rf-brand{font-weight:700}
.rf-main,.container-fluid{padding:.8rem 1.5rem}.container-fluid .container-fluid{padding:0}
.row{display:flex;flex-wrap:wrap}.col-12,.col-sm-12,.col-xs-12{flex:0 0 100%;max-width:100%}
.col-6{flex:0 0 50%;max-width:50%}.d-none{display:none}
.row>.table-responsive{flex:0 0 100%;max-width:100%}.rf-summary.rf-page{margin:.8rem 1.5rem 0}
@media(min-width:768px){.col-md-2{flex:0 0 18%;max-width:18%;padding-right:1rem}
.col-md-10{flex:0 0 82%;max-width:82%}}
.sticky{position:sticky;top:0}.ge-section{margin-bottom:1.2rem}
.alert,.rf-summary{padding:.5rem .75rem;border:1px solid #d6d8db;border-radius:4px;margin:.4rem 0}
.alert-secondary{background:#eceef0}
table{border-collapse:collapse}.table{width:100%;margin:.4rem 0}
td,th{padding:.3rem .5rem;vertical-align:top;text-align:left;border-top:1px solid #dee2e6}
thead th{border-bottom:2px solid #dee2e6}thead[hidden]{display:none}
.table-bordered td,.table-bordered th{border:1px solid #dee2e6}
.table-responsive{overflow-x:auto}.show-scrollbars{overflow:auto;max-height:80vh}
.badge{display:inline-block;padding:.05em .4em;border-radius:3px;font-size:85%;background:#6c757d;
color:#fff;white-space:pre-wrap}.badge-primary{background:#0b5cad}
.text-success,.status-passed{color:#1e7e34}.text-danger,.status-failed{color:#c82333}
.text-warning,.status-warning{color:#a65f00}.text-info{color:#117a8b}.text-muted{color:#6c757d}
.fas{font-style:normal}.fa-check-circle:before{content:"\\2714"}.fa-times:before{content:"\\2716"}
.fa-exclamation-triangle:before{content:"\\26A0"}.fa-comment:before{content:"\\2139"}
.fa-question-circle:before{content:"?"}.fa-minus:before{content:"\\2013"}
.card{border:1px solid #dee2e6;border-radius:4px;margin-bottom:.75rem}
.card-header{padding:.4rem .6rem;background:#f8f9fa;border-bottom:1px solid #dee2e6}
.card-body{padding:.5rem}.collapse{display:none}.collapse:target{display:block}
@media print{.collapse{display:block}}
.nav{list-style:none;padding:0;margin:0}.nav-link{display:block;padding:.15rem .4rem;
text-decoration:none;word-break:break-all}ul{padding-inline-start:20px}
.btn{display:inline-block;padding:.15rem .5rem;margin:.1rem;border:1px solid #0b5cad;
border-radius:3px;cursor:pointer}.btn:has(input:checked){background:#0b5cad;color:#fff}
body:has(#option2:checked) tr:has(>.hide-succeeded-validation-target-child),
body:has(#option2:checked) .hide-succeeded-validation-target,
body:has(#option2:checked) .ge-section:has(.hide-succeeded-validations-column-section-target-child)
{display:none}
.cooltip{position:relative;cursor:help}.cooltip .top{display:none;position:absolute;z-index:9;
left:0;top:1.2em;min-width:220px;padding:.4rem .6rem;color:#fff;background:#222;border-radius:6px;
white-space:pre-wrap;font-size:12px}.cooltip:hover .top{display:block}
.rf-summary.status-passed{border-left:5px solid #1e7e34}
.rf-summary.status-warning{border-left:5px solid #a65f00;background:#fff8e6}
.rf-summary.status-failed{border-left:5px solid #c82333;background:#fdf0f1}
.rf-summary h2{margin:.2rem 0 .4rem}.rf-summary table,.rf-summary td{color:#212529}
.rf-status{font-weight:600;white-space:nowrap}.rf-note{color:#555;font-size:.9em}
"""


@dataclass
class SuitePage:
    """One suite's GX validation, as the site needs it.

    ``rows`` lists the suite's expectation results in GX's order: (section, check, success),
    section being the column (or :data:`TABLE_LEVEL`), check the recforge check it belongs to
    (``meta.check``; None if unknown).
    """

    suite: str
    rows: list[tuple[str, str | None, bool]] = field(default_factory=list)

    def failing(self) -> set[str | None]:
        return {check for _, check, ok in self.rows if not ok}

    def status(self, checks: dict[str, dict]) -> str:
        """``failed`` if a failed expectation belongs to a check the checklist reports failed
        (or to no known check), ``warning`` if all of them belong to warned checks."""
        failing = self.failing()
        if not failing:
            return "passed"
        if all(c is not None and checks.get(c, {}).get("status") == "warning" for c in failing):
            return "warning"
        return "failed"


# ------------------------------------------------------------------------- the rewrite


def finish_site(docs_dir: str | Path, checks: dict[str, dict], suites: list[SuitePage], *,
                dataset: str | None = None, run_name: str | None = None,
                result: dict | None = None, report_href: str | None = None) -> dict[str, str]:
    """Make the GX site at ``docs_dir`` offline and self-contained (see the module doc).

    ``checks`` is the checklist's per-check dict; ``result`` (optional) the gate's result
    (for its verdict; else computed from ``checks``). ``report_href``: the dataset report,
    relative to the site's root (``../report.html`` for a dataset's ``quality/``), linked
    from every page; relative, so it opens wherever the dataset folder is served (S3, a
    local copy, the Airflow UI's plugin). Returns suite name → status
    (``passed``/``warning``/``failed``) of the validation pages found.
    """
    root = Path(docs_dir)
    by_suite = {s.suite: s for s in suites}
    statuses: dict[str, str] = {}
    pages = []
    for page in sorted((root / "validations").rglob("*.html")):
        rel = page.relative_to(root).as_posix()
        info = _validation_info(rel)
        suite = by_suite.get(info["suite"], SuitePage(info["suite"]))
        status = suite.status(checks) if info["suite"] in by_suite else "failed"
        statuses[info["suite"]] = status
        pages.append({**info, "path": rel, "status": status, "suite_page": suite})
        _rewrite_page(page, root, checks, info=info, suite=suite, status=status,
                      report_href=report_href)
    for page in sorted((root / "expectations").rglob("*.html")):
        rel = page.relative_to(root).as_posix()
        _rewrite_page(page, root, checks, info={"title": "Expectation suite " + posixpath
                      .splitext(rel[len("expectations/"):])[0].replace("/", ".")},
                      report_href=report_href)
    (root / "index.html").write_text(
        _index_html(root, checks, pages, dataset, run_name, result, report_href),
        encoding="utf-8")
    shutil.rmtree(root / "static", ignore_errors=True)
    return statuses


def _validation_info(rel: str) -> dict:
    """``validations/<suite (dots as folders)>/<run>/<time>/<batch>.html`` → its parts."""
    parts = rel.split("/")
    if len(parts) < 5:
        return {"suite": posixpath.splitext(parts[-1])[0], "run": "", "time": "",
                "title": rel}
    suite, run, stamp = ".".join(parts[1:-3]), parts[-3], parts[-2]
    when = _pretty_time(stamp)
    return {"suite": suite, "run": run, "time": when,
            "title": f"Validation {suite} · run {run} · {when}"}


def _pretty_time(stamp: str) -> str:
    for fmt in ("%Y%m%dT%H%M%S.%fZ", "%Y%m%dT%H%M%SZ"):
        try:
            return datetime.datetime.strptime(stamp, fmt).strftime("%Y-%m-%d %H:%M:%S UTC")
        except ValueError:
            continue
    return stamp


def _rewrite_page(page: Path, root: Path, checks: dict, *, info: dict,
                  suite: SuitePage | None = None, status: str | None = None,
                  report_href: str | None = None) -> None:
    text = page.read_text(encoding="utf-8")
    if status == "warning":
        text, n = _STATUS_FAILED.subn(
            r'\1<i class="fas fa-exclamation-triangle text-warning" aria-hidden="true"></i> '
            "Warning", text)
        if not n:
            log.warning("quality: no GX status line in %s to mark as a warning", page)
    home = posixpath.relpath("index.html", page.parent.relative_to(root).as_posix())
    # the header goes in as it is, past the unwrapping of links to files not in the site
    header = _bar(home, info["title"], _from_page(home, report_href))
    if suite is not None and status is not None:
        header += _summary(checks, suite, status)
    rewriter = _Rewriter(page, root, header, info["title"],
                         _row_checks(suite) if suite is not None else {}, checks)
    rewriter.feed(text)
    rewriter.close()
    page.write_text(rewriter.result(), encoding="utf-8")


# GX's header: <span class="h6" >Status:</span> <i class="fas fa-times text-danger" ...></i> Failed
_STATUS_FAILED = re.compile(r'(Status:</span>\s*)<i class="[^"]*fa-times[^"]*"[^>]*>\s*</i>\s*'
                            r"Failed")
_SECTION_HEADER = re.compile(r"section-(\d+)-content-block-1-header$")
_STATUS_CELL = re.compile(r"section-(\d+)-content-block-2-cell-(\d+)-1$")


def _row_checks(suite: SuitePage) -> dict[str, list[str | None]]:
    """GX section title → the check of each of its rows, in order."""
    out: dict[str, list[str | None]] = {}
    for section, check, _ in suite.rows:
        out.setdefault(section, []).append(check)
    return out


def _is_external(url: str) -> bool:
    u = url.strip().lower()
    return u.startswith("//") or bool(re.match(r"[a-z][a-z0-9+.-]*:", u)) and \
        not u.startswith("data:")


def _resolves(url: str, page: Path, root: Path) -> bool:
    path = url.split("#", 1)[0].split("?", 1)[0]
    if not path:
        return True
    target = (page.parent / path).resolve()
    try:
        target.relative_to(root.resolve())
    except ValueError:
        return False
    return target.is_file()


def _attrs(attrs: list[tuple[str, str | None]]) -> str:
    return "".join(f" {k}" if v is None else f' {k}="{html.escape(v)}"' for k, v in attrs)


class _Rewriter(HTMLParser):
    """Stream a GX page through, dropping what needs the network or JavaScript."""

    def __init__(self, page: Path, root: Path, header: str, title: str,
                 row_checks: dict[str, list[str | None]], checks: dict):
        super().__init__(convert_charrefs=False)
        self.page, self.root, self.header, self.title = page, root, header, title
        self.row_checks, self.checks = row_checks, checks
        self.out: list[str] = []
        self.skip: tuple[str, int] | None = None  # (tag, nesting) of an element being dropped
        self.open_a: list[bool] = []  # per open <a>: was its start tag dropped
        self.head_done = self.header_done = False
        self.body_at: int | None = None
        self.section_titles: dict[str, str] = {}
        self.in_header: str | None = None  # section number whose header text we collect
        self.tr_depth = 0
        self.warn_row: tuple[int, str] | None = None  # (tr depth, check) of a warned row
        self.pre = 0  # inside <pre>/<textarea>: whitespace is kept

    # -- output
    def result(self) -> str:
        if not self.header_done:
            at = self.body_at if self.body_at is not None else len(self.out)
            self.out.insert(at, self.header)
        return "".join(self.out)

    def _emit(self, text: str) -> None:
        if self.skip is None:
            self.out.append(text)

    # -- tags
    def handle_starttag(self, tag, attrs):
        self._start(tag, attrs, self.get_starttag_text(), closed=False)

    def handle_startendtag(self, tag, attrs):
        self._start(tag, attrs, self.get_starttag_text(), closed=True)

    def _start(self, tag, attrs, raw, closed):
        if self.skip is not None:
            if tag == self.skip[0] and not closed and tag not in VOID:
                self.skip = (tag, self.skip[1] + 1)
            return
        d = dict(attrs)
        classes = (d.get("class") or "").split()
        if tag in DROP or (tag == "nav" and "navbar-expand-md" in classes):
            if tag == "nav" and not self.header_done:
                self.out.append(self.header)
                self.header_done = True
            if not closed and tag not in VOID:
                self.skip = (tag, 1)
            return
        if tag == "body":
            self.out.append(raw)
            self.body_at = len(self.out)
            return
        if tag == "a":
            href = d.get("href")
            drop = href is not None and (_is_external(href) or
                                         not _resolves(href, self.page, self.root))
            if not closed:
                self.open_a.append(drop)
            if drop:
                return
        if tag == "img" and (not d.get("src") or _is_external(d["src"]) or
                             not _resolves(d["src"], self.page, self.root)):
            return
        m = _SECTION_HEADER.match(d.get("id") or "")
        if m:
            self.in_header = m.group(1)
            self.section_titles[m.group(1)] = ""
        if tag == "tr" and not closed:
            self.tr_depth += 1
        m = _STATUS_CELL.match(d.get("id") or "")
        if tag == "td" and m and self.warn_row is None:
            check = self._warn_check(m.group(1), int(m.group(2)))
            if check:
                self.warn_row = (self.tr_depth, check)
        if self.warn_row is not None:  # a warned check's row: warning colours, not danger
            if tag == "i" and "fa-times" in classes:
                self.out.append(f'<i class="fas fa-exclamation-triangle text-warning" title="'
                                f'{html.escape(self.warn_row[1])}: warn severity"'
                                f'{">" if not closed else "/>"}')
                return
            if "text-danger" in classes:
                attrs = [(k, " ".join("text-warning" if c == "text-danger" else c
                                      for c in classes) if k == "class" else v)
                         for k, v in attrs]
                raw = f"<{tag}{_attrs(attrs)}{' /' if closed else ''}>"
        if tag in ("pre", "textarea") and not closed:
            self.pre += 1
        clean = [(k, v) for k, v in attrs if not self._bad_attr(k, v)]
        self.out.append(raw if clean == attrs else
                        f"<{tag}{_attrs(clean)}{' /' if closed else ''}>")

    def _bad_attr(self, key: str, value: str | None) -> bool:
        if key.startswith("on"):
            return True
        if value is None:
            return False
        if key in URL_ATTRS:
            return _is_external(value)
        return key == "style" and "url(" in value.lower()

    def _warn_check(self, section: str, row: int) -> str | None:
        """The check of a status cell's row when it is a warned (not failed) check."""
        rows = self.row_checks.get(self.section_titles.get(section, "").strip(), [])
        check = rows[row - 1] if 0 < row <= len(rows) else None
        if check and self.checks.get(check, {}).get("status") == "warning":
            return check
        return None

    def handle_endtag(self, tag):
        if self.skip is not None:
            if tag == self.skip[0]:
                n = self.skip[1] - 1
                self.skip = None if n == 0 else (tag, n)
            return
        if tag in DROP:
            return
        if tag == "a" and self.open_a and self.open_a.pop():
            return
        if tag == "div" and self.in_header is not None:
            self.in_header = None
        if tag == "tr":
            if self.warn_row is not None and self.warn_row[0] == self.tr_depth:
                self.warn_row = None
            self.tr_depth = max(0, self.tr_depth - 1)
        if tag in ("pre", "textarea") and self.pre:
            self.pre -= 1
        if tag == "head" and not self.head_done:
            self.out.append(_head(self.title))
            self.head_done = True
        self.out.append(f"</{tag}>")

    # -- everything else passes through as written
    def handle_data(self, data):
        if self.skip is None and self.in_header is not None:
            self.section_titles[self.in_header] += data
        if data.isspace() and not self.pre:
            data = "\n" if "\n" in data else " "  # GX's templates are mostly blank lines
        self._emit(data)

    def handle_entityref(self, name):
        self._emit(f"&{name};")

    def handle_charref(self, name):
        self._emit(f"&#{name};")

    def handle_comment(self, data):
        pass  # GX's template comments only

    def handle_decl(self, decl):
        self._emit(f"<!{decl}>")

    def handle_pi(self, data):
        self._emit(f"<?{data}>")

    def unknown_decl(self, data):
        self._emit(f"<![{data}]>")


# ----------------------------------------------------------------------- recforge blocks


def _head(title: str) -> str:
    return (f"<title>{html.escape(title)}</title>\n"
            '<link rel="icon" href="data:,">\n'  # no favicon request
            f"<style>{CSS}</style>\n")


def _from_page(home: str, href: str | None) -> str | None:
    """``href`` (relative to the site's root) as seen from the page whose link to the
    site's index is ``home``."""
    if href is None:
        return None
    return posixpath.normpath(posixpath.join(posixpath.dirname(home), href))


def _bar(home: str, title: str, report: str | None = None) -> str:
    back = (f'<a class="rf-report" href="{html.escape(report)}">dataset report</a>'
            if report else "")
    return (f'<header class="rf-bar"><a class="rf-brand" href="{html.escape(home)}">recforge '
            f"Data Docs</a><span>{html.escape(title)}</span>{back}</header>\n")


def _status_span(status: str) -> str:
    return (f'<span class="rf-status status-{status.replace(" ", "-")}">'
            f'<i class="fas {STATUS_ICON.get(status, "")}" aria-hidden="true"></i> '
            f"{STATUS_TEXT.get(status, status)}</span>")


def _summary(checks: dict, suite: SuitePage, status: str) -> str:
    """recforge's verdict for the checks on one validation page, above GX's details."""
    failing = suite.failing()
    note = {"passed": "Every expectation on this page passed.",
            "warning": "The failed expectations on this page all belong to warn-severity "
                       "checks: reported, not blocking the release.",
            "failed": "A fail-severity check failed here: it blocks the release."}[status]
    rows = []
    for name in dict.fromkeys(c for _, c, _ in suite.rows if c):
        e = checks.get(name, {})
        here = e.get("status", "failed") if name in failing else "passed"
        evidence = "".join(f"<li>{html.escape(str(x))}</li>" for x in e.get("evidence", [])) \
            if name in failing else ""
        rows.append(
            f'<tr data-check="{html.escape(name)}" data-status="{here}"><td>'
            f"{html.escape(str(e.get('item', '')))}</td><td>{html.escape(name)}</td><td>"
            f"{html.escape(str(e.get('severity', '')))}</td><td>{_status_span(here)}</td>"
            f"<td>{html.escape(str(e.get('observed', '')))}"
            f"{f'<ul>{evidence}</ul>' if evidence else ''}</td></tr>")
    table = ("<table class=\"table\"><thead><tr><th>item</th><th>check</th><th>severity</th>"
             f"<th>status</th><th>observed</th></tr></thead><tbody>{''.join(rows)}</tbody>"
             "</table>") if rows else ""
    return (f'<section class="rf-summary rf-page status-{status}" data-status="{status}">'
            f"<h2>recforge checklist: {_status_span(status)}</h2>"
            f'<p class="rf-note">{note} Below: Great Expectations\' results for suite '
            f"<strong>{html.escape(suite.suite)}</strong>, each expectation with its unexpected "
            f"values.</p>{table}</section>\n")


def _index_html(root: Path, checks: dict, pages: list[dict], dataset: str | None,
                run_name: str | None, result: dict | None, report_href: str | None) -> str:
    failed = (result or {}).get("failed", [n for n, e in checks.items()
                                           if e.get("status") == "failed"])
    warned = (result or {}).get("warned", [n for n, e in checks.items()
                                           if e.get("status") == "warning"])
    status = FAILED if failed else WARNING if warned else PASSED
    verdict = (status, verdict_sentence(status, failed or warned))
    title = f"Quality checklist: {dataset or 'dataset'} · run {run_name or '?'}"
    vrows = []
    for p in sorted(pages, key=lambda p: (p["suite"], p["time"])):
        suite: SuitePage = p["suite_page"]
        ok = sum(1 for _, _, s in suite.rows if s)
        failing = sorted(c for c in suite.failing() if c)
        names = ", ".join(
            f"{html.escape(c)} ({html.escape(str(checks.get(c, {}).get('severity', '?')))})"
            for c in failing) or "–"
        vrows.append(
            f'<tr data-suite="{html.escape(p["suite"])}" data-status="{p["status"]}">'
            f"<td>{_status_span(p['status'])}</td>"
            f'<td><a href="{html.escape(p["path"])}">{html.escape(p["suite"])}</a></td>'
            f"<td>{html.escape(p['run'])}</td><td>{html.escape(p['time'])}</td>"
            f"<td>{ok} of {len(suite.rows)} passed</td><td>{names}</td></tr>")
    crows = []
    for name, e in checks.items():
        page = e.get("docs_page")
        link = f'<a href="{html.escape(page)}">{html.escape(name)}</a>' \
            if page and (root / page).is_file() else html.escape(name)
        crows.append(
            f'<tr data-check="{html.escape(name)}" data-status="{e.get("status")}">'
            f"<td>{html.escape(str(e.get('item', '')))}</td><td>{link}</td>"
            f"<td>{html.escape(str(e.get('severity', '')))}</td>"
            f"<td>{_status_span(str(e.get('status')))}</td>"
            f"<td>{html.escape(str(e.get('observed', '')))}</td></tr>")
    suites = sorted((root / "expectations").rglob("*.html")) if (root / "expectations").is_dir() \
        else []
    slinks = "".join(
        f'<li><a href="{html.escape(p.relative_to(root).as_posix())}">'
        f"{html.escape(p.relative_to(root / 'expectations').with_suffix('').as_posix())}"
        "</a></li>" for p in suites)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"UTF-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1.0">\n'
        f"{_head(title)}</head>\n<body>\n{_bar('index.html', title, report_href)}"
        f"<main class=\"rf-main\">\n<h1>{html.escape(title)}</h1>\n"
        + (f'<p class="rf-note">The <a href="{html.escape(report_href)}">dataset report</a> '
           "shows this checklist beside the dataset's summary, samples, charts and its "
           "diff against the previous version.</p>\n" if report_href else "") +
        f'<p class="rf-summary status-{verdict[0]}" data-status="{verdict[0]}">'
        f"{_status_span(verdict[0])} {html.escape(verdict[1])}</p>\n"
        "<h2>Validation results</h2>\n<table class=\"table\" id=\"validations\"><thead><tr>"
        "<th>status</th><th>expectation suite</th><th>run name</th><th>run time</th>"
        "<th>expectations</th><th>failed checks (severity)</th></tr></thead>\n<tbody>\n"
        + "\n".join(vrows) + "\n</tbody></table>\n"
        "<p class=\"rf-note\">Warning: every failed expectation of the suite belongs to a "
        "warn-severity check (reported, not blocking). Failed: a fail-severity check failed."
        "</p>\n<h2>Checklist</h2>\n<table class=\"table\" id=\"checklist\"><thead><tr>"
        "<th>item</th><th>check</th><th>severity</th><th>status</th><th>observed</th></tr>"
        "</thead>\n<tbody>\n" + "\n".join(crows) + "\n</tbody></table>\n"
        f"<h2>Expectation suites</h2>\n<ul>{slinks}</ul>\n"
        "<p class=\"rf-note\">Built by recforge with Great Expectations; this site is "
        "self-contained and makes no network requests.</p>\n</main>\n</body>\n</html>\n")
