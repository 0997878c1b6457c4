"""The Data Docs site: self-contained and offline, a static index, warn shown as warn.

Every site here is built by the real gate (``run_and_upload`` on a packed folder,
``run_checks`` on in-memory inputs) and read back with ``html.parser``: the pages' URLs
(``src``, ``href``, ... and CSS ``url()``), their visible text, their status words.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from recforge import quality as q
from recforge.spec.quality import QualitySpec
from tests.quality.test_quality import (
    CLASSES,
    PACK,
    _label_out_of_range,
    _near_duplicate_across_splits,
    clean_inputs,
    write_packed,
)

URL_ATTRS = {"href", "src", "srcset", "action", "formaction", "poster", "data", "background",
             "cite", "manifest", "ping", "xlink:href"}
SITE_LIMIT = 1_000_000  # bytes, the whole site of a demo-sized dataset
_EXTERNAL = re.compile(r"^\s*(//|[a-z][a-z0-9+.-]*:)", re.I)  # scheme or protocol-relative
_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]*)|@import\s+['"]([^'"]+)""", re.I)


class Page(HTMLParser):
    """One page's URLs, scripts, stylesheets, visible text and per-element attributes."""

    def __init__(self, path: Path):
        super().__init__()
        self.path, self.urls, self.css, self.text = path, [], [], []
        self.scripts, self.elements, self._in = [], [], []
        self.feed(path.read_text(encoding="utf-8"))
        self.close()

    def handle_starttag(self, tag, attrs):
        d = dict(attrs)
        self.elements.append((tag, d))
        for k, v in attrs:
            if v is None:
                continue
            if k == "srcset":
                self.urls += [(tag, k, part.split()[0]) for part in v.split(",") if part.strip()]
            elif k in URL_ATTRS:
                self.urls.append((tag, k, v))
            elif k == "style":
                self.css.append(v)
        if tag == "script":
            self.scripts.append(d)
        if tag in ("script", "style"):
            self._in.append(tag)

    def handle_endtag(self, tag):
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data):
        if not self._in:
            self.text.append(data)
        elif self._in[-1] == "style":
            self.css.append(data)

    @property
    def visible(self) -> str:
        return " ".join(" ".join(self.text).split())

    def css_urls(self) -> list[str]:
        return [a or b for css in self.css for a, b in _CSS_URL.findall(css)]

    def with_class(self, cls: str) -> list[tuple[str, dict]]:
        return [(t, d) for t, d in self.elements if cls in (d.get("class") or "").split()]


def pages(site: Path) -> list[Page]:
    return [Page(p) for p in sorted(site.rglob("*.html"))]


def validation_page(site: Path, suite: str) -> Page:
    (path,) = (site / "validations" / suite).rglob("*.html")
    return Page(path)


def statuses(page: Page) -> list[str]:
    """The word after GX's "Status:" (the icon before it has no text)."""
    return re.findall(r"Status:\s*(\w+)", page.visible)


def index_rows(site: Path) -> dict[str, tuple[str, str]]:
    """suite → (data-status, the row's visible text) of the index's validation table."""
    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.cur = {}, None

        def handle_starttag(self, tag, attrs):
            d = dict(attrs)
            if tag == "tr" and "data-suite" in d:
                self.cur = d["data-suite"]
                self.rows[self.cur] = (d.get("data-status"), "")

        def handle_endtag(self, tag):
            if tag == "tr":
                self.cur = None

        def handle_data(self, data):
            if self.cur:
                status, text = self.rows[self.cur]
                self.rows[self.cur] = (status, " ".join(f"{text} {data}".split()))

    parser = Rows()
    parser.feed((site / "index.html").read_text(encoding="utf-8"))
    return parser.rows


def site_size(site: Path) -> int:
    return sum(p.stat().st_size for p in site.rglob("*") if p.is_file())


def run(inputs, docs, quality=None, **kw):
    kw.setdefault("pack", PACK)
    return q.run_checks(inputs, quality or QualitySpec(), docs_dir=docs, run_name="test", **kw)


