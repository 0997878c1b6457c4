"""``recforge check``: the quality checklist on a packed dataset, from the command line.

The engines (``recforge.quality``, ``storage``, ``spec``) are imported inside the handler, so
building the CLI parser stays cheap.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recforge.spec.quality import QualitySpec

log = logging.getLogger(__name__)


def _spec_parts(args) -> tuple[QualitySpec, Any, str, str | None]:
    """quality, pack, task and dataset name from --spec, else from a version's manifest.json."""
    from recforge import storage
    from recforge.format import names
    from recforge.quality.gate import as_quality
    from recforge.spec.quality import QualitySpec

    if args.spec:
        from recforge.spec import load_spec

        spec = load_spec(args.spec)
        return (as_quality(getattr(spec, "quality", None)), spec.pack, spec.task, spec.name)
    manifest_uri = storage.join(args.prefix, names.MANIFEST)
    if storage.exists(manifest_uri):
        spec = storage.read_json(manifest_uri).get("spec") or {}
        return (as_quality(spec.get("quality")), spec.get("pack"),
                spec.get("task", "classification"), spec.get("name"))
    log.warning("no --spec and no manifest.json under %s: pack options unknown, so image "
                "sizes are checked for channels and >= 1 only", args.prefix)
    return QualitySpec(), None, "classification", None


def _check(args) -> int:
    from recforge.quality import format_table, run_quality_gate, upload_data_docs

    quality, pack, task, name = _spec_parts(args)
    task = args.task or task
    from recforge import storage
    from recforge.format import names

    # the loader benchmark's results: --loader-results, else the version's own bench.json
    bench = args.loader_results or storage.join(args.prefix, names.BENCH)
    loader_results = storage.read_json(bench) if args.loader_results or storage.exists(bench) \
        else None
    docs = Path(args.docs) if args.docs else Path(tempfile.mkdtemp(prefix="recforge-docs-"))
    result = run_quality_gate(args.prefix, quality, docs_dir=docs,
                              source_manifest=args.source_manifest, pack=pack, task=task,
                              loader_results=loader_results, dataset=name,
                              run_name=args.run_name)
    if args.upload_docs:
        result["data_docs"] = upload_data_docs(docs, args.upload_docs)
    print(json.dumps(result, indent=2, default=str) if args.json else format_table(result))
    return 0 if result["ok"] else 1


def register(sub) -> None:
    p = sub.add_parser("check", help="run the quality checklist (Great Expectations) on a "
                       "packed dataset and build Data Docs")
    p.add_argument("prefix", help="a run's out/ prefix or a published version "
                   "(s3://... or a local folder with records.jsonl)")
    p.add_argument("--spec", help="dataset spec YAML for thresholds and pack options "
                   "(default: manifest.json of a published version)")
    p.add_argument("--source-manifest", help="the run's ingest/source_manifest.jsonl, for the "
                   "per-object accounting (default: source_manifest.jsonl under PREFIX, else "
                   "the totals in summary.json)")
    p.add_argument("--loader-results", help="the loader benchmark's bench.json (items 6-10; "
                   "default: bench.json under PREFIX)")
    p.add_argument("--task", choices=["classification", "segmentation"],
                   help="the dataset's task (default: from the spec or manifest)")
    p.add_argument("--docs", help="folder for the Data Docs site (default: a temp folder)")
    p.add_argument("--upload-docs", help="also copy the Data Docs site to this URI")
    p.add_argument("--run-name", default="cli", help="name of this validation run in Data Docs")
    p.add_argument("--json", action="store_true", help="print the result dict as JSON")
    p.set_defaults(func=_check)
