"""Stage 8, publish: a versioned, atomic release of the merged dataset.

Layout: ``<publish.uri>/<name>/<version>/`` holds the splits, ``classes.json``, the record
manifest, the quarantine report and ``summary.json``; ``manifest.json`` is written last and
is what makes a version exist. Then ``<publish.uri>/<name>/latest.json`` is switched to it.
A version that exists is never overwritten; a retried publish of the same run reuses the
version it chose first (kept in staging), so retries never create duplicates.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from recforge import storage
from recforge.run import Run
from recforge.spec import DatasetSpec

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"


class VersionExistsError(RuntimeError):
    """The target version was published by another run; versions are immutable."""


def dataset_root(spec: DatasetSpec) -> str:
    return storage.join(spec.publish.uri, spec.name)


def version_uri(spec: DatasetSpec, version: str, *parts: str) -> str:
    return storage.join(dataset_root(spec), version, *parts)


def latest_uri(spec: DatasetSpec) -> str:
    return storage.join(dataset_root(spec), "latest.json")


def read_latest(spec: DatasetSpec) -> dict | None:
    uri = latest_uri(spec)
    return storage.read_json(uri) if storage.exists(uri) else None


def new_version(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("v%Y%m%dT%H%M%SZ")


def choose_version(run: Run, version: str | None = None) -> str:
    """The run's version name, chosen once and kept in staging so retries reuse it
    (an explicit ``version`` replaces the choice)."""
    chosen = run.uri("publish", "version.json")
    if version is None and storage.exists(chosen):
        return storage.read_json(chosen)["version"]
    version = version or new_version()
    storage.write_json(chosen, {"version": version})
    return version


def publish(run: Run, version: str | None = None, metadata: dict | None = None) -> dict:
    spec = run.spec
    version = choose_version(run, version)
    target = version_uri(spec, version)
    manifest_uri = storage.join(target, MANIFEST)
    if storage.exists(manifest_uri):
        existing = storage.read_json(manifest_uri)
        if existing.get("run_id") != run.run_id:
            raise VersionExistsError(
                f"{target} was already published by run {existing.get('run_id')!r}; "
                "published versions are never overwritten — choose another version"
            )
        log.info("publish: %s already published by this run; nothing to do", target)
    else:
        files = []
        for obj in storage.list_objects(run.uri("out")):
            storage.copy(run.output(obj.key), storage.join(target, obj.key))
            files.append({"name": obj.key, "size": obj.size, "etag": obj.etag})
            log.info("publish: copied %s (%d bytes)", obj.key, obj.size)
        summary = storage.read_json(run.output("summary.json"))
        metadata = dict(metadata or {})
        if any(f["name"] == "bench.json" for f in files):
            bench = storage.read_json(run.output("bench.json"))
            metadata.setdefault("loader", {"summary": bench.get("summary"),
                                           "recommendation": bench.get("recommendation"),
                                           "device": bench.get("device", {}).get("statement")})
        storage.write_json(manifest_uri, {
            "dataset": spec.name, "version": version, "run_id": run.run_id,
            "published_at": datetime.now(UTC).isoformat(), "task": spec.task,
            "files": files, "summary": summary, "spec": spec.model_dump(mode="json"),
            **metadata,
        })
    storage.write_json(latest_uri(spec), {
        "version": version, "uri": target, "run_id": run.run_id,
        "updated_at": datetime.now(UTC).isoformat(),
    })
    log.info("publish: %s → %s (latest.json updated)", spec.name, target)
    return {"version": version, "uri": target}
