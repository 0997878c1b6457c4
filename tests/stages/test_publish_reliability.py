"""Publish is verified and exclusive: every published object carries a SHA-256
checked after the copy, a version is created once, only the current attempt's files are
published, an incomplete version is invisible and cleaned, and `recforge verify` re-checks a
version end to end. Against the moto server, through the real S3 protocol."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid

import pytest

from recforge import pipeline, releases, run_state, storage
from recforge.cli import verify
from recforge.errors import ChecksumMismatch, VersionExistsError
from recforge.format import names
from recforge.run import Run
from recforge.stages import publish, quality_gate
from tests.common.sources import make_source, make_spec

pytestmark = [pytest.mark.both_stores,  # each test against moto and Ceph RGW
              pytest.mark.pipeline]  # whole builds: a slow tier


@pytest.fixture(scope="module")
def staged(s3_endpoint):
    """Two dry-run builds of one spec with different data (runs ``a`` and ``b``), staged
    once for the module; tests publish copies of them (``fresh``) to their own prefixes."""
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    storage.s3_client().create_bucket(Bucket=bucket)
    spec = make_spec(bucket, staging_uri=f"s3://{bucket}/staging")
    make_source(bucket, classes=("dog", "eel"), per_class=8)
    pipeline.build(spec, run_id="a", workers=1, dry_run=True)
    make_source(bucket, classes=("dog", "eel"), per_class=12)
    pipeline.build(spec, run_id="b", workers=1, dry_run=True)
    return spec


def fresh(spec, run_id: str, source: str = "a", publish_uri: str | None = None) -> Run:
    """A new run whose staging is a server-side copy of run ``source``'s (its version not
    chosen yet), publishing to ``publish_uri`` (default: a prefix of its own)."""
    bucket = storage.split_s3(spec.publish.uri)[0]
    spec = spec.model_copy(update={"publish": spec.publish.model_copy(update={
        "uri": publish_uri or f"s3://{bucket}/pub-{uuid.uuid4().hex[:8]}"})})
    src, dst = Run(spec, source), Run(spec, run_id)
    for obj in storage.list_objects(src.staging):
        if not obj.key.startswith("publish/"):
            storage.copy(src.uri(obj.key), dst.uri(obj.key))
    return dst


def version_objects(uri: str) -> set[str]:
    return {o.key for o in storage.list_objects(uri)}


def checksum_entry(uri: str, entry: dict) -> dict:
    """``uri``'s bytes described like ``entry``: one SHA-256, or one per part (composed)."""
    data = storage.get_bytes(uri)
    if "parts" not in entry:
        return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    parts, at = [], 0
    for p in entry["parts"]:
        parts.append({"size": p["size"],
                      "sha256": hashlib.sha256(data[at:at + p["size"]]).hexdigest()})
        at += p["size"]
    return {"size": len(data), "parts": parts}


def test_every_published_file_carries_its_sha256_and_the_version_is_exactly_them(staged):
    run = fresh(staged, "r1")
    out = publish.publish(run)
    manifest = releases.read_manifest(out["uri"])
    files = {f["name"]: f for f in manifest["files"]}
    assert {"train.rec", "train.idx", "val.rec", "bench.json", "report.html",
            "quality/index.html", "summary.json", "source_manifest.jsonl"} <= set(files)
    assert names.CHECKSUMS not in files
    assert version_objects(out["uri"]) == set(files) | {names.MANIFEST, names.CLAIM}
    assert any("parts" in f for f in files.values())  # the composed .rec files
    for name, f in files.items():
        expected = {k: f[k] for k in ("size", "sha256", "parts") if k in f}
        assert checksum_entry(storage.join(out["uri"], name), f) == expected, name
    assert releases.read_latest(run.spec)["uri"] == out["uri"]


def test_a_published_run_releases_its_staged_record_files_and_a_retry_still_works(staged):
    run = fresh(staged, "r-release")
    staged_recs = {o.key: o.size for o in storage.list_objects(run.staging)
                   if o.key.endswith(".rec")}
    assert {"out/train.rec", "out/val.rec"} <= set(staged_recs)
    out = publish.publish(run)
    left = {o.key for o in storage.list_objects(run.staging)}
    assert not {k for k in left if k.endswith(".rec")}
    assert {"out/summary.json", "merge/checksums.json", "publish/version.json"} <= left
    assert verify.differences(out["uri"]) == []
    assert publish.publish(run) == out  # a retry of the task after it succeeded
    assert publish.release_staging(run) == {"files": 0, "bytes": 0}
    assert releases.read_latest(run.spec)["uri"] == out["uri"]


