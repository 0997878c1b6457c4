"""The child side of ``recforge.bench.environment.call``, run in the MXNet environment.

``python -m recforge.bench.worker REQUEST RESPONSE``: reads ``{"target": "module:function",
"kwargs": {...}, "recforge_version": ...}`` from REQUEST, imports MXNet, calls the function
and writes ``{"result": ...}`` or ``{"error": {"kind", "message"}}`` to RESPONSE. A failure
it cannot describe (a crash) leaves no RESPONSE and a non-zero exit; the parent reports
stderr's tail.

RESPONSE appears whole (written beside it, then renamed), and the process then ends at once
(``os._exit``), without the interpreter's teardown: MXNet's engine and OpenMP threads can
keep a finished process from exiting, and a benchmark that has its result must not wait on
them. A Python error that escapes is printed, then the process ends the same way (status 1).
"""

from __future__ import annotations

import importlib
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
        import mxnet  # noqa: F401  (fail here, with the interpreter named, not mid-run)
    except ImportError as exc:
        return _error("environment", f"{sys.executable} cannot import mxnet ({exc})")
    module, _, name = request["target"].partition(":")
    func = getattr(importlib.import_module(module), name)
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
    partial = f"{response_path}.partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(reply, f)
    os.replace(partial, response_path)
    return 0


def leave(status: int) -> None:
    """End now, after flushing what was written: no atexit handlers, no thread joins, no
    C++ static destructors (where MXNet's teardown hangs)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    try:
        status = main(sys.argv[1:])
    except BaseException:  # noqa: BLE001 (printed for the parent's stderr tail)
        import traceback

        traceback.print_exc()
        status = 1
    leave(status)
