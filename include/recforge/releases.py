"""The read side of published versions: where they are, which is latest, what they held.

``<publish.uri>/<name>/latest.json`` points at ``<publish.uri>/<name>/<version>/``. Stages
that build on the previous release (stable label ids, stable segmentation classes) read it
here; only the publish stage writes it.
"""

from __future__ import annotations

from recforge import storage
from recforge.format import names
from recforge.spec import DatasetSpec


def dataset_root(spec: DatasetSpec) -> str:
    return storage.join(spec.publish.uri, spec.name)


def version_uri(spec: DatasetSpec, version: str, *parts: str) -> str:
    return storage.join(dataset_root(spec), version, *parts)


def latest_uri(spec: DatasetSpec) -> str:
    return storage.join(dataset_root(spec), names.LATEST)


def read_latest(spec: DatasetSpec) -> dict | None:
    """``latest.json`` (``version``, ``uri``, ``run_id``), or None before the first publish."""
    uri = latest_uri(spec)
    return storage.read_json(uri) if storage.exists(uri) else None


def previous_classes(spec: DatasetSpec) -> tuple[str, dict] | None:
    """``(version, classes.json)`` of the latest published version, or None."""
    latest = read_latest(spec)
    if not latest:
        return None
    return latest["version"], storage.read_json(
        version_uri(spec, latest["version"], names.CLASSES))