# ----------------------------------------------------------------- offline and static


@pytest.fixture(scope="module")
def uploaded(tmp_path_factory) -> tuple[Path, dict]:
    """A packed folder gated by ``run_and_upload``: the site as it lands next to a version,
    linking to the version's report as the pipeline's site does (written after the site)."""
    data = tmp_path_factory.mktemp("packed")
    write_packed(data)
    dest = tmp_path_factory.mktemp("version") / "quality"
    result = q.run_and_upload(str(data), QualitySpec(class_balance_min_ratio=0.0),
                              docs_uri=str(dest), pack={"resize": 0, "color": 1},
                              loader_results=LOADER, dataset="demo", run_name="r1",
                              report_href="../report.html")
    assert result["ok"], q.format_table(result)
    (dest.parent / "report.html").write_text("<!DOCTYPE html><title>report</title>")
    return dest, result


LOADER = {"batches": [{"type": "NDArray", "dtype": "float32", "shape": [8, 3, 24, 32],
                       "min": 0.0, "max": 1.0}] * 2,
          "images_per_sec": 900.0, "read_mb_per_sec": 80.0, "device": "cpu"}


def test_no_page_points_at_the_network(uploaded):
    site, _ = uploaded
    found = pages(site)
    assert len(found) >= 9  # index + validation and expectation pages of 6+ suites
    for page in found:
        where = page.path.relative_to(site)
        external = [u for u in page.urls if _EXTERNAL.match(u[2])
                    and not u[2].strip().lower().startswith("data:")]
        assert external == [], f"{where}: {external}"
        css = [u for u in page.css_urls() if _EXTERNAL.match(u)
               and not u.strip().lower().startswith("data:")]
        assert css == [], f"{where}: CSS loads {css}"
        assert [s for s in page.scripts if "src" in s] == [], f"{where} loads scripts"
        sheets = [d for t, d in page.elements if t == "link" and "stylesheet" in
                  (d.get("rel") or "")]
        assert sheets == [], f"{where} links stylesheets {sheets}"


def test_every_relative_link_resolves_inside_the_site(uploaded):
    site, _ = uploaded
    checked = 0
    for page in pages(site):
        for tag, attr, url in page.urls + [("style", "url", u) for u in page.css_urls()]:
            path = url.split("#", 1)[0].split("?", 1)[0]
            if not path or url.strip().lower().startswith("data:"):
                continue
            target = (page.path.parent / path).resolve()
            where = f"{page.path.relative_to(site)} <{tag} {attr}={url!r}>"
            if target == (site.parent / "report.html").resolve():
                continue  # the version's report, beside the site (see the test below)
            assert target.is_relative_to(site.resolve()), f"{where} leaves the site"
            assert target.is_file(), f"{where} points at no file"
            checked += 1
    assert checked > 20  # the index and the pages link to each other


def test_every_page_links_back_to_the_version_report(uploaded):
    """A relative link that stays inside the version folder (where the report sits beside
    ``quality/``): it opens on S3, from a local copy, and through the Airflow UI's plugin
    that serves the version folder."""
    site, _ = uploaded
    report = (site.parent / "report.html").resolve()
    found = pages(site)
    for page in found:
        links = [u for t, a, u in page.urls if t == "a" and a == "href"
                 and (page.path.parent / u).resolve() == report]
        assert links, f"{page.path.relative_to(site)} has no link to the report"
        assert all(not _EXTERNAL.match(u) and not u.startswith("/") for u in links), links
    index = Page(site / "index.html")
    assert [u for _, a, u in index.urls if a == "href" and u.endswith("report.html")] == \
        ["../report.html", "../report.html"]  # the bar and the sentence that says what it is
    assert "dataset report" in index.visible


def test_a_site_outside_a_version_names_no_report(tmp_path):
    """``recforge check --docs DIR`` builds a site with no report beside it: no link."""
    run(clean_inputs(), tmp_path)
    assert all(not u.endswith("report.html") for p in pages(tmp_path) for _, _, u in p.urls)