def test_a_benchmark_run_again_after_the_checklist_is_refused_until_it_is_checked(staged):
    """The DAG's checklist waits for the benchmark inside its task, so clearing only the
    benchmark re-runs it after the checklist: its new bench.json must not be published
    beside Data Docs and a report about the earlier one."""
    run = fresh(staged, "r-rebench")
    quality_gate.quality_gate(run, benchmark_finished=lambda: True)  # as the DAG runs it
    measured = storage.read_json(run.checksums("benchmark"))["files"][names.BENCH]
    assert storage.read_json(run.checksums("quality_gate"))["checked"] == {
        names.BENCH: measured["sha256"]}
    bench = storage.read_json(run_state.output(run, names.BENCH))
    with run_state.recording_outputs(run, "benchmark"):  # the benchmark task, cleared and run again
        storage.write_json(run_state.output(run, names.BENCH), {**bench, "started": "later"})
    with pytest.raises(ChecksumMismatch, match="bench.json: quality_gate checked the one"):
        publish.publish(run)
    quality_gate.quality_gate(run, benchmark_finished=lambda: True)  # cleared too
    out = publish.publish(run)
    assert storage.read_json(storage.join(out["uri"], names.BENCH))["started"] == "later"


def test_stale_files_of_a_killed_attempt_are_not_published(staged):
    run = fresh(staged, "r1")
    stale = ["quality/validations/killed-attempt.html", "report-old.html"]
    for key in stale:  # what a killed earlier attempt left in staging out/
        storage.put_bytes(run_state.output(run, key), b"<html>stale</html>")
    out = publish.publish(run)
    published = version_objects(out["uri"])
    assert not set(stale) & published
    assert published == {f["name"] for f in releases.read_manifest(out["uri"])["files"]} | {
        names.MANIFEST, names.CLAIM}


@pytest.mark.parametrize("writer_etag", [True, False], ids=["etag-recorded", "sha256-only"])
def test_a_damaged_staged_train_rec_is_refused_and_latest_stays(staged, writer_etag):
    first = publish.publish(fresh(staged, "good"))
    run = fresh(staged, "damaged", publish_uri=staged_root(first))
    if not writer_etag:  # the merge contract's entries: size and sha256 only
        doc = storage.read_json(run.checksums("merge"))
        for entry in doc["files"].values():
            entry.pop("etag", None)
        storage.write_json(run.checksums("merge"), doc)
    data = bytearray(storage.get_bytes(run_state.output(run, "train.rec")))
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed after merge
    storage.put_bytes(run_state.output(run, "train.rec"), bytes(data))
    latest_before = storage.get_bytes(releases.latest_uri(run.spec))

    with pytest.raises(ChecksumMismatch, match="train.rec"):
        publish.publish(run)
    assert storage.get_bytes(releases.latest_uri(run.spec)) == latest_before
    assert not list(storage.list_objects(releases.version_uri(run.spec, run_state.version(run))))
    assert [m["run_id"] for m in releases.versions(releases.dataset_root(run.spec))] == ["good"]


def staged_root(published: dict) -> str:
    """The publish.uri of a published version (``<publish.uri>/<name>/<version>``)."""
    return published["uri"].rsplit("/", 2)[0]


