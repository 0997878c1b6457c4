"""One rule for an object that cannot be fetched: the same vanished object gets the same
quarantine reason in classification and segmentation, through the real S3 protocol."""

from __future__ import annotations

import numpy as np
import pytest
from botocore.exceptions import ClientError

from recforge import quarantine, storage
from recforge.imaging import PackOptions
from recforge.segmentation.masks import MaskConverter, convert_rows
from recforge.segmentation.pack import SegPackOptions, pack_pair_rows
from recforge.stages.pack import pack_items
from tests.common.segdata import png


@pytest.fixture
def source(bucket):
    """An S3 source where ``gone.png`` (image) and ``gt/gone.png`` (mask) were listed but
    vanished before packing; ``a.png`` and its mask are there."""
    uri = f"s3://{bucket}/raw"
    storage.put_bytes(f"{uri}/a.png", png(np.zeros((8, 8, 3), np.uint8)))
    storage.put_bytes(f"{uri}/gt/a.png", png(np.zeros((8, 8), np.uint8)))
    return uri


def _reasons(entries) -> dict[str, str]:
    return {e.source_key: e.reason for e in entries}


def test_vanished_object_is_missing_for_every_task_kind(source, tmp_path):
    # classification's pack
    rows = [{"source_key": k, "record_key": i, "label": 0, "split": "train", "name": k,
             "class_name": "c", "etag": "x"} for i, k in enumerate(("a.png", "gone.png"))]
    pack_items(rows, source, PackOptions(resize=0), tmp_path)
    classification = _reasons(quarantine.loads((tmp_path / "quarantine.jsonl").read_bytes()))

    # segmentation: the mask stage (mask vanished) and the pack stage (image vanished)
    conv = MaskConverter.from_config(None, id_map={0: 0})
    masks = convert_rows([{"record_key": 0, "source_key": "a.png", "mask_key": "gt/gone.png"}],
                         source, str(tmp_path / "masks"), conv)
    pairs = [{"record_key": 0, "source_key": "gone.png", "mask_key": "gt/a.png", "name": "x"}]
    pack_pair_rows(pairs, source, tmp_path / "seg", SegPackOptions())
    packed = _reasons(quarantine.loads((tmp_path / "seg" / "quarantine.jsonl").read_bytes()))

    assert classification == {"gone.png": "missing"}
    assert _reasons(masks.refused) == {"a.png": "missing", "gt/gone.png": "missing"}
    assert packed == {"gone.png": "missing", "gt/a.png": "missing"}


@pytest.mark.parametrize("error, reason", [
    (FileNotFoundError(2, "No such file"), "missing"),
    (ClientError({"Error": {"Code": "NoSuchKey", "Message": "The specified key does not "
                            "exist."}}, "GetObject"), "missing"),
    (ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadObject"), "missing"),
    (ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "GetObject"),
     "read_error"),
])
def test_fetch_reason(error, reason):
    got, detail = quarantine.fetch_reason(error)
    assert got == reason and type(error).__name__ in detail


class ResponseStreamingError(Exception):
    """Named like botocore's: the body broke mid-read."""


TRANSIENT = [
    ConnectionResetError(104, "Connection reset by peer"),
    TimeoutError("read timed out"),
    ResponseStreamingError("Connection broken: IncompleteRead(10 bytes read, 90 more expected)"),
    ClientError({"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."},
                 "ResponseMetadata": {"HTTPStatusCode": 503}}, "GetObject"),
    ClientError({"Error": {"Code": "InternalError", "Message": "We encountered an internal "
                           "error."}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "GetObject"),
]


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: type(e).__name__)
def test_a_network_error_is_never_a_reason_to_drop_an_image(error, tmp_path, monkeypatch):
    with pytest.raises(type(error)):
        quarantine.fetch_reason(error)
    # and a pack that meets it fails (the task retries) instead of quarantining the object
    rows = [{"source_key": "a.png", "record_key": 0, "label": 0, "split": "train",
             "name": "a.png", "class_name": "c", "etag": "x"}]

    def broken(uris, threads=8, ahead=None):
        for _ in uris:
            yield error

    monkeypatch.setattr(storage, "prefetch", broken)
    with pytest.raises(type(error)):
        pack_items(rows, str(tmp_path), PackOptions(resize=0), tmp_path)


WHOLE_BODY_READS = {"get_bytes": (storage.get_bytes, b"whole object"),
                    "get_with_etag": (storage.get_with_etag, (b"whole object", "e1"))}


@pytest.mark.parametrize("read", WHOLE_BODY_READS)
def test_a_body_broken_mid_read_is_read_again(read, monkeypatch):
    """A whole-body read through botocore retries its GET together with the body, as one
    attempt (``storage.http_get``'s reads are one request an attempt: its own tests)."""
    fetch, whole = WHOLE_BODY_READS[read]
    monkeypatch.setenv("RECFORGE_S3_GET", "botocore")
    calls = []

    class Body:
        def read(self):
            calls.append(1)
            if len(calls) < 3:
                raise ResponseStreamingError("Connection broken mid-body")
            return b"whole object"

    class Client:
        def get_object(self, **kw):
            return {"Body": Body(), "ETag": '"e1"'}

    monkeypatch.setattr(storage.client, "s3_client", lambda: Client())
    monkeypatch.setattr("time.sleep", lambda s: None)
    assert fetch("s3://b/k") == whole and len(calls) == 3
    calls.clear()
    monkeypatch.setattr(storage.retry, "READ_ATTEMPTS", 2)
    with pytest.raises(ResponseStreamingError):
        fetch("s3://b/k")
