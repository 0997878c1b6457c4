"""``recforge build`` imports the later stages' slow modules in a background thread: it never
masks an import error, runs while this process waits for its forked shard workers (on a
spare core) or else beside merge and validate, and is joined before what it imports is
used."""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import sys
import threading

import pytest

from recforge import pipeline, stages, warmup
from recforge.stages import Stage
from tests.common.sources import make_spec


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """Write importable modules into a fresh folder on ``sys.path``; forget them after."""
    made = []

    def make(name: str, body: str) -> str:
        (tmp_path / f"{name}.py").write_text(body)
        made.append(name)
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for name in made:
        sys.modules.pop(name, None)



def _planned(*shards: str) -> dict:
    """What split returns for these shards: one shard a pack task."""
    return {"shards": list(shards), "pack_tasks": [[s] for s in shards]}

def test_a_failing_import_is_left_to_the_stage(modules):
    broken = modules("recforge_warm_broken", "raise ImportError('boom: libfoo.so missing')\n")
    fine = modules("recforge_warm_fine", "VALUE = 1\n")
    pipeline.warm_imports([broken, fine]).join(30)
    assert gc.isenabled()  # the collector, paused while it imports, runs again
    assert broken not in sys.modules  # as if the thread had never tried
    assert sys.modules[fine].VALUE == 1  # a failure does not stop the modules after it
    with pytest.raises(ImportError, match="boom: libfoo.so missing"):
        importlib.import_module(broken)  # the stage's own import raises, as without warm-up


def test_nothing_to_import_starts_no_thread(modules):
    fine = modules("recforge_warm_done", "VALUE = 2\n")
    importlib.import_module(fine)
    assert pipeline.warm_imports([fine, "json"]) is None


def _warming() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "recforge-warm-imports"]


def test_build_warms_only_while_the_shard_workers_run(modules, monkeypatch):
    # slower than the shards: the next stage must still find it done (GX has import cycles;
    # a stage importing a package the thread is halfway through can get it half-initialised)
    probe = modules("recforge_warm_probe", "import time\ntime.sleep(1)\nVALUE = 3\n")
    plan = [Stage("split"), Stage("pack", per_shard=True),
            Stage("benchmark", imports=(probe,)), Stage("quality_gate", imports=(probe,))]
    seen = []
    fakes = {"split": lambda run: _planned("s0", "s1", "s2"),
             "pack": lambda run, shard: {"pid": os.getpid()},
             "benchmark": lambda run, quiet=None: seen.append((_warming(),
                                                                probe in sys.modules)),
             "quality_gate": lambda run, loader_results=None: {}}
    monkeypatch.setattr(stages, "stages_for", lambda kind: plan)
    monkeypatch.setattr(stages, "entry", lambda task_id: fakes[task_id])  # forked: inherited
    calls = []
    real = pipeline.warm_imports

    def recording(names):
        calls.append((list(names), len(multiprocessing.active_children())))
        return real(names)

    monkeypatch.setattr(pipeline, "warm_imports", recording)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)  # a core to spare beside 2 workers
    result = pipeline.build(make_spec("unused-bucket"), run_id="warm", workers=2)
    assert len({r["pid"] for r in result["pack"]} - {os.getpid()}) >= 1  # in workers
    assert calls == [([probe, probe], 2)]  # once, with both workers already forked
    assert seen == [([], True)]  # finished before the stage after the shards began
    assert sys.modules[probe].VALUE == 3


def test_no_warm_up_when_the_shards_run_in_this_thread(modules, monkeypatch):
    probe = modules("recforge_warm_unused", "VALUE = 4\n")
    plan = [Stage("split"), Stage("pack", per_shard=True), Stage("benchmark", imports=(probe,))]
    fakes = {"split": lambda run: _planned("s0"), "pack": lambda run, shard: {},
             "benchmark": lambda run: {}}
    monkeypatch.setattr(stages, "stages_for", lambda kind: plan)
    monkeypatch.setattr(stages, "entry", lambda task_id: fakes[task_id])
    pipeline.build(make_spec("unused-bucket"), run_id="solo", workers=1)
    assert probe not in sys.modules  # pack imported in this thread: no import raced it


def test_no_warm_up_when_every_core_packs(modules, monkeypatch):
    # the imports would take a core from the shards and only move the time, not save it
    probe = modules("recforge_warm_busy", "VALUE = 5\n")
    plan = [Stage("split"), Stage("pack", per_shard=True), Stage("benchmark", imports=(probe,))]
    fakes = {"split": lambda run: _planned("s0", "s1"), "pack": lambda run, shard: {},
             "benchmark": lambda run: {}}
    monkeypatch.setattr(stages, "stages_for", lambda kind: plan)
    monkeypatch.setattr(stages, "entry", lambda task_id: fakes[task_id])
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    calls = []
    monkeypatch.setattr(pipeline, "warm_imports", lambda names: calls.append(list(names)))
    pipeline.build(make_spec("unused-bucket"), run_id="busy", workers=2)
    assert calls == []


