"""The task kinds: what differs between a classification, a segmentation and a detection dataset.

One row per kind in :data:`KINDS`. Stages, checks, report sections and loaders look a kind up
here (``kind(spec.task)``, ``kind_of(doc)`` for a published ``classes.json`` or manifest)
instead of comparing the task's name; adding a kind is a row here plus what the new flags
select. Parse-time light: no engine imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One task kind.

    ``masks``: every record pairs with a mask record (same key); class balance counts pixels.
    ``boxes``: a record's header label is a box array (``format/detection_label.py``).
    ``image_class``: a record's label is the image's class id.
    ``loader``: the loader benchmark's default (``bench.options.loader``).
    ``checks``: checklist items that exist only for this kind.
    """

    name: str
    masks: bool = False
    boxes: bool = False
    image_class: bool = True
    loader: str = "image_record_iter"
    checks: tuple[str, ...] = ()


CLASSIFICATION = Kind("classification")
SEGMENTATION = Kind("segmentation", masks=True, image_class=False, loader="segmentation")
DETECTION = Kind("detection", boxes=True, image_class=False, loader="detection",
                 checks=("objects_per_image", "box_size"))

KINDS: dict[str, Kind] = {k.name: k for k in (CLASSIFICATION, SEGMENTATION, DETECTION)}
NAMES: tuple[str, ...] = tuple(KINDS)


def kind(name: str | None) -> Kind:
    """The kind of this name (``None``: classification, the spec's default)."""
    if name is None:
        return CLASSIFICATION
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"no task kind {name!r}; kinds: {list(KINDS)}") from None


def kind_of(*docs: Mapping | None) -> Kind:
    """The kind a published document names (``classes.json``, ``manifest.json``): the first
    ``task`` any of them holds; classification when none does (its files predate the field)."""
    for doc in docs:
        if doc and doc.get("task"):
            return kind(doc["task"])
    return CLASSIFICATION
