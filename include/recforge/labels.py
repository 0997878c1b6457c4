"""Stage 3, remap labels: class names → contiguous ids 0..N-1, stable across versions.

When a previous version is published, its ``classes.json`` is the starting point: existing
ids never change, new classes are appended (sorted by name). A class that vanished fails
the run — silently shifting ids would corrupt every model fine-tuned on the old ids —
unless ``labels.allow_renumbering`` is set, which renumbers from scratch.
"""

from __future__ import annotations

import logging

from recforge import publish, storage
from recforge.run import Run

log = logging.getLogger(__name__)


class LabelMapError(RuntimeError):
    """The class set changed in a way that would silently change label ids."""


def remap(names: set[str], previous: list[str] | None, allow_renumbering: bool) -> list[str]:
    """The new id → name list. ``previous`` is the published list (index = id) or None."""
    if not previous:
        return sorted(names)
    vanished = [c for c in previous if c not in names]
    if vanished:
        if not allow_renumbering:
            raise LabelMapError(
                f"classes {vanished} exist in the published class map but have no images now; "
                "ids would shift. Restore their images, or set labels.allow_renumbering: true "
                "in the spec to renumber all classes (models trained on the old ids break)."
            )
        log.warning("classes %s vanished; renumbering from scratch as allowed", vanished)
        return sorted(names)
    added = sorted(names - set(previous))
    if added:
        log.info("appending new classes %s after the %d published ones", added, len(previous))
    return list(previous) + added


def classes_document(classes: list[str], previous_version: str | None) -> dict:
    return {"num_classes": len(classes), "classes": classes,
            "ids": {name: i for i, name in enumerate(classes)},
            "based_on_version": previous_version}


def remap_labels(run: Run) -> dict:
    items = storage.read_jsonl(run.items)
    names = {i["class_name"] for i in items}
    if not names:
        raise LabelMapError("no class has any image; nothing to pack")
    latest = publish.read_latest(run.spec)
    previous, prev_version = None, None
    if latest:
        prev_version = latest["version"]
        doc = storage.read_json(publish.version_uri(run.spec, prev_version, "classes.json"))
        previous = doc["classes"]
    classes = remap(names, previous, run.spec.labels.allow_renumbering)
    storage.write_json(run.classes, classes_document(classes, prev_version))
    log.info("labels: %d classes (previous version: %s)", len(classes), prev_version or "none")
    return {"num_classes": len(classes), "based_on_version": prev_version}
