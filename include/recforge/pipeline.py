"""The whole pipeline without Airflow: the stage table (``recforge.stages.STAGES``), in order.

``recforge build`` runs this; the DAG runs each stage as its own task. Per-shard stages run
for every shard in a process pool here (mapped tasks in Airflow), each shard's stages one
after the other in one worker, as a shard would flow through the DAG. The loader benchmark
runs beside validate and the checklist (:func:`benchmark_beside`), as the DAG runs their
tasks.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

from recforge import run_state, stages
from recforge.progress import Progress, quiet_worker
from recforge.run import Run, new_run_id
from recforge.spec import DatasetSpec

log = logging.getLogger(__name__)


def _shard_stages(args: tuple[DatasetSpec, str, tuple[str, ...], str]) -> dict:
    spec, run_id, task_ids, shard = args
    if quiet_worker():  # on a terminal the parent's bar counts the shards: no line per shard
        logging.getLogger("recforge").setLevel(logging.WARNING)
    run = Run(spec, run_id)
    try:
        return {t: stages.entry(t)(run, shard) for t in task_ids}
    except Exception as exc:  # it must cross the process boundary: botocore's errors hold
        try:                  # an unpicklable stream, which would hide the real error
            pickle.dumps(exc)
        except Exception:
            raise RuntimeError(f"shard {shard}: {type(exc).__name__}: {exc}") from None
        raise


def shards_in_pool(jobs: list, workers: int, progress: Progress) -> list[dict]:
    """Each job's ``_shard_stages`` in a pool of ``workers`` processes, results in job
    order. A worker that dies without
    a Python error (a decoder crash, the memory limit) breaks the whole pool: the shards
    not finished then run once more in a new pool, where pack finds their attempt markers
    and decodes each image in a child process (``recforge.crash_isolation``), so the
    image responsible is quarantined. A second break raises."""
    from recforge.imaging import one_opencv_thread  # OpenCV only where shards run

    results: dict[int, dict] = {}
    for attempt in range(2):
        todo = [k for k in range(len(jobs)) if k not in results]
        try:
            # the workers fork with OpenCV on one thread, the count their stages want
            with one_opencv_thread(), ProcessPoolExecutor(workers) as pool:
                futures = {pool.submit(_shard_stages, jobs[k]): k for k in todo}
                for f in as_completed(futures):
                    results[futures[f]] = f.result()
                    progress.update()
        except BrokenProcessPool:
            if attempt:
                raise
            log.warning("a shard worker died without an error (a decoder crash or the memory "
                        "limit); running the %d unfinished shards again, each image decoded "
                        "in a child process", len(jobs) - len(results))
    return [results[k] for k in range(len(jobs))]


def run_shards(jobs: list, workers: int | None, progress: Progress) -> list[dict]:
    """Each job's ``_shard_stages``, results in job order: in this thread where one worker
    runs them, else in a pool (:func:`shards_in_pool`)."""
    n = workers or max(1, min(os.cpu_count() or 1, len(jobs)))
    if n > 1:
        return shards_in_pool(jobs, n, progress)
    done = []
    for j in jobs:
        done.append(_shard_stages(j))
        progress.update()
    return done


def benchmark_beside(run: Run, checks: tuple[str, ...]) -> tuple[dict, dict[str, float]]:
    """The ``benchmark`` stage in a thread beside ``checks``, the stages the stage table
    runs it beside (``Stage.beside``: validate, then the checklist), which run one after
    the other in this thread: ``(each stage's result by task id, each one's seconds)``.

    The checklist needs the loader's results only for its last checks, and each stage
    spends seconds before its real work (validate's reads, GX's import and the checklist's
    reads; the window fetch, MXNet's start-up and the untimed value check). So the
    benchmark runs from the start; the checklist hands it the machine (``quiet``) when it
    asks for the results, and waits while the loader is timed alone. The outcome is the
    sequence's (merge, validate, benchmark, checklist): a failed check before the
    checklist is the error raised once the benchmark has ended, then a failed benchmark
    (the checklist, still waiting for its results, writes nothing), then a failed
    checklist. The DAG runs them as tasks side by side the same way (the benchmark on the
    GPU queue), the checklist waiting for the benchmark task
    (``recforge.orchestration.sibling``)."""
    quiet = threading.Event()
    outcome: dict = {}

    # imported here, not in two threads at once
    measure_loader = stages.entry("benchmark")
    bench_stage = stages.module("benchmark")  # bench_results: what the benchmark left

    def measure() -> None:
        started = time.perf_counter()
        try:
            outcome["result"] = measure_loader(run, quiet=quiet)
        except BaseException as exc:  # raised again in the caller's thread
            outcome["error"] = exc
        finally:
            outcome["seconds"] = time.perf_counter() - started

    def benchmark_ended() -> None:
        quiet.set()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]

    def loader_results() -> dict | None:
        asked = time.perf_counter()
        benchmark_ended()
        log.info("quality: waited %.1f s for the loader benchmark to finish",
                 time.perf_counter() - asked)
        return bench_stage.bench_results(run)

    results: dict = {}
    seconds: dict[str, float] = {}
    thread = threading.Thread(target=measure, name="recforge-benchmark", daemon=True)
    thread.start()
    for task_id in checks:
        started = time.perf_counter()
        try:
            if task_id == "quality_gate":
                results[task_id] = stages.entry(task_id)(run, loader_results=loader_results)
            else:
                results[task_id] = stages.entry(task_id)(run)
        except BaseException:
            if task_id == "quality_gate":
                benchmark_ended()  # the benchmark's own error wins: it came first
            else:                  # an earlier check's error wins: the benchmark's result
                quiet.set()        # is not wanted, but it is not left running behind it
                thread.join()
            raise
        seconds[task_id] = time.perf_counter() - started
    benchmark_ended()
    results["benchmark"] = outcome["result"]
    seconds["benchmark"] = outcome["seconds"]
    return results, seconds


def finish_published(run: Run, version: str) -> dict:
    """A run id whose ``version`` is already published (killed between ``manifest.json`` and
    ``latest.json``, or run twice): only its publish runs again, which moves
    ``latest.json`` and writes nothing into the version."""
    log.info("build %s: run %s already published %s; finishing its publish only",
             run.spec.name, run.run_id, version)
    return {"already_published": version, "no_change": False,
            "publish": stages.entry("publish")(run)}


def build(spec: DatasetSpec, run_id: str | None = None, workers: int | None = None,
          dry_run: bool = False, force_rebuild: bool = False) -> dict:
    """Run every stage of the spec's task kind; returns each stage's result by task id
    (per-shard stages: a list, one per shard). ``dry_run`` stops before ``publish``. When
    ``split`` finds the content unchanged since the latest version (and not
    ``force_rebuild``), the run stops there: ``no_change`` is true, nothing is published.
    A run id that already published its version only finishes that publish
    (``latest.json``): ``already_published`` names the version."""
    run = Run(spec, run_id or new_run_id(), force_rebuild=force_rebuild, dry_run=dry_run,
              slots=workers or os.cpu_count())
    log.info("build %s: run %s, staging %s", spec.name, run.run_id, run.staging)
    result: dict = {"run_id": run.run_id, "staging": run.staging}
    version = run_state.published_version(run)
    if version:  # killed before latest.json, or run twice: finish, report
        return {**result, **finish_published(run, version)}
    plan = stages.stages_for(spec.task)
    timings = result["seconds"] = {}  # wall time per stage (per-shard stages: together)
    i = 0
    while i < len(plan):
        started = time.perf_counter()
        if plan[i].per_shard:  # a run of consecutive per-shard stages, shard by shard
            task_ids = []
            while i < len(plan) and plan[i].per_shard:
                task_ids.append(plan[i].task_id)
                i += 1
            # in the pack tasks' order, largest first: the pool hands each worker the next
            shards = [s for t in result["split"]["pack_tasks"] for s in t]
            jobs = [(spec, run.run_id, tuple(task_ids), s) for s in shards]
            shards_done = Progress("+".join(task_ids), len(jobs), log, unit="shards")
            done = run_shards(jobs, workers, shards_done)
            shards_done.close()
            for t in task_ids:
                result[t] = [d[t] for d in done]
            timings["+".join(task_ids)] = round(time.perf_counter() - started, 2)
            continue
        task_id = plan[i].task_id
        i += 1
        if task_id == "publish" and dry_run:
            log.info("dry run: not publishing; the dataset stays in %s", run_state.out(run))
            result["publish"] = None
            continue
        # the benchmark runs beside this stage and the next (validate and the checklist):
        # the whole run of them at once
        bench = next((s for s in plan[i:] if s.task_id == "benchmark"), None)
        if bench is not None and bench.beside and bench.beside[0] == task_id:
            ids = [s.task_id for s in plan]
            i = max(ids.index(t) for t in (*bench.beside, bench.task_id)) + 1
            got, seconds = benchmark_beside(run, bench.beside)
            result.update(got)
            timings.update({t: round(v, 2) for t, v in seconds.items()})
            continue
        result[task_id] = stages.entry(task_id)(run)
        timings[task_id] = round(time.perf_counter() - started, 2)
        if task_id == "split" and result["split"].get("no_change"):
            log.info("no changes since the latest version: nothing to pack or publish")
            result.update(no_change=True, publish=None)
            return result
    result["no_change"] = False
    return result
