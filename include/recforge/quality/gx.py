"""Running GX: one suite per frame in an ephemeral context, Data Docs, and the result dict.

Why no GX ``Checkpoint``: a Checkpoint passes one ``batch_parameters`` to all its validation
definitions, but each suite here runs on its own in-memory dataframe; so each
``ValidationDefinition`` runs with its dataframe under one run id and Data Docs are built
once at the end. The context is ephemeral (no ``gx/`` folder): the suites are planned in
:mod:`recforge.quality.suites`, the evidence lives in the Data Docs site. The helpers below
turn GX's validation results into each check's status, one observed line and a few evidence
lines (the lines each check's own module gives, ``recforge.quality.checks``), kept short so
the result dict stays small.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recforge.quality.checks import BY_NAME
from recforge.quality.checks.base import MAX_EVIDENCE
from recforge.quality.docs_site import TABLE_LEVEL, SuitePage, finish_site
from recforge.spec.quality import CHECKS, QualitySpec

if TYPE_CHECKING:
    import pandas as pd

    from recforge.quality.checks import Planned

log = logging.getLogger(__name__)

SITE_NAME = "recforge"
MAX_TEXT = 240  # characters per observed value or evidence line (the result stays small)
SUITE_PREFIX = "checklist"
# the column(s) that name a row in each frame: shown for unexpected rows in Data Docs (an
# object of a detection record is named by its record's split and key and its place in the
# label: numbers, not one string per object)
ROW_ID: dict[str, str | tuple[str, ...]] = {
    "records": "record", "sources": "source_key", "classes": "class", "splits": "split",
    "objects": ("split", "key", "object"), "class_names": "class_name"}


def _row_id_columns(frame: str | None) -> list[str]:
    cols = ROW_ID.get(frame) if frame is not None else None
    return [] if cols is None else [cols] if isinstance(cols, str) else list(cols)


def _context(docs_dir: Path):
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
        data_docs_sites={SITE_NAME: {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(docs_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }},
    )
    return gx.get_context(project_config=config, mode="ephemeral")


def _clear_site(docs_dir: Path) -> None:
    """Remove a previous run's pages so the site shows only this run's results."""
    for sub in ("validations", "expectations"):
        shutil.rmtree(docs_dir / sub, ignore_errors=True)
    (docs_dir / "index.html").unlink(missing_ok=True)


class Validations:
    """One ephemeral context and run id whose suites run in steps (:meth:`run`, once per
    group of frames) and whose Data Docs are built once (:meth:`build_docs`): the gate runs
    the dataset's suites while the loader benchmark beside it is still measuring, and the
    loader's suites once its results arrive, all in one site under one run."""

    def __init__(self, docs_dir: Path, run_name: str):
        import datetime

        from great_expectations.core.run_identifier import RunIdentifier

        self.docs_dir = docs_dir
        docs_dir.mkdir(parents=True, exist_ok=True)
        _clear_site(docs_dir)
        self.ctx = _context(docs_dir)
        self.source = self.ctx.data_sources.add_pandas("recforge")
        self.run_id = RunIdentifier(run_name=run_name,
                                    run_time=datetime.datetime.now(datetime.UTC))

    def run(self, frames: dict[str, pd.DataFrame], plans: list[Planned]) -> dict[str, Any]:
        """Run one suite per frame that ``plans`` name (each frame once per session);
        returns frame → validation result."""
        import great_expectations as gx

        results = {}
        for frame in dict.fromkeys(p.frame for p in plans):
            suite = self.ctx.suites.add(gx.ExpectationSuite(name=f"{SUITE_PREFIX}-{frame}"))
            for p in plans:
                if p.frame == frame:
                    suite.add_expectation(p.expectation)
            batch = self.source.add_dataframe_asset(frame) \
                .add_batch_definition_whole_dataframe(frame)
            vd = self.ctx.validation_definitions.add(
                gx.ValidationDefinition(name=f"{SUITE_PREFIX}-{frame}", data=batch,
                                        suite=suite))
            result_format = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
            if frame in ROW_ID:
                result_format["unexpected_index_column_names"] = _row_id_columns(frame)
            data = _checked_columns(frames[frame], [p for p in plans if p.frame == frame])
            results[frame] = vd.run(batch_parameters={"dataframe": data}, run_id=self.run_id,
                                    result_format=result_format)
            del data
        return results

    def build_docs(self) -> None:
        self.ctx.build_data_docs(site_names=[SITE_NAME])


