"""The checklist's items, one module each: what a check plans, observes, shows as evidence and
advises.

:data:`CHECKS` is the table (ordered as ``recforge.spec.quality.CHECKS``, where each item's
name, number, title and default severity live): the expectation plans
(``quality/suites.py``), the observed values and evidence (``quality/gx.py``) and the
report's advice (``report/advice.py``) loop over it. Every module fills in one shape,
:class:`~recforge.quality.checks.base.CheckDef`; adding a check is its module, its row here
and its row in the spec. A check that exists only for some task kinds is named in their
``Kind.checks`` (``recforge.kinds``); :func:`not_for` says why it is not run for others.

* ``base.py`` — the shape: ``CheckDef``, ``Plan`` (what a check's plan reads and writes),
  ``Planned``;
* ``decode.py`` — item 1; ``index.py`` — item 2; ``labels.py`` — item 3 (classes, masks'
  values and detection label arrays); ``image_size.py`` — item 4; ``sources.py`` — item 5;
* ``loader.py`` — items 6-10, the loader benchmark's results (one input, planned when it
  arrives);
* ``class_balance.py`` — item 11;
* ``splits.py`` — items 12a-c, split independence (one item, pairs as evidence, their own
  advice for the source's splits);
* ``masks.py`` — item 13; ``objects_per_image.py`` — item 14; ``box_size.py`` — item 15;
  ``class_name_case.py`` — item 16.
"""

from __future__ import annotations

from recforge import kinds
from recforge.quality.checks import (
    box_size,
    class_balance,
    class_name_case,
    decode,
    image_size,
    index,
    labels,
    loader,
    masks,
    objects_per_image,
    sources,
    splits,
)
from recforge.quality.checks.base import CheckDef, Plan, Planned
from recforge.spec.quality import LOADER_CHECKS

CHECKS: tuple[CheckDef, ...] = (
    decode.CHECK,
    index.CHECK,
    labels.CHECK,
    image_size.CHECK,
    sources.CHECK,
    *loader.CHECKS,
    class_balance.CHECK,
    *splits.CHECKS,
    masks.CHECK,
    objects_per_image.CHECK,
    box_size.CHECK,
    class_name_case.CHECK,
)
BY_NAME: dict[str, CheckDef] = {c.name: c for c in CHECKS}
# planned on the dataset's frames, and on the loader benchmark's results once they arrive
DATASET = tuple(c for c in CHECKS if c.name not in LOADER_CHECKS)
LOADER = tuple(c for c in CHECKS if c.name in LOADER_CHECKS)


def not_for(name: str, kind: kinds.Kind) -> str | None:
    """Why check ``name`` is not run for a dataset of ``kind`` (it exists only for other
    kinds), or None if it is."""
    owners = [k.name for k in kinds.KINDS.values() if name in k.checks]
    if not owners or name in kind.checks:
        return None
    return f"not a {' or '.join(owners)} dataset"


def frames_kind(frames: dict, task: str | None) -> kinds.Kind:
    """The kind the checklist's frames are checked as: the task's, except that records
    carrying label arrays (an ``objects`` frame) are a box kind's whatever the task says
    (``quality.frames.is_detection``), and a box kind without one has no boxes to check."""
    k = kinds.kind(task)
    if ("objects" in frames) == k.boxes:
        return k
    return kinds.DETECTION if "objects" in frames else kinds.CLASSIFICATION


__all__ = ["BY_NAME", "CHECKS", "DATASET", "LOADER", "CheckDef", "Plan", "Planned",
           "frames_kind", "not_for"]
