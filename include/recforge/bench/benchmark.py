"""The whole benchmark: fetch the split's window here, measure each loader where it runs.

``run_benchmark`` produces the ``bench.json`` dict. The window of the split is fetched in this
process (it holds the S3 credentials), then handed to the MXNet environment's child process
(``recforge.bench.environment``: one child for the whole measurement,
``recforge.bench.measure`` inside it); DALI's loader is measured in this process
(``recforge.bench.dali``).
``loader``: ``mxnet`` (the default), ``dali``, ``both`` — then MXNet's result is the
document and DALI's sits beside it under ``"dali"``, gated by floors of its own —, ``all``
(DALI's and the PyTorch loader's beside MXNet's, each that is installed), ``torch``
(``recforge.bench.torch_loader``, in this process) or ``auto``: which of them runs on this
host's GPU (``recforge.bench.gpu_support``); the document's ``loader_choice`` says which and why.
MXNet's loader asked for with ``device=gpu`` on a GPU its kernels cannot run on is refused here,
before anything is fetched.
"""

from __future__ import annotations

import importlib.util
import logging
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path

import recforge.bench.environment as environment
from recforge import storage
from recforge.bench import gpu_support, loaders
from recforge.bench.records import fetch_split, record_sizes, size_check
from recforge.format import names
from recforge.spec.bench import BenchOptions

log = logging.getLogger(__name__)

LOADERS = loaders.CHOICES


def run_benchmark(prefix: str, options: BenchOptions | None = None,
                  previous: dict | None = None, loader: str = "mxnet",
                  quiet: threading.Event | None = None, identity: str | None = None) -> dict:
    """Benchmark the loader(s) over ``<prefix>/<split>.rec``; returns the ``bench.json`` dict.

    ``prefix`` is a local folder or an ``s3://`` prefix (a bounded window is fetched).
    ``previous``: the latest version's ``bench.json``; when the MXNet loader would be handed
    the same bytes with the same options on the same host, its measurements are returned
    (``reused_from`` names them) instead of measuring again (``recforge.bench.measure``);
    for a window known unchanged (``identity``), that is decided before any fetch.
    Raises ``LoaderBenchError`` with the values and the fix when a loader cannot run,
    ``MXNetEnvironmentMissing`` when MXNet's environment is not there, and
    ``MXNetProcessFailed`` when it dies. ``quiet``: the caller sets it once it stops
    competing for the CPU; the fetch, MXNet's start-up and the untimed value check run
    before it, every timed measurement after it (None: no waiting). ``identity``: the
    split's ``records.split_identity``, kept in ``dataset.sample``; when it equals the
    previous measurement's, its window is known unchanged and is not fetched at all
    (:func:`unchanged_window`).
    """
    if loader not in LOADERS:
        raise ValueError(f"loader {loader!r} is not one of {LOADERS}")
    opts = options or BenchOptions()
    started = datetime.now(UTC)
    choice = gpu_support.resolve_loader(loader, opts.device, opts.gpu_id, opts.loader,
                                        _mxnet_python_if_any)
    results = _run(prefix, opts, previous, choice.loader, quiet, identity, started)
    results["loader_choice"] = choice.as_dict()
    return results


def _mxnet_python_if_any() -> str | None:
    try:
        return environment.mxnet_python()
    except Exception as exc:  # no MXNet environment: gpu_support assumes mxnet-cu112
        log.debug("bench: no MXNet environment to read libmxnet.so from (%s)", exc)
        return None


