"""The test tiers: which tests a bare ``pytest`` leaves out, and how ``make test`` spreads the
whole suite over CPU cores (pytest-xdist, ``--dist loadgroup``).

A bare ``pytest`` (no ``-m``, no paths) runs the default tier: unit and single-stage tests on
the moto server, spread over the CPU cores. Tests carrying one of :data:`SLOW` are deselected
there, and the terminal summary says how many and how to run them. Naming paths or node ids,
giving ``-m``, passing ``--all-tiers`` or setting ``RECFORGE_TEST_TIERS=all`` (what
``make test`` does) runs what was asked for, every tier included, in one process unless the
command asks for workers (``-n``).

Under xdist (``--dist loadgroup``) the work units are those of :func:`work_unit`: a module's
tests stay on one worker (its module-scoped fixtures, a built dataset, are built once), the
[rgw] cases share one Ceph cluster, and the Airflow tiers (e2e, celery, browser) run one
after another on one worker.
"""

from __future__ import annotations

import os
import re

import pytest

# marker → what it selects (declared in pyproject.toml; --strict-markers refuses others)
SLOW = ("e2e", "celery", "browser", "packaging", "rgw", "mxnet", "pipeline")
ALL_TIERS_ENV = "RECFORGE_TEST_TIERS"
_LEFT_OUT = pytest.StashKey[int]()
_WORKER_KEY = "recforge_default_tier"


def addoption(parser) -> None:
    parser.addoption(
        "--all-tiers", action="store_true", default=False,
        help="run every tier even with no paths and no -m (also: RECFORGE_TEST_TIERS=all); "
             "a bare pytest runs the default tier only")


def default_tier_only(config) -> bool:
    """True when only the default tier runs: no paths, no ``-m``, no ``--all-tiers``.
    An xdist worker takes the controller's answer (its own arguments are rebuilt)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and _WORKER_KEY in workerinput:
        return workerinput[_WORKER_KEY]
    return (config.args_source == pytest.Config.ArgsSource.TESTPATHS
            and not config.option.markexpr
            and not config.getoption("all_tiers")
            and os.environ.get(ALL_TIERS_ENV, "").lower() != "all")


def spread_default_tier(config) -> None:
    """A bare ``pytest`` runs the default tier over the CPU cores (pytest-xdist, up to four
    workers), unless the command names ``-n``/``--dist``/``--tx`` or ``--pdb``."""
    if hasattr(config, "workerinput") or not hasattr(config.option, "numprocesses"):
        return  # an xdist worker, or xdist is not installed
    option = config.option
    if option.numprocesses is not None or option.dist != "no" or option.tx or \
            option.usepdb or option.collectonly or not default_tier_only(config):
        return
    workers = min(4, os.cpu_count() or 1)
    if workers > 1:
        option.numprocesses, option.dist = workers, "loadgroup"


def slow_tiers(item) -> list[str]:
    return [m for m in SLOW if item.get_closest_marker(m)]


def deselect_slow(config, items) -> None:
    """Leave the slow tiers out of a bare ``pytest``; count them for the summary."""
    if not default_tier_only(config):
        return
    slow = [item for item in items if slow_tiers(item)]
    if slow:
        chosen = {id(item) for item in slow}
        items[:] = [item for item in items if id(item) not in chosen]
        config.hook.pytest_deselected(items=slow)
    config.stash[_LEFT_OUT] = len(slow)


# an [rgw] case: "rgw" among the ids in its brackets ([rgw], [voc-rgw], [rgw-slowdown])
_RGW_CASE = re.compile(r"\[(?:[^\]]*-)?rgw(?:-[^\]]*)?\]$")
_RGW_MODULES = ("tests/dev/test_compose_rgw.py",)  # starts Ceph through the compose script
_AIRFLOW_DIR = "tests/e2e/"  # every e2e, celery and browser test lives here


# the work units that take longest (minutes each, one after another inside): handed out
# first, so the short modules fill the other workers meanwhile
LONGEST_FIRST = ("airflow", "rgw")


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: ``airflow`` (the Airflow tiers, one after another: one
    Celery stack on the machine's Redis queues), ``rgw`` (every [rgw] case, on one Ceph
    cluster), else its module (module- and class-scoped fixtures are built once)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(_AIRFLOW_DIR):
        return "airflow"
    if path in _RGW_MODULES or _RGW_CASE.search(nodeid):
        return "rgw"
    return path


def make_scheduler(config, log):
    """``--dist loadgroup`` schedules the :func:`work_unit` s. (pytest-xdist 3.8's own
    ``xdist_group`` marks no longer reach its scheduler under pytest 9: it renames
    ``item._nodeid``, which pytest 9 does not read.)"""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the longest units first, the modules after them
                for unit in reversed(LONGEST_FIRST):
                    if unit in self.workqueue:
                        self.workqueue.move_to_end(unit, last=False)
                self.ordered = True
            super()._assign_work_unit(node)

    return TierScheduling(config, log)


def configure_node(node) -> None:
    """xdist controller → worker: whether only the default tier runs."""
    node.workerinput[_WORKER_KEY] = default_tier_only(node.config)


def worker_finished(session) -> None:
    """xdist worker → controller: how many tests it left out."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["recforge_left_out"] = session.config.stash.get(_LEFT_OUT, 0)


def node_down(node) -> None:
    left_out = getattr(node, "workeroutput", {}).get("recforge_left_out")
    if left_out is not None:
        stash = node.config.stash
        stash[_LEFT_OUT] = max(stash.get(_LEFT_OUT, 0), left_out)


def summary_line(config) -> str | None:
    left_out = config.stash.get(_LEFT_OUT, 0)
    if not left_out or hasattr(config, "workerinput"):
        return None
    return (f"default tier: {left_out} slow-tier tests left out ({', '.join(SLOW)}); "
            f"run everything with `make test` (or `pytest --all-tiers`), one tier with "
            f"`pytest -m <marker>`, or name the test paths")
