"""The published report and Data Docs in a real browser, opened from disk with no network.

The demo's sample data (fewer images per class) is built with the demo spec and published
through the S3 server; its ``report.html`` and
``quality/`` site are downloaded and opened as ``file://`` pages in headless Chromium, which
must render every section and decode every image without making one request that is not a
``file:///`` or ``data:`` URL. Full-page screenshots land in the test's artefact folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from recforge import pipeline, storage
from recforge.dev import sampledata
from recforge.spec import load_spec
from tests.common.browser import screenshot

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

SECTION_IDS = ("summary", "checklist", "charts", "samples", "masks", "near-duplicates",
               "quarantine", "diff")
LOCAL = ("file:///", "data:")  # file://host/... would be a network share


@pytest.fixture(scope="module")
def published(s3_endpoint, tmp_path_factory):
    """One published version, downloaded (report.html + quality/); returns the local folder."""
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
    return local


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
