"""The failures that end a run: deterministic, so retrying cannot fix them.

Every kind derives from :class:`RecforgeFailure`. The Airflow edge
(``recforge.orchestration``) catches the base class and fails the task at once, without
retries: back-off would only delay the alert. Anything else (S3, network, a crashed worker)
is treated as transient and retried. A new failure kind joins the rule by deriving from the
base class; nothing else has to list it.
"""

from __future__ import annotations


class RecforgeFailure(Exception):
    """A deterministic failure: the input, the spec or the output is wrong; fix, then re-run.

    ``result`` (optional) is a small dict the alert can quote (the quality gate's result).
    """

    result: dict | None = None


class SpecError(RecforgeFailure, ValueError):
    """A dataset spec is invalid; the message names the file, the field and the fix."""


class SourceEmpty(RecforgeFailure):
    """The source holds nothing to pack (no objects, or no usable image/mask pair)."""


class PlanTooLarge(RecforgeFailure):
    """The dataset cannot be planned into as many shards as the deployment can map."""


class LabelMapError(RecforgeFailure):
    """The class set changed in a way that would silently change label ids."""


class ReconciliationError(RecforgeFailure):
    """Some listed object is neither packed nor quarantined, or is counted twice."""


class ValidationFailed(RecforgeFailure):
    """The dataset is structurally broken; the message lists the first failures."""


class VersionExistsError(RecforgeFailure):
    """The target version was published by another run; versions are immutable."""


class ChecksumMismatch(RecforgeFailure):
    """A staged or published object is not the bytes its writer recorded (size, SHA-256 or
    ETag differ), or has no recorded checksum; the message names the file."""
