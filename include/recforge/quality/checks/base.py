"""The shape every checklist item's module fills in: :class:`CheckDef`, and :class:`Plan`, what
a check's ``plan`` reads and writes.

A check's ``plan`` adds its expectations with :meth:`Plan.add` (tagged with the check, its item
and severity; nothing when the spec sets it ``off``) or says why it is not run with
:meth:`Plan.skip`; its ``observed`` gives one short line, true whether it passed or failed;
its ``evidence`` (optional) gives lines better than GX's unexpected rows, shown when it
failed; its ``advice`` is what a check that did not pass means and what to do, as the report
says it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recforge.spec.quality import CHECK_BY_NAME, Check, QualitySpec

if TYPE_CHECKING:
    import pandas as pd

    Frames = dict[str, pd.DataFrame]

MAX_EVIDENCE = 5  # evidence lines per check (and rows named per line)


@dataclass
class Planned:
    """One planned expectation: the frame it runs on and the checklist item it counts for."""

    frame: str
    check: str
    what: str  # one line for the evidence, e.g. "label in [0, 14)"
    expectation: Any


@dataclass
class Plan:
    """One check's planning: the frames and options it reads, and the plans and reasons not
    run that every check of a planning writes into."""

    check: str
    frames: Frames
    quality: QualitySpec
    plans: list[Planned]
    not_run: dict[str, str]
    pack: Any = None
    num_classes: int | None = None

    def add(self, frame: str, what: str, exp_cls, **kw) -> None:
        """One expectation of class ``exp_cls`` on ``frame``, tagged with this check."""
        sev = self.quality.severity_of(self.check)
        if sev == "off":
            return
        c = CHECK_BY_NAME[self.check]
        self.plans.append(Planned(frame, self.check, what, exp_cls(
            **kw, severity="critical" if sev == "fail" else "warning",
            meta={"check": self.check, "item": c.item, "severity": sev, "what": what},
            notes=f"Checklist item {c.item} ({self.check}): {c.title}. {what}.")))

    def skip(self, reason: str) -> None:
        """Why this check is not run (or runs in part): shown as its observed value."""
        self.not_run[self.check] = reason


def no_evidence(frames: Frames) -> list[str]:
    return []


@dataclass(frozen=True)
class CheckDef:
    """One checklist item's behaviour; its name, item number, title and default severity are
    the spec's (``recforge.spec.quality.CHECKS``, :attr:`spec`).

    ``plan(p)``: add the expectations to :class:`Plan` ``p``, or skip with a reason.
    ``observed(frames, quality, num_classes)``: the check's one-line observed value.
    ``advice``: (what it means when it does not pass, what to do), no final full stop.
    ``evidence(frames)``: lines naming the offending rows or pairs, shown when it failed.
    ``source_split_advice``: the advice when the spec keeps the source's own splits
    (``splits.from: source``), where a leak across them is the publisher's.
    """

    name: str
    plan: Callable[[Plan], None]
    observed: Callable[[Frames, QualitySpec, int | None], str]
    advice: tuple[str, str]
    evidence: Callable[[Frames], list[str]] = no_evidence
    source_split_advice: tuple[str, str] | None = None

    @property
    def spec(self) -> Check:
        return CHECK_BY_NAME[self.name]


def share(at_most: float) -> float:
    """GX's ``mostly`` for "at most ``at_most`` of the rows may be unexpected"."""
    return round(1.0 - at_most, 12)
