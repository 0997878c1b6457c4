"""The gate's entry points: run the checklist on a dataset, and stop the release on a failure.

:func:`run_quality_gate` (a dataset prefix, local or S3) and :func:`run_checks` (in-memory
:class:`GateInputs`) read, frame, plan and validate, build Data Docs and return a small
result dict: ``ok``, ``dataset``, ``run``, ``failed`` and ``warned`` (check names),
``checks`` (per check: item, title, severity, status, observed, evidence, docs_page) and
``data_docs`` (the Data Docs index.html: a local path, or the uploaded URI after
:func:`run_and_upload`). None of them raises on a failed check; :func:`enforce` does, with
:class:`QualityGateFailed`.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

from recforge import storage
from recforge.errors import RecforgeFailure, ValidationFailed
from recforge.format import names
from recforge.quality.frames import build_frames
from recforge.quality.gx import Validations, finish_result, summarise_checks, validate_plans
from recforge.quality.inputs import GateInputs, load_inputs, verify_records
from recforge.quality.report import upload_data_docs
from recforge.quality.suites import loader_frames, plan_expectations, plan_loader_expectations
from recforge.spec.quality import CHECKS, LOADER_CHECKS, QualitySpec

log = logging.getLogger(__name__)


class QualityGateFailed(RecforgeFailure):
    """A ``fail``-severity check failed; ``result`` is the gate's result dict (for alerts)."""

    def __init__(self, result: dict):
        self.result = result
        failed = ", ".join(
            f"{n} ({result['checks'][n]['observed']})" for n in result["failed"]) or "?"
        docs = result.get("data_docs") or "(not built)"
        super().__init__(
            f"quality gate failed for {result.get('dataset') or 'dataset'} run "
            f"{result.get('run') or '?'}: {failed}. Evidence: {docs}"
        )


class GateError(ValidationFailed):
    """The gate could not check the dataset (malformed manifest, .idx or inputs): retrying
    reads the same bytes and fails the same way, so the task fails at once."""


LoaderResults = dict | Callable[[], dict | None] | None


def run_checks(inputs: GateInputs, quality: QualitySpec | dict | None = None, *,
               docs_dir: str | Path, pack=None, task: str = "classification",
               loader_results: LoaderResults = None, dataset: str | None = None,
               run_name: str = "adhoc", report_href: str | None = None) -> dict:
    """Run every applicable suite on in-memory inputs; build Data Docs into ``docs_dir``.

    ``loader_results``: the loader benchmark's results, or a callable that returns them,
    called once the dataset's own suites have run and before the loader's — so a
    benchmark running beside the checklist overlaps all of the dataset's checks, and gets
    the machine to itself while it is timed. ``report_href``: the dataset report, relative to
    the site's root, which every page links to (the pipeline's: ``../report.html``)."""
    quality = as_quality(quality)
    frames = build_frames(inputs, quality, task)
    num_classes = (inputs.classes or {}).get("num_classes")
    plans, not_run = plan_expectations(frames, quality, pack, task, num_classes)
    docs_dir = Path(docs_dir)
    session = Validations(docs_dir, run_name)
    results = session.run(frames, plans)
    if callable(loader_results):
        loader_results = loader_results()
    if loader_results is not None:
        frames.update(loader_frames(loader_results))
        lp, lnr = plan_loader_expectations(frames, quality)
        plans += lp
        not_run.update(lnr)
        results.update(session.run(frames, lp))
    else:
        for name in LOADER_CHECKS:
            not_run[name] = "no loader benchmark results (bench.json) given"
    session.build_docs()
    checks = summarise_checks(frames, plans, results, not_run, quality, num_classes)
    out = finish_result(checks, docs_dir, dataset, run_name, results, report_href)
    log.info("quality gate %s: %s; failed %s, warned %s", run_name,
             "passed" if out["ok"] else "FAILED", out["failed"], out["warned"])
    return out


