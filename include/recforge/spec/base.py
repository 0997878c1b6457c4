"""The one base model of every spec section: unknown keys are errors, values are frozen,
and YAML's loose scalars are not coerced (``quality: true`` is not 1, ``upscale: 1`` is not
true)."""

from __future__ import annotations

import types
import typing

from pydantic import BaseModel, ConfigDict, model_validator


def _kinds(annotation) -> set:
    """The plain types an annotation allows (``int | None`` → {int, NoneType})."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return {k for a in typing.get_args(annotation) for k in _kinds(a)}
    return {annotation}


class StrictModel(BaseModel):
    """Unknown keys are rejected (a typo must not silently fall back to a default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_number_coercion(cls, data):
        if not isinstance(data, dict):
            return data
        for name, field in cls.model_fields.items():
            if name not in data:
                continue
            value, kinds = data[name], _kinds(field.annotation)
            if isinstance(value, bool) and bool not in kinds and kinds & {int, float}:
                raise ValueError(f"{name}: {value!r} is a boolean, but a number is expected")
            if kinds == {bool} and not isinstance(value, bool):
                raise ValueError(f"{name}: {value!r} is not true or false")
        return data
