"""``recforge build`` imports the later stages' slow modules in a background thread: it never
masks an import error, runs only while this process waits for its forked shard workers, and
is done before the next stage starts."""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import sys
import threading

import pytest

from recforge import pipeline, stages
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
    fakes = {"split": lambda run: {"shards": ["s0", "s1", "s2"]},
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
    fakes = {"split": lambda run: {"shards": ["s0"]}, "pack": lambda run, shard: {},
             "benchmark": lambda run: {}}
    monkeypatch.setattr(stages, "stages_for", lambda kind: plan)
    monkeypatch.setattr(stages, "entry", lambda task_id: fakes[task_id])
    pipeline.build(make_spec("unused-bucket"), run_id="solo", workers=1)
    assert probe not in sys.modules  # pack imported in this thread: no import raced it


def test_no_warm_up_when_every_core_packs(modules, monkeypatch):
    # the imports would take a core from the shards and only move the time, not save it
    probe = modules("recforge_warm_busy", "VALUE = 5\n")
    plan = [Stage("split"), Stage("pack", per_shard=True), Stage("benchmark", imports=(probe,))]
    fakes = {"split": lambda run: {"shards": ["s0", "s1"]}, "pack": lambda run, shard: {},
             "benchmark": lambda run: {}}
    monkeypatch.setattr(stages, "stages_for", lambda kind: plan)
    monkeypatch.setattr(stages, "entry", lambda task_id: fakes[task_id])
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    calls = []
    monkeypatch.setattr(pipeline, "warm_imports", lambda names: calls.append(list(names)))
    pipeline.build(make_spec("unused-bucket"), run_id="busy", workers=2)
    assert calls == []
