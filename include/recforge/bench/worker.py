"""The child side of ``recforge.bench.environment.call``, run in the MXNet environment.

``python -m recforge.bench.worker REQUEST RESPONSE``: reads ``{"target": "module:function",
"kwargs": {...}, "recforge_version": ...}`` from REQUEST (or ``"kwargs_file"``: a file the
caller writes once it has made them, waited for after MXNet's import; ``"import_mxnet":
false`` skips that import for a target that never needs it), calls the function
and writes ``{"result": ...}`` or ``{"error": {"kind", "message"}}`` to RESPONSE. A failure
it cannot describe (a crash) leaves no RESPONSE and a non-zero exit; the parent reports
stderr's tail.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import sys


def _error(kind: str, message: str) -> dict:
    return {"error": {"kind": kind, "message": message}}


def serve(request: dict) -> dict:
    from recforge import __version__
    from recforge.bench.records import LoaderBenchError
    from recforge.errors import RecforgeFailure

    if request.get("recforge_version") != __version__:
        return _error("environment", (
            f"the MXNet environment ({sys.executable}) has recforge {__version__}, the caller "
            f"{request.get('recforge_version')}; install the same recforge into both"))
    try:
        if request.get("import_mxnet", True):
            import mxnet  # noqa: F401  (fail here, with the interpreter named, not mid-run)
        elif importlib.util.find_spec("mxnet") is None:
            raise ImportError("No module named 'mxnet'")
    except ImportError as exc:
        return _error("environment", f"{sys.executable} cannot import mxnet ({exc})")
    module, _, name = request["target"].partition(":")
    func = getattr(importlib.import_module(module), name)
    if "kwargs_file" in request:  # the caller makes them while this process starts
        from recforge.bench.environment import wait_for_file

        # however long the caller's fetch takes, while the caller lives
        waited = wait_for_file(request["kwargs_file"], None, parent=request["caller_pid"])
        logging.getLogger(__name__).info("started; waited %.1f s for the arguments", waited)
        if not os.path.exists(request["kwargs_file"]):
            return _error("failure", "the caller ended before it handed over the arguments")
        with open(request["kwargs_file"], encoding="utf-8") as f:
            request = {**request, "kwargs": json.load(f)}
    try:
        return {"result": func(**request["kwargs"])}
    except LoaderBenchError as exc:
        return _error("loader", str(exc))
    except RecforgeFailure as exc:
        return _error("failure", str(exc))


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    request_path, response_path = argv
    with open(request_path, encoding="utf-8") as f:
        reply = serve(json.load(f))
    with open(response_path, "w", encoding="utf-8") as f:
        json.dump(reply, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
