"""The DAG factory: one Airflow DAG ``recforge__<name>`` per dataset spec of a folder.

A deployment's DAG file is two lines::

    from recforge.orchestration import dataset_dags
    globals().update(dataset_dags("/opt/airflow/specs"))

The folder is the argument, else ``[recforge] specs_dir``, else ``RECFORGE_SPECS_DIR``, else
``include/datasets`` next to the package (``recforge.orchestration.specs``). Parse time reads
the spec YAMLs and nothing else: no engine import, no S3. Every task body is one call into
``run_stage`` by task id; the tasks are wired here and nothing else happens here. An invalid
spec file becomes a DAG of its own that says what is wrong, so it cannot take the other
datasets' DAGs down with it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pendulum
from airflow.sdk import (
    DAG,
    Asset,
    AssetAny,
    AssetOrTimeSchedule,
    AssetWatcher,
    CronTriggerTimetable,
    Param,
    dag,
    get_current_context,
    task,
)

from recforge.errors import SpecError
from recforge.kinds import kind as task_kind
from recforge.orchestration import pools, timeouts
from recforge.orchestration.docs import dag_doc, pipeline_doc
from recforge.orchestration.notifier import QualityNotifier
from recforge.orchestration.specs import specs_dir as resolve_specs_dir
from recforge.spec import DatasetSpec, load_specs
from recforge.spec.schedule import EventSchedule

log = logging.getLogger(__name__)

# s3://bucket[/prefix] or an absolute path; the spec re-validates the whole value on the worker
URI_PATTERN = r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?|/.+)$"


def trigger_params(spec: DatasetSpec) -> dict[str, Param]:
    """The trigger form. Every field but ``dry_run`` is optional (``null`` = the spec's value),
    so an untouched form is valid; the limits are the spec's own."""
    def optional(kind: str, title: str, section: str, description: str, **schema) -> Param:
        return Param(None, type=["null", kind], title=title, section=section,
                     description=description, **schema)

    return {
        "source_uri": optional(
            "string", "Source prefix", "Data", pattern=URI_PATTERN,
            description=f"Where the raw images are read: s3://bucket/prefix (or an absolute "
            f"path on the workers). Empty: {spec.source.uri}"),
        "publish_uri": optional(
            "string", "Publish target", "Data", pattern=URI_PATTERN,
            description=f"Where versions go (<target>/{spec.name}/<version>/, latest.json "
            f"last): s3://bucket/prefix, not inside the source. Empty: {spec.publish.uri}"),
        "resize": optional(
            "integer", "Resize short side (px)", "Packing", minimum=0, maximum=16384,
            description=f"Short side of every packed image in pixels, 0 to 16384; 0 keeps "
            f"the original size. Empty: {spec.pack.resize}"),
        "quality": optional(
            "integer", "JPEG quality", "Packing", minimum=1, maximum=100,
            description=f"JPEG quality of the packed images, 1 to 100 (higher: larger, "
            f"sharper). Empty: {spec.pack.quality}"),
        "shard_size": optional(
            "integer", "Images per pack task", "Packing", minimum=1, maximum=1_000_000,
            description=f"About this many images per pack task on average, 1 to 1,000,000 "
            f"(shard boundaries follow the content; raised if needed to stay within Airflow's "
            f"max_map_length). Empty: {spec.pack.shard_size}"),
        "dry_run": Param(
            False, type="boolean", title="Dry run", section="Run",
            description="On: build, validate, benchmark and check the dataset, but publish "
            "nothing (no version, no latest.json, no Asset event); the result stays in the "
            "run's staging prefix. Off (default): publish when every check passes."),
        "force_rebuild": Param(
            False, type="boolean", title="Force rebuild", section="Run",
            description="On: build and publish a new version even when nothing changed since "
            "the latest one. Off (default): a night with the same sources and options ends "
            "green with 'no changes' and publishes nothing."),
    }


def pack_timeout(shard_size: int | str) -> timedelta:
    """~3 s an image, at least 10 min; ``auto`` tasks hold ~15 min of work at the assumed
    rate (``stages.split.AUTO_TASK_MAX_IMAGES``; a single shard can hold more), so 3 h."""
    if shard_size == "auto":
        return timedelta(hours=3)
    return timedelta(seconds=max(600, 3 * shard_size))


def shards_label(shard_ids: list[str]) -> str:
    """How a pack task is shown in the UI: its shard ids, or the first and how many more."""
    if len(shard_ids) <= 2:
        return ", ".join(shard_ids)
    return f"{shard_ids[0]} +{len(shard_ids) - 1} shards"


def source_events_asset(spec: DatasetSpec) -> Asset:
    """The Asset an ``s3_events`` schedule watches: named after the dataset, its URI the
    queue (one queue per dataset), its watcher the triggerer's reader of that queue."""
    from recforge.orchestration.events import S3EventsTrigger

    events = spec.schedule.s3_events
    trigger = S3EventsTrigger(events.queue, events.conn_id or spec.aws_conn_id)
    return Asset(name=f"recforge/{spec.name}/s3_events", uri=events.queue,
                 watchers=[AssetWatcher(name=f"{spec.dag_id}__s3_events", trigger=trigger)])


def dataset_asset(spec: DatasetSpec) -> Asset:
    """The Asset the dataset's publish task updates: ``recforge/<name>``, its URI the
    dataset's root (a training DAG scheduled on it reads the release from the event)."""
    return Asset(name=f"recforge/{spec.name}", uri=f"{spec.publish.uri.rstrip('/')}/{spec.name}")


def dag_schedule(spec: DatasetSpec, known: Mapping[str, Asset] | None = None):
    """What the DAG is scheduled on: a cron string or ``None`` as the spec has it; for events,
    the Assets (any one's update starts a run: ``AssetAny``), beside a cron clock where the
    spec sets one (``AssetOrTimeSchedule``).

    An Asset in ``known`` (the other datasets of the folder, by name and by URI) is named in
    full: Airflow links the events that started a run to it (``triggering_asset_events``,
    the run's Asset events in the UI) only for Assets the DAG names so. Any other is a
    reference, by URI where it holds ``://``, else by name: it starts runs all the same."""
    schedule = spec.schedule
    if not isinstance(schedule, EventSchedule):
        return schedule
    known = known or {}
    assets = [known.get(a) or (Asset.ref(uri=a) if "://" in a else Asset.ref(name=a))
              for a in schedule.asset or ()]
    if schedule.s3_events is not None:
        assets.append(source_events_asset(spec))
    condition = assets[0] if len(assets) == 1 else AssetAny(*assets)
    if schedule.cron is None:
        return condition
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(schedule.cron, timezone="UTC"),
                               assets=condition)


