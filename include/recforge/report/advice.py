"""The sentence the report's checklist shows under a check that warned or failed: what it
means and what to do (each check's own words, from its module in ``recforge.quality.checks``),
and whether and why it blocks publish."""

from __future__ import annotations

from recforge.quality.checks import BY_NAME
from recforge.spec.dataset import SOURCE_SPLIT_WARNINGS

# a check's severity as the report says it (spec.quality.Severity)
SEVERITY_WORDS = {"fail": "blocks publish", "warn": "warns", "off": "off"}
# (means, to do) of a check this version of recforge does not know (an older result's)
UNKNOWN = ("the check did not pass", "see the Data Docs evidence")


def severity_words(severity: str) -> str:
    return SEVERITY_WORDS.get(severity, severity)


def explain(name: str, status: str, severity: str, *, splits_from_source: bool = False
            ) -> str:
    """The sentence under a check that warned or failed: what it means, what to do, and
    (for a warning) why it did not block publish. ``splits_from_source``: the spec keeps the
    source's own splits (``splits.from: source``), where cross-split duplicates warn by
    default."""
    check = BY_NAME.get(name)
    means, todo = UNKNOWN if check is None else check.advice
    if splits_from_source and check is not None and check.source_split_advice:
        means, todo = check.source_split_advice
    text = f"Means: {means}. To do: {todo}."
    if status == "warning":
        if splits_from_source and name in SOURCE_SPLIT_WARNINGS:
            why = ("with splits.from: source it warns by default, since the splits are the "
                   "publisher's and public datasets ship known duplicates across them; set "
                   f"quality.severity.{name}: fail to make it block publish")
        elif check is not None and check.spec.default == "warn":
            why = "it warns by default"
        else:
            why = f"this spec sets quality.severity.{name}: warn"
        text += f" Does not block publish: {why}."
    elif status == "failed":
        text += " It blocks publish: this version is not published until it passes."
    return text
