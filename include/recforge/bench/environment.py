"""The MXNet environment: the interpreter MXNet's loaders run in, and one call into it.

MXNet 1.9.1 (its last release) needs numpy < 1.24, which no current Airflow, pandas or OpenCV
accepts. So MXNet lives in an environment of its own, named by one setting, and the loader
benchmark runs its MXNet work there as one child process per benchmark (never per batch):

1. ``$RECFORGE_MXNET_PYTHON``, else Airflow's ``[recforge] mxnet_python``
   (``AIRFLOW__RECFORGE__MXNET_PYTHON``): the path of that environment's ``python``;
2. else this interpreter, when it can import MXNet itself (a single-environment install);
3. else ``MXNetEnvironmentMissing``, naming the setting and how to make the environment — a
   benchmark never silently skips, so publish never goes through unmeasured.

The child runs ``python -m recforge.bench.worker`` (the same recforge version must be
installed there: it is checked) and exchanges JSON files with this process. A failure the
child understands (``LoaderBenchError``: a bad option, a split too small) comes back as the
same error; a child that dies (a signal, an import error, out of memory) fails with its exit
status and the tail of its stderr.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from recforge.bench.records import LoaderBenchError
from recforge.errors import RecforgeFailure

log = logging.getLogger(__name__)

ENV_VAR = "RECFORGE_MXNET_PYTHON"
AIRFLOW_OPTION = ("recforge", "mxnet_python")
STDERR_TAIL = 4000  # characters of a dead child's stderr kept in the error

HOW_TO = (
    f"set {ENV_VAR} (or Airflow's [recforge] mxnet_python, AIRFLOW__RECFORGE__MXNET_PYTHON) "
    "to the python of an environment with MXNet and recforge: python3.11 -m venv "
    "/opt/recforge/mxnet-venv && /opt/recforge/mxnet-venv/bin/pip install -r "
    "requirements-mxnet.txt -c constraints-mxnet.txt 'recforge[mxnet]' (in this repository: "
    "make venv builds .venv-mxnet); see docs/operations.md, 'The MXNet environment'"
)


class MXNetEnvironmentMissing(LoaderBenchError):
    """No interpreter with MXNet is configured or found; the message says how to make one."""


class MXNetProcessFailed(RuntimeError):
    """The MXNet child process died (signal, crash, out of memory): its exit status and the
    tail of its stderr. Not a ``RecforgeFailure``: the task's retries apply."""


def _airflow_setting() -> str | None:
    if importlib.util.find_spec("airflow") is None:
        return None
    try:
        from airflow.configuration import conf

        return conf.get(*AIRFLOW_OPTION, fallback=None) or None
    except Exception as exc:  # an unconfigured Airflow must not break the CLI
        log.debug("[recforge] mxnet_python unreadable: %s", exc)
        return None


def mxnet_python() -> str:
    """The interpreter MXNet's loaders run in (see the module docstring for the order)."""
    configured = os.environ.get(ENV_VAR) or _airflow_setting()
    if configured:
        path = Path(configured).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise MXNetEnvironmentMissing(
                f"{ENV_VAR} / [recforge] mxnet_python is {configured!r}, which is not an "
                f"executable file; {HOW_TO}")
        return str(path)
    if importlib.util.find_spec("mxnet") is not None:
        return sys.executable
    raise MXNetEnvironmentMissing(
        f"the loader benchmark needs MXNet, which this interpreter ({sys.executable}) cannot "
        f"import and no MXNet environment is configured; {HOW_TO}")


def call(target: str, kwargs: dict, python: str | None = None,
         pythonpath: list[str] | None = None, timeout: float | None = None):
    """Run ``target`` (``"module:function"``) with ``kwargs`` in the MXNet environment and
    return its JSON result. One process per call: callers put a whole benchmark in one call.

    ``pythonpath``: folders put first on the child's ``sys.path`` (tests use it for their own
    helpers). Raises the child's ``LoaderBenchError`` as such, ``MXNetEnvironmentMissing``
    when the interpreter has no MXNet or another recforge, ``MXNetProcessFailed`` when it dies.
    """
    from recforge import __version__

    python = python or mxnet_python()
    with tempfile.TemporaryDirectory(prefix="recforge-mxnet-") as tmp:
        request, response = Path(tmp) / "request.json", Path(tmp) / "response.json"
        request.write_text(json.dumps({"target": target, "kwargs": kwargs,
                                       "recforge_version": __version__}))
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = os.pathsep.join([*pythonpath, env.get("PYTHONPATH", "")])
        log.info("MXNet environment: %s -m recforge.bench.worker %s", python, target)
        try:
            proc = subprocess.run([python, "-m", "recforge.bench.worker", str(request),
                                   str(response)], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, timeout=timeout, check=False)
        except OSError as exc:
            raise MXNetEnvironmentMissing(f"cannot start {python}: {exc}; {HOW_TO}") from exc
        except subprocess.TimeoutExpired as exc:
            raise MXNetProcessFailed(f"the MXNet process ({python}) ran past {timeout} s "
                                     f"running {target}; it was killed") from exc
        stderr = proc.stderr.decode("utf-8", "replace")
        for line in stderr.splitlines()[-50:]:
            log.info("mxnet process: %s", line)
        reply = json.loads(response.read_text()) if response.exists() else None
    if reply is not None and "error" in reply:
        err = reply["error"]
        kind = {"environment": MXNetEnvironmentMissing,
                "loader": LoaderBenchError}.get(err["kind"], RecforgeFailure)
        message = err["message"] + (f"; {HOW_TO}" if err["kind"] == "environment" else "")
        raise kind(message)
    if proc.returncode != 0 or reply is None:
        raise MXNetProcessFailed(
            f"the MXNet process ({python} -m recforge.bench.worker {target}) exited with "
            f"status {proc.returncode}{_signal_name(proc.returncode)} without a result; "
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