def test_without_a_spare_core_the_imports_run_beside_merge_and_validate(modules, monkeypatch):
    # merge and validate wait on S3 or the disk: a core is free for the imports even where
    # the shards filled them all; they go on beside the stages that need them, and the one
    # that asks for them gets the importing thread to join, never a half-imported module
    probe = modules("recforge_warm_after", "import time\ntime.sleep(2)\nVALUE = 6\n")
    plan = [Stage("split"), Stage("pack", per_shard=True), Stage("merge"), Stage("validate"),
            Stage("benchmark", imports=(probe,)), Stage("quality_gate", imports=(probe,))]
    seen = {}

    def gate(run, loader_results=None):
        importing = warmup.warm_imports([probe])
        seen["gate"] = importing is not None and importing.name == "recforge-warm-imports"
        importing.join(30)
        seen["value"] = sys.modules[probe].VALUE
        return {}

    fakes = {"split": lambda run: _planned("s0", "s1"),
             "pack": lambda run, shard: {},
             "merge": lambda run: seen.setdefault("merge", len(_warming())),
             "validate": lambda run: {},
             "benchmark": lambda run, quiet=None: {},
             "quality_gate": gate}
    order = []
    real_warm, real_module = pipeline.warm_imports, stages.module

    def warming(names):
        order.append(("warm", list(names)))
        return real_warm(names)

    def module(task_id):
        order.append(("module", task_id))
        return real_module(task_id)

    monkeypatch.setattr(stages, "stages_for", lambda kind: plan)
    monkeypatch.setattr(stages, "entry", lambda task_id: fakes[task_id])
    monkeypatch.setattr(stages, "module", module)
    monkeypatch.setattr(pipeline, "warm_imports", warming)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # both cores pack
    pipeline.build(make_spec("unused-bucket"), run_id="beside", workers=2)
    # every later stage's own module is imported first, on this thread
    assert order[:5] == [("module", t) for t in ("merge", "validate", "benchmark",
                                                  "quality_gate")] + [("warm", [probe, probe])]
    assert seen == {"merge": 1, "gate": True, "value": 6}


def test_a_second_call_gets_the_thread_still_importing(modules):
    slow = modules("recforge_warm_slow", "import time\ntime.sleep(0.5)\nVALUE = 7\n")
    other = modules("recforge_warm_other", "VALUE = 8\n")
    apart = modules("recforge_warm_apart", "VALUE = 9\n")
    first = warmup.warm_imports([slow])
    assert warmup.warm_imports([slow, other]) is first  # no second thread in its modules
    beside = warmup.warm_imports([apart])  # none of its modules: a thread of its own
    assert beside is not None and beside is not first
    beside.join(30)
    assert sys.modules[apart].VALUE == 9
    assert warmup.warm_imports([slow]) is first  # still the one importing it
    first.join(30)
    assert other not in sys.modules  # left to the caller, after the join


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``recforge_lazy_pkg`` whose ``heavy`` submodule counts its runs in
    ``recforge_lazy_pkg.RUNS``, and a module ``recforge_lazy_user`` that imports it at the
    top and uses it only inside a function."""
    pkg = tmp_path / "recforge_lazy_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("RUNS = []\n")
    (pkg / "heavy.py").write_text("import recforge_lazy_pkg\nrecforge_lazy_pkg.RUNS.append(1)\n"
                                  "def value():\n    return 42\n")
    (tmp_path / "recforge_lazy_user.py").write_text(
        "from recforge_lazy_pkg import heavy\n\ndef use():\n    return heavy.value()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield sys.modules
    for name in ("recforge_lazy_user", "recforge_lazy_pkg.heavy", "recforge_lazy_pkg"):
        sys.modules.pop(name, None)


def test_a_deferred_module_runs_on_first_use_only(package):
    warmup.defer("recforge_lazy_pkg.heavy")
    user = importlib.import_module("recforge_lazy_user")
    assert package["recforge_lazy_pkg"].RUNS == []  # bound by the import, not run
    assert user.use() == 42  # the first use runs it, and it works as an eager import
    assert package["recforge_lazy_pkg"].RUNS == [1]
    assert importlib.import_module("recforge_lazy_pkg.heavy").value() == 42
    assert package["recforge_lazy_pkg"].RUNS == [1]  # once


def test_the_warm_up_defers_what_a_package_never_calls(package, monkeypatch):
    monkeypatch.setattr(warmup, "UNUSED_BY", {"recforge_lazy_user": ("recforge_lazy_pkg.heavy",)})
    warmup.warm_imports(["recforge_lazy_user"]).join(30)
    assert "recforge_lazy_user" in sys.modules
    assert package["recforge_lazy_pkg"].RUNS == []
    assert sys.modules["recforge_lazy_user"].use() == 42


def test_deferring_a_missing_or_imported_module_changes_nothing():
    warmup.defer("recforge_no_such_package.child")
    warmup.defer("recforge_no_such_module")
    assert "recforge_no_such_package.child" not in sys.modules
    assert "recforge_no_such_module" not in sys.modules
    imported = sys.modules["json"]
    warmup.defer("json")
    assert sys.modules["json"] is imported


def test_great_expectations_imports_without_running_scipy_stats():
    """In a fresh interpreter: the checklist's warm-up imports GX and leaves SciPy's
    statistics unrun (~1 s of CPU), and they still work when something asks for them."""
    import subprocess

    code = ("import sys\nfrom recforge import warmup\n"
            "warmup.warm_imports(['great_expectations', 'great_expectations.expectations'])"
            ".join(120)\n"
            "assert 'great_expectations.expectations' in sys.modules\n"
            "print('ran before use:', 'scipy.stats._stats_py' in sys.modules)\n"
            "import scipy.stats\nprint('cdf:', scipy.stats.norm.cdf(0.0))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ran before use: False" in out.stdout
    assert "cdf: 0.5" in out.stdout
