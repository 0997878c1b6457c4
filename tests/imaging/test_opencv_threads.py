"""OpenCV on one thread where images are packed (``imaging.one_opencv_thread``): set and
restored in a process, inherited by the shard pool's forked workers, and never changed in a
fork of a process whose OpenCV pool has run (there ``cv2.setNumThreads`` hangs)."""

from __future__ import annotations

import contextlib
import logging
import os
import time

import cv2
import numpy as np
import pytest

from recforge import imaging, pipeline, stages
from recforge.progress import Progress


@pytest.fixture
def two_threads():
    before = cv2.getNumThreads()
    cv2.setNumThreads(2)
    yield
    cv2.setNumThreads(before)


def _run_pool() -> None:
    """OpenCV's pool at work: parallel resizes and blurs of a large image."""
    img = np.random.default_rng(0).integers(0, 255, (1500, 2000, 3), np.uint8)
    for _ in range(5):
        cv2.resize(img, (200, 150), interpolation=cv2.INTER_AREA)
        cv2.GaussianBlur(img, (5, 5), 0)


def _in_fork(child, seconds: float = 20) -> str:
    """Run ``child`` in a forked process: ``"ok"``, ``"failed"`` or ``"hung"`` (killed)."""
    pid = os.fork()
    if pid == 0:
        try:
            child()
            os._exit(0)
        except BaseException:
            os._exit(1)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "ok" if os.waitstatus_to_exitcode(status) == 0 else "failed"
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"


def test_one_thread_inside_and_the_count_restored_after(two_threads):
    with imaging.one_opencv_thread():
        assert cv2.getNumThreads() == 1
    assert cv2.getNumThreads() == 2


def test_a_fork_after_the_pool_ran_keeps_its_count_and_does_not_hang(two_threads):
    _run_pool()

    def child():
        with imaging.one_opencv_thread():
            assert cv2.getNumThreads() == 2  # left alone in a fork
            _run_pool()

    # forked right after parallel work, when a bare cv2.setNumThreads(1) in the child hung
    # in 5 of 6 tries (OpenCV 4.14: it waits for threads only the parent has)
    assert [_in_fork(child) for _ in range(3)] == ["ok"] * 3


def test_the_shard_pool_workers_start_with_one_thread(two_threads, monkeypatch):
    _run_pool()  # a parent whose pool ran: its forks must not change the count themselves
    monkeypatch.setattr(pipeline, "Run", lambda spec, run_id: None)
    monkeypatch.setattr(stages, "entry", lambda task_id: lambda run, shard: cv2.getNumThreads())
    jobs = [(None, "run", ("probe",), f"s{i}") for i in range(4)]
    progress = Progress("probe", len(jobs), logging.getLogger(__name__))
    got = pipeline.shards_in_pool(jobs, 2, progress)
    assert [r["probe"] for r in got] == [1, 1, 1, 1]
    assert cv2.getNumThreads() == 2  # the parent's own count is back


def test_pack_runs_opencv_on_one_thread(two_threads, monkeypatch):
    from recforge.stages import pack

    seen = []
    monkeypatch.setattr(pack.crash_isolation, "attempt_marker",
                        lambda *a: contextlib.nullcontext(False))
    monkeypatch.setattr(pack, "_pack", lambda run, shard, isolated: seen.append(
        cv2.getNumThreads()) or {"shard": shard})
    pack.pack(type("R", (), {"shard_output": lambda self, *a: "unused"})(), "s0")
    assert seen == [1] and cv2.getNumThreads() == 2
