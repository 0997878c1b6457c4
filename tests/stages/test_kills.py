"""Killed tasks are harmless: a ``pack`` of one shard and a ``merge`` SIGKILLed after they
have started writing to staging, then run again, leave exactly the bytes of an uninterrupted
run, with no record lost or doubled.

The killed stage runs in its own process (as an Airflow worker runs a task), through the
fault proxy in ``delay`` mode, so it is slow enough to be killed reliably half-way: after its
first staged object appears, before its last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from recforge import run_state, stages, storage
from recforge.format import names
from recforge.incremental import cache
from recforge.run import Run, cache_uri
from tests.common.faultproxy import running_proxy
from tests.common.sources import make_source, make_spec

pytestmark = [pytest.mark.both_stores,  # each test against moto and Ceph RGW
              pytest.mark.pipeline]  # whole builds: a slow tier

BEFORE_PACK = ("ingest", "flatten", "remap_labels", "split")
RUN_STAGE = ("import json, sys\n"
             "from recforge import stages\nfrom recforge.run import Run\n"
             "from recforge.spec import parse_spec\n"
             "spec = parse_spec(json.load(open(sys.argv[1])))\n"
             "stages.entry(sys.argv[3])(Run(spec, sys.argv[2]), *sys.argv[4:])\n")


def snapshot(prefix: str, skip=("plan.jsonl",)) -> dict[str, bytes]:
    return {o.key: storage.get_bytes(storage.join(prefix, o.key))
            for o in storage.list_objects(prefix) if o.key not in skip}


def planned(spec, run_id: str) -> tuple[Run, list[str]]:
    run = Run(spec, run_id)
    for task_id in BEFORE_PACK:
        stages.entry(task_id)(run)
    return run, storage.read_json(run.shard_list)["shards"]


def kill_when_written(s3_endpoint, tmp_path, run: Run, stage: str, args: list[str],
                      watch: str, first: str, last: str) -> dict[str, bytes]:
    """Run ``stage`` in a subprocess (its S3 requests each delayed), SIGKILL it as soon as
    ``first`` appears under ``watch``; returns what it had staged there. Fails unless it was
    killed before ``last`` was written."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(run.spec.model_dump(mode="json")))
    with running_proxy(s3_endpoint, rate=1.0, modes=("delay",), max_delay_s=0.3) as proxy:
        proc = subprocess.Popen(
            [sys.executable, "-c", RUN_STAGE, str(spec_file), run.run_id, stage, *args],
            env={**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        try:
            while first not in snapshot(watch) and proc.poll() is None:
                assert time.monotonic() < deadline, "the stage never started writing"
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == -signal.SIGKILL, f"finished before the kill: {err.decode()}"
    staged = snapshot(watch)
    assert staged and last not in staged, f"not killed half-way: {sorted(staged)}"
    return staged


@pytest.fixture
def source(bucket):
    make_source(bucket, classes=("dog", "eel"), per_class=6)
    return make_spec(bucket)


def test_a_killed_pack_run_again_stages_the_same_bytes(source, s3_endpoint, tmp_path):
    clean, shards = planned(source, "clean")
    shard = shards[0]
    stages.entry("pack")(clean, shard)
    # a classification shard's files live in its cache entry; shard.json points there
    entry = cache.shard_entry(clean, storage.read_jsonl(clean.shard_plan(shard)))
    expected = snapshot(clean.shard_output(shard, "")), snapshot(entry)
    assert names.rec(names.SHARD_PART) in expected[1]
    storage.delete_prefix(cache_uri(source))  # the killed run starts from an empty cache

    killed, _ = planned(source, "killed")
    staged = kill_when_written(s3_endpoint, tmp_path, killed, "pack", [shard], entry,
                               names.rec(names.SHARD_PART), cache.ENTRY)
    assert not storage.exists(killed.shard_output(shard, names.SHARD_META)), staged
    stages.entry("pack")(killed, shard)  # the retry
    assert (snapshot(killed.shard_output(shard, "")), snapshot(entry)) == expected


def test_a_killed_merge_in_its_version_folder_is_invisible_and_its_rerun_finishes_it(
        source, s3_endpoint, tmp_path):
    """Merge composes straight into the run's claimed version folder: killed half-way, the
    folder holds part of a dataset but no manifest, so no reader sees it; the retry writes
    exactly an uninterrupted run's bytes there, and publish makes it a verified version."""
    from recforge import releases
    from recforge.cli import main

    runs = {}
    for run_id in ("clean", "killed"):
        run, shards = planned(source, run_id)
        for shard in shards:
            stages.entry("pack")(run, shard)
        runs[run_id] = run
    stages.entry("merge")(runs["clean"])
    unchecked = ("plan.jsonl", names.CLAIM)
    expected = snapshot(run_state.out(runs["clean"]), unchecked)
    assert run_state.out_version(runs["clean"]) is not None  # composed in its version folder

    killed = runs["killed"]
    target = releases.version_uri(source, run_state.version(killed))
    written = kill_when_written(s3_endpoint, tmp_path, killed, "merge", [], target,
                                names.rec("train"), names.SUMMARY)
    assert names.rec("train") in written and names.MANIFEST not in written
    root = releases.dataset_root(source)
    assert releases.read_manifest(target) is None and releases.read_latest(source) is None
    assert releases.versions(root) == []  # a folder without a manifest is no version
    summary = stages.entry("merge")(killed)  # the retry
    assert run_state.out(killed) == target and snapshot(target, unchecked) == expected
    records = storage.read_jsonl(run_state.output(killed, names.RECORDS))
    keys = [r["source_key"] for r in records]
    assert len(keys) == len(set(keys)) == summary["packed"]
    assert summary["listed"] == summary["packed"] + summary["quarantined"]
    published = stages.entry("publish")(killed)
    assert published["uri"] == target and main(["verify", target]) == 0


def test_a_publish_killed_before_its_manifest_then_rerun_verifies(source, s3_endpoint,
                                                                  tmp_path):
    """The killed attempt copied Data Docs pages that the re-run gate writes under new
    names; the resumed publish lands exactly its own files, and ``recforge verify`` agrees."""
    from recforge import pipeline, releases
    from recforge.cli import main

    run = Run(source, "killed")
    pipeline.build(source, run_id=run.run_id, workers=1, dry_run=True)
    target = releases.version_uri(source, run_state.version(run))
    pages = sorted(n for n in storage.read_json(run.checksums("quality_gate"))["files"]
                   if n.endswith(".html") and "/validations/" in n)
    assert pages, "the gate recorded no Data Docs validation pages"
    killed_copies = kill_when_written(s3_endpoint, tmp_path, run, "publish", [], target,
                                      pages[0], names.MANIFEST)

    stages.entry("quality_gate")(run)  # an Airflow clear of quality_gate + publish
    stages.entry("publish")(run)
    assert main(["verify", target]) == 0
    manifest = releases.read_manifest(target)
    listed = {f["name"] for f in manifest["files"]}
    assert {o.key for o in storage.list_objects(target)} == listed | {names.MANIFEST,
                                                                      names.CLAIM}
    assert set(killed_copies) - listed - {names.CLAIM}, \
        "the re-run gate wrote the same page names: nothing was left to clean"
