"""storage.http_get: the GET recforge signs itself gives what botocore's ``get_object`` gives
— the same signature, bytes, errors, checksum check and byte count — under the one retry
rule, and botocore stays one switch away."""

from __future__ import annotations

import calendar
import hashlib
import os
import socket
import time

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, FlexibleChecksumError

from recforge import quarantine, storage
from recforge.storage import checksums, errors, http_get, retry, write_options
from recforge.storage.write_options import WriteOptions
from tests.common.faultproxy import BucketPolicy, running_proxy

pytestmark = pytest.mark.both_stores  # signatures and answers against moto and Ceph RGW

KEYS = ("plain.jpg", "a/b c+d.jpg", "ü/ñ.JPEG", "x//y/.z.png", "sp%ce&=?#;.png",
        "n01440764/n01440764_0.JPEG")


def sent_since(before: dict[str, int]) -> dict[str, int]:
    now = storage.request_counts()
    return {op: n - before.get(op, 0) for op, n in now.items() if n != before.get(op, 0)}


@pytest.mark.parametrize("token", [None, "session-token"])
@pytest.mark.parametrize("key", KEYS)
def test_the_signature_is_botocores(key, token):
    """SigV4 of the same request at the same second, key encoding included."""
    from urllib.parse import quote

    creds = botocore.credentials.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfi",
                                             token)
    path = "/bkt/" + quote(key, safe="/~")
    request = botocore.awsrequest.AWSRequest("GET", "http://127.0.0.1:9000" + path, headers={
        "Host": "127.0.0.1:9000", "X-Amz-Content-SHA256": http_get.EMPTY_SHA256,
        "x-amz-checksum-mode": "ENABLED", "Range": "bytes=3-9"})
    botocore.auth.S3SigV4Auth(creds, "s3", "eu-west-1").add_auth(request)
    at = calendar.timegm(time.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ"))
    headers = {"host": "127.0.0.1:9000", "x-amz-content-sha256": http_get.EMPTY_SHA256,
               "x-amz-checksum-mode": "ENABLED", "range": "bytes=3-9"}
    http_get.sign(headers, path, "eu-west-1", creds, now=at)
    assert headers["authorization"] == request.headers["Authorization"]
    assert headers.get("x-amz-security-token") == token


def test_bytes_ranges_and_conditions_are_botocores(bucket):
    """Every key shape, whole and ranged, against the store itself (which checks the
    signature on Ceph RGW); a range past the end is short, as botocore gives it."""
    assert http_get.enabled()
    s3 = storage.s3_client()
    for i, key in enumerate(KEYS):
        data = os.urandom(1000 + i)
        storage.put_bytes(f"s3://{bucket}/{key}", data)
        uri = f"s3://{bucket}/{key}"
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == data  # its own key
        assert storage.get_bytes(uri) == data
        assert storage.get_range(uri, 10, 20) == data[10:30]
        assert storage.get_range(uri, 990, 100) == data[990:]
        if i == 0:
            etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
            assert storage.get_range(uri, 0, 5, if_match=etag) == data[:5]
    with pytest.raises(ClientError) as lost:
        storage.get_range(f"s3://{bucket}/{KEYS[0]}", 0, 5, if_match='"0123abcd"')
    assert errors.is_precondition(lost.value)


def test_a_missing_object_fails_as_botocore_says_it(bucket):
    uri = f"s3://{bucket}/no/such.jpg"
    before = storage.request_counts()
    with pytest.raises(ClientError) as missing:
        storage.get_bytes(uri)
    assert errors.is_not_found(missing.value) and not errors.is_transient(missing.value)
    assert quarantine.fetch_reason(missing.value)[0] == "missing"
    assert sent_since(before) == {"get_object": 1}  # not retried


@pytest.mark.moto_only("this Ceph RGW answers a GET without the SHA-256 checksum: there is "
                       "nothing to check, for botocore either")
def test_a_wrong_checksum_is_refused_and_the_right_one_checked(bucket, monkeypatch):
    """The store's SHA-256 comes back with the GET and is compared with the body's: a
    digest that disagrees raises botocore's FlexibleChecksumError, never retried."""
    uri = f"s3://{bucket}/checked.jpg"
    storage.put_bytes(uri, b"the bytes")  # sent with its SHA-256, as recforge writes
    compared: list[bytes] = []
    real = dict((n, d) for n, d, _ in http_get.CHECKSUMS)["sha256"]

    def spy(body: bytes) -> bytes:
        compared.append(body)
        return real(body)

    table = [(n, spy if n == "sha256" else d, crt) for n, d, crt in http_get.CHECKSUMS]
    monkeypatch.setattr(http_get, "CHECKSUMS", table)
    got = storage.get_bytes(uri)
    assert got == b"the bytes" and compared == [b"the bytes"]
    # the digest computed for the check is handed on, not computed again
    assert isinstance(got, checksums.Checked)
    assert got.sha256 == storage.sha256_hex(got) == hashlib.sha256(b"the bytes").hexdigest()
    assert storage.sha256_hex(b"other") == hashlib.sha256(b"other").hexdigest()
    monkeypatch.setattr(http_get, "CHECKSUMS", [
        (n, (lambda body: b"\0" * 32) if n == "sha256" else d, crt) for n, d, crt in table])
    before = storage.request_counts()
    with pytest.raises(FlexibleChecksumError, match="checked.jpg"):
        storage.get_bytes(uri)
    assert sent_since(before) == {"get_object": 1}
    assert storage.get_range(uri, 0, 3) == b"the"  # a range carries no whole checksum


def test_validate_skips_what_is_no_checksum_of_the_bytes():
    body = b"abc"
    sha = "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
    http_get.validate({"x-amz-checksum-sha256": sha}, body, "s3://b/k")
    http_get.validate({"x-amz-checksum-sha256": "AAAA-3"}, body, "s3://b/k")  # composite
    http_get.validate({"x-amz-checksum-sha256": "AAAA", "x-amz-checksum-type": "COMPOSITE"},
                      body, "s3://b/k")
    http_get.validate({"x-amz-checksum-crc32": "NSRBwg=="}, body, "s3://b/k")
    with pytest.raises(FlexibleChecksumError):
        http_get.validate({"x-amz-checksum-crc32": "AAAAAA=="}, body, "s3://b/k")
    with pytest.raises(FlexibleChecksumError):
        http_get.validate({"x-amz-checksum-sha256": sha}, b"abd", "s3://b/k")


def test_bytes_received_are_counted(bucket):
    uri = f"s3://{bucket}/counted.rec"
    storage.put_bytes(uri, b"x" * 4321)
    before = storage.transferred()
    storage.get_bytes(uri)
    storage.get_range(uri, 0, 100)
    moved = storage.transferred().minus(before)
    assert (moved.down, moved.down_by_suffix) == (4421, {".rec": 4421})


@pytest.mark.parametrize("mode", ["slowdown", "internal", "reset"])
def test_a_transient_fault_is_retried_by_the_rule_and_counted(bucket, s3_endpoint,
                                                              monkeypatch, mode):
    """Every request answered with the fault: each attempt is one request, counted, and
    the last error is one the rule calls transient (so a stage fails, never quarantines)."""
    uri = f"s3://{bucket}/flaky.jpg"
    storage.put_bytes(uri, b"flaky bytes")
    monkeypatch.setenv("RECFORGE_S3_BACKOFF_S", "0.001")
    monkeypatch.setenv("RECFORGE_S3_MAX_ATTEMPTS", "2")
    with running_proxy(s3_endpoint, rate=1.0, modes=(mode,)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        before = storage.request_counts()
        with pytest.raises(Exception) as failed:
            storage.get_bytes(uri)
        assert proxy.stats[mode] == http_get.attempts() == 10
    assert errors.is_transient(failed.value), repr(failed.value)
    with pytest.raises(type(failed.value)):
        quarantine.fetch_reason(failed.value)
    assert sent_since(before) == {"get_object": 10}
    with running_proxy(s3_endpoint, rate=0.5, modes=(mode,), seed=3) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        assert [storage.get_bytes(uri) for _ in range(8)] == [b"flaky bytes"] * 8
        assert proxy.stats[mode] >= 2


def test_an_endpoint_that_does_not_answer_is_named(bucket, monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("RECFORGE_S3_MAX_ATTEMPTS", "1")
    with pytest.raises(EndpointConnectionError) as down:
        storage.get_bytes(f"s3://{bucket}/k.jpg")
    assert f"cannot reach http://127.0.0.1:{port}" in errors.explain(down.value)


def test_a_bucket_owner_condition_goes_with_every_get(bucket, s3_endpoint, monkeypatch):
    uri = f"s3://{bucket}/owned.jpg"
    storage.put_bytes(uri, b"owned")
    policy = BucketPolicy(bucket, owner="111122223333", kms_key_id="k")
    with running_proxy(s3_endpoint, policy=policy) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        with pytest.raises(ClientError) as denied:
            storage.get_bytes(uri)
        assert denied.value.response["Error"]["Code"] == "AccessDenied"
        write_options.use_write_options(
            {f"s3://{bucket}": WriteOptions(expected_bucket_owner="111122223333")})
        try:
            assert storage.get_bytes(uri) == b"owned"
            assert storage.get_range(uri, 1, 2) == b"wn"
        finally:
            write_options.use_write_options({})


def test_botocore_is_one_switch_away(bucket, monkeypatch):
    """``RECFORGE_S3_GET=botocore``, or a client behind an HTTP proxy: botocore's
    ``get_object``, seen by its own hooks."""
    uri = f"s3://{bucket}/switch.jpg"
    storage.put_bytes(uri, b"switch")
    seen: list[str] = []
    storage.s3_client().meta.events.register(
        "before-call.s3.GetObject", lambda **_: seen.append("GetObject"))
    storage.get_bytes(uri)
    assert seen == []
    monkeypatch.setenv("RECFORGE_S3_GET", "botocore")
    assert not http_get.enabled()
    assert storage.get_bytes(uri) == b"switch" and seen == ["GetObject"]
    assert http_get.attempts() == retry.READ_ATTEMPTS
    monkeypatch.delenv("RECFORGE_S3_GET")
    assert http_get._make_target(storage.s3_client()) is not None
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("NO_PROXY", "example.org")
    assert http_get._make_target(storage.s3_client()) is None


def test_a_bucket_in_another_region_goes_to_botocore_and_stays_there(bucket, monkeypatch):
    """A 301 (or a 400 naming another region) is botocore's to follow; the bucket's next
    GETs go to botocore at once instead of costing a wasted request each."""
    sent, through_botocore = [], []

    class Moved:
        status, data, headers = 301, b"<Error><Code>PermanentRedirect</Code></Error>", {}

    monkeypatch.setattr(http_get, "_elsewhere", set())
    monkeypatch.setattr(http_get, "_send", lambda *a, **k: sent.append(a) or Moved())
    monkeypatch.setattr(http_get, "_botocore",
                        lambda s3, b, k, r, m: through_botocore.append(k) or b"moved")
    assert storage.get_bytes(f"s3://{bucket}/a.jpg") == b"moved"
    assert storage.get_bytes(f"s3://{bucket}/b.jpg") == b"moved"
    assert (len(sent), through_botocore) == (1, ["a.jpg", "b.jpg"])
