"""The whole pipeline through the real S3 protocol, read back with MXNet's own readers."""

from __future__ import annotations

import json
import logging

import pytest

from recforge import pipeline, releases, storage
from recforge.errors import LabelMapError, VersionExistsError
from recforge.stages import publish
from tests.common import mxnet_readers
from tests.common.sources import BAD, make_source, make_spec

pytestmark = [pytest.mark.both_stores,  # each test against moto and Ceph RGW
              pytest.mark.pipeline]  # whole builds: a slow tier


def test_build_publishes_what_mxnet_reads(bucket, tmp_path):
    objects = make_source(bucket)
    spec = make_spec(bucket)
    result = pipeline.build(spec, run_id="r1", workers=1)
    summary = result["merge"]
    good = len(objects) - len(BAD)
    assert summary["listed"] == len(objects)
    assert summary["packed"] == good and summary["quarantined"] == len(BAD)
    assert sum(summary["splits"].values()) == good

    version = result["publish"]["uri"]
    latest = storage.read_json(f"s3://{bucket}/datasets/pets/latest.json")
    assert latest["uri"] == version
    for obj in storage.list_objects(version):
        storage.download(f"{version}/{obj.key}", tmp_path / obj.key)
    quarantined = {json.loads(ln)["source_key"]: json.loads(ln)["reason"]
                   for ln in (tmp_path / "quarantine.jsonl").read_text().splitlines()}
    assert quarantined == BAD
    classes = json.loads((tmp_path / "classes.json").read_text())
    assert classes["classes"] == ["cat", "dog", "eel"]
    records = [json.loads(ln) for ln in (tmp_path / "records.jsonl").read_text().splitlines()]
    truth = {r["source_key"]: classes["ids"][r["source_key"].split("/")[0]] for r in records}

    for split, n in summary["splits"].items():
        got = [int(x) for x in mxnet_readers.read(
            "iter_labels", rec=str(tmp_path / f"{split}.rec"),
            idx=str(tmp_path / f"{split}.idx"), data_shape=[3, 48, 48])]
        mine = [r for r in records if r["split"] == split]
        assert len(got) == n == len(mine)
        assert got == [truth[r["source_key"]] for r in sorted(mine, key=lambda r: r["key"])]
        assert all(min(r["height"], r["width"]) == 48 for r in mine)  # short side = resize
    assert json.loads((tmp_path / "manifest.json").read_text())["run_id"] == "r1"

    # what each shard cost: its memory, and one GET per image it fetched
    shards = result["pack"]
    assert all(0 < s["peak_rss_mb"] < 2048 for s in shards)
    fetched = sum(s["s3_requests"].get("get_object", 0) for s in shards)
    assert fetched >= len(objects) - len(BAD)
    assert all(s["s3_requests"].get("put_object", 0) >= 1 for s in shards)


def test_rebuild_keeps_ids_appends_classes_and_never_overwrites(bucket):
    make_source(bucket, classes=("dog", "eel"))
    spec = make_spec(bucket)
    first = pipeline.build(spec, run_id="r1", workers=1)["publish"]
    make_source(bucket, classes=("ant", "dog", "eel"))
    second = pipeline.build(spec, run_id="r2", workers=1)["publish"]
    assert second["version"] != first["version"]
    doc = storage.read_json(f"{second['uri']}/classes.json")
    assert doc["classes"] == ["dog", "eel", "ant"]  # ant appended; dog/eel keep 0/1
    assert doc["based_on_version"] == first["version"]

    storage.delete_prefix(f"s3://{bucket}/raw/eel")
    with pytest.raises(LabelMapError, match="eel"):
        pipeline.build(spec, run_id="r3", workers=1)
    assert storage.read_json(releases.latest_uri(spec))["version"] == second["version"]


