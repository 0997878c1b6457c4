"""The MXNet environment: the interpreter MXNet's loaders run in, and one call into it.

MXNet 1.9.1 (its last release) needs numpy < 1.24, which no current Airflow, pandas or OpenCV
accepts. So MXNet lives in an environment of its own, named by one setting, and the loader
benchmark runs its MXNet work there as one child process per benchmark (never per batch):

1. ``$RECFORGE_MXNET_PYTHON``, else Airflow's ``[recforge] mxnet_python``
   (``AIRFLOW__RECFORGE__MXNET_PYTHON``): the path of that environment's ``python``;
2. else this interpreter, when it can import MXNet itself (a single-environment install);
3. else ``.venv-mxnet/bin/python`` of the checkout recforge is installed from (an editable
   install: the folder above ``include/recforge``), the environment ``make venv`` builds, so
   ``airflow standalone`` on a checkout needs no setting;
4. else ``MXNetEnvironmentMissing``, naming every place looked at and how to make the
   environment — a benchmark never silently skips, so publish never goes through unmeasured.

The child runs ``python -m recforge.bench.worker`` (the same recforge version must be
installed there: it is checked) and exchanges JSON files with this process. A failure the
child understands (``LoaderBenchError``: a bad option, a split too small) comes back as the
same error; a child that dies (a signal, an import error, out of memory) fails with its exit
status and the tail of its stderr; one still running after ``CALL_LIMIT_S`` is killed and
fails the same way, on the command line as in a DAG.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from recforge import settings
from recforge.bench.records import LoaderBenchError
from recforge.errors import RecforgeFailure

log = logging.getLogger(__name__)

ENV_VAR = "RECFORGE_MXNET_PYTHON"
CHECKOUT_VENV = Path(".venv-mxnet") / "bin" / "python"  # what ``make venv`` builds
STDERR_TAIL = 4000  # characters of a dead child's stderr kept in the error
QUIET_POLL_S = 0.02  # how often the caller looks for its ``quiet`` event or a dead child
QUIET_WAIT_S = 900.0  # the longest a child waits for ``quiet``: a caller that died never
                      # leaves it waiting for good
CALL_LIMIT_S = 1500.0  # one call's child, its wait for ``quiet`` included: a benchmark reads
                       # a bounded window, so a child still running then is stuck (the DAG's
                       # benchmark task allows 30 minutes in all; the command line the same)

HOW_TO = (
    f"set {ENV_VAR} (or Airflow's [recforge] mxnet_python, {settings.MXNET_PYTHON.env_var}) "
    "to the python of an environment with MXNet and recforge: python3.11 -m venv "
    "/opt/recforge/mxnet-venv && /opt/recforge/mxnet-venv/bin/pip install -r "
    "requirements-mxnet.txt -c constraints-mxnet.txt 'recforge[mxnet]' (in a checkout: "
    f"make venv builds {CHECKOUT_VENV}, found there without a setting); see "
    "docs/operations.md, 'The MXNet environment'"
)


class MXNetEnvironmentMissing(LoaderBenchError):
    """No interpreter with MXNet is configured or found; the message says how to make one."""


class MXNetProcessFailed(RuntimeError):
    """The MXNet child process died (signal, crash, out of memory): its exit status and the
    tail of its stderr. Not a ``RecforgeFailure``: the task's retries apply."""


def _airflow_setting() -> str | None:
    """Airflow's ``[recforge] mxnet_python``, read without importing Airflow where it is not
    imported yet (the command line; the MXNet environment has no Airflow at all): see
    :func:`recforge.settings.get_without_airflow`."""
    return settings.get_without_airflow(settings.MXNET_PYTHON)


def checkout_python() -> Path | None:
    """``.venv-mxnet/bin/python`` of the checkout recforge is installed from, whether it
    exists or not; ``None`` for an install that is no checkout (a wheel in site-packages),
    which has no such folder beside it."""
    package = Path(__file__).resolve().parents[1]  # include/recforge
    if package.parent.name != "include":
        return None
    return package.parents[1] / CHECKOUT_VENV


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def mxnet_python() -> str:
    """The interpreter MXNet's loaders run in (see the module docstring for the order)."""
    configured = os.environ.get(ENV_VAR) or _airflow_setting()
    if configured:
        path = Path(configured).expanduser()
        if not _executable(path):
            raise MXNetEnvironmentMissing(
                f"{ENV_VAR} / [recforge] mxnet_python is {configured!r}, which is not an "
                f"executable file; {HOW_TO}")
        return str(path)
    if importlib.util.find_spec("mxnet") is not None:
        return sys.executable
    beside = checkout_python()
    if beside is not None and _executable(beside):
        log.info("MXNet environment: %s, beside the checkout (no %s set)", beside, ENV_VAR)
        return str(beside)
    looked = (f"there is no {beside}" if beside is not None
              else f"recforge is not installed from a checkout (no {CHECKOUT_VENV} beside it)")
    raise MXNetEnvironmentMissing(
        f"the loader benchmark needs MXNet, and none was found: {ENV_VAR} and Airflow's "
        f"[recforge] mxnet_python ({settings.MXNET_PYTHON.env_var}) are unset, this "
        f"interpreter ({sys.executable}) cannot import mxnet, and {looked}; {HOW_TO}")