def test_index_is_static_html_listing_every_validation_page(uploaded):
    site, result = uploaded
    index = Page(site / "index.html")
    assert index.scripts == []  # nothing to run: the table is in the HTML
    linked = {(site / u).resolve() for _, a, u in index.urls if a == "href"}
    validations = sorted((site / "validations").rglob("*.html"))
    suites = {"checklist-records", "checklist-sources", "checklist-classes", "checklist-splits",
              "checklist-class_names", "checklist-loader_batches", "checklist-loader"}
    assert {p.relative_to(site / "validations").parts[0] for p in validations} == suites
    assert {p.resolve() for p in validations} <= linked
    rows = index_rows(site)
    assert set(rows) == suites
    for suite, (status, text) in rows.items():
        assert status == "passed" and "Succeeded" in text and "r1" in text, (suite, text)
    text = index.visible
    assert "demo" in text and "quality gate passed" in text
    for name, check in result["checks"].items():  # the checklist, readable without JS
        assert name in text and " ".join(check["observed"].split()) in text
    # each check's docs_page is still its validation page
    assert (site / result["checks"]["labels"]["docs_page"]).is_file()


def test_site_keeps_no_fonts_gifs_or_gx_static(uploaded):
    site, _ = uploaded
    assert not (site / "static").exists()
    kinds = {p.suffix for p in site.rglob("*") if p.is_file()}
    assert kinds <= {".html", ".json"}, kinds  # quality.json sits next to the pages


def test_validation_pages_read_without_javascript(uploaded):
    site, _ = uploaded
    page = validation_page(site, "checklist-records")
    assert page.scripts == []
    assert statuses(page) == ["Succeeded"]
    text = page.visible
    assert "recforge checklist" in text and "labels" in text and "decode_status" in text
    # GX's styles are replaced by one inline stylesheet that knows its classes
    assert any(".collapse:target" in css for css in page.css)


def test_demo_sized_site_stays_small(tmp_path):
    """560 records (as the demo), failures with unexpected values in several suites."""
    inputs = clean_inputs(sizes=(("train", 498), ("val", 62)))
    for k in range(1, 11):  # ten near-duplicates across splits, as the demo has
        val = [r for r in inputs.records if r["split"] == "val"][k]
        val["phash"] = f"{int(inputs.records[k]['phash'], 16) ^ 0b101:016x}"
    _label_out_of_range(inputs)
    result = run(inputs, tmp_path, QualitySpec(severity={"near_duplicates": "warn"}),
                 loader_results=LOADER)
    assert result["failed"] == ["labels"] and result["warned"] == ["near_duplicates"]
    assert len(list((tmp_path / "validations").rglob("*.html"))) == 7
    assert site_size(tmp_path) <= SITE_LIMIT, f"{site_size(tmp_path)} bytes"


def test_loader_floor_shown_is_the_one_the_benchmark_was_gated_by(tmp_path):
    """bench.json's floors (``bench.floors``, what the report draws) are the floor the Data
    Docs show and the checklist holds the loader to, not the spec's unset 0.0."""
    bench = {"schema": 1, "value_check": {"per_batch": [
        {"dtype": "float32", "shape": [8, 3, 24, 32], "min": 0.0, "max": 1.0}] * 2},
        "summary": {"images_per_sec": 42.0, "read_mb_per_sec": 80.0, "device": "cpu"},
        "floors": {"environment": "cpu", "values": {"min_images_per_sec": 50.0}}}
    result = q.run_loader_checks(bench, QualitySpec(), docs_dir=tmp_path, run_name="t")
    check = result["checks"]["loader_throughput"]
    assert check["status"] == "failed" and check["observed"].startswith("42.0 images/s "
                                                                        "(floor 50)")
    text = validation_page(tmp_path, "checklist-loader").visible
    ips = text[text.rindex("images_per_sec Status"):text.index("read_mb_per_sec Status")]
    assert "greater than or equal to 50.0" in ips and "equal to 0.0" not in ips
    # a spec floor above the benchmark's wins, as in the report
    result = q.run_loader_checks(bench, QualitySpec(loader={"min_images_per_sec": 60}),
                                 docs_dir=tmp_path / "spec", run_name="t")
    assert result["checks"]["loader_throughput"]["observed"].startswith("42.0 images/s "
                                                                        "(floor 60)")


