"""storage.request_counts: the S3 requests this process sent, by operation, every attempt
counted (a retried request counts each time), from any thread."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from recforge import storage


def sent_since(before: dict[str, int]) -> dict[str, int]:
    now = storage.request_counts()
    return {op: n - before.get(op, 0) for op, n in now.items() if n != before.get(op, 0)}


def test_a_put_and_a_get_are_one_request_each(bucket):
    before = storage.request_counts()
    storage.put_bytes(f"s3://{bucket}/a", b"a")
    assert storage.get_bytes(f"s3://{bucket}/a") == b"a"
    assert sent_since(before) == {"put_object": 1, "get_object": 1}


def test_requests_from_many_threads_are_all_counted(bucket):
    storage.put_bytes(f"s3://{bucket}/a", b"a")
    before = storage.request_counts()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: storage.head(f"s3://{bucket}/a"), range(200)))
    assert sent_since(before) == {"head_object": 200}


def test_every_attempt_counts_and_the_answer_is_a_copy(monkeypatch):
    failures = [ConnectionResetError(104, "Connection reset by peer")] * 2

    class Client:
        def head_object(self, **kw):
            if failures:
                raise failures.pop()
            return {"ContentLength": 1, "ETag": '"e"'}

    monkeypatch.setattr(storage.client, "s3_client", lambda: Client())
    monkeypatch.setattr("time.sleep", lambda s: None)
    before = storage.request_counts()
    assert storage.size_of("s3://b/k") == 1
    assert sent_since(before) == {"head_object": 3}
    storage.request_counts()["head_object"] = 0  # the caller's copy, not the count
    assert sent_since(before) == {"head_object": 3}
