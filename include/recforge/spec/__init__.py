"""Dataset specs: the parse-time leaf. Pydantic models only, no engine, no I/O but YAML.

Airflow reads these at DAG parse time, so nothing here imports numpy, OpenCV, MXNet, GX or
boto3. One module per section: ``dataset.py`` (the spec and its loaders), ``quality.py``,
``bench.py``, ``alerts.py``, ``s3.py`` (``publish.s3`` and ``staging_s3``), ``schedule.py``
(when a dataset rebuilds); ``base.py`` is the one strict base model they all share. What
differs between task kinds is ``recforge.kinds``.
"""

from recforge.errors import SpecError
from recforge.spec.dataset import (
    IMAGE_EXTENSIONS,
    DatasetSpec,
    PackSpec,
    load_all_specs,
    load_spec,
    load_specs,
    parse_spec,
    specs_dir,
    using_specs_dir,
)

__all__ = ["IMAGE_EXTENSIONS", "DatasetSpec", "PackSpec", "SpecError", "load_all_specs",
           "load_spec", "load_specs", "parse_spec", "specs_dir", "using_specs_dir"]
