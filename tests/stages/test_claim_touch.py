"""Touching a claim under the store's real conditional writes: stages of one run touching it
at once all succeed, a write whose answer was lost (the store applied it, the retry was
refused) is not mistaken for another run's, and a claim another run holds still fails."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from recforge import claims, storage
from recforge.format import names

pytestmark = pytest.mark.both_stores  # each test against moto and Ceph RGW


@pytest.fixture
def target(bucket) -> str:
    uri = f"s3://{bucket}/ds/v1"
    claims.claim("run-1", uri)
    return uri


def alive_at(target: str) -> str:
    return storage.read_json(storage.join(target, names.CLAIM))["alive_at"]


def test_many_stages_of_one_run_touching_at_once_all_succeed(target):
    """The loader benchmark beside validate or the checklist touch the claim at the same
    moment; each refused write is another stage of the run touching it, never a lost claim."""
    threads = 8
    start = threading.Barrier(threads)

    def touch(_):
        start.wait()
        claims.touch("run-1", target)

    before = alive_at(target)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(touch, range(threads)))  # raises the first ClaimLost, if any
    assert alive_at(target) > before


def test_a_touch_whose_answer_was_lost_is_done(target, monkeypatch):
    """Every write applied, then refused on its retry (as after a connection reset that
    came after the store wrote): the touch still ends, alive."""
    write = claims._write
    writes = []

    def applied_then_refused(uri, doc, **conditions):
        write(uri, doc, **conditions)
        writes.append(doc)
        raise storage.PreconditionFailed(f"{uri}: the retry of an applied write")

    monkeypatch.setattr(claims, "_write", applied_then_refused)
    before = alive_at(target)
    claims.touch("run-1", target)
    assert len(writes) == 1
    assert alive_at(target) == writes[0]["alive_at"] > before


def test_a_claim_taken_over_during_a_touch_is_lost(target, monkeypatch):
    """Refused because another run holds the claim now: ClaimLost, naming it."""
    write = claims._write

    def taken_over(uri, doc, **conditions):
        write(uri, {**doc, "run_id": "run-2"})
        raise storage.PreconditionFailed(f"{uri} changed")

    monkeypatch.setattr(claims, "_write", taken_over)
    with pytest.raises(claims.ClaimLost, match="'run-2'"):
        claims.touch("run-1", target)
