"""Browser fixtures: Debian's headless Chromium driven by Playwright's sync API.

Playwright only drives the system browser (``executable_path``); its own browser downloads
(``playwright install``) are never used. Tests that take ``page`` or ``browser`` carry the
``browser`` marker: when Chromium or Playwright is missing they skip with the reason locally,
and fail in CI (``CI`` set), where ``make test`` installs Chromium; the check runs before any
other fixture (``pytest_runtest_setup``, imported into ``tests/conftest.py``).

Screenshots go to ``$RECFORGE_TEST_ARTIFACTS`` or ``tests/artifacts/``, one folder per test
(named after its node id, e.g. ``e2e_test_ui.py_test_...``).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

ARTIFACTS = Path(os.environ.get("RECFORGE_TEST_ARTIFACTS")
                 or Path(__file__).resolve().parents[1] / "artifacts")


def chromium_path() -> str | None:
    override = os.environ.get("RECFORGE_CHROMIUM")
    return shutil.which(override) if override else shutil.which("chromium")


def _unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"playwright is not installed ({exc}); make test installs it"
    if not chromium_path():
        return ("chromium is not installed (apt-get install chromium, or set RECFORGE_CHROMIUM); "
                "make test installs it when run as root")
    return None


def require_browser() -> None:
    """Skip (locally) or fail (in CI) when Chromium or Playwright is missing."""
    why = _unavailable()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests need Chromium and Playwright in CI: {why}")
        pytest.skip(why)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A ``browser`` test skips or fails before its other fixtures (an Airflow stack, a
    dataset build) are set up for nothing."""
    if item.get_closest_marker("browser"):
        require_browser()


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the module. ``--no-sandbox``: CI runs as root."""
    require_browser()
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=20_000)  # the default 5 s is short on 2 busy cores
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                      args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def artifacts(request) -> Path:
    """This test's artefact folder (emptied first)."""
    folder = ARTIFACTS / re.sub(r"[^\w.-]+", "_", request.node.nodeid.removeprefix("tests/"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def page(browser, artifacts):
    """A fresh page in its own context; its last state is saved as ``last.png``."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(30_000)
    tab = context.new_page()
    try:
        yield tab
    finally:
        try:
            tab.screenshot(path=artifacts / "last.png", full_page=True)
        except Exception:  # best effort: the page may be gone
            pass
        context.close()


def screenshot(page, artifacts: Path, name: str) -> Path:
    """Save a full-page screenshot ``<name>.png`` in the test's artefact folder."""
    path = artifacts / f"{name}.png"
    page.screenshot(path=path, full_page=True)
    return path
