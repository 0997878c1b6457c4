"""``storage.prefetch``: every object's bytes or its exception, in the order given; S3
objects fetched by threads ahead of the consumer, local files read when their turn comes."""

from __future__ import annotations

import threading

from recforge import storage
from recforge.storage.errors import is_not_found


def _recording(monkeypatch) -> list[tuple[str, str]]:
    """Each read as (URI, the thread that made it)."""
    from recforge.storage import objects

    reads, real = [], objects.get_bytes

    def get_bytes(uri):
        reads.append((uri, threading.current_thread().name))
        return real(uri)

    monkeypatch.setattr(objects, "get_bytes", get_bytes)
    return reads


def test_local_files_are_read_in_order_in_the_consumers_thread(tmp_path, monkeypatch):
    for i in range(5):
        (tmp_path / f"{i}.bin").write_bytes(bytes([i]) * (i + 1))
    uris = [str(tmp_path / f"{i}.bin") for i in (3, 0, 4)] + [str(tmp_path / "gone.bin")]
    reads = _recording(monkeypatch)
    got = storage.prefetch(iter(uris), threads=8)
    assert next(got) == b"\x03" * 4
    assert len(reads) == 1  # nothing read ahead of the consumer
    rest = list(got)
    assert rest[:2] == [b"\x00", b"\x04" * 5]
    assert isinstance(rest[2], FileNotFoundError)  # handed over, not raised
    assert [u for u, _ in reads] == uris
    assert {t for _, t in reads} == {threading.current_thread().name}
    assert list(storage.prefetch([])) == []


def test_s3_objects_are_fetched_by_threads_ahead_in_order(bucket, monkeypatch):
    uris = [f"s3://{bucket}/o{i}" for i in range(12)]
    for i, uri in enumerate(uris):
        storage.put_bytes(uri, str(i).encode())
    reads = _recording(monkeypatch)
    got = storage.prefetch(uris + [f"s3://{bucket}/missing"], threads=3, ahead=4)
    assert next(got) == b"0"
    assert 1 < len(reads) <= 4  # read ahead, within the window
    rest = list(got)
    assert rest[:-1] == [str(i).encode() for i in range(1, 12)]
    assert is_not_found(rest[-1])
    assert threading.current_thread().name not in {t for _, t in reads}


def test_local_and_s3_in_one_list_keep_their_order_each_read_its_way(bucket, tmp_path,
                                                                     monkeypatch):
    """A local image beside its mask in S3 staging (segmentation): one ordered prefetch."""
    uris = []
    for i in range(6):
        (tmp_path / f"{i}.png").write_bytes(b"image %d" % i)
        storage.put_bytes(f"s3://{bucket}/m{i}", b"mask %d" % i)
        uris += [str(tmp_path / f"{i}.png"), f"s3://{bucket}/m{i}"]
    reads = _recording(monkeypatch)
    got = list(storage.prefetch(uris, threads=2))
    assert got == [b"%s %d" % (w, i) for i in range(6) for w in (b"image", b"mask")]
    me = threading.current_thread().name
    assert {t == me for u, t in reads if u.startswith("s3://")} == {False}
    assert {t == me for u, t in reads if not u.startswith("s3://")} == {True}


def test_s3_objects_come_in_runs_each_fetched_by_one_thread(bucket, tmp_path, monkeypatch):
    """A thread GETs ``batch`` consecutive objects and hands them over together; a local
    file ends a run and is read by the consumer; the window still bounds what is held."""
    uris = [f"s3://{bucket}/o{i}" for i in range(7)]
    for i, uri in enumerate(uris):
        storage.put_bytes(uri, str(i).encode())
    (tmp_path / "local.bin").write_bytes(b"local")
    order = uris[:4] + [str(tmp_path / "local.bin")] + uris[4:]
    reads = _recording(monkeypatch)
    got = storage.prefetch(order, threads=2, ahead=6, batch=3)
    assert next(got) == b"0"
    assert len(reads) <= 6  # two runs of three in flight at most
    assert list(got) == [b"1", b"2", b"3", b"local", b"4", b"5", b"6"]
    by_uri = dict(reads)
    runs = [uris[0:3], uris[3:4], uris[4:7]]  # the local file cut the second run short
    assert [len({by_uri[u] for u in run}) for run in runs] == [1, 1, 1]
    assert by_uri[str(tmp_path / "local.bin")] == threading.current_thread().name


def test_a_window_smaller_than_a_run_shortens_the_run(bucket, monkeypatch):
    uris = [f"s3://{bucket}/o{i}" for i in range(6)]
    for i, uri in enumerate(uris):
        storage.put_bytes(uri, str(i).encode())
    reads = _recording(monkeypatch)
    got = storage.prefetch(uris, threads=2, ahead=2, batch=4)
    assert next(got) == b"0"
    assert len(reads) <= 2
    assert list(got) == [str(i).encode() for i in range(1, 6)]


def test_runs_never_leave_a_thread_idle_that_the_window_has_work_for(bucket, monkeypatch):
    """A window of 2 x threads objects: runs of 2, so every thread has a GET in flight at
    once (runs of 4 would fill only half of them, and the barrier would break)."""
    from recforge.storage import objects

    uris = [f"s3://{bucket}/o{i}" for i in range(12)]
    for i, uri in enumerate(uris):
        storage.put_bytes(uri, str(i).encode())
    threads, real = 4, objects.get_bytes
    barrier, started, lock = threading.Barrier(threads, timeout=10), [0], threading.Lock()

    def get_bytes(uri):
        with lock:
            started[0] += 1
            first_wave = started[0] <= threads
        if first_wave:  # the first GETs wait until every thread has one in flight
            barrier.wait()
        return real(uri)

    monkeypatch.setattr(objects, "get_bytes", get_bytes)
    got = list(storage.prefetch(uris, threads=threads, ahead=2 * threads, batch=4))
    assert got == [str(i).encode() for i in range(12)]
