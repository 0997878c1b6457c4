"""The DAG's checklist waits inside its task for the benchmark beside it: it goes on when
the benchmark succeeded, is skipped when the benchmark ended otherwise, keeps waiting while
the benchmark runs, and gives its worker slot back when the benchmark is not running."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk.exceptions import AirflowRescheduleException, AirflowSkipException

from recforge.orchestration import sibling
from recforge.run import Run
from recforge.stages.benchmark import awaited_results


class FakeTI:
    """Answers ``get_task_states`` with the next state of ``states``, as the Task SDK
    shapes it: ``{run_id: {task_id: state}}``."""

    task_id = "quality_gate"  # the waiting task

    def __init__(self, *states):
        self.states = list(states)
        self.asked = []

    def get_task_states(self, dag_id, task_ids, run_ids):
        self.asked.append((dag_id, tuple(task_ids), tuple(run_ids)))
        state = self.states.pop(0)
        return {} if state is None else {run_ids[0]: {task_ids[0]: state}}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_success_after_running_goes_on_and_asks_for_this_run_only():
    ti = FakeTI("running", "running", "success")
    poll = sibling.finished(ti, "recforge__pets", "manual__1", "benchmark")
    assert [poll(), poll(), poll()] == [False, False, True]
    assert set(ti.asked) == {("recforge__pets", ("benchmark",), ("manual__1",))}


@pytest.mark.parametrize("state", ["failed", "upstream_failed", "skipped", "removed"])
def test_a_benchmark_that_ended_otherwise_skips_the_checklist(state, caplog):
    poll = sibling.finished(FakeTI("running", state), "d", "r", "benchmark")
    assert poll() is False
    with pytest.raises(AirflowSkipException, match=f"benchmark ended {state}"):
        poll()
    # the task log says why and what to clear (Airflow's own line says "Skipping task."):
    # both, since the checklist is not downstream of the benchmark
    assert f"skipped: benchmark ended {state}" in caplog.text
    assert "To run both again, clear benchmark and quality_gate together: select both in " \
        "the run's grid and Clear them with their downstream tasks; quality_gate is not " \
        "downstream of benchmark, so clearing benchmark alone leaves quality_gate skipped " \
        "and publish skipped after it" in caplog.text


def test_a_benchmark_not_running_past_the_limit_reschedules_the_checklist():
    clock = Clock()
    ti = FakeTI(None, "queued", "up_for_retry", "up_for_retry")
    poll = sibling.finished(ti, "d", "r", "benchmark", timedelta(seconds=60), clock)
    assert poll() is False  # no task instance yet: the timer starts
    clock.now = 30
    assert poll() is False
    clock.now = 59
    assert poll() is False
    clock.now = 60
    with pytest.raises(AirflowRescheduleException):
        poll()


@pytest.mark.parametrize("state", [None, "queued", "up_for_retry"])
def test_a_rescheduled_checklist_gives_its_slot_back_at_once_beside_an_idle_benchmark(state):
    """It would redo its reads only to wait again: it starts only beside a running or
    finished benchmark."""
    context = {"ti": FakeTI(state), "run_id": "r", "task_reschedule_count": 1}
    with pytest.raises(AirflowRescheduleException):
        sibling.waiting_for(context, "d", "benchmark")


@pytest.mark.parametrize("state", ["running", "success"])
def test_a_rescheduled_checklist_starts_beside_a_running_or_finished_benchmark(state):
    context = {"ti": FakeTI(state, "success"), "run_id": "r", "task_reschedule_count": 2}
    poll = sibling.waiting_for(context, "d", "benchmark")
    assert poll() is True and context["ti"].states == []


def test_a_first_attempt_does_its_own_work_before_asking():
    context = {"ti": FakeTI(), "run_id": "r", "task_reschedule_count": 0}
    sibling.waiting_for(context, "d", "benchmark")
    assert context["ti"].asked == []


def test_running_restarts_the_not_running_timer():
    clock = Clock()
    ti = FakeTI("queued", "running", "up_for_retry", "up_for_retry")
    poll = sibling.finished(ti, "d", "r", "benchmark", timedelta(seconds=60), clock)
    assert poll() is False
    clock.now = 50
    assert poll() is False  # running: the wait is the benchmark's own time
    clock.now = 100
    assert poll() is False  # a retry: the timer starts again here
    clock.now = 159
    assert poll() is False


def test_the_results_are_read_only_once_the_benchmark_finished(monkeypatch):
    polls, reads = iter([False, False, True]), []
    monkeypatch.setattr("recforge.stages.benchmark.bench_results",
                        lambda run: reads.append(run) or {"summary": "ok"})
    run = object.__new__(Run)
    got = awaited_results(run, lambda: next(polls), first_poll=0.001)
    assert got == {"summary": "ok"} and reads == [run]
    assert next(polls, "drained") == "drained"


@pytest.mark.parametrize("kind", ["classification", "segmentation", "detection"])
def test_the_checklist_is_not_downstream_of_the_benchmark(kind):
    """Why the skipped checklist's log asks to clear both: clearing the benchmark with its
    downstream tasks does not reach the checklist, which would stay skipped."""
    from recforge.stages import upstream

    waits = upstream(kind)

    def ancestors(task: str) -> set[str]:
        found = set(waits[task])
        for t in waits[task]:
            found |= ancestors(t)
        return found

    assert "benchmark" not in ancestors("quality_gate")
    assert {"benchmark", "quality_gate"} <= waits["publish"]
