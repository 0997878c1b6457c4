"""One pipeline run: the spec, the run id and the S3 staging layout every stage shares.

Stages find each other's outputs only through these names, so any task can run on any
worker, and re-running a stage overwrites exactly what it wrote before (idempotent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from recforge import storage
from recforge.spec import DatasetSpec

SPLITS = ("train", "val", "test")


def safe_run_id(run_id: str) -> str:
    """Airflow run ids contain ':' and '+'; keep S3 keys plain."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("_") or "run"


def new_run_id() -> str:
    return "cli_" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


@dataclass(frozen=True)
class Run:
    spec: DatasetSpec
    run_id: str

    @property
    def staging(self) -> str:
        return storage.join(self.spec.staging, self.spec.dag_id, safe_run_id(self.run_id))

    def uri(self, *parts: str) -> str:
        return storage.join(self.staging, *parts)

    # Well-known staging objects, one per stage output.
    @property
    def source_manifest(self) -> str:
        return self.uri("ingest", "source_manifest.jsonl")

    @property
    def ingested(self) -> str:
        return self.uri("ingest", "accepted.jsonl")

    @property
    def items(self) -> str:
        return self.uri("flatten", "items.jsonl")

    @property
    def classes(self) -> str:
        return self.uri("labels", "classes.json")

    def stage_quarantine(self, stage: str) -> str:
        return self.uri(stage, "quarantine.jsonl")

    def shard_plan(self, shard_id: str) -> str:
        return self.uri("shards", shard_id, "plan.jsonl")

    def shard_output(self, shard_id: str, name: str) -> str:
        return self.uri("shards", shard_id, name)

    @property
    def shard_list(self) -> str:
        return self.uri("split", "shards.json")

    def output(self, name: str) -> str:
        """The merged dataset, exactly as it will be published."""
        return self.uri("out", name)
