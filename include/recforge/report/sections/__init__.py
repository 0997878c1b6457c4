"""The report's sections: one module per section, each rendering its body with
``render(ctx: Context) -> str``. :data:`SECTIONS` is the one list of them, in page order;
a row names the section (its anchor and heading), its module and the task kinds it is shown
for (``recforge.kinds``, chosen by a kind's flags). A section whose body differs by kind is one
row per variant, all under the same anchor and heading, each for its kinds; a section with a
kind-specific part looks that part up by kind name in a table of its own module.

In page order: ``summary.py`` (what the version is and where it lives; ``loading.py``: how to
load it), ``checklist.py`` (the quality checklist), ``charts.py`` (``balance.py``: the class
balance as the kind counts it; image sizes; ``loader.py``: loader throughput), the samples
(``class_samples.py`` per class, ``record_samples.py`` random records of a dataset with masks,
``box_samples.py`` with their boxes drawn), ``masks.py`` (masks blended over their images),
``near_duplicates.py`` (near pairs across splits), ``quarantine.py`` (quarantined images,
refused objects, objects not used) and ``changes.py`` (against the previous version). What
they share: ``context.py`` (what a section is given) and ``markup.py`` (figures, tables).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from recforge.kinds import KINDS
from recforge.kinds import NAMES as TASK_KINDS


def kinds_with(flag: str) -> tuple[str, ...]:
    """The task kinds whose ``flag`` (a ``recforge.kinds.Kind`` field) is set."""
    return tuple(k.name for k in KINDS.values() if getattr(k, flag))


@dataclass(frozen=True)
class Section:
    """One section of the page: its anchor ``sid`` and ``heading``, the module that renders
    its body (``recforge.report.sections.<module>.render``) and the task kinds it is shown
    for."""

    sid: str
    heading: str
    module: str
    kinds: tuple[str, ...] = TASK_KINDS

    def shown_for(self, kind: str) -> bool:
        return kind in self.kinds


SECTIONS: tuple[Section, ...] = (
    Section("summary", "Summary", "summary"),
    Section("checklist", "Checklist", "checklist"),
    Section("charts", "Charts", "charts"),
    Section("samples", "Samples", "class_samples", kinds=kinds_with("image_class")),
    Section("samples", "Samples", "record_samples", kinds=kinds_with("masks")),
    Section("samples", "Samples", "box_samples", kinds=kinds_with("boxes")),
    Section("masks", "Masks", "masks", kinds=kinds_with("masks")),
    Section("near-duplicates", "Near-duplicates", "near_duplicates"),
    Section("quarantine", "Quarantine", "quarantine"),
    Section("diff", "Changes", "changes"),
)


def sections_for(kind: str) -> list[Section]:
    """The sections a dataset of this task kind's report has, in page order."""
    return [s for s in SECTIONS if s.shown_for(kind)]


def module(section: Section) -> ModuleType:
    """The section's module, ``recforge.report.sections.<module>`` (imported now)."""
    return importlib.import_module(f"{__name__}.{section.module}")


def renderer(section: Section) -> Callable:
    """The section's ``render(ctx) -> str``."""
    return module(section).render
