"""Source layouts: how a source's listed objects become the items to pack.

One module per layout, ``class_folders.py`` and ``lists.py`` (classification), ``voc.py``
and ``coco.py`` (detection), ``pairs.py`` (segmentation), each with its ``LAYOUT``,
registered (``_registry``) by the name ``source.layout`` gives (segmentation: ``pairs``,
whose ``source.pairs`` says how images meet masks). A layout's
``flatten(rows, spec)`` sorts every listed object it is given into exactly one of:

* an item to pack (``Flattened.items``; with ``splits.from: source`` each carries the
  ``split`` its source defines),
* the quarantine, for bad data (``Flattened.refused``: a reason and its fix),
* a file read whole to make the items, accounted as used (``Flattened.used``: a COCO
  instances file, a list file under the prefix),
* set aside as no part of this dataset, though nothing is wrong with it
  (``Flattened.not_used``: a captions file beside COCO's instances, an image in no chosen VOC
  image set), counted and published in ``not_used.jsonl``, never in the quarantine.

So the run's counts reconcile: listed = packed + quarantined + not used (``summary.json``
counts the used files as packed). ``extensions``
names the non-image files a layout reads or knows (ingest accepts them), ``expected`` the
paths it looks for, which a source where nothing matches is told, and ``labels`` where the
classes (and boxes) come from: the DAG doc says both, so it describes each layout's real
input from the layout itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from recforge.kinds import kind
from recforge.quarantine import QuarantineEntry


@dataclass(frozen=True)
class NotUsed:
    """A listed object that is no part of the dataset by its definition (not bad data)."""

    key: str
    reason: str
    detail: str = ""

    def row(self) -> dict:
        return {"key": self.key, "reason": self.reason, "detail": self.detail}


@dataclass
class Flattened:
    """What a layout made of the listing (see the module doc)."""

    items: list[dict]
    refused: list[QuarantineEntry]
    not_used: list[NotUsed] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    # the order the source gives its classes (COCO: by category id), which numbers a first
    # version and the classes a later one appends; None: by name
    class_order: list[str] | None = None
    counts: dict[str, int] = field(default_factory=dict)  # into summary.json: crowd_dropped


@dataclass(frozen=True)
class Layout:
    """One source layout: its flatten, the non-image extensions it reads or knows, a
    sentence naming the paths it expects (for a source where nothing matches, and the DAG
    doc), and one saying where the labels come from (the DAG doc)."""

    name: str
    flatten: Callable[[list[dict], object], Flattened]
    extensions: Callable[[object], tuple[str, ...]]
    expected: Callable[[object], str]
    labels: Callable[[object], str]


def _registry() -> dict[str, Layout]:
    from recforge.layouts import class_folders, coco, lists, pairs, voc

    return {m.LAYOUT.name: m.LAYOUT for m in (class_folders, lists, voc, coco, pairs)}


def layout_name(spec) -> str:
    """The layout's name: ``pairs`` for a kind with masks (images meet their masks by
    ``source.pairs``), else ``source.layout``."""
    return "pairs" if kind(spec.task).masks else spec.source.layout


def for_spec(spec) -> Layout:
    """The layout that flattens ``spec``'s source."""
    return _registry()[layout_name(spec)]


def names() -> tuple[str, ...]:
    return tuple(_registry())