def _run(prefix: str, opts: BenchOptions, previous: dict | None, loader: str,
         quiet: threading.Event | None, identity: str | None, started: datetime) -> dict:
    """``run_benchmark`` once the loader is decided (``mxnet``, ``dali``, ``both``,
    ``torch``): the first loader's row says where it runs (``both``, ``all``: MXNet's)."""
    row = loaders.row(loader if loader in loaders.NAMES else "mxnet", opts.loader)
    python = environment.mxnet_python() if row.interpreter == loaders.MXNET else None
    with tempfile.TemporaryDirectory(prefix="recforge-bench-") as tmp:
        def fetch() -> dict:
            got = fetch_split(prefix, opts.split, Path(tmp), opts.max_bytes,
                              min_records=opts.batch_size)
            got["sample"]["split_identity"] = identity
            return got

        if row.interpreter == loaders.CORE:
            fetched = fetch()
            root = fetched.pop("root")
            return row.entry()(prefix, root, opts, fetched, _size_check_of(fetched, opts),
                               started, quiet=quiet.wait if quiet is not None
                               else loaders.at_once)

        known = unchanged_window(prefix, opts, previous, identity) if loader == "mxnet" else None
        if known is not None:  # decided without the window
            results = environment.call("recforge.bench.measure:reuse", {
                "prefix": prefix, "options": opts.model_dump(mode="json"),
                "fetched": {k: v for k, v in known.items() if k != "root"},
                "sizes": _size_check_of(known, opts), "previous": previous,
                "started": started.isoformat()}, python=python)
            if "window_needed" not in results:
                return results
            log.info("bench: fetching the window after all (%s)", results["window_needed"])

        fetched = fetch()  # what the MXNet side is handed: DALI's "both" reads it too
        root, sizes = fetched.pop("root"), _size_check_of(fetched, opts)
        # the MXNet side looks its loader up in the table again (recforge.bench.measure)
        results = environment.call("recforge.bench.measure:measure", {
            "prefix": prefix, "root": str(root), "options": opts.model_dump(mode="json"),
            "fetched": fetched, "sizes": sizes, "previous": previous,
            "started": started.isoformat()}, python=python, quiet=quiet)
        for name in beside(loader):
            measure = loaders.row(name, opts.loader).entry()
            results[name] = measure(prefix, root, opts, fetched, sizes, datetime.now(UTC))
        return results


def beside(loader: str) -> list[str]:
    """The loaders measured beside MXNet's: DALI's for ``both``; for ``all`` every one of
    DALI's and the PyTorch loader that is installed (a missing one is logged, not fatal)."""
    wanted = loaders.BESIDE.get(loader, ())
    if loader != "all":
        return list(wanted)
    found = []
    for name in wanted:
        if importlib.util.find_spec(loaders.one(name).requires) is None:
            log.info("bench: %s is not installed here; bench.loader all measures without it",
                     name)
        else:
            found.append(name)
    return found


def unchanged_window(prefix: str, opts: BenchOptions, previous: dict | None,
                     identity: str | None) -> dict | None:
    """``fetch_split``'s answer without the fetch, when the previous measurement's split
    had this ``identity`` and the same window size: the window is then byte-identical to
    the one it measured (its ``sample``, SHA-256 included, still holds), so whether that
    measurement can be reused is decided without downloading and hashing it — at
    ImageNet size, a gigabyte each night. ``recforge.bench.measure.reuse`` answers
    ``window_needed`` when it cannot reuse it for another reason (another host, other
    options), and the window is fetched then. None: fetch it."""
    sample = ((previous or {}).get("dataset") or {}).get("sample") or {}
    if (identity is None or sample.get("split_identity") != identity
            or sample.get("max_bytes") != opts.max_bytes or not sample.get("sha256")):
        return None
    records_uri = storage.join(prefix, names.RECORDS)
    log.info("bench: the split is the one the previous measurement read (identity %s…); "
             "its window is not fetched", identity[:12])
    return {"root": None, "download_seconds": None, "downloaded_bytes": 0,
            "records_uri": records_uri if storage.exists(records_uri) else None,
            "sample": {**sample, "fetched": False}}


def _size_check_of(fetched: dict, opts: BenchOptions) -> dict | None:
    """The size check over every record of the split, from its manifest (``records.jsonl``);
    None where there is none (then the measuring side checks the decoded sample)."""
    manifest_sizes = record_sizes(fetched.get("records_uri"), opts.split)
    return (size_check(manifest_sizes, opts.data_shape, "records.jsonl (every record)")
            if manifest_sizes else None)
