"""Run one pipeline stage for one Airflow task: params → ``Run`` → stage → XCom / failure.

The DAG passes the dataset name, the run's params and its run id; the spec is re-read on
the worker and the params applied as overrides and re-validated, so every task, on any
worker, sees the same spec the run was triggered with. The spec comes from the folder the
DAG was built from (``recforge.orchestration.specs``), which is also the folder relative colour
maps are read from while the stage runs. S3 goes through the spec's Airflow connection when it
exists (``recforge.orchestration.connections``); what the stage read and published is reported
to the task's lineage (``recforge.orchestration.lineage``).
"""

from __future__ import annotations

import logging
import os
from functools import lru_cache
from pathlib import Path

from recforge import run_state, settings, stages, storage
from recforge.errors import RecforgeFailure, SpecError
from recforge.orchestration import connections, lineage, pools, specs, xcom
from recforge.run import Run
from recforge.spec import DatasetSpec, load_specs, using_specs_dir

log = logging.getLogger(__name__)

# Param name → dotted spec field it overrides (None/empty means "keep the spec's value").
PARAM_FIELDS = {
    "source_uri": "source.uri",
    "publish_uri": "publish.uri",
    "resize": "pack.resize",
    "quality": "pack.quality",
    "shard_size": "pack.shard_size",
}


@lru_cache(maxsize=4)
def _specs(directory: Path) -> dict[str, DatasetSpec]:
    # an invalid file is its own DAG's problem
    return {s.name: s for s in load_specs(directory)[0]}


def spec_by_name(name: str, directory: str | Path | None = None) -> DatasetSpec:
    """The spec named ``name`` in ``directory`` (default: ``specs.specs_dir()``'s order)."""
    folder = specs.specs_dir(directory)
    try:
        return _specs(folder)[name]
    except KeyError:
        raise SpecError(f"no dataset spec named {name!r} under {folder}") from None


# run switches beside the spec overrides: what a run does, not what it builds
RUN_PARAMS = ("dry_run", "force_rebuild")
# a trigger's URI override → the spec's prefixes it must lie inside (besides the spec's own)
URI_BOUNDS = {"source_uri": ("source.uri", "source"), "publish_uri": ("publish.uri", "publish")}


def overrides_from_params(params: dict | None) -> dict:
    params = params or {}
    return {field: params[p] for p, field in PARAM_FIELDS.items()
            if params.get(p) not in (None, "")}


def checked_overrides(spec: DatasetSpec, params: dict | None) -> dict:
    """The spec overrides of a triggered run's params, refused unless every param is known
    and every URI stays inside what the dataset may touch: its own URI, or a prefix its
    spec lists in ``source.allowed`` / ``publish.allowed``. A local path is the worker's own
    disk: allowed only when such a list names it. The CLI builds without these bounds
    (whoever runs it has the worker's access already)."""
    from recforge.spec.dataset import check_uri, is_local, within

    unknown = sorted(set(params or {}) - set(PARAM_FIELDS) - set(RUN_PARAMS))
    if unknown:
        raise SpecError(f"unknown run parameter(s) {unknown}; known: "
                        f"{sorted([*PARAM_FIELDS, *RUN_PARAMS])}")
    overrides = overrides_from_params(params)
    for param, (dotted, section) in URI_BOUNDS.items():
        if dotted not in overrides:
            continue
        uri = str(overrides[dotted])
        try:
            check_uri(uri, param)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        own = getattr(spec, section).uri
        allowed = getattr(spec, section).allowed
        if uri.rstrip("/") == own.rstrip("/") or within(uri, allowed):
            continue
        where = f"inside {list(allowed)}" if allowed else f"{own} (the spec's own)"
        kind = "the local path" if is_local(uri) else ""
        raise SpecError(
            f"{param} {kind + ' ' if kind else ''}{uri!r} is outside what dataset "
            f"{spec.name} may touch: it must be {where}. To allow other prefixes, list them "
            f"in the spec's {section}.allowed (docs/operations.md#who-may-trigger-what)")
    return overrides


def max_map_length() -> int:
    """Airflow's ``[core] max_map_length``: the most tasks one mapped task can expand to."""
    return settings.airflow_conf().getint("core", "max_map_length", fallback=1024)


