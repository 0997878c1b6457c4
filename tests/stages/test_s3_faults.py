"""S3 faults never shrink a dataset: a whole ``recforge build`` through a proxy that fails 5 %
of the requests (503 SlowDown, 500 InternalError, a connection reset mid-body, delays; each
alone and mixed) publishes exactly the bytes of a fault-free build; S3 down fails the build
with the endpoint named and nothing published."""

from __future__ import annotations

import os

import pytest

from recforge import pipeline, storage
from tests.common.faultproxy import MODES, running_proxy
from tests.common.sources import make_source, make_spec

pytestmark = [pytest.mark.both_stores,  # each test against moto and Ceph RGW
              pytest.mark.pipeline]  # whole builds: a slow tier

DATA_FILES = (".rec", ".idx", ".lst")
COMPARED = ("records.jsonl", "quarantine.jsonl", "summary.json", "classes.json")


def published_data(uri: str) -> dict[str, bytes]:
    """The published data files of a version: ``*.rec``/``.idx``/``.lst`` and the manifests
    that do not name the run (the record manifest, quarantine, summary, classes)."""
    return {o.key: storage.get_bytes(f"{uri}/{o.key}") for o in storage.list_objects(uri)
            if o.key.endswith(DATA_FILES) or o.key in COMPARED}


@pytest.fixture
def through(s3_endpoint, monkeypatch):
    """``through(**proxy kwargs)``: a fault proxy in front of the S3 server, with boto3
    pointed at it (and short back-offs) for the ``with`` block."""
    import contextlib

    @contextlib.contextmanager
    def _through(**kwargs):
        with running_proxy(s3_endpoint, **kwargs) as proxy:
            monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
            try:
                yield proxy
            finally:
                monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)

    monkeypatch.setenv("RECFORGE_S3_BACKOFF_S", "0.01")
    monkeypatch.setenv("RECFORGE_S3_RETRY_MODE", "standard")
    return _through


@pytest.fixture(scope="module")
def baseline(s3_endpoint):
    """One fault-free build of a small source; yields (bucket, its published data)."""
    import uuid

    bucket = f"t-{uuid.uuid4().hex[:12]}"
    storage.s3_client().create_bucket(Bucket=bucket)
    make_source(bucket, classes=("dog", "eel"), per_class=6)
    spec = make_spec(bucket)
    out = pipeline.build(spec, run_id="clean", workers=1)
    return bucket, published_data(out["publish"]["uri"])


@pytest.mark.parametrize("modes", [(m,) for m in MODES] + [MODES], ids="+".join)
def test_faulty_s3_publishes_the_same_bytes(baseline, through, modes):
    bucket, expected = baseline
    spec = make_spec(bucket).with_overrides({"publish.uri": f"s3://{bucket}/{'_'.join(modes)}"})
    with through(rate=0.05, modes=modes, seed=len(modes) + sum(map(len, modes))) as proxy:
        out = pipeline.build(spec, run_id="faulty", workers=1)
    injected = sum(proxy.stats[m] for m in modes)
    assert injected >= 3, f"too few faults to prove anything: {dict(proxy.stats)}"
    got = published_data(out["publish"]["uri"])
    assert sorted(got) == sorted(expected)
    for name, data in expected.items():
        assert got[name] == data, f"{name} differs after {dict(proxy.stats)}"


def test_s3_down_names_the_endpoint_and_publishes_nothing(baseline, through, monkeypatch,
                                                          capsys, tmp_path):
    import yaml

    from recforge.cli import main

    bucket, _ = baseline
    monkeypatch.setenv("RECFORGE_S3_MAX_ATTEMPTS", "2")
    spec = make_spec(bucket).with_overrides({"publish.uri": f"s3://{bucket}/down"})
    spec_file = tmp_path / "pets.yaml"
    spec_file.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    with through() as proxy:
        proxy.down = True
        assert main(["build", str(spec_file), "--run-id", "down"]) == 2
        endpoint = os.environ["AWS_ENDPOINT_URL"]
    err = capsys.readouterr().err
    assert f"cannot reach {endpoint}: is the server running" in err, err
    assert "AWS_ENDPOINT_URL" in err
    assert proxy.stats["refused"] >= 2
    assert not list(storage.list_objects(f"s3://{bucket}/down"))


