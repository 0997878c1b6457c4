"""The ``quality_gate`` task: the Great Expectations checklist over the merged output and
the loader benchmark's results (``recforge.quality``), then the dataset report
(``recforge.report``) that shows it.

Data Docs land in ``quality/`` and the report in ``report.html`` of the merged dataset
(``run_state.out``), so both are published with it; a failed run's stay in its unpublished
folder for the alert, until a later publish removes it as a dead run's
(``recforge.claims``). The
report names the version the run publishes to; a failed gate's report says it was not
published. A
failed ``fail``-severity check raises ``QualityGateFailed`` carrying the result (the
Airflow edge hands it to the alert); otherwise the result is returned for the notice.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

from recforge import claims, releases, run_state, storage
from recforge.format import names
from recforge.incremental import changes
from recforge.quality import enforce, format_table, run_and_upload
from recforge.report import build_report
from recforge.run import Run
from recforge.stages.benchmark import awaited_results, bench_results
from recforge.stages.publish import content_fields

log = logging.getLogger(__name__)


def quality_gate(run: Run, loader_results: Callable[[], dict | None] | None = None,
                 benchmark_finished: Callable[[], bool] | None = None) -> dict:
    """``loader_results``: what hands over the loader benchmark's results when the checklist
    needs them (``recforge build`` runs the benchmark beside the checklist). Else the run's
    ``bench.json``, read then; with ``benchmark_finished`` (the DAG, where this task starts
    beside the benchmark task) once that says the benchmark succeeded."""
    if loader_results is None:
        loader_results = (functools.partial(awaited_results, run, benchmark_finished)
                          if benchmark_finished else functools.partial(bench_results, run))
    claims.keep_alive(run)
    # a killed earlier attempt's pages never mix with this one's (publish copies only what
    # this attempt records in quality_gate/checksums.json anyway)
    storage.delete_prefix(run_state.quality_docs(run))
    storage.delete(run_state.output(run, names.REPORT))
    checked: dict[str, str] = {}  # the bench.json the loader items describe
    with run_state.recording_outputs(run, "quality_gate", checked):
        return _quality_gate(run, _noting(run, loader_results, checked))


def _noting(run: Run, loader_results: Callable[[], dict | None], checked: dict
            ) -> Callable[[], dict | None]:
    """``loader_results`` that also notes the SHA-256 the benchmark recorded for the
    ``bench.json`` it hands over, where it recorded one: a benchmark run again after the
    checklist (a cleared task) must not publish beside Data Docs about the earlier one."""
    def results() -> dict | None:
        got = loader_results()
        record = run.checksums("benchmark")
        if got is not None and storage.exists(record):
            entry = storage.read_json(record)["files"].get(names.BENCH)
            if entry:
                checked[names.BENCH] = entry["sha256"]
        return got

    return results


def _quality_gate(run: Run, bench: Callable[[], dict | None]) -> dict:
    spec = run.spec
    result = run_and_upload(
        run_state.out(run), spec.quality, docs_uri=run_state.quality_docs(run),
        source_manifest=run.source_manifest,
        pack=spec.pack, task=spec.task, loader_results=bench, dataset=spec.name,
        run_name=run.run_id,
        # the site is out/quality/, the report out/report.html: relative, so the link holds
        # in staging, in the published version and wherever that folder is served
        report_href=f"../{names.REPORT}")
    log.info("quality gate: %s; Data Docs: %s", "passed" if result["ok"] else "FAILED",
             result["data_docs"])
    log.info("checklist:\n%s", format_table(result))
    result.update(write_report(run, blocked=None if result["ok"] else result["failed"]))
    result["changes"] = changes.run_headline(run.changes)  # quoted by the alert
    return enforce(result)


def write_report(run: Run, blocked: list[str] | None = None) -> dict:
    """``out/report.html``, diffed against the latest published version; returns where it
    is staged (``report``) and, unless the gate failed (``blocked``: the failed checks),
    where publish puts it (``published_report``).

    The report describes the version the run publishes to (``releases.version_uri`` of
    ``run_state.version``), where publish leaves it unchanged. A failed gate's report says it was
    not published; a dry run's names its staging prefix and no version, since none will
    exist (pointing at one would send the reader to a version nobody can open)."""
    latest = releases.read_latest(run.spec)
    version = None if run.dry_run else run_state.version(run)
    target = releases.version_uri(run.spec, version) if version else None
    about = {"dataset": run.spec.name, "version": version, "run_id": run.run_id,
             "task": run.spec.task, "spec": run.spec.public_dump(), **content_fields(run),
             "previous_uri": latest["uri"] if latest and latest.get("run_id") != run.run_id
             else None, "uri": target, "blocked": list(blocked or [])}
    with tempfile.TemporaryDirectory(prefix="recforge-report-") as tmp:
        local = build_report(run_state.out(run), Path(tmp) / names.REPORT, about=about)
        uri = run_state.output(run, names.REPORT)
        storage.put_bytes(uri, local.read_bytes(), "text/html; charset=utf-8")
    # no presigned link here: the result is logged (Airflow logs a task's return value) and
    # kept in XCom, and a link names the access key and opens the object to whoever holds
    # it. The alert presigns `report` where it shows it (storage.browser_url).
    if blocked:
        log.info("report: %s (NOT published: the quality gate failed; open it with "
                 "`recforge report %s --open`)", uri, run_state.out(run))
        return {"report": uri}
    if target is None:
        log.info("report: %s (dry run: nothing is published, the report stays staged; open "
                 "it with `recforge report %s --open`)", uri, run_state.out(run))
        return {"report": uri}
    published = storage.join(target, names.REPORT)
    log.info("report: %s once published (staged as %s; open it with "
             "`recforge report %s --open`)", published, uri, target)
    return {"report": uri, "published_report": published}
