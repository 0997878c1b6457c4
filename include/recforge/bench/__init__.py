"""The loader benchmark: does the packed ``.rec`` feed a trainer fast enough? (``recforge bench``)

A dataset that validates but starves the GPU is still a failed build. The benchmark runs the
loader users train with (``mx.io.ImageRecordIter``; for ``loader: segmentation`` a Gluon
``DataLoader`` over ``SegmentationRecordDataset``; for ``loader: detection``
``mx.io.ImageDetRecordIter``) over a packed split, next to the bare-decode rate of the same
records, sweeps the loader's threads, and gates publish on the spec's floors. One
module per step, each importing only the ones before it:

- ``records``: fetch the split, count and size its records, the bare-decode reference;
- ``device``: where it runs (GPU or CPU, the host, MXNet's ``preprocess_threads`` cap);
- ``results``: what both loaders' results share (schema, latency percentiles, the pick);
- ``loader`` / ``segmentation``: one timed ImageRecordIter (or ImageDetRecordIter) run / the
  segmentation loader;
- ``benchmark``: the whole benchmark, producing the ``bench.json`` dict;
- ``floors``: the floors per environment, saving ``bench.json``, the gate;
- ``report``: the table people read.

MXNet facts it relies on are in docs/gpu-worker.md (checked with mxnet 1.9.1). The spec's
models (``BenchOptions``, ``BenchFloors``, ``BenchSpec``) live in ``recforge.spec.bench``,
the command line in ``recforge.cli.bench``; mxnet, cv2 and numpy are imported inside the
functions that use them, so importing this package stays light.
"""

from recforge.bench.benchmark import run_benchmark
from recforge.bench.floors import BenchFloorsFailed, check_floors, run_and_gate, select_floors
from recforge.bench.records import LoaderBenchError
from recforge.bench.report import format_table

__all__ = ["BenchFloorsFailed", "LoaderBenchError", "check_floors", "format_table",
           "run_and_gate", "run_benchmark", "select_floors"]