def call(target: str, kwargs: dict, python: str | None = None,
         pythonpath: list[str] | None = None, timeout: float | None = CALL_LIMIT_S,
         quiet: threading.Event | None = None):
    """Run ``target`` (``"module:function"``) with ``kwargs`` in the MXNet environment and
    return its JSON result. One process per call: callers put a whole benchmark in one call.

    ``pythonpath``: folders put first on the child's ``sys.path`` (tests use it for their own
    helpers). ``timeout``: the seconds the child may take (None: no limit). ``quiet``: set
    by the caller once nothing else of its own competes for the CPU; the target gets
    ``quiet_file``, a path that exists from then on, and waits for it before its timed work
    (:func:`wait_for_quiet`). Raises the child's ``LoaderBenchError`` as such,
    ``MXNetEnvironmentMissing`` when the interpreter has no MXNet or another recforge,
    ``MXNetProcessFailed`` when it dies or runs past ``timeout``.
    """
    from recforge import __version__

    python = python or mxnet_python()
    with tempfile.TemporaryDirectory(prefix="recforge-mxnet-") as tmp:
        request, response = Path(tmp) / "request.json", Path(tmp) / "response.json"
        quiet_file = Path(tmp) / "quiet"
        if quiet is not None:
            kwargs = {**kwargs, "quiet_file": str(quiet_file)}
        request.write_text(json.dumps({
            "target": target, "recforge_version": __version__, "kwargs": kwargs}))
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = os.pathsep.join([*pythonpath, env.get("PYTHONPATH", "")])
        log.info("MXNet environment: %s -m recforge.bench.worker %s", python, target)
        # stderr goes to a file, not a pipe: nobody reads a pipe while this waits for
        # ``quiet``, and a child that fills one would block
        with open(Path(tmp) / "stderr", "w+b") as stderr_file:
            try:
                proc = subprocess.Popen([python, "-m", "recforge.bench.worker", str(request),
                                         str(response)], env=env, stdout=subprocess.DEVNULL,
                                        stderr=stderr_file)
            except OSError as exc:
                raise MXNetEnvironmentMissing(f"cannot start {python}: {exc}; {HOW_TO}") \
                    from exc
            _drive(proc, quiet, quiet_file, timeout, target)
            stderr_file.seek(0)
            stderr = stderr_file.read().decode("utf-8", "replace")
        for line in stderr.splitlines()[-50:]:
            log.info("mxnet process: %s", line)
        reply = json.loads(response.read_text()) if response.exists() else None
    return _result(reply, proc.returncode, stderr, python, target)


def _drive(proc: subprocess.Popen, quiet: threading.Event | None, quiet_file: Path,
           timeout: float | None, target: str) -> None:
    """``call``'s side while the child runs: touch ``quiet_file`` once ``quiet`` is set,
    wait for the child's end; a child past ``timeout`` or an error here kills it."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        if quiet is not None:
            while proc.poll() is None and not quiet.wait(QUIET_POLL_S):
                if deadline is not None and time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(proc.args, timeout)
            quiet_file.touch()
        proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        raise MXNetProcessFailed(f"the MXNet process ({proc.args[0]}) ran past {timeout} s "
                                 f"running {target}; it was killed") from exc
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def _result(reply: dict | None, returncode: int, stderr: str, python: str, target: str):
    """The child's result, or its failure raised as ``call`` documents it."""
    if reply is not None and "error" in reply:
        err = reply["error"]
        kind = {"environment": MXNetEnvironmentMissing,
                "loader": LoaderBenchError}.get(err["kind"], RecforgeFailure)
        message = err["message"] + (f"; {HOW_TO}" if err["kind"] == "environment" else "")
        raise kind(message)
    if returncode != 0 or reply is None:
        raise MXNetProcessFailed(
            f"the MXNet process ({python} -m recforge.bench.worker {target}) exited with "
            f"status {returncode}{_signal_name(returncode)} without a result; "
            f"stderr ends with:\n{stderr[-STDERR_TAIL:]}")
    return reply["result"]


def _signal_name(returncode: int) -> str:
    if returncode >= 0:
        return ""
    import signal

    try:
        return f" (killed by {signal.Signals(-returncode).name})"
    except ValueError:
        return f" (killed by signal {-returncode})"


def wait_for_quiet(quiet_file: str | None, limit_s: float = QUIET_WAIT_S) -> float:
    """The child's side of ``call(..., quiet=)``: block until ``quiet_file`` exists (None:
    at once); returns the seconds waited. The untimed work runs before it, beside the
    caller's; the timed work after it, alone. At most ``limit_s``: then it goes on."""
    if quiet_file is None:
        return 0.0
    started = time.monotonic()
    while not os.path.exists(quiet_file) and time.monotonic() - started < limit_s:
        time.sleep(QUIET_POLL_S / 2)
    waited = time.monotonic() - started
    log.info("bench: waited %.1f s for the caller's quiet", waited)
    return waited

