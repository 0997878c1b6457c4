"""The detached local S3 server that `make demo` leaves running."""

from __future__ import annotations

import socket

import pytest

from recforge.dev import s3server


def test_start_reuse_refuse_and_stop(tmp_path):
    port = s3server.free_port()
    endpoint, started = s3server.start_detached(tmp_path, port)
    try:
        assert started and endpoint == f"http://127.0.0.1:{port}"
        assert s3server.start_detached(tmp_path, port) == (endpoint, False)
        with pytest.raises(RuntimeError, match=f"port {port} on 127.0.0.1 is taken"):
            s3server.start_detached(tmp_path / "other", port)
    finally:
        assert s3server.stop_detached(tmp_path)
    assert not s3server.stop_detached(tmp_path)


def test_connections_are_kept_alive_between_requests_and_stop_ends_the_server():
    """As S3 keeps them: a client's second request goes out on the same connection."""
    import http.client
    import threading

    def loops() -> int:
        return sum(t.name == "dev-s3" for t in threading.enumerate())

    before = loops()  # the session's own server may run beside this one
    with s3server.running_server() as endpoint:
        assert loops() == before + 1
        conn = http.client.HTTPConnection(endpoint.removeprefix("http://"), timeout=10)
        conn.request("PUT", "/keep-alive-bucket")
        first = conn.getresponse()
        first.read()
        sock = conn.sock
        conn.request("PUT", "/keep-alive-bucket/k", body=b"x" * 3000)
        second = conn.getresponse()
        second.read()
        # boto3 asks leave to send even an empty body: the answer comes, not "100 Continue"
        conn.request("PUT", "/keep-alive-bucket/empty", body=b"",
                     headers={"Expect": "100-continue"})
        third = conn.getresponse()
        assert (first.status, second.status, third.status) == (200, 200, 200)
        assert third.read() == b""
        assert conn.sock is sock  # http.client reconnects where the server closed
        assert first.getheader("Connection") != "close"
        conn.close()
    assert loops() == before
    with pytest.raises(ConnectionRefusedError):  # nothing listens there any more
        socket.create_connection(("127.0.0.1", int(endpoint.rsplit(":", 1)[1])), timeout=5)


KEYS_A_URL_DECODES = ("100%25.jpg", "why?.jpg", "a#1.jpg", "a+b c.jpg", "x%2Fy.jpg",
                      "sp%ce&=?#;.png")


def test_a_key_is_stored_listed_and_read_as_sent_whatever_a_url_makes_of_it(bucket):
    """Every key shape stays itself through boto3's PUT, listing and GET: the server reads
    the request target as it arrived, not a path decoded twice."""
    from recforge import storage

    s3 = storage.s3_client()
    for i, key in enumerate(KEYS_A_URL_DECODES):
        s3.put_object(Bucket=bucket, Key=f"k/{key}", Body=b"%d" % i)
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="k/")["Contents"]]
    assert sorted(listed) == sorted(f"k/{key}" for key in KEYS_A_URL_DECODES)
    for i, key in enumerate(KEYS_A_URL_DECODES):
        assert s3.get_object(Bucket=bucket, Key=f"k/{key}")["Body"].read() == b"%d" % i
        assert storage.get_bytes(f"s3://{bucket}/k/{key}") == b"%d" % i


def test_requests_are_routed_without_listing_motos_package_folder(monkeypatch):
    """moto's router lists its package folder for every request; the server lists it once,
    with the same answer."""
    import http.client
    import os

    from moto import backends

    with s3server.running_server() as endpoint:
        assert "s3" in backends.list_of_moto_modules()
        assert list(backends.list_of_moto_modules()) == list(backends.moto_list_of_moto_modules())

        def no_listing(path):
            raise AssertionError(f"listed {path} for a request")

        monkeypatch.setattr(os, "listdir", no_listing)
        conn = http.client.HTTPConnection(endpoint.removeprefix("http://"), timeout=10)
        conn.request("PUT", "/routed-bucket")
        answer = conn.getresponse()
        answer.read()
        conn.close()
        monkeypatch.undo()
        assert answer.status == 200


