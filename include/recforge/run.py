"""One pipeline run: the spec, the run id and the S3 staging layout every stage shares.

This module owns every staging name: stages find each other's outputs only through these
methods, so any task can run on any worker, and re-running a stage overwrites exactly what
it wrote before (idempotent). Layout under ``<staging>/<dag_id>/<run_id>/``::

    ingest/source_manifest.jsonl  ingest/accepted.jsonl  <stage>/quarantine.jsonl
    flatten/items.jsonl  labels/classes.json  split/shards.json
    split/content.json  split/changes.json  (content id, changes since the latest version)
    shards/<shard>/plan.jsonl  shards/<shard>/part.*  (pack's output)
    masks/<shard>/*.png  masks/<shard>/{converted.jsonl, quarantine.jsonl, report.json}
    split/cache_keys.json  (the shard-cache entries this run's version is built from)
    merge/home.json  where the merged dataset lives: the claimed version folder, or out/
    out/   the merged dataset of a dry run (or of staging and publish on different stores)
    merge/checksums.json  benchmark/checksums.json  quality_gate/checksums.json
                          (the files each stage wrote into the merged dataset)
    publish/version.json  the version name this run chose (retries reuse it)

A ``Run`` only names: it reads and writes nothing (making one does no I/O). What the run
chose and recorded there (its version, where the dataset lives, what each stage wrote) is
read and written by ``recforge.run_state``.

The merged dataset is written where it will be published (``run_state.out``): merge claims
the version folder (``recforge.claims``) and composes the splits straight into it, so a
version costs one server-side pass over its bytes; the folder stays invisible until
publish writes its manifest. Publish checks exactly the files the ``checksums.json``
records name and deletes anything else there (a killed earlier attempt's leftovers), so it
is never published. The packed-shard cache is not per
run: ``<staging>/cache/<dataset>/`` (:func:`cache_uri`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from recforge import storage
from recforge.errors import SpecError
from recforge.format import names
from recforge.spec import DatasetSpec


def safe_run_id(run_id: str) -> str:
    """Airflow run ids contain ':' and '+'; keep S3 keys plain. A run id that would name no
    folder of its own (``..``, ``.``, nothing but punctuation) is refused: its staging would
    land in the dataset's shared staging root."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("_")
    if not re.search(r"[A-Za-z0-9]", safe) or ".." in safe:
        raise SpecError(f"run id {run_id!r} names no folder of its own (it needs a letter or "
                        "digit and no '..'); trigger the run with another run id")
    return safe


def new_run_id() -> str:
    return "cli_" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def new_version(now: datetime | None = None, run_id: str = "",
                content_id: str | None = None) -> str:
    """``v<UTC time>[-<first 12 hex of the content id>]-<6 hex of the run id>``: sorts by
    time, names what it holds, and two runs choosing in the same second still differ (should
    they not, the publish's conditional writes decide)."""
    stamp = (now or datetime.now(UTC)).strftime("v%Y%m%dT%H%M%SZ")
    content = f"-{content_id[:12]}" if content_id else ""
    return f"{stamp}{content}-{hashlib.sha256(run_id.encode()).hexdigest()[:6]}"


def write_options(spec: DatasetSpec) -> dict[str, storage.WriteOptions]:
    """The spec's write options by prefix: ``publish.s3`` for the publish target,
    ``staging_s3`` (default: the same) for the staging prefix, the cache included."""
    def options(s3) -> storage.WriteOptions:
        return storage.WriteOptions(
            sse=None if s3.sse == "none" else s3.sse, kms_key_id=s3.kms_key_id,
            storage_class=s3.storage_class, acl=None if s3.acl == "none" else s3.acl,
            expected_bucket_owner=s3.expected_bucket_owner)

    return {spec.publish.uri: options(spec.publish.s3),
            spec.staging: options(spec.staging_options)}


def use_spec_storage(spec: DatasetSpec) -> None:
    """Every request from now on carries what the spec's buckets ask for
    (:func:`write_options`; the table of an earlier spec is dropped)."""
    storage.use_write_options(write_options(spec))


def cache_uri(spec: DatasetSpec, *parts: str) -> str:
    """The dataset's content-addressed cache of packed chunks and shards (shared by runs)."""
    return storage.join(spec.staging, "cache", spec.name, *parts)


