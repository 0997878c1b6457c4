"""The ``remap_labels`` task: class names → contiguous ids 0..N-1, stable across versions.

Classification: when a previous version is published, its ``classes.json`` is the starting
point: existing ids never change, new classes are appended (sorted by name). A class that
vanished fails the run — silently shifting ids would corrupt every model fine-tuned on the
old ids — unless ``labels.allow_renumbering`` is set, which renumbers from scratch.

Detection: the same, over the class names of the annotated objects (or
``detection.classes``, whose order numbers a first version). Where the source orders its
classes (COCO: by category id, GluonCV's ``COCODetection.CLASSES`` order, so ``person``,
id 1, is 0), that order numbers a first version and the classes a later one appends, and
every class the source defines is numbered, with objects in this build or not (flatten's
``class_order``); published ids still never change.

Segmentation: the classes come from the label definition (colour map / id map); a class list
that differs from the published one would silently change what every mask value means, so
it fails the run unless ``labels.allow_renumbering`` is set.
"""

from __future__ import annotations

import logging

from recforge import releases, storage
from recforge.errors import LabelMapError
from recforge.kinds import kind
from recforge.run import Run
from recforge.segmentation.masks import converter_for
from recforge.spec import specs_dir

log = logging.getLogger(__name__)


def ordered(names: set[str], order: list[str] | None = None) -> list[str]:
    """``names`` in the source's ``order``, those it does not name after them by name —
    by number when every name is a whole number (``0``…``99``: a list's integer labels,
    CIFAR-style folders), so a first version's ids equal the labels the source wrote."""
    rank = {name: i for i, name in enumerate(order or ())}
    numeric = bool(names) and all(n.isdecimal() and n.isascii() for n in names)

    def by_name(n: str):
        return (int(n), n) if numeric else (0, n)

    return sorted(names, key=lambda n: (0, rank[n], (0, "")) if n in rank
                  else (1, 0, by_name(n)))


def remap(names: set[str], previous: list[str] | None, allow_renumbering: bool,
          order: list[str] | None = None) -> list[str]:
    """The new id → name list. ``previous`` is the published list (index = id) or None;
    ``order`` the source's class order (None: by name)."""
    if not previous:
        return ordered(names, order)
    vanished = [c for c in previous if c not in names]
    if vanished:
        if not allow_renumbering:
            raise LabelMapError(
                f"classes {vanished} exist in the published class map but have no images now; "
                "ids would shift. Restore their images, or set labels.allow_renumbering: true "
                "in the spec to renumber all classes (models trained on the old ids break)."
            )
        log.warning("classes %s vanished; renumbering from scratch as allowed", vanished)
        return ordered(names, order)
    added = ordered(names - set(previous), order)
    if added:
        log.info("appending new classes %s after the %d published ones", added, len(previous))
    return list(previous) + added


def classes_document(classes: list[str], previous_version: str | None) -> dict:
    return {"num_classes": len(classes), "classes": classes,
            "ids": {name: i for i, name in enumerate(classes)},
            "based_on_version": previous_version}


def remap_labels(run: Run) -> dict:
    """``classes.json`` for the run (``run.classes``), checked against the published one."""
    k = kind(run.spec.task)
    if k.masks:
        return _segmentation_classes(run)
    detection = k.boxes
    given = run.spec.detection.classes if detection else None
    order = source_order(run) if detection else None
    if detection:
        names = set(given) if given is not None else \
            {o[0] for i in storage.iter_jsonl(run.items) for o in i["objects"]} | set(order or ())
    else:
        names = {i["class_name"] for i in storage.iter_jsonl(run.items)}
    if not names:
        raise LabelMapError("no class has any image; nothing to pack" if not detection else
                            "no annotated object names a class; nothing to pack")
    published = releases.previous_classes(run.spec)
    prev_version, previous = (published[0], published[1]["classes"]) if published \
        else (None, None)
    if given is not None and not previous:
        classes = list(given)  # the spec's order numbers a first version
    else:
        classes = remap(names, previous, run.spec.labels.allow_renumbering, order)
    doc = classes_document(classes, prev_version)
    # a box kind's classes.json names its kind: its labels are arrays (format.validate)
    storage.write_json(run.classes, {**doc, "task": k.name} if detection else doc)
    log.info("labels: %d classes (previous version: %s)", len(classes), prev_version or "none")
    return {"num_classes": len(classes), "based_on_version": prev_version}


def source_order(run: Run) -> list[str] | None:
    """The class order flatten found in the source (COCO's category ids), if any."""
    if not storage.exists(run.annotation_files):
        return None
    return storage.read_json(run.annotation_files).get("class_order")


def _segmentation_classes(run: Run) -> dict:
    doc = converter_for(run.spec.segmentation, specs_dir()).classes_document()
    published = releases.previous_classes(run.spec)
    if published:
        version, before = published
        if before.get("classes") != doc["classes"] and not run.spec.labels.allow_renumbering:
            raise LabelMapError(
                f"the label definition now gives classes {doc['classes']}, but published "
                f"version {version} has {before.get('classes')}; mask values would "
                "change meaning. Restore the label definition, or set "
                "labels.allow_renumbering: true to publish the new class list.")
        doc["based_on_version"] = version
    storage.write_json(run.classes, doc)
    log.info("labels: %d classes from the label definition (previous version: %s)",
             doc["num_classes"], published[0] if published else "none")
    return {"num_classes": doc["num_classes"], "ignore_index": doc["ignore_index"],
            "based_on_version": published[0] if published else None}