def race(runs: list[Run], version: str) -> dict:
    """Publish every run to ``version`` at once (threads released together); returns each
    run's result or the exception it raised."""
    barrier, results = threading.Barrier(len(runs)), {}

    def go(run: Run) -> None:
        barrier.wait()
        try:
            results[run.run_id] = publish.publish(run, version=version)
        except Exception as exc:  # noqa: BLE001 (the loser's error is the point)
            results[run.run_id] = exc

    threads = [threading.Thread(target=go, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_two_concurrent_publishes_of_one_version_exactly_one_wins(staged):
    for round_ in range(3):
        pub = f"s3://{storage.split_s3(staged.publish.uri)[0]}/race"
        runs = [fresh(staged, f"race-{s}{round_}", s, pub) for s in ("a", "b")]
        expected = {r.run_id: publish.staged_files(r) for r in runs}
        assert expected[runs[0].run_id]["train.idx"] != expected[runs[1].run_id]["train.idx"]
        results = race(runs, f"v-race-{round_}")
        won = [k for k, v in results.items() if isinstance(v, dict)]
        lost = [v for v in results.values() if not isinstance(v, dict)]
        assert len(won) == 1 and len(lost) == 1, results
        assert isinstance(lost[0], VersionExistsError)
        uri = results[won[0]]["uri"]
        manifest = releases.read_manifest(uri)
        assert manifest["run_id"] == won[0]
        mine = expected[won[0]]
        def described(f):
            return {k: f[k] for k in ("size", "sha256", "parts") if k in f}
        assert {f["name"]: described(f) for f in manifest["files"]} == {
            k: described(v) for k, v in mine.items()}
        for f in manifest["files"]:
            assert checksum_entry(storage.join(uri, f["name"]), f) == described(mine[f["name"]]), \
                f["name"]
        assert releases.read_latest(runs[0].spec)["run_id"] == won[0]


def test_a_crash_mid_publish_is_invisible_then_resumed_or_cleaned(staged, monkeypatch):
    crashed = fresh(staged, "crashed")
    real_copy, calls = storage.copy_exact, []

    def dies_after_three(src, dst, *layout):
        calls.append(dst)
        if len(calls) > 3:
            raise ConnectionError("worker lost mid-publish")
        return real_copy(src, dst, *layout)

    monkeypatch.setattr(storage, "copy_exact", dies_after_three)
    with pytest.raises(ConnectionError):
        publish.publish(crashed)
    monkeypatch.setattr(storage, "copy_exact", real_copy)
    root = releases.dataset_root(crashed.spec)
    orphan = releases.version_uri(crashed.spec, run_state.version(crashed))
    assert storage.exists(storage.join(orphan, names.CLAIM))
    assert releases.read_manifest(orphan) is None
    assert releases.versions(root) == [] and releases.read_latest(crashed.spec) is None

    # another run publishes: the orphan is young (its publish may be alive), so it stays
    other = fresh(staged, "other", publish_uri=crashed.spec.publish.uri)
    publish.publish(other)
    assert storage.exists(storage.join(orphan, names.CLAIM))
    # the crashed run's retry resumes its own claim and completes the version
    out = publish.publish(crashed)
    assert out["uri"] == orphan
    manifest = releases.read_manifest(orphan)
    assert version_objects(orphan) == {f["name"] for f in manifest["files"]} | {
        names.MANIFEST, names.CLAIM}
    assert releases.read_latest(crashed.spec)["uri"] == orphan

    # a crash never retried is removed by the next publish once it is older than the grace
    never = fresh(staged, "never", publish_uri=crashed.spec.publish.uri)
    calls.clear()
    monkeypatch.setattr(storage, "copy_exact", dies_after_three)
    with pytest.raises(ConnectionError):
        publish.publish(never)
    monkeypatch.setattr(storage, "copy_exact", real_copy)
    dead = releases.version_uri(never.spec, run_state.version(never))
    assert list(storage.list_objects(dead))
    last = fresh(staged, "last", publish_uri=crashed.spec.publish.uri)
    out = publish.publish(last, orphan_grace_s=0)
    assert not list(storage.list_objects(dead))
    assert releases.read_latest(last.spec)["uri"] == out["uri"]
    assert [m["run_id"] for m in releases.versions(root)] == ["other", "crashed", "last"]


def test_latest_moves_by_compare_and_swap_and_only_forward(bucket, monkeypatch):
    def pointer(version: str, day: str) -> dict:
        return {"version": version, "run_id": f"r-{version}", "uri": f"x/{version}",
                "published_at": f"2026-01-{day}"}

    uri = f"s3://{bucket}/ds/latest.json"
    assert publish.advance_latest(uri, pointer("v2", "02"))
    assert not publish.advance_latest(uri, pointer("v1", "01"))  # a late retry of an older one
    assert storage.read_json(uri)["version"] == "v2"

    real, raced = storage.get_with_etag, []

    def racer_moves_it(u):  # another publish moves latest.json between our read and write
        got = real(u)
        if not raced:
            raced.append(u)
            storage.write_json(u, pointer("v3", "03"))
        return got

    monkeypatch.setattr(storage, "get_with_etag", racer_moves_it)
    # newer than what we read (v2), older than what the racer wrote (v3): If-Match refuses
    assert not publish.advance_latest(uri, pointer("v2b", "02T12"))
    assert storage.read_json(uri)["version"] == "v3"
    raced.clear()  # likewise the very first latest.json: If-None-Match refuses
    first = f"s3://{bucket}/other/latest.json"
    assert not publish.advance_latest(first, pointer("v2", "02"))
    assert storage.read_json(first)["version"] == "v3"
    assert publish.advance_latest(first, pointer("v4", "04"))
    assert storage.read_json(first)["version"] == "v4"


def test_conditional_writes_and_exact_multipart_copy(bucket, tmp_path):
    for base in (f"s3://{bucket}", str(tmp_path)):
        uri = storage.join(base, "c/once.json")
        storage.write_json(uri, {"n": 1}, if_none_match=True)
        with pytest.raises(storage.PreconditionFailed):
            storage.write_json(uri, {"n": 2}, if_none_match=True)
        with pytest.raises(storage.PreconditionFailed):
            storage.write_json(uri, {"n": 3}, if_match="not-the-etag")
        storage.write_json(uri, {"n": 4}, if_match=storage.head(uri).etag)
        assert storage.read_json(uri) == {"n": 4}

    key = "big/two-parts.bin"
    body = [bytes([i]) * (5 * 1024 * 1024 + i) for i in range(2)]
    src = _multipart(bucket, key, body)
    assert src.etag.endswith("-2")
    # the layout it was written in: what a store that answers no HEAD ?partNumber (Ceph RGW
    # 16) copies by; the moto server reports the parts itself
    dst = storage.copy_exact(f"s3://{bucket}/{key}", f"s3://{bucket}/copy/{key}",
                             composed_of=[len(b) for b in body])
    assert (dst.size, dst.etag) == (src.size, src.etag)
    entry = {"size": src.size, "parts": [{"size": len(b), "sha256": hashlib.sha256(b)
                                          .hexdigest()} for b in body]}
    copy_uri = f"s3://{bucket}/copy/{key}"
    for threads in (1, 4):  # parts hashed one by one or at once: the same verdicts
        assert releases.check_file(copy_uri, entry, threads=threads) is None
        wrong = {**entry, "parts": [entry["parts"][0], {**entry["parts"][1], "sha256": "0" * 64}]}
        assert "part 2" in releases.check_file(copy_uri, wrong, threads=threads)
        both = {**wrong, "parts": [{**entry["parts"][0], "sha256": "1" * 64}, wrong["parts"][1]]}
        assert "part 1 " in releases.check_file(copy_uri, both, threads=threads)  # the first
        unhashed = {**entry, "parts": [entry["parts"][0], {"size": entry["parts"][1]["size"]}]}
        assert "no SHA-256 recorded" in releases.check_file(copy_uri, unhashed, threads=threads)


def test_recforge_verify(staged, capsys):
    from recforge.cli import main

    out = publish.publish(fresh(staged, "v"))
    root = releases.dataset_root(fresh(staged, "unused", publish_uri=staged_root(out)).spec)
    assert main(["verify", out["uri"]]) == 0
    assert main(["verify", root]) == 0  # the dataset prefix: its latest version
    assert f"verified: {out['uri']}" in capsys.readouterr().out

    rec = storage.join(out["uri"], "val.rec")
    data = bytearray(storage.get_bytes(rec))
    data[0] ^= 0xFF  # the first record's magic: a framing error as well as a checksum one
    storage.put_bytes(rec, bytes(data))
    storage.delete(storage.join(out["uri"], "summary.json"))
    storage.put_bytes(storage.join(out["uri"], "extra.txt"), b"x")
    assert main(["verify", out["uri"]]) == 1
    text = capsys.readouterr().out
    assert re.search(r"val\.rec: .*SHA-256", text) and "summary.json: missing" in text
    assert "extra.txt: in the version but not in its manifest" in text
    assert "RecordIO structure: val:" in text

    assert main(["verify", storage.join(root, "no-such-version")]) == 2
    assert "no manifest.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["verify"])
    assert exc.value.code == 2


def test_two_runs_choosing_a_version_in_one_second_do_not_collide():
    from datetime import UTC, datetime

    from recforge.run import new_version

    now = datetime(2026, 12, 1, 13, 0, 0, tzinfo=UTC)
    assert new_version(now, "run-a") != new_version(now, "run-b")
    assert new_version(now, "run-a").startswith("v20261201T130000Z-")
    assert sorted([new_version(now.replace(second=1), "a"), new_version(now, "z")])[0] \
        .startswith("v20261201T130000Z")


KILLED_PUBLISH = """
import json, os, signal, sys
from recforge import storage
from recforge.run import Run
from recforge.spec import parse_spec
from recforge.stages import publish, quality_gate

spec, run_id = parse_spec(json.loads(sys.argv[1])), sys.argv[2]
real, calls = storage.copy_exact, []

def copy_then_die(src, dst, *layout):
    calls.append(dst)
    if len(calls) > 3:  # SIGKILL: no except, no finally, no abort of a multipart copy
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *layout)

storage.copy_exact = copy_then_die
publish.publish(Run(spec, run_id))
"""


def test_a_publish_killed_with_sigkill_is_invisible_and_resumed(staged):
    import subprocess
    import sys

    run = fresh(staged, "killed")
    proc = subprocess.run([sys.executable, "-c", KILLED_PUBLISH,
                           json.dumps(run.spec.model_dump(mode="json")), run.run_id],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    version = releases.version_uri(run.spec, run_state.version(run))
    assert storage.exists(storage.join(version, names.CLAIM))
    assert releases.read_manifest(version) is None and releases.read_latest(run.spec) is None
    out = publish.publish(run)  # the task's retry
    assert out["uri"] == version
    files = {f["name"]: f for f in releases.read_manifest(version)["files"]}
    assert version_objects(version) == set(files) | {names.MANIFEST, names.CLAIM}
    for name, f in files.items():
        assert checksum_entry(storage.join(version, name), f) == {
            k: f[k] for k in ("size", "sha256", "parts") if k in f}, name
    assert releases.read_latest(run.spec)["uri"] == version


def test_copy_exact_copies_many_parts_at_once_in_order(bucket, monkeypatch):
    """A composed split has one part per shard (a thousand at ImageNet size): the parts are
    copied several at a time, and the copy is still the source byte for byte, same ETag."""
    key = "big/many-parts.bin"
    body = [bytes([65 + i]) * (5 * 1024 * 1024 + 7 * i) for i in range(5)] + [b"tail"]
    src = _multipart(bucket, key, body)
    active, most, lock = [0], [0], threading.Lock()
    real_client = storage.s3_client

    class Counting:  # how many part copies are in flight at once
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def upload_part_copy(self, **kw):
            with lock:
                active[0] += 1
                most[0] = max(most[0], active[0])
            try:
                time.sleep(0.05)
                return self.inner.upload_part_copy(**kw)
            finally:
                with lock:
                    active[0] -= 1

    monkeypatch.setattr(storage.client, "s3_client", lambda: Counting(real_client()))
    dst = storage.copy_exact(f"s3://{bucket}/{key}", f"s3://{bucket}/copy/{key}",
                             composed_of=[len(b) for b in body])
    assert (dst.size, dst.etag) == (src.size, src.etag)
    assert storage.get_bytes(f"s3://{bucket}/copy/{key}") == b"".join(body)
    assert most[0] > 1


def _multipart(bucket: str, key: str, body: list[bytes]) -> storage.ObjectInfo:
    """Upload ``body`` as one multipart object, a part each; returns its HEAD."""
    client = storage.s3_client()
    mpu = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = [{"PartNumber": n + 1, "ETag": client.upload_part(
        Bucket=bucket, Key=key, UploadId=mpu, PartNumber=n + 1, Body=b)["ETag"]}
        for n, b in enumerate(body)]
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=mpu,
                                     MultipartUpload={"Parts": parts})
    return storage.head(f"s3://{bucket}/{key}")


def test_copy_exact_refuses_parts_that_do_not_add_up_and_leaves_no_copy(bucket, monkeypatch):
    """The part sizes HEAD reports must add up to the object: otherwise the ranges would
    copy the wrong bytes, so the copy fails naming the source and its upload is aborted."""
    key = "big/lying-parts.bin"
    src = _multipart(bucket, key, [b"a" * (5 * 1024 * 1024), b"tail"])
    real_client = storage.s3_client

    class ShortPart:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def head_object(self, **kw):
            got = self.inner.head_object(**kw)
            if kw.get("PartNumber") == 1:
                got = {**got, "ContentLength": got["ContentLength"] - 1}
            return got

    monkeypatch.setattr(storage.client, "s3_client", lambda: ShortPart(real_client()))
    # a store that reports no part sizes (Ceph RGW 16) is refused too: nothing to lie with
    with pytest.raises(OSError, match=r"lying-parts\.bin: (its 2 parts add up to|the store "
                                      r"does not report)"):
        storage.copy_exact(f"s3://{bucket}/{key}", f"s3://{bucket}/copy/{key}")
    monkeypatch.setattr(storage.client, "s3_client", real_client)
    assert storage.head(f"s3://{bucket}/copy/{key}") is None
    assert not real_client().list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert src.size == 5 * 1024 * 1024 + 4