@dataclass(frozen=True)
class Run:
    spec: DatasetSpec
    run_id: str
    max_shards: int | None = None  # how many pack tasks the orchestrator can map (None: any)
    slots: int | None = None  # pack tasks that run at once (pack.shard_size: auto sizes for it)
    force_rebuild: bool = False  # build and publish even when nothing changed
    dry_run: bool = False  # stop before publish: the merged dataset stays in staging out/

    def __post_init__(self):
        safe_run_id(self.run_id)  # a run id naming no folder of its own fails before any I/O
        use_spec_storage(self.spec)  # in every process that works for the run

    @property
    def staging(self) -> str:
        return storage.join(self.spec.staging, self.spec.dag_id, safe_run_id(self.run_id))

    def uri(self, *parts: str) -> str:
        return storage.join(self.staging, *parts)

    # ---- stage outputs, in pipeline order
    @property
    def source_manifest(self) -> str:
        return self.uri("ingest", names.SOURCE_MANIFEST)

    @property
    def ingested(self) -> str:
        return self.uri("ingest", "accepted.jsonl")

    def stage_quarantine(self, stage: str) -> str:
        return self.uri(stage, names.QUARANTINE)

    @property
    def items(self) -> str:
        return self.uri("flatten", "items.jsonl")

    @property
    def annotation_files(self) -> str:
        """The files flatten read whole to make the items (COCO instances files, list files
        under the prefix), for merge's accounting."""
        return self.uri("flatten", "annotation_files.json")

    @property
    def not_used(self) -> str:
        """The listed objects flatten set aside as no part of the dataset (not bad data)."""
        return self.uri("flatten", names.NOT_USED)

    @property
    def classes(self) -> str:
        return self.uri("labels", names.CLASSES)

    @property
    def shard_list(self) -> str:
        return self.uri("split", "shards.json")

    @property
    def content(self) -> str:
        """The run's content id and whether it equals the latest version's (``split``)."""
        return self.uri("split", "content.json")

    @property
    def changes(self) -> str:
        """Objects and classes added/changed/removed since the latest version (``split``)."""
        return self.uri("split", "changes.json")

    def cache(self, *parts: str) -> str:
        return cache_uri(self.spec, *parts)

    def shard_plan(self, shard_id: str) -> str:
        return self.uri("shards", shard_id, "plan.jsonl")

    def shard_output(self, shard_id: str, name: str) -> str:
        return self.uri("shards", shard_id, name)

    def masks(self, shard_id: str, *parts: str) -> str:
        """The mask conversion's output for one shard: class-id PNGs and its reports."""
        return self.uri("masks", shard_id, *parts)

    def converted_masks(self, shard_id: str) -> str:
        return self.masks(shard_id, "converted.jsonl")

    def mask_quarantine(self, shard_id: str) -> str:
        return self.masks(shard_id, names.QUARANTINE)

    def mask_report(self, shard_id: str) -> str:
        return self.masks(shard_id, "report.json")

    @property
    def cache_keys(self) -> str:
        """split's record of the shard-cache entries (merge puts it into the dataset)."""
        return self.uri("split", names.CACHE_KEYS)

    @property
    def composes_in_version(self) -> bool:
        """Whether merge writes the dataset straight into its version folder: not for a dry
        run (nothing may appear where versions live), nor when staging and the publish
        target are on different stores (no server-side pass between them)."""
        return not self.dry_run and \
            storage.is_s3(self.spec.staging) == storage.is_s3(self.spec.publish.uri)

    @property
    def home(self) -> str:
        """Where merge records the dataset's home: the version folder it claimed, or None
        for staging ``out/`` (read and written by ``recforge.run_state``)."""
        return self.uri("merge", "home.json")

    @property
    def version_choice(self) -> str:
        """The version name this run publishes under, once chosen (``recforge.run_state``)."""
        return self.uri("publish", "version.json")

    def checksums(self, stage: str) -> str:
        """The ``checksums.json`` of what ``stage`` wrote into the merged dataset
        (``<stage>/checksums.json`` in staging: never in the version folder itself)."""
        return self.uri(stage, names.CHECKSUMS)