BENCHMARK_PRIORITY = 10  # above validate's and the checklist's downstream weights
S3_RETRIES = {"retries": 3, "retry_delay": timedelta(seconds=20),
              "retry_exponential_backoff": True, "max_retry_delay": timedelta(minutes=10)}


def build_dag(spec: DatasetSpec, specs_dir: str | Path | None = None,
              known: Mapping[str, Asset] | None = None) -> DAG:
    """The DAG of one dataset; its tasks read the spec from ``specs_dir`` where they run.
    ``known``: the Assets of the folder's datasets (``dag_schedule``)."""
    folder = str(resolve_specs_dir(specs_dir))
    outlet = dataset_asset(spec)
    notify = QualityNotifier(spec.alerts, dataset=spec.name)

    @dag(
        dag_id=spec.dag_id,
        description=spec.description or f"Build the {spec.name} RecordIO dataset",
        schedule=dag_schedule(spec, known),
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        default_args={"owner": spec.owner, "on_failure_callback": notify, **S3_RETRIES},
        tags=["recforge", spec.task, *spec.tags],
        doc_md=dag_doc(spec, pipeline_doc(folder)),
        params=trigger_params(spec),
    )
    def dataset_dag():
        stage = _stage_call(spec.name, folder)
        t = SimpleNamespace(**_build_tasks(spec, stage), **_release_tasks(spec, stage, notify,
                                                                        outlet))
        tasks = t.split(t.remap_labels(t.flatten(t.ingest())))
        if task_kind(spec.task).masks:
            tasks = t.convert_masks.expand(shard_ids=tasks)
        packed = t.pack.expand(shard_ids=tasks)
        merged = t.merge(packed)
        # the benchmark reads a bounded window of the merged split; validate, then the
        # checklist, read the whole dataset's bookkeeping beside it, the checklist asking
        # for the loader's results last: the critical path is the longer of the two
        measured = t.benchmark(merged)
        measured >> t.publish(t.quality_gate(t.validate(merged)))

    return dataset_dag()


