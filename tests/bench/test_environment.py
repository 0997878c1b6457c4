"""The MXNet environment: named by one setting, started once per benchmark, and a failure
there fails the benchmark with what happened (never a silent skip that lets publish through).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from recforge.bench import LoaderBenchError, environment, run_and_gate, run_benchmark
from recforge.spec.bench import BenchOptions, BenchSpec
from tests.bench.test_bench import FAST, pack

REPO = Path(__file__).resolve().parents[2]


def die_loudly() -> None:
    """A child that dies the way a crashing MXNet does: a message on stderr, then a signal."""
    sys.stderr.write("terminate called after throwing an instance of 'dmlc::Error'\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def mxnet_version() -> str:
    import mxnet as mx

    return mx.__version__


@pytest.fixture
def dataset(tmp_path) -> Path:
    pack(tmp_path / "ds", n=32)
    return tmp_path / "ds"


def test_the_setting_names_the_interpreter(monkeypatch):
    monkeypatch.setenv(environment.ENV_VAR, os.environ[environment.ENV_VAR])
    assert environment.mxnet_python() == os.environ[environment.ENV_VAR]
    assert environment.call("tests.bench.test_environment:mxnet_version", {},
                            pythonpath=[str(REPO)]) == "1.9.1"


def test_no_mxnet_anywhere_fails_at_once_naming_the_setting(dataset, monkeypatch):
    monkeypatch.delenv(environment.ENV_VAR)
    monkeypatch.setattr(environment, "_airflow_setting", lambda: None)
    with pytest.raises(environment.MXNetEnvironmentMissing) as err:
        run_benchmark(str(dataset), BenchOptions(**FAST))
    assert "RECFORGE_MXNET_PYTHON" in str(err.value) and "make venv" in str(err.value)
    assert isinstance(err.value, LoaderBenchError)  # deterministic: no retries


def test_a_setting_that_is_not_an_interpreter_is_named(dataset, monkeypatch, tmp_path):
    monkeypatch.setenv(environment.ENV_VAR, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(environment.MXNetEnvironmentMissing, match="not an executable file"):
        run_benchmark(str(dataset), BenchOptions(**FAST))


def test_an_interpreter_without_mxnet_is_refused_by_name(dataset, monkeypatch):
    monkeypatch.setenv(environment.ENV_VAR, sys.executable)  # the core: recforge, no MXNet
    with pytest.raises(environment.MXNetEnvironmentMissing, match="cannot import mxnet"):
        run_benchmark(str(dataset), BenchOptions(**FAST))


def test_a_dead_child_fails_with_its_status_and_stderr():
    with pytest.raises(environment.MXNetProcessFailed) as err:
        environment.call("tests.bench.test_environment:die_loudly", {},
                         pythonpath=[str(REPO)])
    msg = str(err.value)
    assert "exited with status -9 (killed by SIGKILL)" in msg
    assert "dmlc::Error" in msg


def test_a_dead_benchmark_writes_no_passing_bench_json(dataset, monkeypatch, tmp_path):
    def dead(*_a, **_k):
        raise environment.MXNetProcessFailed("exited with status -11 (killed by SIGSEGV)")

    monkeypatch.setattr(environment, "call", dead)
    out = tmp_path / "bench.json"
    with pytest.raises(environment.MXNetProcessFailed):
        run_and_gate(str(dataset), BenchSpec(options=BenchOptions(**FAST)), str(out))
    assert not out.exists()


def test_one_child_process_per_benchmark(dataset, monkeypatch):
    calls = []
    real = environment.subprocess.run

    def counting(*a, **k):
        calls.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(environment.subprocess, "run", counting)
    res = run_benchmark(str(dataset), BenchOptions(**{**FAST, "thread_grid": (1, 2)}))
    assert len(res["runs"]) >= 1 and len(calls) == 1
    assert res["host"]["mxnet"] == "1.9.1"  # measured where MXNet lives, and said so


def test_another_recforge_in_the_mxnet_environment_is_named():
    from recforge.bench import worker

    reply = worker.serve({"target": "tests.bench.test_environment:mxnet_version",
                          "kwargs": {}, "recforge_version": "0.0.1"})
    assert reply["error"]["kind"] == "environment"
    assert "caller 0.0.1" in reply["error"]["message"]
    assert "install the same recforge into both" in reply["error"]["message"]


def test_dali_missing_names_its_extra(dataset, monkeypatch):
    from recforge import errors

    monkeypatch.setattr(errors, "_importable", lambda module: module != "nvidia.dali")
    with pytest.raises(errors.MissingExtra) as err:
        run_benchmark(str(dataset), BenchOptions(**FAST), loader="dali")
    assert "needs the 'dali' extra: pip install 'recforge[dali]'" in str(err.value)
    assert "bench.loader: mxnet" in str(err.value)
