"""One server-side pass per version: merge claims the run's version folder and composes the
splits into it; the later stages write there, keep the claim alive, and publish checks the
files where they are, copying nothing. The folder is invisible until its manifest, a dead
run's folder is cleaned and a live one's is not. Through the real S3 protocol."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from recforge import claims, pipeline, releases, run_state, stages, storage
from recforge.cli import verify
from recforge.errors import VersionExistsError
from recforge.format import names
from recforge.run import Run
from recforge.stages import publish
from tests.common.sources import make_source, make_spec

pytestmark = [pytest.mark.both_stores,  # each test against moto and Ceph RGW
              pytest.mark.pipeline]  # whole builds: a slow tier

BEFORE_PUBLISH = ("ingest", "flatten", "remap_labels", "split", "pack", "merge", "validate",
                  "benchmark", "quality_gate")


@pytest.fixture
def spec(bucket):
    make_source(bucket, classes=("dog", "eel"), per_class=6)
    return make_spec(bucket, staging_uri=f"s3://{bucket}/staging")


def run_until(spec, run_id: str, last: str = "quality_gate") -> Run:
    """A run whose stages up to ``last`` have run, in this process."""
    run = Run(spec, run_id)
    for task_id in BEFORE_PUBLISH[:BEFORE_PUBLISH.index(last) + 1]:
        if task_id == "pack":
            for shard in storage.read_json(run.shard_list)["shards"]:
                stages.entry("pack")(run, shard)
        else:
            stages.entry(task_id)(run)
    return run


def claim_doc(target: str) -> dict:
    return storage.read_json(storage.join(target, names.CLAIM))


def test_merge_composes_into_the_claimed_version_and_publish_copies_nothing(spec,
                                                                            monkeypatch):
    run = run_until(spec, "r1")
    target = releases.version_uri(spec, run_state.version(run))
    assert run_state.out(run) == target and run_state.out_version(run) == run_state.version(run)
    assert claim_doc(target)["run_id"] == "r1"
    assert releases.read_manifest(target) is None and releases.read_latest(spec) is None
    assert not [o for o in storage.list_objects(run.staging) if o.key.endswith(".rec")]
    recorded = storage.read_json(run.checksums("merge"))["files"]["train.rec"]

    def no_copies(*args, **kwargs):
        raise AssertionError("publish copied a file that is already in its version folder")

    monkeypatch.setattr(storage, "copy_exact", no_copies)
    out = publish.publish(run)
    assert out["uri"] == target
    manifest = releases.read_manifest(target)
    train = next(f for f in manifest["files"] if f["name"] == "train.rec")
    assert train["etag"] == recorded["etag"]  # the object merge composed, not a copy of it
    assert {o.key for o in storage.list_objects(target)} == {
        f["name"] for f in manifest["files"]} | {names.MANIFEST, names.CLAIM}
    assert verify.differences(target) == []
    assert releases.read_latest(spec)["uri"] == target


def test_a_dry_run_writes_nothing_where_versions_live(spec):
    result = pipeline.build(spec, run_id="dry", workers=1, dry_run=True)
    assert result["publish"] is None
    assert list(storage.list_objects(releases.dataset_root(spec))) == []
    run = Run(spec, "dry")
    assert run_state.out(run) == run.uri("out")
    assert storage.exists(run_state.output(run, "train.rec"))


def test_each_stage_after_merge_keeps_the_claim_alive(spec):
    run = run_until(spec, "alive", last="merge")
    target = run_state.out(run)
    first = claim_doc(target)["alive_at"]
    stages.entry("validate")(run)
    assert claim_doc(target)["alive_at"] > first


def backdate(target: str, field: str, seconds: float) -> None:
    doc = claim_doc(target)
    doc[field] = (datetime.now(UTC) - timedelta(seconds=seconds)).isoformat()
    storage.write_json(storage.join(target, names.CLAIM), doc)


def test_a_live_run_keeps_its_folder_and_a_dead_one_is_removed_by_the_next_publish(spec):
    long_ago = claims.ORPHAN_GRACE_S + 60
    live = run_until(spec, "live", last="merge")
    backdate(run_state.out(live), "claimed_at", long_ago)  # merged long ago (a long checklist) ...
    backdate(run_state.out(live), "alive_at", long_ago)
    stages.entry("validate")(live)  # ... and alive: its latest stage touched the claim
    dead = run_until(spec, "dead", last="merge")
    backdate(run_state.out(dead), "claimed_at", long_ago)
    backdate(run_state.out(dead), "alive_at", long_ago)

    publisher = run_until(spec, "publisher")
    publish.publish(publisher)
    assert storage.exists(run_state.output(live, "train.rec"))
    assert list(storage.list_objects(run_state.out(dead))) == []  # untouched beyond the grace: dead

    # a run whose folder was removed fails at its next stage, naming the fix, and never
    # publishes into a folder it no longer owns
    with pytest.raises(claims.ClaimLost, match="re-run this run from merge"):
        stages.entry("benchmark")(dead)
    stages.entry("benchmark")(live)
    assert claim_doc(run_state.out(live))["run_id"] == "live"


def test_a_version_claimed_by_another_run_fails_merge_before_it_writes(spec):
    first = run_until(spec, "first", last="merge")
    other = run_until(spec, "other", last="split")
    run_state.pin_version(other, run_state.version(first))
    with pytest.raises(VersionExistsError, match="claimed"):
        stages.entry("merge")(other)
    assert claim_doc(run_state.out(first))["run_id"] == "first"
    assert not storage.exists(other.home)


def test_merge_never_rewrites_a_version_this_run_published(spec):
    run = run_until(spec, "done")
    published = publish.publish(run)
    before = {o.key: o.etag for o in storage.list_objects(published["uri"])}
    with pytest.raises(VersionExistsError, match="already published"):
        stages.entry("merge")(run)
    assert {o.key: o.etag for o in storage.list_objects(published["uri"])} == before


def test_a_version_pinned_at_publish_is_copied_there_and_the_merged_folder_released(spec):
    run = run_until(spec, "pinned")
    merged_into = run_state.out(run)
    out = publish.publish(run, version="v-pinned")
    assert out["uri"] == releases.version_uri(spec, "v-pinned")
    assert verify.differences(out["uri"]) == []
    assert list(storage.list_objects(merged_into)) == []
    assert json.loads(storage.get_bytes(releases.latest_uri(spec)))["version"] == "v-pinned"
