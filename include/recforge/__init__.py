"""recforge: forge, check, benchmark and publish MXNet RecordIO datasets from images in S3.

The package imports and runs without Airflow; the DAGs, the CLI and the tests all call
the same stage functions (``recforge.stages.ingest``, ``recforge.stages.pack``, ...).
"""

__version__ = "0.2.0"
