"""The ``benchmark`` task (queue ``gpu``): the loader benchmark on the merged train split.

``bench.json`` lands in the merged dataset (``run_state.out``) and so is published with it; a
loader below the spec's floors raises ``BenchFloorsFailed`` with the numbers
(``recforge.bench``). The latest version's ``bench.json`` is handed over: when the loader
would read byte-identical files with the same options on the same host, its measurements
are reused (``reused_from``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from recforge import claims, releases, run_state, storage
from recforge.bench import records, run_and_gate
from recforge.format import names
from recforge.run import Run

log = logging.getLogger(__name__)


def benchmark(run: Run, quiet: threading.Event | None = None) -> dict:
    """``quiet``: set by a caller running this beside other work (``recforge build`` runs it
    beside the checklist) once that work stops using the CPU; the timed measurements wait
    for it, so they time the loader alone."""
    claims.keep_alive(run)
    with run_state.recording_outputs(run, "benchmark"):  # bench.json's checksum, for publish
        return run_and_gate(run_state.out(run), run.spec.bench, run_state.output(run, names.BENCH),
                            dataset_version=run_state.version(run), run_id=run.run_id,
                            previous=previous_results(run), quiet=quiet,
                            identity=split_identity(run))


def split_identity(run: Run) -> str | None:
    """The benchmarked split's identity (``recforge.bench.records.split_identity``) from
    merge's record of what it composed; None where merge recorded none."""
    record = run.checksums("merge")
    if not storage.exists(record):
        return None
    classes = run_state.output(run, names.CLASSES)
    return records.split_identity(
        storage.read_json(record)["files"], run.spec.bench.options.split,
        storage.get_bytes(classes) if storage.exists(classes) else None)


def bench_results(run: Run) -> dict | None:
    """This run's ``bench.json``, if the benchmark wrote one (the checklist's loader items)."""
    uri = run_state.output(run, names.BENCH)
    return storage.read_json(uri) if storage.exists(uri) else None


def awaited_results(run: Run, finished: Callable[[], bool], first_poll: float = 0.2,
                    longest_poll: float = 5.0) -> dict | None:
    """``bench_results`` once ``finished()`` says the benchmark succeeded: the DAG's
    checklist runs beside the benchmark and asks for its results only for its loader items
    (``finished`` raises when the benchmark ended otherwise:
    ``recforge.orchestration.sibling``). Polls start at ``first_poll`` seconds and grow
    to ``longest_poll``."""
    started, delay = time.monotonic(), first_poll
    while not finished():
        time.sleep(delay)
        delay = min(delay * 1.5, longest_poll)
    log.info("quality: waited %.1f s for the loader benchmark to finish",
             time.monotonic() - started)
    return bench_results(run)


def previous_results(run: Run) -> dict | None:
    """The latest published version's ``bench.json``, if any (never this run's own)."""
    latest = releases.read_latest(run.spec)
    if not latest or latest.get("run_id") == run.run_id:
        return None
    uri = storage.join(latest["uri"], names.BENCH)
    try:
        return storage.read_json(uri) if storage.exists(uri) else None
    except ValueError as exc:  # unreadable: measure again
        log.warning("bench: previous %s unreadable (%s); measuring again", uri, exc)
        return None
