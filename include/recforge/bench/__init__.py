"""The loader benchmark: does the packed ``.rec`` feed a trainer fast enough? (``recforge bench``)

A dataset that validates but starves the GPU is still a failed build. The benchmark runs the
loader users train with (``mx.io.ImageRecordIter``; for ``loader: segmentation`` a Gluon
``DataLoader`` over ``SegmentationRecordDataset``; for ``loader: detection``
``mx.io.ImageDetRecordIter``; beside or instead of them DALI's and the PyTorch loader) over
a packed split, next to the bare-decode rate of the same records, sweeps the loader's
threads, and gates publish on the spec's floors.

The loaders: ``loaders.py`` is their table, one row each (module, interpreter, task kinds),
and every loader module has the one entry ``measure`` it names; callers dispatch through it.

Run in the MXNet environment (a child process, ``environment.py``; numpy 1.23, no pandas,
GX or Airflow there):

- ``measure.py``: the child's entry: reuse the previous measurements, else the loader's row;
- ``image_record_iter.py``: MXNet's ImageRecordIter (ImageDetRecordIter) loader: the value
  check, the ``preprocess_threads`` sweep, the document;
- ``loader.py``: one timed ImageRecordIter (or ImageDetRecordIter) run;
- ``value_check.py``: its untimed value check over one epoch;
- ``segmentation.py``: the segmentation loader;
- ``worker.py``: the child side of ``environment.call``.

Run in this (the core) environment:

- ``benchmark.py``: the whole benchmark, fetching the window and producing the ``bench.json``
  dict;
- ``dali.py`` / ``torch_loader.py``: DALI's loader / the PyTorch loader
  (``recforge.readers.torch.dataset`` + ``DataLoader``, nvJPEG decode on a GPU);
- ``floors.py``: the floors per environment, saving ``bench.json``, the gate;
- ``report.py``: the table people read;
- ``gpu_support.py``: which GPUs MXNet's kernels run on (CUDA's SASS / PTX rules) and what
  ``bench.loader: auto`` measures there.

Imported in both (light: nothing either environment lacks):

- ``loaders.py``: the loaders' table;
- ``results.py``: what every loader's results share (schema, latency percentiles, the pick,
  label and detection statistics);
- ``records.py``: fetch the split, count and size its records, the bare-decode reference;
- ``device.py``: where it runs (GPU or CPU, the host, MXNet's ``preprocess_threads`` cap);
- ``environment.py``: the interpreter MXNet's loaders run in and one call into it (the
  child waits for the caller's quiet with it).

MXNet facts it relies on are in docs/gpu-worker.md (checked with mxnet 1.9.1). The spec's
models (``BenchOptions``, ``BenchFloors``, ``BenchSpec``) live in ``recforge.spec.bench``,
the command line in ``recforge.cli.bench``; mxnet, cv2 and numpy are imported inside the
functions that use them, so importing this package stays light.
"""

import importlib

_EXPORTS = {"run_benchmark": "benchmark", "BenchFloorsFailed": "floors",
            "check_floors": "floors", "run_and_gate": "floors", "select_floors": "floors",
            "LoaderBenchError": "records", "format_table": "report"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """The names above, imported on first use: importing one module of the package (the
    offline GPU check imports ``gpu_support`` and ``torch_loader`` on a host without pydantic)
    does not import the spec's models."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'recforge.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"recforge.bench.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