# ----------------------------------------------------------------- warn shown as warn


@pytest.fixture(scope="module")
def warned_site(tmp_path_factory) -> Path:
    """near_duplicates set to warn and failing; everything else passes."""
    site = tmp_path_factory.mktemp("warned")
    inputs = clean_inputs()
    _near_duplicate_across_splits(inputs)
    result = run(inputs, site, QualitySpec(severity={"near_duplicates": "warn"}))
    assert result["ok"] and result["warned"] == ["near_duplicates"]
    return site


def test_warn_only_suite_says_warning_on_its_page(warned_site):
    page = validation_page(warned_site, "checklist-records")
    assert statuses(page) == ["Warning"]
    summary = page.with_class("rf-summary")
    assert [d.get("data-status") for _, d in summary] == ["warning"]
    assert "near_duplicates" in page.visible and "warn" in page.visible
    # the failed expectation's row shows a warning icon, not a red cross
    assert page.with_class("fa-times") == []
    assert any("near_duplicates" in d.get("title", "")
               for _, d in page.with_class("fa-exclamation-triangle"))
    assert page.with_class("text-danger") == []


def test_warn_only_suite_says_warning_on_the_index(warned_site):
    rows = index_rows(warned_site)
    status, text = rows["checklist-records"]
    assert status == "warning" and "Warning" in text and "Failed" not in text
    assert "near_duplicates (warn)" in text
    assert all(s == "passed" for suite, (s, _) in rows.items() if suite != "checklist-records")
    assert "quality gate passed with warnings: near_duplicates" in \
        Page(warned_site / "index.html").visible


def test_class_imbalance_warning_shows_as_warning(tmp_path):
    inputs = clean_inputs()
    for r in inputs.records:  # one owl left in train: class_balance (warn by default) fails
        if r["split"] == "train" and r["class_name"] == CLASSES[2] and r["key"] > 2:
            r["label"], r["class_name"] = 0, CLASSES[0]
    result = run(inputs, tmp_path, QualitySpec(class_balance_min_ratio=0.2))
    assert result["warned"] == ["class_balance"]
    assert statuses(validation_page(tmp_path, "checklist-classes")) == ["Warning"]
    assert index_rows(tmp_path)["checklist-classes"][0] == "warning"


@pytest.mark.parametrize("severity", [None, {"near_duplicates": "warn"}])
def test_fail_severity_failure_still_says_failed(tmp_path, severity):
    """near_duplicates at its default (fail); or warn, with a failing label on the same page."""
    inputs = clean_inputs()
    _near_duplicate_across_splits(inputs)
    if severity:
        _label_out_of_range(inputs)
    result = run(inputs, tmp_path, QualitySpec(severity=severity or {}))
    if severity:
        assert result["failed"] == ["labels"] and result["warned"] == ["near_duplicates"]
    else:
        assert result["failed"] == ["near_duplicates"]
    page = validation_page(tmp_path, "checklist-records")
    assert statuses(page) == ["Failed"]
    assert [d.get("data-status") for _, d in page.with_class("rf-summary")] == ["failed"]
    status, text = index_rows(tmp_path)["checklist-records"]
    assert status == "failed" and "Failed" in text and "Warning" not in text
    # the rows' icons (the status lines' icons are aria-hidden)
    crosses = [d for _, d in page.with_class("fa-times") if "aria-hidden" not in d]
    warns = [d for _, d in page.with_class("fa-exclamation-triangle") if "aria-hidden" not in d]
    assert crosses  # the failed fail-severity expectation(s)
    if severity:  # near_duplicates' row is a warning on a failed page
        assert [d.get("title") for d in warns] == ["near_duplicates: warn severity"]
    else:
        assert warns == []
