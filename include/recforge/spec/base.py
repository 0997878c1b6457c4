"""The one base model of every spec section: unknown keys are errors, values are frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown keys are rejected (a typo must not silently fall back to a default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
