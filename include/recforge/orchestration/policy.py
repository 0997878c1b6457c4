"""A cluster policy that makes a missing recforge pool harmless: the task runs in
``default_pool`` instead of waiting forever in "scheduled".

Registered through the ``airflow.policy`` entry point of the recforge package, so every
Airflow component where recforge is installed loads it; nothing to add to
``airflow_local_settings.py``. Airflow calls ``task_instance_mutation_hook`` in the
scheduler when it creates task instances (and when a mapped task expands), where it has
the metadata database: the hook looks the pool up in the scheduler's own session (one query
per pool per :data:`CACHE_S`; no flush, no commit) and, when it does not exist, moves the
task to ``default_pool`` and logs a warning with the command that creates the pools. The
tasks' ``max_active_tis_per_dagrun`` caps still apply there. Tasks in any other pool are left alone.
"""

from __future__ import annotations

import contextlib
import logging
import time

from airflow.policies import hookimpl

from recforge.orchestration import pools

log = logging.getLogger(__name__)
CACHE_S = 30.0
FALLBACK_POOL = "default_pool"
_seen: dict[str, tuple[float, bool]] = {}


def pool_exists(name: str, session=None) -> bool:
    """Whether the pool exists: read in the scheduler's own ``session`` (no flush, no commit:
    the hook runs inside its transaction), else on a connection of its own."""
    now = time.monotonic()
    cached = _seen.get(name)
    if cached and now - cached[0] < CACHE_S:
        return cached[1]
    from airflow.models.pool import Pool
    from sqlalchemy import select

    query = select(Pool.id).where(Pool.pool == name)
    if session is not None:
        with session.no_autoflush:
            found = session.execute(query).first() is not None
    else:
        from airflow import settings

        with settings.engine.connect() as conn:
            found = conn.execute(query).first() is not None
    _seen[name] = (now, found)
    return found


def _session_of(*objects):
    from sqlalchemy.orm import object_session

    for obj in objects:
        if obj is not None:
            with contextlib.suppress(Exception):
                session = object_session(obj)
                if session is not None:
                    return session
    return None


@hookimpl
def task_instance_mutation_hook(task_instance, dag_run=None) -> None:
    name = getattr(task_instance, "pool", None)
    if name not in pools.NAMES:
        return
    try:
        exists = pool_exists(name, _session_of(dag_run, task_instance))
    except Exception as err:  # no database here (a parse or a worker): nothing to decide
        log.debug("recforge pool check skipped: %s", err)
        return
    if not exists:
        task_instance.pool = FALLBACK_POOL
        log.warning("pool %r does not exist: %s.%s[%s] runs in %s instead (its per-run cap "
                    "still applies). Create the recforge pools with: %s", name,
                    task_instance.dag_id, task_instance.task_id, task_instance.map_index,
                    FALLBACK_POOL, pools.IMPORT_COMMAND)


def _mark_hook_active() -> None:
    """Airflow skips the hook when a DAG run creates its task instances unless an
    ``airflow_local_settings`` module registered one (``is_noop``); a hook registered by
    entry point is just as real, so say so."""
    from airflow import settings

    settings.task_instance_mutation_hook.is_noop = False


_mark_hook_active()
