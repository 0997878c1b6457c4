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