def validate_plans(frames: dict[str, pd.DataFrame], plans: list[Planned], docs_dir: Path,
                   run_name: str) -> dict[str, Any]:
    """Run one suite per frame with GX; build Data Docs; return frame → validation result."""
    session = Validations(docs_dir, run_name)
    results = session.run(frames, plans)
    session.build_docs()
    return results


def _checked_columns(df: pd.DataFrame, plans: list[Planned]) -> pd.DataFrame:
    """Only the columns the frame's expectations read (and its row id): GX copies the frame
    it validates per metric and scans its columns per unexpected row, so at ImageNet size
    every column it does not check costs time and memory."""
    needed = set()
    for p in plans:
        e = p.expectation
        needed |= {getattr(e, a, None) for a in ("column", "column_A", "column_B")}
        needed |= set(getattr(e, "column_list", None) or ())
    frame = plans[0].frame if plans else None
    needed |= set(_row_id_columns(frame))
    cols = [c for c in df.columns if c in needed]
    return df if len(cols) == len(df.columns) else df[cols]


def _row_label(frame: str, df: pd.DataFrame, ref) -> str:
    """Name an unexpected row: GX gives ``{id column: value, checked columns: values}``."""
    if isinstance(ref, dict):
        if frame == "objects":  # train/12 object 0: the record and the object's row in its label
            ids = ("split", "key", "object")
            ident = f"{ref.get('split', '?')}/{ref.get('key', '?')} object {ref.get('object', '?')}"
            values = ", ".join(f"{k}={_short(v)}" for k, v in ref.items() if k not in ids)
            return f"{ident} [{values}]" if values else ident
        id_col = ROW_ID.get(frame)
        ident = ref.get(id_col, "?")
        values = ", ".join(f"{k}={_short(v)}" for k, v in ref.items() if k != id_col)
        if frame == "records" and id_col in df:
            match = df.loc[df[id_col] == ident, "source_key"]
            if len(match):
                ident = f"{ident} {match.iloc[0]}"
        return f"{ident} [{values}]" if values else str(ident)
    if frame == "loader_batches":
        return f"batch {ref}"
    return str(ref)


