"""Whole-dataset task timeouts follow the record ceiling the deployment plans for."""

from __future__ import annotations

from datetime import timedelta

import pytest

from recforge.orchestration import timeouts


def test_timeouts_grow_with_the_ceiling_and_keep_their_floors(monkeypatch):
    monkeypatch.delenv(timeouts.ENV_VAR, raising=False)
    assert timeouts.max_records() == 10_000_000
    small = {t: timeouts.execution_timeout(t, 10_000) for t in timeouts.RATES}
    assert small == {t: floor for t, (floor, _) in timeouts.RATES.items()}  # the old values
    big = {t: timeouts.execution_timeout(t) for t in timeouts.RATES}
    assert big["quality_gate"] == timedelta(hours=3) and big["merge"] > timedelta(hours=2)
    assert big["benchmark"] == timedelta(minutes=30)  # a bounded sample: no growth
    monkeypatch.setenv(timeouts.ENV_VAR, "50000000")
    assert timeouts.execution_timeout("quality_gate") == timedelta(hours=15)


def test_a_bad_ceiling_names_the_variable(monkeypatch):
    monkeypatch.setenv(timeouts.ENV_VAR, "lots")
    with pytest.raises(ValueError, match="RECFORGE_MAX_RECORDS='lots'"):
        timeouts.max_records()
