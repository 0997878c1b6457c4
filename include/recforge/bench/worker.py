"""The child side of ``recforge.bench.environment.call``, run in the MXNet environment.

``python -m recforge.bench.worker REQUEST RESPONSE``: reads ``{"target": "module:function",
"kwargs": {...}, "recforge_version": ...}`` from REQUEST, imports MXNet, calls the function
and writes ``{"result": ...}`` or ``{"error": {"kind", "message"}}`` to RESPONSE. A failure
it cannot describe (a crash) leaves no RESPONSE and a non-zero exit; the parent reports
stderr's tail.
"""

from __future__ import annotations

import importlib
import json
import logging
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
    with open(response_path, "w", encoding="utf-8") as f:
        json.dump(reply, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
