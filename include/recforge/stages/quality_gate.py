"""The ``quality_gate`` task: the Great Expectations checklist over the merged output and
the loader benchmark's results (``recforge.quality``), then the dataset report
(``recforge.report``) that shows it.

Data Docs land in ``out/quality/`` and the report in ``out/report.html``, so both are
published next to the dataset, and a failed run keeps them in staging for the alert. A
failed ``fail``-severity check raises ``QualityGateFailed`` carrying the result (the
Airflow edge hands it to the alert); otherwise the result is returned for the notice.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from recforge import releases, storage
from recforge.format import names
from recforge.incremental import changes
from recforge.quality import enforce, format_table, run_and_upload
from recforge.report import build_report
from recforge.run import Run

log = logging.getLogger(__name__)


def quality_gate(run: Run) -> dict:
    # a killed earlier attempt's pages never mix with this one's (publish copies only what
    # this attempt records in quality_gate/checksums.json anyway)
    storage.delete_prefix(run.quality_docs)
    storage.delete(run.output(names.REPORT))
    with run.recording_outputs("quality_gate"):
        return _quality_gate(run)


def _quality_gate(run: Run) -> dict:
    spec = run.spec
    bench_uri = run.output(names.BENCH)
    bench = storage.read_json(bench_uri) if storage.exists(bench_uri) else None
    result = run_and_upload(
        run.out, spec.quality, docs_uri=run.quality_docs, source_manifest=run.source_manifest,
        pack=spec.pack, task=spec.task, loader_results=bench, dataset=spec.name,
        run_name=run.run_id)
    log.info("quality gate: %s; Data Docs: %s", "passed" if result["ok"] else "FAILED",
             result["data_docs"])
    log.info("checklist:\n%s", format_table(result))
    result.update(write_report(run))
    result["changes"] = changes.run_headline(run.changes)  # quoted by the alert
    return enforce(result)


def write_report(run: Run) -> dict:
    """``out/report.html``, diffed against the latest published version; returns where it
    is and a link a browser can open."""
    latest = releases.read_latest(run.spec)
    about = {"dataset": run.spec.name, "version": run.version(), "run_id": run.run_id,
             "task": run.spec.task, "spec": run.spec.public_dump(),
             "previous_uri": latest["uri"] if latest and latest.get("run_id") != run.run_id
             else None}
    with tempfile.TemporaryDirectory(prefix="recforge-report-") as tmp:
        local = build_report(run.out, Path(tmp) / names.REPORT, about=about)
        uri = run.output(names.REPORT)
        storage.put_bytes(uri, local.read_bytes(), "text/html; charset=utf-8")
    # no presigned link here: the result is logged (Airflow logs a task's return value) and
    # kept in XCom, and a link names the access key and opens the object to whoever holds
    # it. The CLI and the alert presign `report` where they show it (storage.browser_url).
    log.info("report: %s", uri)
    return {"report": uri}
