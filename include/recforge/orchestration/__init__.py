"""The Airflow edge: everything that knows about task contexts, XCom, pools and callbacks.

``dataset_dags(specs_dir=None)`` (:mod:`recforge.orchestration.dags`) builds one DAG per spec
of a folder, so a deployment's DAG file is two lines::

    from recforge.orchestration import dataset_dags
    globals().update(dataset_dags("/opt/airflow/specs"))

The DAG names stages by task id and calls :func:`recforge.orchestration.stage.run_stage`;
that turns the task's params into a :class:`recforge.run.Run`, runs the stage, and maps a
:class:`recforge.errors.RecforgeFailure` to a task failure without retries. Importable at DAG
parse time: nothing here loads an engine until a task runs, and importing this package loads
no Airflow until ``dataset_dags`` is asked for.

Modules: ``dags.py`` (the DAG factory), ``docs.py`` (each DAG's ``doc_md``), ``specs.py``
(where the specs are), ``stage.py`` (one stage for one task), ``sibling.py`` (waiting for a
sibling task), ``timeouts.py`` (the whole-dataset tasks' limits), ``pools.py`` and
``policy.py`` (the pools, and a missing one made harmless), ``xcom.py`` (the XCom keys),
``workers.py`` (worker identity), ``connections.py`` (S3 through an Airflow connection),
``events.py`` (the S3-event watcher), ``lineage.py`` (OpenLineage), ``notifier.py`` (alerts
as task callbacks), ``plugin.py`` and ``ui.py`` (the run page's report tab and what it
reads from S3), ``provider.py`` (recforge as an Airflow provider).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from recforge.orchestration.dags import dataset_dags

__all__ = ["dataset_dags"]


def __getattr__(name: str):
    if name == "dataset_dags":  # lazily: the CLI and the stages import this package too
        from recforge.orchestration.dags import dataset_dags

        return dataset_dags
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
