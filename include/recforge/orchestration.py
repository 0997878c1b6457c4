"""Glue between Airflow task contexts and recforge stages, importable without Airflow.

The DAG passes the dataset name, the run's params and its run id; this module turns them
into a ``Run`` (spec re-read on the worker, params applied as overrides and re-validated),
so every task, on any worker, sees the same spec the run was triggered with.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache

from recforge.run import Run
from recforge.spec import DatasetSpec, SpecError, load_all_specs

# Param name → dotted spec field it overrides (None/empty means "keep the spec's value").
PARAM_FIELDS = {
    "source_uri": "source.uri",
    "publish_uri": "publish.uri",
    "resize": "pack.resize",
    "quality": "pack.quality",
    "shard_size": "pack.shard_size",
}


@lru_cache(maxsize=1)
def _specs() -> dict[str, DatasetSpec]:
    return {s.name: s for s in load_all_specs()}


def spec_by_name(name: str) -> DatasetSpec:
    try:
        return _specs()[name]
    except KeyError:
        raise SpecError(f"no dataset spec named {name!r} under include/datasets/") from None


def overrides_from_params(params: dict | None) -> dict:
    params = params or {}
    return {field: params[p] for p, field in PARAM_FIELDS.items()
            if params.get(p) not in (None, "")}


def run_for(name: str, params: dict | None, run_id: str) -> Run:
    spec = spec_by_name(name)
    overrides = overrides_from_params(params)
    if overrides:
        spec = spec.with_overrides(overrides)
    return Run(spec, run_id)


@contextmanager
def fail_fast():
    """Deterministic failures (bad spec, label-map change, invalid dataset, unreconciled
    counts, version clash, loader below its floors) fail the task at once: retrying cannot
    fix them, and back-off only delays the alert. Transient errors (S3, network) retry."""
    from recforge.labels import LabelMapError
    from recforge.loaderbench import BenchFloorsFailed, LoaderBenchError
    from recforge.merge import ReconciliationError
    from recforge.publish import VersionExistsError
    from recforge.quality import QualityGateFailed
    from recforge.validate import ValidationFailed

    try:
        yield
    except (SpecError, LabelMapError, ValidationFailed, ReconciliationError,
            VersionExistsError, BenchFloorsFailed, LoaderBenchError, QualityGateFailed) as exc:
        from airflow.exceptions import AirflowFailException

        failure = AirflowFailException(f"{type(exc).__name__}: {exc}")
        if hasattr(exc, "result"):  # the notifier reads the gate's result from the exception
            failure.result = exc.result
        raise failure from exc


ERROR_XCOM_KEY = "recforge_error"


def run_stage(name: str, params: dict | None, run_id: str, fn_path: str, *args, ti=None):
    """Run ``recforge.<module>.<function>(run, *args)`` for one Airflow task.

    With the task instance ``ti``, a failure's message is also pushed as XCom
    ``recforge_error`` before the task fails, so the failure alert can quote it (with its
    numbers) even where the callback context carries no exception (``dags test``)."""
    import importlib

    module, fn = fn_path.rsplit(".", 1)
    try:
        with fail_fast():
            run = run_for(name, params, run_id)
            return getattr(importlib.import_module(module), fn)(run, *args)
    except Exception as exc:
        if ti is not None:
            cause = exc.__cause__ or exc
            try:
                ti.xcom_push(key=ERROR_XCOM_KEY,
                             value=f"{type(cause).__name__}: {cause}"[:4000])
            except Exception:  # the original failure matters more than its XCom copy
                pass
        raise


def worker_hostname() -> str:
    """Airflow ``[core] hostname_callable``: ``RECFORGE_WORKER_NAME`` if set, else the FQDN.

    Several Celery workers on one host (compose, the test tier) then report distinct
    hostnames on their task instances, so a run shows which worker ran what.
    """
    import os
    import socket

    return os.environ.get("RECFORGE_WORKER_NAME") or socket.getfqdn()
