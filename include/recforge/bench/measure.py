"""The MXNet environment's side of the loader benchmark: the entry its child calls.

``measure`` is what ``recforge.bench.benchmark.run_benchmark`` calls through
``recforge.bench.environment.call`` once the split's window is on local disk: reuse the
previous measurements when nothing the loader reads has changed, else hand the window to
the MXNet loader of ``bench.options.loader`` (its row in ``recforge.bench.loaders``:
``recforge.bench.image_record_iter`` for classification and detection,
``recforge.bench.segmentation`` for segmentation). ``reuse`` decides the reuse alone, for a
window known unchanged and not fetched. Their arguments and results are JSON, as they cross a
process.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

from recforge.bench import loaders
from recforge.bench.device import host_info
from recforge.bench.environment import wait_for_quiet
from recforge.bench.results import SCHEMA
from recforge.spec.bench import BenchOptions

log = logging.getLogger(__name__)


def measure(prefix: str, root: str, options: dict, fetched: dict, sizes: dict | None,
            previous: dict | None, started: str, quiet_file: str | None = None) -> dict:
    """The ``bench.json`` dict for the window fetched into ``root`` (see the module
    docstring); ``sizes``: the size check over the whole split from its manifest, if any.
    ``quiet_file``: the loader's untimed work runs first, the timed work once that path
    exists (``environment.wait_for_quiet``)."""
    opts = BenchOptions.model_validate(options)
    started_at = datetime.fromisoformat(started)
    fetched = {**fetched, "root": Path(root)}
    if previous is not None:
        why_not = reusable(previous, opts, fetched["sample"], sizes)
        if why_not is None:
            return _reused(previous, prefix, fetched, started_at)
        log.info("bench: measuring again (%s)", why_not)
    loader = loaders.row("mxnet", opts.loader).entry()
    return loader(prefix, Path(root), opts, fetched, sizes, started_at,
                  quiet=lambda: wait_for_quiet(quiet_file))


def reuse(prefix: str, options: dict, fetched: dict, sizes: dict | None, previous: dict,
          started: str) -> dict:
    """The previous measurements for a window known unchanged without fetching it
    (``recforge.bench.benchmark.unchanged_window``), or ``{"window_needed": why}`` when they
    cannot stand for it (another host, other options): then the caller fetches the window
    and calls :func:`measure`."""
    opts = BenchOptions.model_validate(options)
    why_not = reusable(previous, opts, fetched["sample"], sizes)
    if why_not is not None:
        return {"window_needed": why_not}
    return _reused(previous, prefix, fetched, datetime.fromisoformat(started))


def reusable(previous: dict, opts: BenchOptions, sample: dict, sizes: dict | None
             ) -> str | None:
    """Why ``previous`` (a ``bench.json``) cannot stand for this run, or None when it can:
    the same schema and options, the same window bytes (``dataset.sample.sha256``: the
    ``.rec``/``.idx``/masks/``classes.json`` the loader reads), the same host (hostname,
    versions, CPUs, MXNet features), the size check over the whole split unchanged, and it
    passed its own problems check. What the loader measures is a function of exactly those
    inputs, so measuring again would measure the same thing."""
    old_sample = (previous.get("dataset") or {}).get("sample") or {}
    host = {k: v for k, v in host_info().items() if k != "loadavg_at_start"}
    old_host = {k: v for k, v in (previous.get("host") or {}).items()
                if k != "loadavg_at_start"}
    checks = (
        (previous.get("schema") == SCHEMA, "another bench.json schema"),
        (previous.get("options") == opts.model_dump(mode="json"), "the options changed"),
        (bool(sample.get("sha256")) and old_sample.get("sha256") == sample["sha256"],
         "the sampled window's bytes changed"),
        (old_host == host, "another host or software versions"),
        (sizes is None or previous.get("image_sizes") == sizes,
         "the split's image sizes changed"),
        (not previous.get("problems"), "the previous run had problems"),
    )
    return next((why for ok, why in checks if not ok), None)


def _reused(previous: dict, prefix: str, fetched: dict, started) -> dict:
    out = json.loads(json.dumps(previous))  # a copy
    # the version that measured: a reused bench.json passes its origin on
    reused_from = {k: (previous.get("reused_from") or previous).get(k)
                   for k in ("dataset_version", "run_id", "created_at")}
    for k in ("dataset_version", "run_id", "floors", "violations", "passed", "reused_from"):
        out.pop(k, None)
    out["reused_from"] = {**reused_from, "why": (
        "the loader would read byte-identical files (dataset.sample.sha256) with the same "
        "options on the same host: these are that version's measurements")}
    out["prefix"] = prefix
    out["created_at"] = started.isoformat()
    out["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 3)
    out["dataset"]["sample"] = fetched["sample"]
    log.info("bench: reused the measurements of %s (window sha256 %s…)",
             reused_from["dataset_version"], fetched["sample"]["sha256"][:12])
    return out
