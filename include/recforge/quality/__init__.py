"""The quality gate: the pre-release checklist as Great Expectations 1.x suites, run every build.

Each checklist item is one named check (``recforge.spec.quality.CHECKS``) with a severity
from the spec's :class:`~recforge.spec.quality.QualitySpec`: ``fail`` blocks publishing,
``warn`` is reported, ``off`` skips it. :func:`run_quality_gate` returns a small result dict
(``data_docs`` names the Data Docs index.html); :func:`enforce` raises
:class:`QualityGateFailed` on a failed ``fail`` check.

One module per step, in the order a run goes through them; each imports only those before
it (``gate.py`` also uses ``report.py`` to upload the site; ``report.py`` imports none of
them):

* ``inputs.py`` — what the checklist reads: the record manifest, listing, quarantine, summary,
  classes, ``.idx`` files, and a sample of records re-read from the ``.rec``;
* ``frames.py`` — the pandas facts: cross-row facts (duplicates across splits, per-object
  accounting, class counts) computed as columns;
* ``checks/`` — the checklist's items, one module each (a package; its docstring names them):
  what a check plans as GX expectations, its observed line, its evidence and the report's
  advice, in one table ordered as the spec's items;
* ``suites.py`` — the expectation plans, items 1-16, by walking that table (items 6-10 on the
  loader benchmark's results, which it turns into frames);
* ``gx.py`` — running GX in an ephemeral context, building Data Docs, summarising the verdicts
  (each check's observed line and evidence from its module);
  ``docs_site.py`` (standard library only, used by ``gx.py``) finishes the site: offline, a static
  index, warn-only suites shown as warnings;
* ``gate.py`` — the entry points and :func:`enforce`;
* ``report.py`` — what people read: the Data Docs upload, the text table, the failed checks.

Below them all, ``verdict.py`` holds the gate's words (a check's status, the gate's status,
the verdict sentence) that ``docs_site.py`` and ``report.py`` both write.

Heavy imports (great_expectations, pandas, numpy, cv2) happen inside functions, so importing
this package stays light; the spec's models and the item table live in ``recforge.spec.quality``.
"""

from recforge.quality.gate import (
    GateError,
    QualityGateFailed,
    enforce,
    run_and_upload,
    run_checks,
    run_loader_checks,
    run_quality_gate,
)
from recforge.quality.inputs import GateInputs
from recforge.quality.report import format_table, iter_failed, upload_data_docs

__all__ = ["GateError", "GateInputs", "QualityGateFailed", "enforce", "format_table", "iter_failed",
           "run_and_upload", "run_checks", "run_loader_checks", "run_quality_gate",
           "upload_data_docs"]
