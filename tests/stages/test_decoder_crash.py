"""An image that crashes the decoder costs that image, not the run: the pack worker dies,
the shards it and its neighbours left unfinished are packed again with each image decoded
in a child process, and the image is quarantined as ``decoder_crashed``."""

from __future__ import annotations

import pytest

from recforge import pipeline, run_state, storage
from recforge.format import names
from recforge.run import Run, cache_uri
from recforge.stages import merge, pack
from tests.common import crashers
from tests.common.sources import BAD, make_source, make_spec

pytestmark = pytest.mark.pipeline  # whole builds with a crashing decoder: a slow tier

CRASHER = "dog/a/crasher.jpg"


def _crashing_decoder(monkeypatch):
    # the forked workers, and by name the child an isolated attempt decodes in
    monkeypatch.setattr(pack, "process_hashed", crashers.process_hashed_or_crash)


def test_a_decoder_crash_in_a_worker_quarantines_the_image_and_the_build_completes(
        bucket, monkeypatch, caplog):
    objects = make_source(bucket)
    good = objects["dog/a/1.jpg"]
    storage.put_bytes(f"s3://{bucket}/raw/{CRASHER}", crashers.SEGFAULT + good)
    _crashing_decoder(monkeypatch)
    spec = make_spec(bucket)
    result = pipeline.build(spec, run_id="crash", workers=2, dry_run=True)
    summary = result["merge"]
    assert summary["listed"] == len(objects) + 1
    assert summary["quarantined"] == len(BAD) + 1
    assert summary["quarantined_by_reason"]["decoder_crashed"] == 1
    run = Run(spec, "crash")
    entries = {e["source_key"]: e
               for e in storage.read_jsonl(run_state.output(run, "quarantine.jsonl"))}
    assert "SIGSEGV" in entries[CRASHER]["detail"]
    assert any("died without an error" in r.message for r in caplog.records)
    for shard in result["split"]["shards"]:  # no attempt is left marked as running
        assert not storage.exists(run.shard_output(shard, "pack_attempt.json"))


def test_only_a_shard_whose_attempt_died_decodes_in_isolation(bucket, monkeypatch):
    """In Airflow the task process itself dies; its retry finds the attempt marker. An
    attempt that ends in a Python error removes its marker, so its retry packs as usual."""
    make_source(bucket, classes=("dog", "eel"), per_class=4)
    storage.put_bytes(f"s3://{bucket}/raw/{CRASHER}", crashers.SEGFAULT + b"\xff\xd8")
    spec = make_spec(bucket, pack={"resize": 48, "shard_size": 100})
    pipeline.build(spec, run_id="iso", workers=1, dry_run=True)  # plans, and packs
    run = Run(spec, "iso")
    shard = storage.read_json(run.shard_list)["shards"]
    shard = next(s for s in shard if any(r["source_key"] == CRASHER for r in
                                         storage.read_jsonl(run.shard_plan(s))))
    _crashing_decoder(monkeypatch)
    storage.write_json(run.shard_output(shard, "pack_attempt.json"), {"run_id": "iso"})
    storage.delete_prefix(cache_uri(spec))  # nothing to reuse: the shard is decoded again
    counts = pack.pack(run, shard)
    assert counts["quarantined"] >= 1
    packed = merge.Shard.read(run.shard_output(shard, ""))
    refused = {e["source_key"]: e["reason"] for e in
               storage.read_jsonl(packed.file(names.QUARANTINE))}
    assert refused[CRASHER] == "decoder_crashed"
    assert not storage.exists(run.shard_output(shard, "pack_attempt.json"))
