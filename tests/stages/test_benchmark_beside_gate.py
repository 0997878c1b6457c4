"""``recforge build`` runs the loader benchmark beside the checklist: the untimed parts
overlap, the timed part runs alone, and the outcome is the sequence's."""

from __future__ import annotations

import threading
import time

import pytest

from recforge import pipeline, stages
from recforge.errors import RecforgeFailure
from recforge.stages import benchmark as bench_stage

BENCH_JSON = {"summary": "the loader's results"}


class Stages:
    """Fake ``benchmark`` and ``quality_gate`` stages that log what they do, in order."""

    def __init__(self, bench_error=None, gate_error=None, gate_asks=True):
        self.events: list[str] = []
        self.lock = threading.Lock()
        self.bench_error, self.gate_error, self.gate_asks = bench_error, gate_error, gate_asks
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
        return {"benchmark": self.benchmark, "quality_gate": self.quality_gate}[task_id]


@pytest.fixture
def fake(monkeypatch):
    def make(**kw) -> Stages:
        st = Stages(**kw)
        monkeypatch.setattr(stages, "entry", st.entry)
        monkeypatch.setattr(bench_stage, "bench_results", lambda run: BENCH_JSON)
        return st
    return make


def test_the_untimed_parts_overlap_and_the_timing_runs_alone(fake):
    st = fake()
    started = time.perf_counter()
    bench, gate, bench_s = pipeline.benchmark_beside_gate(run=object())
    wall = time.perf_counter() - started
    assert bench == {"uri": "bench.json"} and gate == {"ok": True}
    assert st.gate_saw == BENCH_JSON
    ev = st.events
    # both started before either finished its untimed part
    assert {ev[0], ev[1]} == {"bench: untimed", "gate: reads"}
    # the timing starts only once the gate stops for the results, and the gate goes on
    # only once the timing is over
    assert ev.index("bench: timed") > ev.index("bench: waits for quiet")
    assert ev[ev.index("bench: timed"):] == ["bench: timed", "bench: done",
                                               "gate: has the results", "gate: writes"]
    assert 0.4 <= bench_s and wall < 0.2 + 0.3 + 0.2 + 0.2  # less than one after the other


def test_a_failed_benchmark_is_the_error_and_the_gate_writes_nothing(fake):
    st = fake(bench_error=RecforgeFailure("the loader missed its floor"))
    with pytest.raises(RecforgeFailure, match="missed its floor"):
        pipeline.benchmark_beside_gate(run=object())
    assert "gate: writes" not in st.events and st.gate_saw is None


def test_a_failed_gate_raises_once_the_benchmark_has_ended(fake):
    st = fake(gate_error=ValueError("the checklist could not read its inputs"))
    with pytest.raises(ValueError, match="could not read"):
        pipeline.benchmark_beside_gate(run=object())
    assert st.events[-1] == "bench: done"  # not left running behind the error


def test_when_both_fail_the_benchmarks_error_wins(fake):
    fake(bench_error=RuntimeError("MXNet died"),
         gate_error=ValueError("the checklist could not read its inputs"))
    with pytest.raises(RuntimeError, match="MXNet died"):
        pipeline.benchmark_beside_gate(run=object())


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
        pipeline.benchmark_beside_gate(run=object())
