"""The trigger form in a real browser, against the Celery tier's running api-server.

Log in through the simple auth manager's login page, open ``recforge__pets``, check that the
trigger form renders the DAG's Params in their sections with their descriptions, override two
of them, trigger, and read the overrides back from the published manifest. Screenshots of
every step land in the test's artefact folder (see ``tests/common/browser.py``).
"""

from __future__ import annotations

import json
import re
import urllib.parse

import pytest

from recforge import storage
from tests.common.browser import screenshot
from tests.common.sources import make_source
from tests.e2e.cluster import ADMIN_PASSWORD, dump_logs, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.browser]

DAG_ID = "recforge__pets"


def _login(page, base: str, artifacts) -> None:
    from playwright.sync_api import expect

    page.goto(f"{base}/dags")
    expect(page).to_have_url(re.compile(r"/auth/login"))
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(ADMIN_PASSWORD)
    screenshot(page, artifacts, "01-login")
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/dags/?(\?.*)?$"))


def _open_trigger_form(page):
    """Click the DAG page's Trigger button until its dialog is open (a click that lands while
    the page is still loading the DAG can be lost)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    dialog = page.get_by_role("dialog").filter(
        has=page.get_by_role("heading", name=re.compile(rf"Trigger Dag\s+-\s+{DAG_ID}")))
    for _ in range(3):
        page.get_by_role("button", name="Trigger Dag").click()
        try:
            dialog.wait_for(state="visible", timeout=10_000)
            return dialog
        except PlaywrightTimeout:
            continue
    raise AssertionError("the trigger dialog did not open")


def _open_section(dialog, name: str):
    """Expand one Param section (an accordion: opening one closes the others)."""
    from playwright.sync_api import expect

    dialog.get_by_role("button", name=name, exact=True).click()
    region = dialog.get_by_role("region", name=name, exact=True)
    expect(region).to_be_visible()
    return region


def test_trigger_form_overrides_reach_the_published_manifest(cluster, page, artifacts):
    from playwright.sync_api import expect

    api, bucket, base = cluster["api"], cluster["bucket"], cluster["base"]
    make_source(bucket, per_class=16)  # the same source as the REST API test's

    _login(page, base, artifacts)
    dag_link = page.get_by_role("link", name=DAG_ID, exact=True).first
    expect(dag_link).to_be_visible()
    screenshot(page, artifacts, "02-dags")
    dag_link.click()
    expect(page).to_have_url(re.compile(rf"/dags/{DAG_ID}/?$"))
    # the DAG's details have loaded once its tasks are listed
    expect(page.get_by_text("quality_gate", exact=True).first).to_be_visible()
    screenshot(page, artifacts, "03-dag")

    dialog = _open_trigger_form(page)
    for name in ("Data", "Packing", "Run"):
        expect(dialog.get_by_role("button", name=name, exact=True)).to_be_visible()
    screenshot(page, artifacts, "04-trigger-form")

    data = _open_section(dialog, "Data")
    expect(data.get_by_text("Source prefix")).to_be_visible()
    expect(data.get_by_text(re.compile(rf"Empty: s3://{bucket}/raw$"))).to_be_visible()
    expect(data.get_by_text("Publish target")).to_be_visible()
    screenshot(page, artifacts, "05-section-data")

    run = _open_section(dialog, "Run")
    expect(run.get_by_text("Dry run")).to_be_visible()
    expect(run.get_by_text(re.compile(r"but publish nothing \(no version"))).to_be_visible()
    expect(run.get_by_text("Force rebuild")).to_be_visible()
    screenshot(page, artifacts, "06-section-run")

    packing = _open_section(dialog, "Packing")
    for value in (40, 95, 8):  # the spec's values, in the descriptions
        expect(packing.get_by_text(re.compile(rf"Empty: {value}$"))).to_be_visible()
    resize = packing.get_by_label("Resize short side (px)")
    shard_size = packing.get_by_label("Images per pack task")
    resize.fill("36")
    shard_size.fill("5")
    expect(resize).to_have_value("36")
    expect(shard_size).to_have_value("5")
    screenshot(page, artifacts, "07-overrides")

    dialog.get_by_role("button", name="Trigger", exact=True).click()
    expect(page).to_have_url(re.compile(rf"/dags/{DAG_ID}/runs/[^/]+$"))
    run_id = urllib.parse.unquote(page.url.rstrip("/").rsplit("/", 1)[1])
    screenshot(page, artifacts, "08-run-page")

    path = f"/api/v2/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
    status, dag_run = api.call("GET", path)
    assert status == 200, dag_run
    assert dag_run["conf"]["resize"] == 36 and dag_run["conf"]["shard_size"] == 5, dag_run

    def finished():
        state = api.call("GET", path)[1].get("state")
        return state if state in ("success", "failed") else None

    state = wait_for("the DAG run triggered from the UI", finished, 600, cluster["procs"],
                     cluster["logs"])
    if state != "success":
        _, tis = api.call("GET", f"{path}/taskInstances?limit=200")
        pytest.fail(f"run {run_id} ended {state}:\n" + json.dumps(tis, indent=1)[:4000]
                    + dump_logs(cluster["logs"]))
    page.reload()
    expect(page.get_by_text("Success", exact=True).first).to_be_visible()
    screenshot(page, artifacts, "09-run-success")

    latest = storage.read_json(f"s3://{bucket}/datasets/pets/latest.json")
    manifest = storage.read_json(f"{latest['uri']}/manifest.json")
    assert manifest["run_id"] == run_id
    assert manifest["spec"]["pack"]["resize"] == 36  # the form's values, not the spec's 40 / 8
    assert manifest["spec"]["pack"]["shard_size"] == 5
