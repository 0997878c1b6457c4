"""The ``quality_gate`` task: the Great Expectations checklist over the merged output and
the loader benchmark's results (``recforge.quality``).

Data Docs land in ``out/quality/`` and so are published next to the dataset. A failed
``fail``-severity check raises ``QualityGateFailed`` carrying the result (the Airflow edge
hands it to the alert); otherwise the result is returned for the success/warning notice.
"""

from __future__ import annotations

import logging

from recforge import storage
from recforge.format import names
from recforge.quality import enforce, format_table, run_and_upload
from recforge.run import Run

log = logging.getLogger(__name__)


def quality_gate(run: Run) -> dict:
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
    return enforce(result)
