"""The ``validate`` task: the check of the merged dataset where it lies (its version folder,
not yet visible, or staging ``out/``).

A merged run (merge's ``checksums.json`` present) is checked by its composition
(``recforge.format.composed``): every shard was checked structurally by its pack task, so
this proves the parts were put together right — sizes, offsets, part boundaries read back
with ranged GETs, ``.idx``/``.lst``/``records.jsonl``/``summary.json`` agreeing — without
downloading the image bytes. Anything else gets the full structural check
(``recforge.format.validate``, ``full``: framing, index, counts, labels, masks decoded). A broken
dataset fails the run here, before the checklist spends time on it or anything is
published. In the DAG the loader benchmark runs beside this task (both follow merge): it
reads a bounded window, this task the whole dataset's bookkeeping."""

from __future__ import annotations

from recforge import claims, run_state, storage
from recforge.errors import ValidationFailed
from recforge.format.composed import validate_composition
from recforge.format.validate import format_report, validate_prefix
from recforge.run import Run


def validate(run: Run) -> dict:
    claims.keep_alive(run)
    record = run.checksums("merge")
    composed = storage.exists(record)
    report = validate_composition(run_state.out(run), record) if composed \
        else validate_prefix(run_state.out(run), full=True)
    if not report["ok"]:
        raise ValidationFailed("structural validation failed:\n" + format_report(report))
    return {"ok": True, "checked": "composition" if composed else "every record",
            "splits": {s: r["records"] for s, r in report["splits"].items()}}

