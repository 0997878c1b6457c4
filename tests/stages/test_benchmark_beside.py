"""``recforge build`` runs the loader benchmark beside validate and the checklist: the
untimed parts overlap, the timed part runs alone, and the outcome is the sequence's
(validate, benchmark, checklist)."""

from __future__ import annotations

import threading
import time

import pytest

from recforge import pipeline, stages
from recforge.errors import RecforgeFailure
from recforge.stages import benchmark as bench_stage

BENCH_JSON = {"summary": "the loader's results"}


class Stages:
    """Fake ``validate``, ``benchmark`` and ``quality_gate`` stages that log what they do,
    in order."""

    def __init__(self, bench_error=None, gate_error=None, gate_asks=True, validate_error=None):
        self.events: list[str] = []
        self.lock = threading.Lock()
        self.bench_error, self.gate_error, self.gate_asks = bench_error, gate_error, gate_asks
        self.validate_error = validate_error
        self.gate_saw = None

    def note(self, what: str) -> None:
        with self.lock:
            self.events.append(what)

    def benchmark(self, run, quiet=None):
        self.note("bench: untimed")
        time.sleep(0.2)  # the fetch, MXNet's start-up, the value check
        self.note("bench: waits for quiet")
        assert quiet.wait(10)
        self.note("bench: timed")
        time.sleep(0.2)
        if self.bench_error:
            raise self.bench_error
        self.note("bench: done")
        return {"uri": "bench.json"}

    def validate(self, run):
        self.note("validate: reads")
        time.sleep(0.1)
        if self.validate_error:
            raise self.validate_error
        self.note("validate: done")
        return {"valid": True}

    def quality_gate(self, run, loader_results=None):
        self.note("gate: reads")
        time.sleep(0.3)  # GX's import, the inputs, the frames
        if self.gate_error:
            raise self.gate_error
        if self.gate_asks:
            self.gate_saw = loader_results()
            self.note("gate: has the results")
        self.note("gate: writes")
        return {"ok": True}

    def entry(self, task_id):
        return {"benchmark": self.benchmark, "quality_gate": self.quality_gate,
                "validate": self.validate}[task_id]


@pytest.fixture
def fake(monkeypatch):
    def make(**kw) -> Stages:
        st = Stages(**kw)
        monkeypatch.setattr(stages, "entry", st.entry)
        monkeypatch.setattr(bench_stage, "bench_results", lambda run: BENCH_JSON)
        return st
    return make


CHECKS = ("validate", "quality_gate")


def beside(checks=CHECKS):
    return pipeline.benchmark_beside(run=object(), checks=checks)


def test_the_untimed_parts_overlap_and_the_timing_runs_alone(fake):
    st = fake()
    started = time.perf_counter()
    results, seconds = beside()
    wall = time.perf_counter() - started
    assert results == {"validate": {"valid": True}, "benchmark": {"uri": "bench.json"},
                       "quality_gate": {"ok": True}}
    assert st.gate_saw == BENCH_JSON
    ev = st.events
    # the benchmark starts with validate, and validate ends before the checklist starts
    assert {ev[0], ev[1]} == {"bench: untimed", "validate: reads"}
    assert ev.index("validate: done") < ev.index("gate: reads") < ev.index("bench: timed")
    # the timing starts only once the gate stops for the results, and the gate goes on
    # only once the timing is over
    assert ev.index("bench: timed") > ev.index("bench: waits for quiet")
    assert ev[ev.index("bench: timed"):] == ["bench: timed", "bench: done",
                                               "gate: has the results", "gate: writes"]
    assert set(seconds) == {"validate", "benchmark", "quality_gate"}
    assert 0.4 <= seconds["benchmark"] and seconds["validate"] >= 0.1
    # less than one after the other (0.1 + 0.4 + 0.3 + the results)
    assert wall < 0.1 + 0.2 + 0.3 + 0.2 + 0.2


def test_a_failed_validate_is_the_error_once_the_benchmark_has_ended(fake):
    st = fake(validate_error=RecforgeFailure("train.idx disagrees with train.rec"),
              bench_error=RuntimeError("MXNet died"))
    with pytest.raises(RecforgeFailure, match="disagrees"):
        beside()
    # the checklist never started, and the benchmark was not left running behind it
    assert not any(e.startswith("gate:") for e in st.events)
    assert st.events[-1] == "bench: timed"


def test_a_failed_benchmark_is_the_error_and_the_gate_writes_nothing(fake):
    st = fake(bench_error=RecforgeFailure("the loader missed its floor"))
    with pytest.raises(RecforgeFailure, match="missed its floor"):
        beside()
    assert "gate: writes" not in st.events and st.gate_saw is None


def test_a_failed_gate_raises_once_the_benchmark_has_ended(fake):
    st = fake(gate_error=ValueError("the checklist could not read its inputs"))
    with pytest.raises(ValueError, match="could not read"):
        beside()
    assert st.events[-1] == "bench: done"  # not left running behind the error


def test_when_both_fail_the_benchmarks_error_wins(fake):
    fake(bench_error=RuntimeError("MXNet died"),
         gate_error=ValueError("the checklist could not read its inputs"))
    with pytest.raises(RuntimeError, match="MXNet died"):
        beside()


def test_a_benchmark_that_dies_inside_the_gates_wait_is_not_wrapped(monkeypatch):
    """The gate wraps what it does not know as its own error; the benchmark's reaches the
    caller as it was raised."""
    class Wrapping(Stages):
        def quality_gate(self, run, loader_results=None):
            try:
                loader_results()
            except Exception as exc:
                raise ValueError(f"quality gate could not check: {exc}") from exc

    st = Wrapping(bench_error=RuntimeError("MXNet died"))
    monkeypatch.setattr(stages, "entry", st.entry)
    with pytest.raises(RuntimeError, match="MXNet died"):
        beside()
