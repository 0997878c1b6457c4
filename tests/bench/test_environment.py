"""The MXNet environment: named by one setting, started once per benchmark, and a failure
there fails the benchmark with what happened (never a silent skip that lets publish through).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from recforge.bench import LoaderBenchError, environment, run_and_gate, run_benchmark
from recforge.spec.bench import BenchOptions, BenchSpec
from tests.bench.test_bench import FAST, pack

pytestmark = pytest.mark.mxnet  # children in the MXNet environment: a slow tier

REPO = Path(__file__).resolve().parents[2]


def die_loudly(quiet_file: str | None = None) -> None:
    """A child that dies the way a crashing MXNet does: a message on stderr, then a signal."""
    sys.stderr.write("terminate called after throwing an instance of 'dmlc::Error'\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def wait_then_report(quiet_file: str | None = None) -> dict:
    """A child that waits for its caller's quiet, as the benchmark's timed part does."""
    import time

    waited = environment.wait_for_quiet(quiet_file)
    return {"waited": waited, "quiet_at": time.time(), "told": quiet_file is not None}


def answer_then_linger(quiet_file: str | None = None) -> str:
    """A child whose answer is ready while a thread of its own still runs, as MXNet's engine
    and OpenMP threads can be at exit: an interpreter's normal exit waits for it for ever."""
    threading.Thread(target=threading.Event().wait, name="lingering").start()
    return "answered"


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


@pytest.mark.parametrize("where", ["airflow_cfg", "env_var"])
def test_the_command_line_reads_airflows_setting_without_importing_airflow(where, tmp_path):
    """Outside Airflow, ``[recforge] mxnet_python`` is read from ``AIRFLOW__RECFORGE__*`` or
    ``$AIRFLOW_HOME/airflow.cfg`` by hand: importing Airflow costs seconds and reconfigures
    logging in the middle of a command."""
    python = tmp_path / "mxnet-venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    home = tmp_path / "airflow"
    home.mkdir()
    configured = str(python) if where == "airflow_cfg" else "/nowhere/python"
    (home / "airflow.cfg").write_text(  # a %-format elsewhere, as Airflow's own cfg has
        f"[logging]\nlog_format = %%(asctime)s %%(message)s\n\n"
        f"[recforge]\nmxnet_python = {configured}\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AIRFLOW") and k != environment.ENV_VAR}
    env["AIRFLOW_HOME"] = str(home)
    if where == "env_var":
        env["AIRFLOW__RECFORGE__MXNET_PYTHON"] = str(python)
    probe = ("import sys\n"
             "from recforge.bench import environment\n"
             "print(environment.mxnet_python())\n"
             "assert 'airflow' not in sys.modules, 'airflow was imported'\n")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(python)


def test_no_mxnet_anywhere_fails_at_once_naming_every_place_looked_at(dataset, monkeypatch,
                                                                     tmp_path):
    monkeypatch.delenv(environment.ENV_VAR)
    monkeypatch.setattr(environment, "_airflow_setting", lambda: None)
    nowhere = tmp_path / "checkout" / environment.CHECKOUT_VENV
    monkeypatch.setattr(environment, "checkout_python", lambda: nowhere)
    with pytest.raises(environment.MXNetEnvironmentMissing) as err:
        run_benchmark(str(dataset), BenchOptions(**FAST))
    msg = str(err.value)
    for place in ("RECFORGE_MXNET_PYTHON", "[recforge] mxnet_python",
                  "AIRFLOW__RECFORGE__MXNET_PYTHON", f"({sys.executable}) cannot import mxnet",
                  f"there is no {nowhere}", "make venv"):
        assert place in msg
    assert isinstance(err.value, LoaderBenchError)  # deterministic: no retries