def test_taken_port_is_named(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(RuntimeError, match="--port"):
            s3server.start_detached(tmp_path, s.getsockname()[1])


def test_ranged_gets_return_the_range_without_reading_the_whole_object(bucket, monkeypatch):
    import os

    from botocore.exceptions import ClientError
    from moto.s3 import models

    from recforge import storage

    data = os.urandom(6 << 20)
    storage.put_bytes(f"s3://{bucket}/big", data)
    client = storage.s3_client()
    whole_reads = []  # every read of an object's whole value (bytes, not a lazy view)
    value = models.FakeKey.value

    def spied(key):
        got = value.fget(key)
        if isinstance(got, bytes) and key.name == "big":  # (parts are read to complete)
            whole_reads.append(key.name)
        return got

    monkeypatch.setattr(models.FakeKey, "value", property(spied, value.fset))
    n = len(data)
    for spec, want in [("0-31", data[:32]), ("12345-", data[12345:]), ("-100", data[-100:]),
                       (f"{n - 5}-{n + 50}", data[-5:]), ("1000-1000", data[1000:1001])]:
        got = client.get_object(Bucket=bucket, Key="big", Range=f"bytes={spec}")
        assert got["Body"].read() == want, spec
        assert got["ContentRange"].endswith(f"/{n}")
    assert storage.get_range(f"s3://{bucket}/big", 2 << 20, 64) == data[2 << 20:(2 << 20) + 64]
    with pytest.raises(ClientError, match="InvalidRange"):
        client.get_object(Bucket=bucket, Key="big", Range=f"bytes={n + 10}-{n + 20}")
    up = client.create_multipart_upload(Bucket=bucket, Key="copied")["UploadId"]
    etags = [client.upload_part_copy(
        Bucket=bucket, Key="copied", UploadId=up, PartNumber=i + 1,
        CopySource={"Bucket": bucket, "Key": "big"},
        CopySourceRange=f"bytes={a}-{b - 1}")["CopyPartResult"]["ETag"]
        for i, (a, b) in enumerate([(0, 5 << 20), (1 << 20, n)])]
    client.complete_multipart_upload(Bucket=bucket, Key="copied", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]})
    assert whole_reads == []  # only the ranges were read, for GETs and part copies
    assert storage.get_bytes(f"s3://{bucket}/copied") == data[:5 << 20] + data[1 << 20:]
    whole_reads.clear()
    assert client.get_object(Bucket=bucket, Key="big")["Body"].read() == data
    assert whole_reads == ["big"]  # a plain GET still reads it all


def _backend_bucket(name: str):
    from moto.s3.models import s3_backends

    for account in s3_backends.values():
        for backend in account.values():
            if name in backend.buckets:
                return backend, backend.buckets[name]
    raise AssertionError(f"bucket {name} not in moto's backends")


def _pages(list_v2, backend, bucket, prefix, delimiter, start_after, max_keys):
    """Every page of one listing: ``[(names, truncated)]``, following the tokens."""
    pages, token = [], None
    while True:
        found, truncated, token = list_v2(backend, bucket, prefix, delimiter, token,
                                          start_after, max_keys)
        pages.append(([k if isinstance(k, str) else k.name for k in found], truncated))
        if not truncated:
            return pages


def test_listing_pages_equal_motos_own_and_never_walk_the_bucket(bucket, monkeypatch):
    import random

    from moto.s3 import models, utils

    from recforge import storage

    rng = random.Random(5)
    parts = ["a", "a!", "a0", "b", "é", "z~"]
    keys = {"/".join(rng.choice(parts) for _ in range(rng.randint(1, 4))) for _ in range(400)}
    keys |= {"a/", "a/b/", "a/b", "top"}
    for k in keys:
        storage.put_bytes(f"s3://{bucket}/{k}", b"x")
    storage.put_bytes(f"s3://{bucket}/top", b"overwritten")  # same name: no new entry
    for k in sorted(keys)[::7]:  # deletions after the names were indexed
        storage.s3_client().delete_object(Bucket=bucket, Key=k)
    backend, fake = _backend_bucket(bucket)
    ours, theirs = models.S3Backend.list_objects_v2, models.S3Backend.moto_list_objects_v2
    compared = 0
    for prefix in ["", "a", "a/", "a/b", "a!/", "é/", "nothing"]:
        for delimiter in [None, "/", "!"]:
            for start_after in [None, "a/a", "a0/b"]:
                for max_keys in [0, 1, 3, 50, 1000]:
                    args = (backend, fake, prefix, delimiter, start_after, max_keys)
                    assert _pages(ours, *args) == _pages(theirs, *args), args
                    compared += 1
    assert compared == 7 * 3 * 3 * 5
    walks = []  # moto's own listing copies the whole store once a page
    walk = utils._VersionedKeyStore._self_iterable
    monkeypatch.setattr(utils._VersionedKeyStore, "_self_iterable",
                        lambda store: walks.append(1) or walk(store))
    listed = [o.key for o in storage.list_objects(f"s3://{bucket}/")]
    assert listed == sorted(set(keys) - set(sorted(keys)[::7]))
    assert walks == []