def run_loader_checks(results: dict, quality: QualitySpec | dict | None = None, *,
                      docs_dir: str | Path, dataset: str | None = None,
                      run_name: str = "adhoc") -> dict:
    """Items 6-10 alone, on the loader benchmark's results dict (see :func:`loader_frames`)."""
    quality = as_quality(quality)
    frames = loader_frames(results)
    plans, not_run = plan_loader_expectations(frames, quality)
    docs_dir = Path(docs_dir)
    gx_results = validate_plans(frames, plans, docs_dir, run_name)
    skip = [c.name for c in CHECKS if c.name not in LOADER_CHECKS]
    checks = summarise_checks(frames, plans, gx_results, not_run, quality, None, skip=skip)
    return finish_result(checks, docs_dir, dataset, run_name, gx_results)


def as_quality(quality) -> QualitySpec:
    """The spec's quality section as a ``QualitySpec`` (None: the defaults; a dict: parsed)."""
    if quality is None:
        return QualitySpec()
    if isinstance(quality, QualitySpec):
        return quality
    if isinstance(quality, dict):
        return QualitySpec.model_validate(quality)
    return QualitySpec.model_validate(quality.model_dump())


def run_quality_gate(prefix: str, quality: QualitySpec | dict | None = None, *,
                     docs_dir: str | Path, source_manifest: str | list[dict] | None = None,
                     pack=None, task: str = "classification",
                     loader_results: LoaderResults = None, dataset: str | None = None,
                     run_name: str = "adhoc", report_href: str | None = None) -> dict:
    """The gate on a dataset prefix (a run's ``out/`` or a published version, local or S3).

    Reads the manifest, quarantine, summary, classes and ``.idx`` files, re-reads a sample of
    records from the ``.rec`` files (``quality.decode_sample``), runs the suites and writes
    Data Docs into ``docs_dir``. Returns the small result dict; never raises on a failed
    check — call :func:`enforce` for that. A deterministic error while checking (malformed
    inputs, a bug) raises :class:`GateError`, which is not retried; a transient storage
    error propagates as it is, so the task is retried, and so does an error raised by a
    ``loader_results`` callable (the caller's: a failed benchmark, an orchestrator's skip).
    """
    quality = as_quality(quality)
    handed: list[BaseException] = []  # what the caller's loader_results raised

    def handover() -> dict | None:
        try:
            return loader_results() if callable(loader_results) else loader_results
        except BaseException as exc:
            handed.append(exc)
            raise

    try:
        inputs = load_inputs(prefix, source_manifest)
        rec = inputs.records  # one compact frame (recforge.quality.inputs.read_records)
        if quality.decode_sample != 0 and not rec.empty and inputs.rec_uris:
            verify_records(rec, inputs.rec_uris, quality.decode_sample)
        result = run_checks(inputs, quality, docs_dir=docs_dir, pack=pack, task=task,
                            loader_results=handover, dataset=dataset,
                            run_name=run_name, report_href=report_href)
    except Exception as exc:
        if isinstance(exc, RecforgeFailure) or storage.is_transient(exc) \
                or isinstance(exc, MemoryError) or exc in handed:
            raise
        raise GateError(f"quality gate could not check {prefix}: {type(exc).__name__}: "
                        f"{exc}") from exc
    result["prefix"] = prefix
    return result


def enforce(result: dict) -> dict:
    """Raise :class:`QualityGateFailed` (carrying ``result``) if a ``fail`` check failed; else
    return the result. Warnings never raise."""
    if not result["ok"]:
        raise QualityGateFailed(result)
    return result


def run_and_upload(prefix: str, quality: QualitySpec | dict | None = None, *, docs_uri: str,
                   **kwargs) -> dict:
    """The one call for a pipeline task: gate ``prefix``, upload Data Docs to ``docs_uri``.

    Also writes the result as ``<docs_uri>/quality.json``. With ``docs_uri`` under the run's
    ``out/`` (e.g. ``out/quality``), publish copies the site next to the dataset version.
    Returns the result with ``data_docs`` set to the uploaded index.html URI; raises nothing
    on failed checks (see :func:`enforce`).
    """
    with tempfile.TemporaryDirectory(prefix="recforge-docs-") as tmp:
        result = run_quality_gate(prefix, quality, docs_dir=tmp, **kwargs)
        result["data_docs"] = upload_data_docs(tmp, docs_uri)
    storage.write_json(storage.join(docs_uri, names.QUALITY_RESULT), result)
    return result