def test_the_gate_tells_a_record_it_cannot_read_from_a_wrong_one(bucket, through, tmp_path,
                                                                 monkeypatch):
    """The checklist's re-read sample: a record read and wrong (its offset past the end of
    the .rec) is a failed check; a record that cannot be read (every GET reset) fails the
    task with a transient error, to be retried, and is never counted as corrupt."""
    import pandas as pd

    from recforge.quality.inputs import load_inputs, verify_records
    from tests.quality.test_quality import write_packed

    write_packed(tmp_path)
    prefix = f"s3://{bucket}/ds"
    for p in tmp_path.iterdir():
        storage.upload(p, storage.join(prefix, p.name))
    inputs = load_inputs(prefix)
    records = pd.DataFrame(inputs.records)
    records.loc[0, "offset"] = 10 ** 7
    checked = verify_records(records.copy(), inputs.rec_uris, None)
    assert list(checked["rec_status"]) == ["bad_record"] + ["ok"] * (len(records) - 1)

    monkeypatch.setenv("RECFORGE_S3_MAX_ATTEMPTS", "2")
    with through(rate=1.0, modes=("reset",)), pytest.raises(Exception) as failed:
        verify_records(records.copy(), inputs.rec_uris, None)
    assert storage.is_transient(failed.value), repr(failed.value)


def test_every_s3_request_of_a_build_goes_through_the_one_retry_rule(baseline, through):
    """Each request a client sends is seen by a botocore hook, and each GET recforge signs
    itself by a wrapper around ``http_get``'s send, that ask whether it runs under
    ``storage.retry``: a whole build (pack, compose, copies, publish, cleanup), through the
    fault proxy, makes none outside it."""
    from recforge.storage import client, http_get, retry

    seen: list[tuple[str, bool]] = []
    send = http_get._send

    def watched_send(*args, **kwargs):
        seen.append(("GetObject (http_get)", retry.inside()))
        return send(*args, **kwargs)

    def instrumented():
        made = client.default_client()
        made.meta.events.register(
            "before-call.s3", lambda event_name, **_: seen.append(
                (event_name.rsplit(".", 1)[-1], retry.inside())))
        return made

    bucket, expected = baseline
    spec = make_spec(bucket).with_overrides({"publish.uri": f"s3://{bucket}/ruled"})
    storage.configure_s3(instrumented)
    http_get._send = watched_send
    try:
        with through(rate=0.05, modes=MODES, seed=7):
            out = pipeline.build(spec, run_id="ruled", workers=1)
            elsewhere = [f"s3://{bucket}/elsewhere/{n}" for n in ("train.rec", "val.rec")]
            for name, uri in zip(("train.rec", "val.rec"), elsewhere, strict=True):
                storage.copy_exact(storage.join(out["publish"]["uri"], name), uri)
            storage.delete(elsewhere[0])
            storage.delete_many(elsewhere)  # a build composing in place deletes no batch
    finally:
        storage.configure_s3(None)
        http_get._send = send
    outside = sorted({op for op, ruled in seen if not ruled})
    assert outside == [], f"requests outside the retry rule: {outside}"
    made = {op for op, _ in seen}
    assert {"GetObject (http_get)", "PutObject", "HeadObject", "ListObjectsV2", "CopyObject",
            "DeleteObject", "DeleteObjects"} <= made, sorted(made)
    assert published_data(out["publish"]["uri"]) == expected


@pytest.mark.moto_only(reason="the proxy strips signed headers (If-None-Match, If-Match); RGW "
                      "checks SigV4 signatures and answers SignatureDoesNotMatch, moto checks none")