def _stage_call(name: str, folder: str):
    """What every task body calls: ``stage(context, task_id, *args)`` runs that stage of
    the dataset ``name`` (``run_stage``), its spec read from ``folder`` on the worker."""
    def stage(context, task_id: str, *args):
        from recforge.orchestration.stage import run_stage

        return run_stage(name, context["params"], context["run_id"], task_id, *args,
                         ti=context["ti"], specs_dir=folder)

    return stage


def _build_tasks(spec: DatasetSpec, stage) -> dict:
    """The tasks that build the dataset, by task id: ingest to merge, and validate."""
    # mapped tasks show their shards in the UI instead of 0..N-1
    per_task = {"pool": pools.PACK.name, "max_active_tis_per_dagrun": pools.PACK.slots,
                "map_index_template": "{{ shards }}",
                "execution_timeout": pack_timeout(spec.pack.shard_size)}

    @task(execution_timeout=timedelta(minutes=30))
    def ingest(**context) -> dict:
        """Lists the source prefix; the source is this task's lineage input."""
        return stage(context, "ingest")

    @task(execution_timeout=timedelta(minutes=30))
    def flatten(_: dict, **context) -> dict:
        """Class folders → items; segmentation: image/mask pairs."""
        return stage(context, "flatten")

    @task(execution_timeout=timedelta(minutes=10))
    def remap_labels(_: dict, **context) -> dict:
        """Stable class ids; segmentation: classes from the label definition."""
        return stage(context, "remap_labels")

    @task(execution_timeout=timedelta(minutes=30))
    def split(_: dict, **context) -> list[list[str]]:
        """Returns each pack task's shard ids (the per-split counts are in the log); none
        when nothing changed since the latest version, which skips everything after it."""
        return stage(context, "split")["pack_tasks"]

    @task(**per_task)
    def convert_masks(shard_ids: list[str], **context) -> list[str]:
        """RGB/palette/id masks → single-channel class ids, in staging masks/<shard>/."""
        get_current_context()["shards"] = shards_label(shard_ids)  # map_index_template
        for shard_id in shard_ids:
            stage(context, "convert_masks", shard_id)
        return shard_ids

    @task(**per_task)
    def pack(shard_ids: list[str], **context) -> list[dict]:
        """Packs its shards one after the other (memory is one shard's)."""
        get_current_context()["shards"] = shards_label(shard_ids)  # map_index_template
        return [stage(context, "pack", shard_id) for shard_id in shard_ids]

    @task(execution_timeout=timeouts.execution_timeout("merge"))
    def merge(_: list, **context) -> dict:
        return stage(context, "merge")

    @task(execution_timeout=timeouts.execution_timeout("validate"))
    def validate(_: dict, **context) -> dict:
        return stage(context, "validate")

    return {"ingest": ingest, "flatten": flatten, "remap_labels": remap_labels,
            "split": split, "convert_masks": convert_masks, "pack": pack, "merge": merge,
            "validate": validate}