def pack_slots() -> int:
    """Pack tasks that run at once: the pack pool (as sized by ``RECFORGE_PACK_POOL_SLOTS``),
    the per-run cap and ``[core] parallelism``, whichever is smallest."""
    pool = int(os.environ.get(pools.PACK.slots_env) or pools.PACK.slots)
    parallelism = settings.airflow_conf().getint("core", "parallelism", fallback=32)
    return max(1, min(pool, pools.PACK.slots, parallelism))


def run_for(name: str, params: dict | None, run_id: str,
            directory: str | Path | None = None) -> Run:
    spec = spec_by_name(name, directory)
    overrides = checked_overrides(spec, params)
    if overrides:
        spec = spec.with_overrides(overrides)
    return Run(spec, run_id, max_shards=max_map_length(), slots=pack_slots(),
               force_rebuild=bool((params or {}).get("force_rebuild")),
               dry_run=bool((params or {}).get("dry_run")))


# libraries whose INFO lines drown a task log (botocore's endpoint line per client, GX's
# "Skipping registering function" per expectation): WARNING and above only
NOISY_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "great_expectations")


def quiet_libraries() -> None:
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def _push(ti, key: str, value) -> None:
    try:
        ti.xcom_push(key=key, value=value)
    except Exception:  # the original failure matters more than its XCom copy
        pass


def run_stage(name: str, params: dict | None, run_id: str, task_id: str, *args, ti=None,
              specs_dir: str | Path | None = None):
    """Run stage ``task_id`` (``recforge.stages``) for dataset ``name``; returns its result.

    The spec is read from ``specs_dir`` (the DAG's folder; default: ``specs.specs_dir()``'s
    order), and the stage runs with it as the specs folder. Its inputs and outputs go to the
    task's lineage (``lineage.report``) once it succeeded.

    A :class:`RecforgeFailure` (deterministic: bad spec or input, invalid output, a failed
    check, a version clash) fails the task at once with ``AirflowFailException``: retrying
    cannot fix it, and back-off only delays the alert. Anything else (S3, network) is raised
    as it is, so the task retries. With the task instance ``ti``, a failure's message is
    pushed as XCom ``recforge_error`` (and a failed gate's result as ``quality``) before
    the task fails, so the alert can quote them even where the callback context carries
    no exception (``dags test``).
    """
    quiet_libraries()
    try:
        folder = specs.specs_dir(specs_dir)
        with using_specs_dir(folder):
            run = run_for(name, params, run_id, folder)
            connections.use_connection(run.spec.aws_conn_id)
            done = run_state.published_version(run) if task_id != "publish" else None
            result = already_published(run, task_id, done) if done else \
                stages.entry(task_id)(run, *args)
        lineage.report(task_id, run, result)
        return result
    except RecforgeFailure as exc:
        from airflow.sdk.exceptions import AirflowFailException

        if ti is not None:
            _push(ti, xcom.ERROR_KEY, f"{type(exc).__name__}: {exc}"[:4000])
            if exc.result is not None:
                _push(ti, xcom.QUALITY_RESULT_KEY, exc.result)
        failure = AirflowFailException(f"{type(exc).__name__}: {exc}")
        failure.result = exc.result  # the notifier reads the gate's result from the exception
        raise failure from exc
    except Exception as exc:
        if ti is not None and not _airflow_control(exc):
            _push(ti, xcom.ERROR_KEY, f"{type(exc).__name__}: {exc}"[:4000])
        raise


def already_published(run: Run, task_id: str, version: str) -> dict:
    """What a task of a run that already published ``version`` returns instead of running
    (a cleared or re-run DAG run): nothing is written, so the published folder never
    changes; split hands on the same pack tasks so the run reaches publish, which finishes
    ``latest.json``."""
    log.info("%s: run %s already published %s; nothing to do before publish", task_id,
             run.run_id, version)
    result = {"already_published": version}
    if task_id == "split":
        result["pack_tasks"] = storage.read_json(run.shard_list).get("pack_tasks", [])
    return result


def _airflow_control(exc: Exception) -> bool:
    """Whether ``exc`` tells Airflow what to do with the task (skip it, reschedule it)
    rather than reporting an error (``recforge.orchestration.sibling`` raises these)."""
    from airflow.sdk.exceptions import AirflowRescheduleException, AirflowSkipException

    return isinstance(exc, AirflowSkipException | AirflowRescheduleException)