def test_the_environment_make_venv_builds_is_found_beside_the_checkout(monkeypatch):
    """Nothing set: an editable install finds ``.venv-mxnet`` in its checkout, the folder
    above ``include/recforge``, so ``airflow standalone`` on a checkout needs no setting."""
    monkeypatch.delenv(environment.ENV_VAR)
    monkeypatch.setattr(environment, "_airflow_setting", lambda: None)
    beside = REPO / ".venv-mxnet" / "bin" / "python"
    assert environment.checkout_python() == beside
    if not beside.exists():
        pytest.skip("no .venv-mxnet in this checkout (make venv builds it)")
    assert environment.mxnet_python() == str(beside)
    assert environment.call("tests.bench.test_environment:mxnet_version", {},
                            pythonpath=[str(REPO)]) == "1.9.1"


def test_an_installed_wheel_looks_for_no_checkout(monkeypatch, tmp_path):
    """In site-packages there is no checkout: nothing beside the package is taken for one."""
    fake = tmp_path / "lib" / "python3.11" / "site-packages" / "recforge" / "bench"
    fake.mkdir(parents=True)
    monkeypatch.setattr(environment, "__file__", str(fake / "environment.py"))
    assert environment.checkout_python() is None
    monkeypatch.delenv(environment.ENV_VAR)
    monkeypatch.setattr(environment, "_airflow_setting", lambda: None)
    with pytest.raises(environment.MXNetEnvironmentMissing,
                       match="recforge is not installed from a checkout"):
        environment.mxnet_python()


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
    real = environment.subprocess.Popen

    def counting(*a, **k):
        calls.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(environment.subprocess, "Popen", counting)
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


def test_the_child_waits_for_its_callers_quiet():
    quiet = threading.Event()
    timer = threading.Timer(1.0, quiet.set)
    timer.start()
    set_at = time.time() + 1.0
    out = environment.call("tests.bench.test_environment:wait_then_report", {},
                           pythonpath=[str(REPO)], quiet=quiet)
    timer.join()
    assert out["told"] and out["quiet_at"] >= set_at - 0.1 and out["waited"] > 0


def test_without_quiet_the_child_does_not_wait():
    out = environment.call("tests.bench.test_environment:wait_then_report", {},
                           pythonpath=[str(REPO)])
    assert not out["told"] and out["waited"] == 0


def test_a_child_that_dies_before_quiet_is_not_waited_for():
    started = time.monotonic()
    with pytest.raises(environment.MXNetProcessFailed, match="SIGKILL"):
        environment.call("tests.bench.test_environment:die_loudly", {},
                         pythonpath=[str(REPO)], quiet=threading.Event())  # never set
    assert time.monotonic() - started < 60


def test_a_timeout_covers_the_wait_for_quiet():
    with pytest.raises(environment.MXNetProcessFailed, match="ran past"):
        environment.call("tests.bench.test_environment:wait_then_report", {},
                         pythonpath=[str(REPO)], quiet=threading.Event(), timeout=8)


def test_a_child_with_its_answer_ends_without_waiting_for_its_threads():
    started = time.monotonic()
    assert environment.call("tests.bench.test_environment:answer_then_linger", {},
                            pythonpath=[str(REPO)], timeout=45) == "answered"
    assert time.monotonic() - started < 45


def test_a_child_has_a_limit_when_the_caller_sets_none():
    """The command line's benchmark passes no timeout: a stuck child still ends."""
    import inspect

    limit = inspect.signature(environment.call).parameters["timeout"].default
    assert limit == environment.CALL_LIMIT_S
    assert environment.QUIET_WAIT_S < limit <= 30 * 60  # within the DAG task's 30 minutes


def test_the_benchmarks_timing_waits_for_quiet_and_its_value_check_does_not(dataset):
    """The value check runs before the caller is quiet, the timed sweep after it."""
    quiet = threading.Event()
    timer = threading.Timer(6.0, quiet.set)
    timer.start()
    started = time.monotonic()
    res = run_benchmark(str(dataset), BenchOptions(**FAST), quiet=quiet)
    timer.join()
    assert time.monotonic() - started >= 6.0
    assert res["value_check"]["batches"] >= 1 and res["runs"] and not res["problems"]