def test_publish_is_idempotent_per_run_and_refuses_overwrite(bucket):
    make_source(bucket, classes=("dog",), per_class=10)
    spec = make_spec(bucket)
    out = pipeline.build(spec, run_id="same", workers=1)["publish"]
    from recforge.run import Run

    again = publish.publish(Run(spec, "same"))
    assert again == out
    # the same content again: without force_rebuild the run would stop at "no changes"
    pipeline.build(spec, run_id="other", workers=1, dry_run=True, force_rebuild=True)
    with pytest.raises(VersionExistsError, match="never overwritten"):
        publish.publish(Run(spec, "other"), version=out["version"])


class _Said(logging.Handler):
    """The records of one logger, whatever an earlier test did to propagation or the root's
    handlers (caplog sees only what reaches the root)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_dry_run_publishes_nothing(bucket):
    make_source(bucket, classes=("dog",), per_class=10)
    logger, said_by = logging.getLogger("recforge.stages.quality_gate"), _Said()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(said_by)
    try:
        result = pipeline.build(make_spec(bucket), run_id="dry", workers=1, dry_run=True)
    finally:
        logger.removeHandler(said_by)
        logger.setLevel(level)
    assert result["publish"] is None
    assert not list(storage.list_objects(f"s3://{bucket}/datasets/pets"))
    out = f"{result['staging']}/out"
    assert storage.exists(f"{out}/train.rec")
    # the log and the report point at the staged report, never at a version that won't exist
    said = [r.getMessage() for r in said_by.records if r.getMessage().startswith("report: ")]
    assert said == [f"report: {out}/report.html (dry run: nothing is published, the report "
                    f"stays staged; open it with `recforge report {out} --open`)"]
    page = storage.get_bytes(f"{out}/report.html").decode()
    assert "datasets/pets/v" not in page and f"{out} (not a published version)" in page


def test_listing_is_paginated(bucket):
    from recforge.run import Run
    from recforge.stages import ingest

    client = storage.s3_client()
    for i in range(1005):
        client.put_object(Bucket=bucket, Key=f"raw/c/{i:04d}.jpg", Body=b"x")
    counts = ingest.ingest(Run(make_spec(bucket), "p"))
    assert counts["listed"] == 1005 and counts["accepted"] == 1005


def test_cli_build_prints_counts_and_refuses_a_bad_spec(bucket, tmp_path, capsys):
    import yaml

    from recforge.cli import main

    objects = make_source(bucket, classes=("dog", "eel"), per_class=8)
    spec_file = tmp_path / "pets.yaml"
    spec_file.write_text(yaml.safe_dump(make_spec(bucket).model_dump(mode="json")))
    assert main(["build", str(spec_file), "--dry-run"]) == 0
    out = capsys.readouterr().out
    n_bad = sum(1 for k in BAD if k.split("/")[0] in ("dog", "eel") or "/" not in k)
    assert f"listed {len(objects)} = packed {len(objects) - n_bad} + quarantined {n_bad}" in out
    assert "quality checklist: passed" in out and "dry run, not published" in out
    spec_file.write_text("name: pets\nsource: {uri: s3://x/y}\npublish: {uri: s3://x/z}\n"
                         "pack: {resize: -5}\n")
    assert main(["build", str(spec_file)]) == 2
    assert "pack.resize" in capsys.readouterr().err


def test_ingest_lists_the_class_folders_side_by_side(bucket, monkeypatch):
    import threading

    from recforge.run import Run
    from recforge.stages import ingest
    from recforge.storage import listing, retry

    objects = make_source(bucket)
    monkeypatch.setattr(listing, "PAGE_KEYS", 7)  # 45 objects: 7 pages one after the other
    threads_used, real = set(), retry.call

    def call(operation, uri, **kwargs):
        threads_used.add(threading.current_thread().name.split("_")[0])
        return real(operation, uri, **kwargs)

    monkeypatch.setattr(retry, "call", call)
    run = Run(make_spec(bucket), "fan")
    counts = ingest.ingest(run)
    listed = [row["key"] for row in storage.iter_jsonl(run.source_manifest)]
    assert listed == sorted(objects) and counts["listed"] == len(objects)
    assert "recforge-list" in threads_used  # the class folders were listed in the pool
