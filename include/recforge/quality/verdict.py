"""The quality gate's words: a check's status, the gate's status, and the verdict sentence.

One spelling for the task log's table (``quality.report``), the Data Docs index
(``quality.docs_site``), the dataset report (``recforge.report``) and the alerts
(``recforge.alerts``). Standard library only, imports nothing of recforge.
"""

from __future__ import annotations

from collections.abc import Iterable

# a check's status (``result["checks"][name]["status"]``); the first three are also the gate's
PASSED = "passed"
WARNING = "warning"
FAILED = "failed"
NOT_RUN = "not run"
OFF = "off"
STATUSES = (PASSED, WARNING, FAILED, NOT_RUN, OFF)

SUBJECT = "quality gate"
# the gate's status as the verdict sentence says it
VERDICT_WORDS = {PASSED: "passed", WARNING: "passed with warnings", FAILED: "FAILED"}


def gate_status(result: dict) -> str:
    """The gate's status from its result: ``failed`` when it is not ok, ``warning`` when it
    passed with warned checks, else ``passed``."""
    if not result.get("ok", True):
        return FAILED
    return WARNING if result.get("warned") else PASSED


def verdict(status: str, checks: Iterable[str] = (), *, subject: str = SUBJECT,
            parenthesised: bool = False) -> str:
    """The verdict sentence, e.g. ``quality gate FAILED: class_balance, duplicates``.

    ``checks``: the failed (or, for ``warning``, the warned) check names, listed after the
    words (``: a, b``, or `` (a, b)`` when ``parenthesised``); ``passed`` lists none.
    ``subject=""`` leaves the words alone (``FAILED: a, b``) for a page that names the gate
    itself."""
    words = f"{subject} {VERDICT_WORDS[status]}" if subject else VERDICT_WORDS[status]
    if status == PASSED:
        return words
    listed = ", ".join(checks)
    return f"{words} ({listed})" if parenthesised else f"{words}: {listed}"


def gate_verdict(result: dict, *, subject: str = SUBJECT, parenthesised: bool = False) -> str:
    """:func:`verdict` for a gate result dict (its ``ok``, ``failed`` and ``warned``)."""
    status = gate_status(result)
    checks = result.get("failed", []) if status == FAILED else result.get("warned", [])
    return verdict(status, checks, subject=subject, parenthesised=parenthesised)
