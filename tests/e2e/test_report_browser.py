"""The published report and Data Docs in a real browser, opened from disk with no network.

The demo's sample data (fewer images per class) is built with the demo spec and published
through the S3 server; its ``report.html`` and
``quality/`` site are downloaded and opened as ``file://`` pages in headless Chromium, which
must render every section and decode every image without making one request that is not a
``file:///`` or ``data:`` URL. It must also say what a person needs: captions that name the
source files (the record keys on hover), a location and a loading snippet that name the
published version (not staging), and a loader section with a table or labelled axes.
Full-page screenshots (and ones of the samples and the loader section) land in the test's
artefact folder (``tests/artifacts/``, git-ignored).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from recforge import pipeline, storage
from recforge.dev import sampledata
from recforge.spec import load_spec
from tests.common.browser import screenshot

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# a classification dataset: no Masks section
SECTION_IDS = ("summary", "checklist", "charts", "samples", "near-duplicates", "quarantine",
               "diff")
LOCAL = ("file:///", "data:")  # file://host/... would be a network share


@dataclass(frozen=True)
class Published:
    local: Path  # report.html and quality/, downloaded
    uri: str  # the version
    records: list[dict]  # its records.jsonl

    def __truediv__(self, name: str) -> Path:
        return self.local / name


@pytest.fixture(scope="module")
def published(s3_endpoint, tmp_path_factory):
    """One published version, downloaded (report.html + quality/)."""
    bucket = f"rbrowser-{tmp_path_factory.mktemp('b').name[-6:].lower()}"
    storage.s3_client().create_bucket(Bucket=bucket)
    sampledata.upload(f"s3://{bucket}/raw", per_class=8)
    spec = load_spec(REPO / "include" / "datasets" / "demo_classification.yaml").with_overrides(
        {"source.uri": f"s3://{bucket}/raw", "publish.uri": f"s3://{bucket}/datasets"})
    version = pipeline.build(spec, run_id="r1", workers=1)["publish"]["uri"]
    local = tmp_path_factory.mktemp("published")
    for obj in storage.list_objects(version):
        if obj.key == "report.html" or obj.key.startswith("quality/"):
            storage.download(f"{version}/{obj.key}", local / obj.key)
    assert (local / "report.html").is_file(), "publish did not copy report.html"
    assert (local / "quality" / "index.html").is_file(), "no Data Docs index in the version"
    return Published(local, version, storage.read_jsonl(f"{version}/records.jsonl"))


def _open_offline(page, path):
    """Open ``path`` as a file:// page; returns the list of every URL the page requested.
    Anything off the machine is also aborted, so a leak fails fast instead of hanging."""
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.context.route(re.compile(r"^(?!file:|data:)"), lambda route: route.abort())
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    assert requested and requested[0] == path.as_uri()  # the recorder sees the page itself
    return requested


def _undecoded_images(page) -> list[str]:
    """The ``src`` (first 80 characters) of every <img> that did not decode."""
    return page.evaluate("""async () => {
        const imgs = [...document.images];
        await Promise.all(imgs.map(img => img.decode().catch(() => null)));
        return imgs.filter(img => !(img.complete && img.naturalWidth > 0))
                   .map(img => (img.getAttribute('src') || '').slice(0, 80));
    }""")


def test_report_renders_every_section_and_image_offline(published, page, artifacts):
    from playwright.sync_api import expect

    requested = _open_offline(page, published / "report.html")
    for sid in SECTION_IDS:
        section = page.locator(f"[id='{sid}']")
        expect(section).to_have_count(1)
        expect(section).to_be_visible()
    count = page.locator("img").count()
    assert count > 0, "the report shows no images"
    assert _undecoded_images(page) == []
    screenshot(page, artifacts, "report")
    assert [url for url in requested if not url.startswith(LOCAL)] == []


def test_report_says_what_a_person_needs(published, page, artifacts):
    """Captions are source files (keys on hover, no caption spilling into the next); the
    summary names the published version; the loader section is a table (or a chart with
    labelled axes)."""
    from playwright.sync_api import expect

    _open_offline(page, published / "report.html")
    expect(page.locator("[id='masks']")).to_have_count(0)  # classification: no Masks
    sources = {r["source_key"] for r in published.records}
    keys = {str(r["key"]) for r in published.records}
    figures = page.eval_on_selector_all("#samples figure", """figs => figs.map(f => {
        const cap = f.querySelector('figcaption'), box = f.getBoundingClientRect();
        const c = cap.getBoundingClientRect();
        return {caption: cap.textContent, title: f.title, capLeft: c.left, capRight: c.right,
                left: box.left, right: box.right, scrollW: cap.scrollWidth,
                clientW: cap.clientWidth};
    })""")
    assert figures, "no sample figures"
    for f in figures:
        assert f["caption"] in sources, f["caption"]  # a file name …
        assert not re.fullmatch(r"\d{15,20}", f["caption"]) and f["caption"] not in keys
        assert any(k in f["title"] for k in keys), f["title"]  # … the key on hover
        # the caption stays inside its figure: it wraps or is cut, never spills over
        assert f["capLeft"] >= f["left"] - 1 and f["capRight"] <= f["right"] + 1, f
        assert f["scrollW"] <= f["clientW"] + 1, f
    page.locator("#samples").screenshot(path=artifacts / "samples.png")

    summary = dict(page.eval_on_selector_all(
        "#summary table.kv tr", "rows => rows.map(r => [r.cells[0].innerText, "
        "r.cells[1].innerText])"))
    assert summary["location"] == published.uri
    assert summary["report"] == f"{published.uri}/report.html"
    assert summary["latest"].startswith(published.uri.rsplit("/", 1)[0] + "/latest.json")
    assert "mx.io.ImageRecordIter(" in summary["load it"]
    assert 'path_imgrec="train.rec", path_imgidx="train.idx"' in summary["load it"]
    assert f"{published.uri}/train.rec" in summary["load it"]
    assert "_staging" not in " ".join(summary.values())
    # every link in the page stays in the page or in the published version's folder
    links = page.eval_on_selector_all("a[href]", "as => as.map(a => a.getAttribute('href'))")
    assert all(h.startswith("#") or not re.match(r"^[a-z]+:", h) for h in links), links
    assert "quality/index.html" in links
    page.locator("#summary").screenshot(path=artifacts / "summary.png")

    loader = page.locator("#loader")
    expect(loader).to_be_visible()
    tables, axes = loader.locator("table").count(), loader.locator("svg text").all_inner_texts()
    assert tables or {"images / s"} <= set(axes), "the loader section has no table or axes"
    if tables:
        head = loader.locator("table th").all_inner_texts()
        assert "img/s" in head and any("threads" in h or "workers" in h for h in head), head
        expect(loader).to_contain_text("floor")
        expect(loader).to_contain_text("bare decode")
    for svg in page.locator("#charts svg").all():  # every chart's axes are labelled
        assert len(svg.locator("text.l").all_inner_texts()) >= 1
    loader.screenshot(path=artifacts / "loader.png")


def test_data_docs_open_offline(published, page, artifacts):
    from playwright.sync_api import expect

    index = published / "quality" / "index.html"
    requested = _open_offline(page, index)
    expect(page.locator("body")).not_to_be_empty()
    assert _undecoded_images(page) == []
    screenshot(page, artifacts, "data-docs-index")
    # and every validation page the index links to
    pages = sorted({href for href in page.eval_on_selector_all(
        "a[href]", "links => links.map(a => a.href)") if href.startswith("file:")
        and href.split("#")[0].endswith(".html")})
    for i, url in enumerate(pages):
        page.goto(url)
        page.wait_for_load_state("load")
        assert _undecoded_images(page) == [], url
        if i == 0:
            screenshot(page, artifacts, "data-docs-validation")
    assert [url for url in requested if not url.startswith(LOCAL)] == []


@pytest.fixture(scope="module")
def published_detection(s3_endpoint, tmp_path_factory):
    """The detection sample (VOC, known boxes, bad annotations) built and published."""
    from recforge.dev import detection_sample

    bucket = f"rdetect-{tmp_path_factory.mktemp('b').name[-6:].lower()}"
    storage.s3_client().create_bucket(Bucket=bucket)
    detection_sample.upload(f"s3://{bucket}/raw", "voc", count=30)
    spec = load_spec(REPO / "include" / "datasets" / "demo_detection.yaml").with_overrides(
        {"source.uri": f"s3://{bucket}/raw", "publish.uri": f"s3://{bucket}/datasets"})
    version = pipeline.build(spec, run_id="d1", workers=1)["publish"]["uri"]
    local = tmp_path_factory.mktemp("published-detection")
    storage.download(f"{version}/report.html", local / "report.html")
    return Published(local, version, storage.read_jsonl(f"{version}/records.jsonl"))


def test_detection_report_draws_boxes_and_refused_objects(published_detection, page,
                                                          artifacts):
    """Samples with their boxes drawn, the object charts, and the refused objects with
    their box, all decoded offline."""
    from playwright.sync_api import expect

    requested = _open_offline(page, published_detection / "report.html")
    expect(page.locator("#samples figure.box img").first).to_be_visible()
    assert page.locator("#samples figure.box img").count() >= 4
    expect(page.locator("[id='refused-objects']")).to_be_visible()
    table = page.locator("[id='refused-objects'] ~ table").first
    text = table.inner_text()
    assert "box_outside_image" in text and "degenerate_box" in text
    assert table.locator("img").count() == 2  # each refused box drawn on its source image
    assert page.locator("#charts svg").count() >= 3
    assert _undecoded_images(page) == []
    screenshot(page, artifacts, "detection-report")
    page.locator("#samples").screenshot(path=str(artifacts / "detection-samples.png"))
    assert [url for url in requested if not url.startswith(LOCAL)] == []