def test_listing_responses_parse_equal_to_motos_own_rendering(bucket, monkeypatch):
    from moto.s3 import responses

    from recforge import storage

    client = storage.s3_client()
    keys = ["a&b/1", "a&b/2", "<x>/'q'\"", "sp ace/é", "plain", "deep/er/key", "deep/x"]
    for k in keys:
        client.put_object(Bucket=bucket, Key=k, Body=k.encode())
    client.put_object(Bucket=bucket, Key="summed", Body=b"s", ChecksumAlgorithm="SHA256")
    requests = [{}, {"Prefix": "a&b/"}, {"Delimiter": "/"}, {"Delimiter": "/", "Prefix": "deep/"},
                {"EncodingType": "url"}, {"EncodingType": "url", "Delimiter": "/"},
                {"FetchOwner": True}, {"StartAfter": "deep/x"}, {"MaxKeys": 2},
                {"MaxKeys": 0}, {"Prefix": "nothing/"}]

    def listings():
        out = []
        for request in requests:
            pages, token = [], None
            while True:
                page = client.list_objects_v2(Bucket=bucket, **request,
                                              **({"ContinuationToken": token} if token else {}))
                page.pop("ResponseMetadata")
                pages.append(page)
                token = page.get("NextContinuationToken")
                if not token:
                    break
            out.append(pages)
        return out

    ours = listings()
    monkeypatch.setattr(responses.S3Response, "list_objects_v2",
                        responses.S3Response.moto_list_objects_v2)
    theirs = listings()
    assert ours == theirs
    assert sum(len(p.get("Contents", [])) for p in ours[0]) == len(keys) + 1
    assert any(c.get("ChecksumAlgorithm") for c in ours[0][0]["Contents"])
    assert any("Owner" in c for c in ours[6][0]["Contents"])


# ---- the moto the patches were written for ---------------------------------------------------

def test_the_dev_extra_bounds_moto_to_the_versions_the_patches_support():
    """pyproject's ``dev`` extra and the server's guard name one range, which the installed
    (constraints-pinned) moto is in."""
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    (moto,) = [Requirement(r) for r in project["project"]["optional-dependencies"]["dev"]
               if Requirement(r).name == "moto"]
    assert moto.specifier == Requirement(f"moto{s3server.SUPPORTED_MOTO}").specifier
    assert moto.specifier.contains(version("moto"))
    s3server.check_moto()  # this moto has every name, patched already or not


@pytest.mark.parametrize("owner, name, replacement, said", [
    ("moto.s3.responses:S3Response", "_handle_range_header", None,
     "moto.s3.responses.S3Response._handle_range_header"),
    ("moto.s3.utils:_VersionedKeyStore", "setlist", None,
     "moto.s3.utils._VersionedKeyStore.setlist"),
    ("moto.s3.models:S3Backend", "list_objects_v2", lambda self, bucket, prefix: None,
     "moto.s3.models.S3Backend.list_objects_v2(self, bucket, prefix, delimiter, "),
    ("moto.s3.responses:S3Response", "list_objects_v2", lambda self: None,
     "moto.s3.responses.S3Response.list_objects_v2 calling serialized"),
    ("moto.moto_server.werkzeug_app:DomainDispatcherApplication", "get_backend_for_host",
     lambda self, host: None, "DomainDispatcherApplication.get_backend_for_host calling "
     "list_of_moto_modules"),
])
def test_a_moto_without_a_patched_name_is_refused_naming_versions(monkeypatch, owner, name,
                                                                   replacement, said):
    import importlib
    from importlib.metadata import version

    module, cls = owner.split(":")
    target = getattr(importlib.import_module(module), cls)
    if replacement is None:
        monkeypatch.delattr(target, name)
    else:
        monkeypatch.setattr(target, name, replacement)
    with pytest.raises(s3server.MotoUnsupported) as caught:
        s3server.check_moto()
    message = str(caught.value)
    assert said in message
    assert f"moto {version('moto')} lacks" in message
    assert f"Supported: moto{s3server.SUPPORTED_MOTO}" in message


def test_the_server_refuses_an_unsupported_moto_before_patching_it():
    """In a fresh process (this one's moto is patched already): nothing is changed."""
    import subprocess
    import sys

    probe = (
        "from moto.s3 import models, responses\n"
        "del responses.S3Response._handle_range_header\n"
        "from recforge.dev import s3server\n"
        "try:\n"
        "    s3server.stand_in_for_s3()\n"
        "except s3server.MotoUnsupported as exc:\n"
        "    print('refused:', exc)\n"
        "print('patched:', any(hasattr(c, a) for c, a in ((models.S3Backend, "
        "'_recforge_listing'), (responses.S3Response, '_recforge_ranges'), "
        "(responses.S3Response, '_recforge_render'))) or hasattr(__import__("
        "'moto.backends').backends, 'moto_list_of_moto_modules'))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "refused: the dev S3 server patches moto" in out and "patched: False" in out


def test_dev_s3_start_refuses_an_unsupported_moto_before_starting(monkeypatch, tmp_path):
    """``recforge dev-s3 start`` says it, not the detached server's log."""
    from moto.s3 import responses

    monkeypatch.delattr(responses.S3Response, "_handle_range_header")
    with pytest.raises(s3server.MotoUnsupported, match="Supported: moto>=5.2,<5.3"):
        s3server.start_detached(tmp_path / "state", s3server.free_port())
    assert not (tmp_path / "state").exists()