def _short(v) -> str:
    text = f"{v:g}" if isinstance(v, float) else str(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _evidence_line(frame: str, df: pd.DataFrame, what: str, result) -> str:
    r = result.result or {}
    if result.exception_info and result.exception_info.get("raised_exception"):
        return f"{what}: error {result.exception_info.get('exception_message')}"[:MAX_TEXT]
    rows = r.get("partial_unexpected_index_list") or []
    if rows:
        n = r.get("unexpected_count", len(rows))
        head = f"{what}: {n} of {r.get('element_count')} unexpected, e.g. "
        shown: list[str] = []
        for label in (_row_label(frame, df, i) for i in rows[:MAX_EVIDENCE]):
            if shown and len(head) + len(", ".join([*shown, label])) + 5 > MAX_TEXT:
                break  # whole items only: never cut one in the middle
            shown.append(label)
        more = ", …" if len(shown) < min(len(rows), MAX_EVIDENCE) or n > len(shown) else ""
        return (head + ", ".join(shown) + more)[:MAX_TEXT]
    if "observed_value" in r:
        return f"{what}: observed {r['observed_value']}"[:MAX_TEXT]
    vals = r.get("partial_unexpected_list") or []
    return f"{what}: unexpected {vals[:MAX_EVIDENCE]}"[:MAX_TEXT]


def _observed(name: str, frames: dict[str, pd.DataFrame], quality: QualitySpec,
              num_classes: int | None) -> str:
    """One short, human line per check, true whether it passed or failed (its module's)."""
    c = BY_NAME.get(name)
    return c.observed(frames, quality, num_classes) if c is not None else ""


def _special_evidence(name: str, frames: dict[str, pd.DataFrame]) -> list[str]:
    """A check's own evidence lines (pairs are better evidence than rows for the split
    checks), before GX's unexpected rows."""
    c = BY_NAME.get(name)
    if frames.get("records") is None or c is None:
        return []
    return [s[:MAX_TEXT] for s in c.evidence(frames)]


def summarise_checks(frames, plans, results, not_run, quality, num_classes, skip=()) -> dict:
    """Check name → status, observed value and evidence, from the GX validation results."""
    checks: dict[str, dict] = {}
    by_check: dict[str, list] = {}
    for p in plans:
        res = results[p.frame]
        for r in res.results:
            if r.expectation_config.meta.get("what") == p.what and \
                    r.expectation_config.meta.get("check") == p.check:
                by_check.setdefault(p.check, []).append((p, r))
                break
    for c in CHECKS:
        if c.name in skip:
            continue
        sev = quality.severity_of(c.name)
        entry = {"item": c.item, "title": c.title, "severity": sev}
        pairs = by_check.get(c.name, [])
        if sev == "off":
            entry.update(status="off", success=None, observed="disabled in quality.severity",
                         evidence=[])
        elif not pairs:
            entry.update(status="not run", success=None,
                         observed=not_run.get(c.name, "no input for this check"), evidence=[])
        else:
            ok = all(r.success for _, r in pairs)
            failed = [(p, r) for p, r in pairs if not r.success]
            evidence = _special_evidence(c.name, frames) if failed else []
            evidence += [_evidence_line(p.frame, frames[p.frame], p.what, r) for p, r in failed]
            entry.update(
                status="passed" if ok else ("failed" if sev == "fail" else "warning"),
                success=ok, observed=_observed(c.name, frames, quality, num_classes)[:MAX_TEXT],
                evidence=evidence[:MAX_EVIDENCE], expectations=len(pairs),
                docs_page=f"validations/{SUITE_PREFIX}-{pairs[0][0].frame}")
            if c.name in not_run:
                entry["note"] = not_run[c.name]
        checks[c.name] = entry
    return checks


def _suite_pages(results: dict[str, Any]) -> list[SuitePage]:
    """Each suite's expectation results as the site needs them: (section, check, success) in
    GX's order (GX groups a validation page by ``kwargs.column``, else table-level)."""
    pages = []
    for frame, res in results.items():
        rows = []
        for r in res.results:
            cfg = r.expectation_config
            section = cfg.kwargs.get("column", TABLE_LEVEL) if cfg is not None else TABLE_LEVEL
            check = (cfg.meta or {}).get("check") if cfg is not None else None
            rows.append((str(section), check, bool(r.success)))
        pages.append(SuitePage(f"{SUITE_PREFIX}-{frame}", rows))
    return pages


def finish_result(checks: dict, docs_dir: Path, dataset: str | None, run_name: str,
                  results: dict[str, Any] | None = None, report_href: str | None = None
                  ) -> dict:
    """The result dict; with ``results`` (frame → GX validation result) also finish the Data
    Docs site: offline, a static index, warn-only suites shown as warnings, and every page
    linking to the dataset report at ``report_href`` (relative to the site's root), if given
    (:func:`recforge.quality.docs_site.finish_site`)."""
    # point each check at its validation page (relative to the site root)
    for entry in checks.values():
        page = entry.get("docs_page")
        if page:
            found = sorted((docs_dir / page).rglob("*.html"))
            entry["docs_page"] = found[0].relative_to(docs_dir).as_posix() if found else None
    failed = [n for n, e in checks.items() if e["status"] == "failed"]
    out = {
        "ok": not failed, "dataset": dataset, "run": run_name,
        "failed": failed, "warned": [n for n, e in checks.items() if e["status"] == "warning"],
        "checks": checks, "data_docs": str(docs_dir / "index.html"),
    }
    if results is not None:
        try:
            finish_site(docs_dir, checks, _suite_pages(results), dataset=dataset,
                        run_name=run_name, result=out, report_href=report_href)
        except Exception:  # the verdict stands; the site stays as GX built it
            log.exception("quality: could not finish the Data Docs site in %s", docs_dir)
    return out