def _release_tasks(spec: DatasetSpec, stage, notify: QualityNotifier, outlet: Asset) -> dict:
    """The tasks that check and release the built dataset, by task id: benchmark,
    quality_gate and publish (whose ``outlet`` is the dataset's Asset)."""
    # first when one slot is free: the checklist, started beside it, waits for it
    @task(queue="gpu", pool=pools.GPU_BENCH.name, priority_weight=BENCHMARK_PRIORITY,
          execution_timeout=timeouts.execution_timeout("benchmark"))
    def benchmark(_: dict, **context) -> dict:
        """Loader throughput on the GPU worker queue, beside validate and the checklist;
        gates publish on the spec's floors."""
        return stage(context, "benchmark")

    # passing runs notify too when the spec asks for success or warning notices
    # (on_warning is on by default); the notifier decides per outcome what to send
    @task(on_success_callback=notify if spec.alerts.on_success or spec.alerts.on_warning
          else None,
          execution_timeout=timeouts.execution_timeout("quality_gate")
          + timeouts.execution_timeout("benchmark"))
    def quality_gate(_: dict, **context) -> dict:
        """The Great Expectations checklist, beside the benchmark: its loader items wait
        for the benchmark's results. Data Docs are published with the dataset."""
        from recforge.orchestration import sibling

        return stage(context, "quality_gate", None,
                     sibling.waiting_for(context, spec.dag_id, "benchmark"))

    @task(outlets=[outlet], execution_timeout=timedelta(hours=2))
    def publish(_: dict, **context) -> dict:
        """The versioned release; the version is this task's lineage output."""
        if context["params"].get("dry_run"):  # skipped: no Asset event for unpublished data
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(
                "dry run: not published; the dataset stays in the run's staging out/")
        published = stage(context, "publish")
        # the Asset event says what was released (a training DAG reads it from here)
        context["outlet_events"][outlet].extra = {
            k: published[k] for k in ("version", "uri", "report", "run_id", "records")
            if k in published}
        return published

    return {"benchmark": benchmark, "quality_gate": quality_gate, "publish": publish}


def invalid_spec_dag(file_name: str, error: Exception, specs_dir: str | Path | None = None
                     ) -> DAG:
    """A bad spec file becomes a DAG of its own that says what is wrong (and fails if run),
    instead of an import error that would take every other dataset's DAG down with it."""
    path = Path(resolve_specs_dir(specs_dir)) / file_name
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", file_name.removesuffix(".yaml"))

    @dag(dag_id=f"recforge__invalid__{stem}", schedule=None, catchup=False,
         start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), tags=["recforge", "invalid"],
         description=f"{path} is invalid: fix it to get its DAG",
         doc_md=f"## {path} is invalid\n\n```\n{error}\n```\n")
    def invalid():
        @task(retries=0)
        def spec_error():
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(str(error))

        spec_error()

    return invalid()


def dataset_dags(specs_dir: str | Path | None = None) -> dict[str, DAG]:
    """Every DAG of the specs folder by dag_id: ``recforge__<name>`` per valid spec, and
    ``recforge__invalid__<file>`` per invalid file. The folder is ``specs_dir``, else
    ``[recforge] specs_dir``, else ``RECFORGE_SPECS_DIR``, else ``include/datasets`` next to
    the package. A folder that does not exist raises ``SpecError`` (an import error naming it)
    instead of an empty DAG list."""
    folder = resolve_specs_dir(specs_dir)
    if not folder.is_dir():
        raise SpecError(
            f"the dataset specs folder {folder} does not exist: pass the folder to "
            f"dataset_dags(), or set [recforge] specs_dir (AIRFLOW__RECFORGE__SPECS_DIR) or "
            f"RECFORGE_SPECS_DIR")
    specs, invalid = load_specs(folder)
    known = {key: asset for asset in map(dataset_asset, specs) for key in (asset.name, asset.uri)}
    dags = {s.dag_id: build_dag(s, folder, known) for s in specs}
    for file_name, error in invalid.items():
        log.error("dataset spec %s: %s", folder / file_name, error)
        bad = invalid_spec_dag(file_name, error, folder)
        dags[bad.dag_id] = bad
    return dags
