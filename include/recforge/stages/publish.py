"""The ``publish`` task: a versioned, atomic release of the merged dataset.

Layout: ``<publish.uri>/<name>/<version>/`` holds the splits, ``classes.json``, the record
manifest, the quarantine report and ``summary.json``; ``manifest.json`` is written last and
is what makes a version exist. Then ``<publish.uri>/<name>/latest.json`` is switched to it.
A version that exists is never overwritten; a retried publish of the same run reuses the
version it chose first (``Run.version``, kept in staging), so retries never create
duplicates. Reading releases is ``recforge.releases``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from recforge import releases, storage
from recforge.errors import VersionExistsError
from recforge.format import names
from recforge.run import Run

log = logging.getLogger(__name__)


def content_fields(run: Run) -> dict:
    """``content_id`` (what the next run compares with to skip a no-change night)."""
    if not storage.exists(run.content):
        return {}
    content = storage.read_json(run.content)
    return {"content_id": content["content_id"], "options_hash": content["options_hash"]}


def publish(run: Run, version: str | None = None, metadata: dict | None = None) -> dict:
    """Copy the run's ``out/`` to a new version (server-side), write its manifest, then move
    ``latest.json``. ``version`` pins the version name (default: the run's choice)."""
    spec = run.spec
    version = run.pin_version(version) if version else run.version()
    target = releases.version_uri(spec, version)
    previous = releases.read_latest(spec)
    summary = storage.read_json(run.output(names.SUMMARY))
    manifest_uri = storage.join(target, names.MANIFEST)
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
        for obj in storage.list_objects(run.out):
            storage.copy(run.output(obj.key), storage.join(target, obj.key))
            files.append({"name": obj.key, "size": obj.size, "etag": obj.etag})
            log.info("publish: copied %s (%d bytes)", obj.key, obj.size)
        metadata = dict(metadata or {})
        if any(f["name"] == names.BENCH for f in files):
            bench = storage.read_json(run.output(names.BENCH))
            metadata.setdefault("loader", {"summary": bench.get("summary"),
                                           "recommendation": bench.get("recommendation"),
                                           "device": bench.get("device", {}).get("statement")})
        storage.write_json(manifest_uri, {
            "dataset": spec.name, "version": version, "run_id": run.run_id,
            "published_at": datetime.now(UTC).isoformat(), "task": spec.task,
            "files": files, "summary": summary, "spec": spec.model_dump(mode="json"),
            "previous_uri": previous["uri"] if previous and previous["uri"] != target else None,
            **content_fields(run), **metadata,
        })
    storage.write_json(releases.latest_uri(spec), {
        "version": version, "uri": target, "run_id": run.run_id,
        "updated_at": datetime.now(UTC).isoformat(),
    })
    log.info("publish: %s → %s (latest.json updated)", spec.name, target)
    out = {"version": version, "uri": target, "run_id": run.run_id,
           "records": summary.get("splits", {})}
    report = storage.join(target, names.REPORT)
    if storage.exists(report):
        out["report"] = report
        log.info("publish: report %s (open in a browser: %s)", report,
                 storage.browser_url(report))
    return out
