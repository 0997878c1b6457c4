"""A task that waits inside for a sibling task of its run: the DAG's checklist starts after
validate, beside the loader benchmark, and needs the benchmark's results only for its
loader items (``recforge.stages.quality_gate``).

``finished(...)`` is what the waiting stage calls between polls. It asks Airflow for the
sibling's state (the Task SDK's ``get_task_states``, no database access from the task):

* ``success``: True, the results are in staging;
* failed, upstream_failed, skipped, removed: the waiting task is skipped
  (``AirflowSkipException``): the sibling's own failure is the run's failure and its alert,
  and a checklist without the loader's results would check nothing about the loader. The
  waiting task is not downstream of the sibling, so clearing the sibling (with its
  downstream tasks) leaves it skipped: its log says to clear both together (:func:`rerun`);
* running: False, keep waiting (the sibling's own timeout bounds it);
* anything else (none, scheduled, queued, up_for_retry, …) for longer than
  ``not_running_limit``: the waiting task is rescheduled (``AirflowRescheduleException``),
  so it gives its worker slot back. Where both tasks share one slot (``parallelism`` 1,
  ``airflow dags test`` running tasks one at a time) that slot is what the sibling waits for.

``waiting_for(context, ...)`` is the poll a task makes: a task that gave its slot back
before starts its own work again only beside a running or finished sibling, else it is
rescheduled again at once (a missing GPU worker does not make the checklist redo its reads
every few minutes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

log = logging.getLogger(__name__)

NOT_RUNNING_LIMIT = timedelta(minutes=5)
RESCHEDULE_AFTER = timedelta(seconds=30)
ENDED_WITHOUT_SUCCESS = frozenset({"failed", "upstream_failed", "skipped", "removed"})


def finished(ti, dag_id: str, run_id: str, task_id: str,
             not_running_limit: timedelta = NOT_RUNNING_LIMIT,
             clock: Callable[[], float] = time.monotonic) -> Callable[[], bool]:
    """The poll for ``task_id`` of this run (see the module docstring)."""
    not_running_since: list[float] = []

    def poll() -> bool:
        states = ti.get_task_states(dag_id=dag_id, task_ids=[task_id], run_ids=[run_id])
        state = (states.get(run_id) or {}).get(task_id)
        if state == "success":
            return True
        if state in ENDED_WITHOUT_SUCCESS:
            from airflow.sdk.exceptions import AirflowSkipException

            why = (f"{task_id} ended {state}: nothing to check its results against; its "
                   f"own failure is the run's. {rerun(task_id, getattr(ti, 'task_id', None))}")
            log.warning("skipped: %s", why)  # Airflow's own line says only "Skipping task."
            raise AirflowSkipException(why)
        if state == "running":
            not_running_since.clear()
            return False
        now = clock()
        if not not_running_since:
            not_running_since.append(now)
        if now - not_running_since[0] >= not_running_limit.total_seconds():
            from airflow.sdk.exceptions import AirflowRescheduleException

            log.info("%s has not been running for %s (%s): rescheduling this task so its "
                     "worker slot is free", task_id, not_running_limit, state)
            raise AirflowRescheduleException(datetime.now(tz=UTC) + RESCHEDULE_AFTER)
        return False

    return poll


def rerun(sibling: str, waiting: str | None) -> str:
    """What to clear to run the sibling and the waiting task again: both, since the waiting
    one is not downstream of the sibling (clearing the sibling with its downstream tasks
    leaves it skipped, and what waits for it, e.g. publish, is skipped again)."""
    waiting = waiting or "this task"
    return (f"To run both again, clear {sibling} and {waiting} together: select both in the "
            f"run's grid and Clear them with their downstream tasks; {waiting} is not "
            f"downstream of {sibling}, so clearing {sibling} alone leaves {waiting} skipped "
            "and publish skipped after it")


def waiting_for(context, dag_id: str, task_id: str) -> Callable[[], bool]:
    """The poll for ``task_id`` of the context's run (``finished``); first, for a task
    rescheduled before, the check that the sibling is running or done."""
    ti, run_id = context["ti"], context["run_id"]
    if context.get("task_reschedule_count"):
        finished(ti, dag_id, run_id, task_id, timedelta(0))()
    return finished(ti, dag_id, run_id, task_id)
