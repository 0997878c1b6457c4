"""The ``benchmark`` task (queue ``gpu``): the loader benchmark on the merged train split.

``bench.json`` lands in ``out/`` and so is published with the dataset; a loader below the
spec's floors raises ``BenchFloorsFailed`` with the numbers (``recforge.bench``).
"""

from __future__ import annotations

from recforge.bench import run_and_gate
from recforge.format import names
from recforge.run import Run


def benchmark(run: Run) -> dict:
    with run.recording_outputs("benchmark"):  # bench.json's checksum, for publish
        return run_and_gate(run.out, run.spec.bench, run.output(names.BENCH),
                            dataset_version=run.version(), run_id=run.run_id)
