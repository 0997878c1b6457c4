"""Data lineage for OpenLineage: what a run read and what it published, as run events name it.

``ingest`` reports the source prefix it listed as an input; ``publish`` reports the version it
published (``<publish>/<name>/<version>``) and the dataset's Asset root as outputs. Both are
known only when the task runs (a trigger can override the source, and the version is chosen
at publish time), so they go to Airflow's hook lineage collector, the runtime channel the
OpenLineage provider reads when it builds the task's run event; static inlets and outlets
could not name them.

With the provider installed and configured (``recforge[lineage]``, an ``[openlineage]``
transport), its plugin registers a lineage reader and the events name those datasets. Without
it the collector is Airflow's no-op one, or absent, and nothing happens. Reporting lineage never
fails a task: the data is already written when it runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageLineage:
    """Where a collected dataset was seen: the dataset and the task that read or wrote it."""

    dataset: str
    task_id: str


def asset_uri(uri: str) -> str:
    """An Asset URI for a storage URI: ``s3://…`` as it is, an absolute path as ``file://``."""
    uri = uri.rstrip("/")
    return uri if "://" in uri else Path(uri).as_uri()


def lineage_of(task_id: str, run, result) -> tuple[list[str], list[str]]:
    """``(inputs, outputs)`` URIs that stage ``task_id`` read and wrote, for the run events."""
    if task_id == "ingest":
        return [asset_uri(run.spec.source.uri)], []
    if task_id == "publish" and isinstance(result, dict) and result.get("uri"):
        root = f"{run.spec.publish.uri.rstrip('/')}/{run.spec.name}"
        return [], [asset_uri(result["uri"]), asset_uri(root)]
    return [], []


def _collector():
    try:
        from airflow.providers.common.compat.lineage.hook import get_hook_lineage_collector
    except ImportError:  # no provider that reads lineage: nothing to report to
        return None
    return get_hook_lineage_collector()


def report(task_id: str, run, result) -> None:
    """Add what stage ``task_id`` read and wrote to the task's hook lineage."""
    inputs, outputs = lineage_of(task_id, run, result)
    if not inputs and not outputs:
        return
    try:
        collector = _collector()
        if collector is None:
            return
        context = StageLineage(run.spec.name, task_id)
        for uri in inputs:
            collector.add_input_asset(context=context, uri=uri)
        for uri in outputs:
            collector.add_output_asset(context=context, uri=uri)
    except Exception as err:  # lineage is a report about the data, never a reason to fail it
        log.warning("lineage of %s not reported: %s: %s", task_id, type(err).__name__, err)
