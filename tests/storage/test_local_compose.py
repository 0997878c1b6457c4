"""Composing into a local file: the parts' bytes are joined by the kernel
(``copy_file_range``), byte for byte what reading and writing them gives, and where the
kernel cannot join two files the bytes are read and written instead."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from recforge import storage
from recforge.storage import copies


@pytest.fixture
def parts(tmp_path) -> list[tuple[str, bytes]]:
    """Local parts of uneven sizes: one past the 1 MiB read size, an empty one."""
    sizes = [3 * (1 << 20) + 17, 0, 5, 70_001]
    out = []
    for i, size in enumerate(sizes):
        body = os.urandom(size)
        path = tmp_path / "in" / f"p{i}.rec"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(body)
        out.append((str(path), body))
    return out


def test_local_parts_are_joined_by_the_kernel(tmp_path, parts, monkeypatch):
    def read_and_written(*_a, **_k):
        raise AssertionError("a local part went through this process's memory")

    monkeypatch.setattr(shutil, "copyfileobj", read_and_written)
    monkeypatch.setattr(copies, "iter_chunks", read_and_written)
    dest = tmp_path / "out" / "train.rec"
    bases = storage.compose([p for p, _ in parts], str(dest))
    assert dest.read_bytes() == b"".join(body for _, body in parts)
    sizes = [len(body) for _, body in parts]
    assert bases == [sum(sizes[:i]) for i in range(len(sizes))]
    assert sorted(p.name for p in dest.parent.iterdir()) == ["train.rec"]


@pytest.mark.parametrize("code", [errno.EXDEV, errno.ENOSYS, errno.EINVAL])
def test_where_the_kernel_cannot_join_the_files_the_bytes_are_copied(tmp_path, parts,
                                                                     monkeypatch, code):
    """Also after the kernel copied part of a file: the rest follows from where it stopped."""
    real = os.copy_file_range
    calls = []

    def refuses_after_a_piece(src, dst, count, *args):
        calls.append(count)
        if len(calls) == 1:
            return real(src, dst, min(count, 4096), *args)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "copy_file_range", refuses_after_a_piece)
    dest = tmp_path / "out" / "train.rec"
    storage.compose([p for p, _ in parts], str(dest))
    assert dest.read_bytes() == b"".join(body for _, body in parts)
    assert calls


def test_a_platform_without_the_call_copies_the_bytes(tmp_path, parts, monkeypatch):
    monkeypatch.delattr(os, "copy_file_range")
    dest = tmp_path / "out" / "train.rec"
    storage.compose([p for p, _ in parts], str(dest))
    assert dest.read_bytes() == b"".join(body for _, body in parts)


def test_a_failing_write_fails_the_compose_and_leaves_nothing(tmp_path, parts, monkeypatch):
    def full(*_a):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "copy_file_range", full)
    dest = tmp_path / "out" / "train.rec"
    with pytest.raises(OSError, match="No space"):
        storage.compose([p for p, _ in parts], str(dest))
    assert not dest.parent.exists() or not list(dest.parent.iterdir())
