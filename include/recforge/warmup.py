"""Importing what a later step needs in a background thread, while this one waits on
other processes, S3 or code that releases the GIL."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Iterable

log = logging.getLogger(__name__)

_running: list[tuple[threading.Thread, frozenset[str]]] = []  # threads and what they import

# What a slow package imports at its own import and recforge never calls, made lazy before it
# (:func:`defer`): GX imports ``scipy.stats`` (~1 s of CPU) for two expectations and two
# metrics on distributions that no checklist item uses.
UNUSED_BY = {"great_expectations": ("scipy.stats",)}


def defer(name: str) -> None:
    """Put a lazy ``name`` in ``sys.modules`` (``importlib.util.LazyLoader``): importing it
    binds the module, and its code runs on first use — an attribute read, or an
    ``import name`` statement elsewhere, which reads its spec. So a package that imports it
    at the top and uses it only inside functions pays nothing until those run. Nothing when
    it is already imported or cannot be found (its importer then fails as it would have).
    The first use should come from one thread at a time (Python 3.11's lazy module has no
    lock), which holds for what ``UNUSED_BY`` names."""
    if name in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(name)  # imports the parent package
    except (ImportError, ValueError):
        return
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def warm_imports(modules: Iterable[str]) -> threading.Thread | None:
    """Import ``modules`` (those not yet imported) one after the other in a daemon thread;
    returns it, or None when there is nothing to import.

    A head start only: ``import great_expectations`` takes ~5 s and ``import mxnet`` ~2 s in
    a fresh process, seconds this process otherwise spends waiting on the shard workers and
    S3. A stage that imports a module the thread is still importing waits for it (Python's
    per-module import lock). A module that fails to import here is left unimported (Python
    removes it from ``sys.modules``), so the stage's own import runs it again and raises
    there, exactly as without the thread. Run it only while nothing else imports, and start
    it only once no fork can follow: a child forked while this thread holds an import lock
    can deadlock, and a package with import cycles imported by two threads at once can be
    handed half-initialised to one of them. So while one thread is importing, a second
    call for any of its modules starts none and returns that thread, which its caller
    joins before it uses what it asked for (``pipeline.build`` starts one while it waits
    for the per-shard pool's workers, or beside merge and validate; the checklist while it
    reads its inputs, see ``quality.gate``)."""
    wanted = list(dict.fromkeys(modules))
    _running[:] = [(t, names) for t, names in _running if t.is_alive()]
    for thread, names in _running:
        if names.intersection(wanted):  # may be half-imported: the caller joins it first
            return thread
    todo = [m for m in wanted if m not in sys.modules]
    if not todo:
        return None

    def run() -> None:
        collecting = gc.isenabled()
        gc.disable()  # importing GX makes ~1 M objects; the cycle collector would walk them
        try:          # over and over as they arrive (~2 s of a 2-core machine)
            for name in todo:
                started = time.perf_counter()
                try:
                    for unused in UNUSED_BY.get(name, ()):
                        defer(unused)
                    importlib.import_module(name)
                except Exception as exc:  # the stage's own import raises it again, there
                    log.debug("warm-up: import %s failed (%s: %s); left to the stage", name,
                              type(exc).__name__, exc)
                else:
                    log.debug("warm-up: imported %s in %.1f s", name,
                              time.perf_counter() - started)
        finally:
            if collecting:
                gc.enable()

    thread = threading.Thread(target=run, name="recforge-warm-imports", daemon=True)
    thread.start()
    _running.append((thread, frozenset(todo)))
    return thread
