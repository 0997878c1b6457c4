"""Where the dataset specs of an Airflow deployment are, first found wins:

1. the folder given in code: ``dataset_dags("/opt/airflow/specs")``;
2. Airflow's config ``[recforge] specs_dir`` (``AIRFLOW__RECFORGE__SPECS_DIR``);
3. the environment variable ``RECFORGE_SPECS_DIR`` (what the command line reads too);
4. ``include/datasets`` next to the package: the repo layout, for an editable install.

The DAG factory resolves the folder when it parses the DAG file, and every task re-parses that
file where it runs, so a task reads its spec from the same folder the DAG was built from. Give
an absolute path: a relative one is taken from the working directory of each Airflow process.
"""

from __future__ import annotations

from pathlib import Path

from recforge import settings, spec


def specs_dir(directory: str | Path | None = None) -> Path:
    """The specs folder: ``directory`` if given, else the first of the order above."""
    if directory:
        return Path(directory).expanduser()
    configured = settings.get(settings.SPECS_DIR)
    if configured:
        return Path(configured).expanduser()
    return spec.specs_dir()  # RECFORGE_SPECS_DIR, else include/datasets next to the package
