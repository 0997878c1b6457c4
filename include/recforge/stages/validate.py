"""The ``validate`` task: the structural check of the merged output in staging
(``recforge.format.validate``: framing, index, counts, labels, mask alignment). A broken
dataset fails the run here, before the benchmark or the checklist spend time on it."""

from __future__ import annotations

from recforge.errors import ValidationFailed
from recforge.format.validate import format_report, validate_prefix
from recforge.run import Run


def validate(run: Run) -> dict:
    report = validate_prefix(run.out)
    if not report["ok"]:
        raise ValidationFailed("structural validation failed:\n" + format_report(report))
    return {"ok": True, "splits": {s: r["records"] for s, r in report["splits"].items()}}
