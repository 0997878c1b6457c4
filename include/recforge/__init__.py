"""recforge: forge, check, benchmark and publish MXNet RecordIO datasets from images in S3.

The package imports and runs without Airflow; the DAGs, the CLI and the tests all call
the same stage functions (``recforge.stages.ingest``, ``recforge.stages.pack``, ...).
"""

__version__ = "0.2.0"


def open(uri: str, spec_path=None):  # recforge.open: the builtin is not used in this module
    """A published version (a version URI, a dataset prefix for its latest, ``…@<version>``
    or a dataset name): its ``version``, ``classes``, ``splits``; ``.pull(dir)`` downloads it
    verified. Imported on first use, so ``import recforge`` stays light (``recforge.pull``)."""
    from recforge.pull import open_version

    return open_version(uri, spec_path)
