"""The whole pipeline without Airflow: the same stage functions, in the DAG's order.

``recforge build`` runs this; the DAG runs each stage as its own task. Shards are packed
by a process pool here (mapped tasks in Airflow).
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ProcessPoolExecutor

from recforge import ingest, labels, layout, merge, pack, publish, split, validate
from recforge.run import Run, new_run_id
from recforge.spec import DatasetSpec

log = logging.getLogger(__name__)


def _pack_one(args: tuple[DatasetSpec, str, str]) -> dict:
    spec, run_id, shard = args
    run = Run(spec, run_id)
    if spec.task == "segmentation":
        from recforge import segstages

        segstages.convert_stage(run, shard)
        return segstages.pack_stage(run, shard)
    return pack.pack_shard(run, shard)


def validate_run(run: Run) -> dict:
    """Structural validation of the merged output in staging; raises on failure."""
    num_classes = None
    report = validate.validate_prefix(run.uri("out"), num_classes)
    if not report["ok"]:
        raise validate.ValidationFailed(
            "structural validation failed:\n" + validate.format_report(report))
    return {"ok": True, "splits": {s: r["records"] for s, r in report["splits"].items()}}


def benchmark_run(run: Run) -> dict:
    """Loader benchmark on the merged train split; ``bench.json`` lands in ``out/`` (and so is
    published); raises ``BenchFloorsFailed`` with the numbers when a floor is missed."""
    from recforge import loaderbench

    return loaderbench.run_and_gate(
        run.uri("out"), run.spec.bench, run.output("bench.json"),
        dataset_version=publish.choose_version(run), run_id=run.run_id)


def quality_run(run: Run, ti=None) -> dict:
    """The Great Expectations checklist over the merged output (and the loader benchmark's
    results); Data Docs land in ``out/quality/`` and so are published next to the dataset.
    Raises ``QualityGateFailed`` when a fail-severity check fails; returns a small summary."""
    from recforge import quality, storage

    spec = run.spec
    bench_uri = run.output("bench.json")
    bench = storage.read_json(bench_uri) if storage.exists(bench_uri) else None
    result = quality.run_and_upload(
        run.uri("out"), spec.quality, docs_uri=run.uri("out", "quality"),
        source_manifest=run.source_manifest, pack=spec.pack, task=spec.task,
        loader_results=bench,
        dataset=spec.name, run_name=run.run_id)
    log.info("quality gate: %s; Data Docs: %s", "passed" if result["ok"] else "FAILED",
             result["data_docs_uri"])
    log.info("checklist:\n%s", quality.format_table(result))
    quality.enforce(result, ti)
    return {"ok": result["ok"], "data_docs_uri": result["data_docs_uri"],
            "failed": [n for n, c in result["checks"].items() if c["status"] == "failed"],
            "warnings": [n for n, c in result["checks"].items() if c["status"] == "warning"]}


def build(spec: DatasetSpec, run_id: str | None = None, workers: int | None = None,
          dry_run: bool = False) -> dict:
    run = Run(spec, run_id or new_run_id())
    log.info("build %s: run %s, staging %s", spec.name, run.run_id, run.staging)
    result: dict = {"run_id": run.run_id, "staging": run.staging}
    result["ingest"] = ingest.ingest(run)
    if spec.task == "segmentation":
        from recforge import segstages

        result["flatten"] = segstages.flatten_stage(run)
        result["labels"] = segstages.classes_stage(run)
    else:
        result["flatten"] = layout.flatten(run)
        result["labels"] = labels.remap_labels(run)
    planned = split.split_and_plan(run)
    result["split"] = planned["planned"]
    workers = workers or max(1, min(os.cpu_count() or 1, len(planned["shards"])))
    jobs = [(spec, run.run_id, s) for s in planned["shards"]]
    if workers == 1:
        result["pack"] = [_pack_one(j) for j in jobs]
    else:
        with ProcessPoolExecutor(workers) as pool:
            result["pack"] = list(pool.map(_pack_one, jobs))
    result["merge"] = merge.merge(run)
    result["validate"] = validate_run(run)
    result["bench"] = benchmark_run(run)
    result["quality"] = quality_run(run)
    if dry_run:
        log.info("dry run: not publishing; the dataset stays in %s", run.uri("out"))
        result["publish"] = None
    else:
        result["publish"] = publish.publish(run)
    return result