def test_a_store_that_ignores_conditional_writes_is_refused_by_name(baseline, through):
    """A gateway that drops If-None-Match / If-Match: publish proves the store first, and
    fails naming the store and both guarantees before it writes anything into the version;
    ``publish.conditional_writes: unchecked`` is the documented way to publish anyway."""
    from recforge import releases
    from recforge.errors import StoreGuaranteeMissing
    from recforge.run import Run
    from recforge.stages import publish

    bucket, expected = baseline
    spec = make_spec(bucket).with_overrides({"publish.uri": f"s3://{bucket}/stripped"})
    pipeline.build(spec, run_id="stripped", workers=1, dry_run=True)
    run = Run(spec, "stripped")
    with through(strip=("If-None-Match", "If-Match")) as proxy:
        with pytest.raises(StoreGuaranteeMissing) as refused:
            publish.publish(run)
        message = str(refused.value)
        assert proxy.endpoint in message and bucket in message
        assert "If-None-Match: *" in message and "If-Match a wrong ETag" in message
        assert "publish.conditional_writes: unchecked" in message
        assert proxy.stats["stripped"] >= 2
        assert not list(storage.list_objects(releases.dataset_root(spec))), "wrote first"
        assert not list(storage.list_objects(storage.join(spec.publish.uri,
                                                          "_recforge_probe")))

        trusting = spec.with_overrides({"publish.conditional_writes": "unchecked"})
        out = publish.publish(Run(trusting, "stripped"))
    assert published_data(out["uri"]) == expected
    assert releases.read_latest(trusting)["uri"] == out["uri"]


@pytest.mark.moto_only(reason="RGW 16.2 refuses PutBucketEncryption (InvalidArgument) and cannot "
                      "server-side copy an SSE-KMS object (CopyObject: 501 NotImplemented)")
def test_sse_kms_publish_and_verify_rest_on_checksums_not_etags(baseline, through, capsys):
    """A bucket encrypted with SSE-KMS by default, behind a store whose ETags are no MD5s
    (and differ between a copy and its source, as KMS ETags do): publish still proves each
    copy by the store's SHA-256, verify passes, and a flipped byte is still caught."""
    import hashlib

    from recforge.cli import main

    bucket, expected = baseline
    kms = f"t-{bucket[2:]}-kms"[:63]
    storage.s3_client().create_bucket(Bucket=kms)
    storage.s3_client().put_bucket_encryption(Bucket=kms, ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {
            "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "alias/recforge-test"}}]})
    for o in storage.list_objects(f"s3://{bucket}/raw"):
        storage.copy(f"s3://{bucket}/raw/{o.key}", f"s3://{kms}/raw/{o.key}")
    spec = make_spec(kms)
    with through(opaque_etags=True) as proxy:
        out = pipeline.build(spec, run_id="kms", workers=1)
        version = out["publish"]["uri"]
        classes = storage.join(version, "classes.json")
        head = storage.head(classes)
        assert head.checksum and head.etag != hashlib.md5(storage.get_bytes(classes)).hexdigest()
        assert main(["verify", version]) == 0
        data_files = {k: v for k, v in published_data(version).items()
                      if k.endswith(DATA_FILES)}  # the manifests name the other bucket
        assert data_files == {k: v for k, v in expected.items() if k.endswith(DATA_FILES)}
        rec = storage.join(version, "val.rec")
        data = bytearray(storage.get_bytes(rec))
        data[len(data) // 2] ^= 0x01  # inside a record's image bytes: framing stays sound
        storage.put_bytes(rec, bytes(data))
        capsys.readouterr()
        assert main(["verify", version]) == 1
    assert "val.rec" in capsys.readouterr().out
    assert storage.s3_client().head_object(
        Bucket=kms, Key=version.split("/", 3)[3] + "/train.rec")["ServerSideEncryption"] == \
        "aws:kms"
    assert proxy.stats["requests"] > 0
