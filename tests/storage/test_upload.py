"""A file whose SHA-256 the caller knows (hashed as it was written) is uploaded without
being read a second time to hash it: the value goes with the request as the object's
SHA-256 checksum, and is what the upload records."""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path

import pytest

from recforge import storage
from recforge.storage import recording

pytestmark = pytest.mark.both_stores  # the uploads against moto and Ceph RGW


@pytest.fixture(params=["local", "s3"])
def target(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "out" / "part.rec")
    return f"s3://{request.getfixturevalue('bucket')}/up/part.rec"


def test_a_known_digest_is_sent_as_it_is_and_the_file_not_hashed_again(tmp_path, target,
                                                                        monkeypatch):
    src = tmp_path / "part.rec"
    src.write_bytes(b"record bytes " * 1000)
    known = hashlib.sha256(src.read_bytes()).hexdigest()

    def hashed_again(path):
        raise AssertionError(f"{path} was read again to hash it")

    monkeypatch.setattr(recording, "sha256_file", hashed_again)
    assert storage.upload(src, target, sha256=known) == known
    assert storage.get_bytes(target) == src.read_bytes()


def test_without_a_digest_the_file_is_hashed(tmp_path, target):
    src = tmp_path / "part.rec"
    src.write_bytes(b"x" * 5000)
    assert storage.upload(src, target) == hashlib.sha256(b"x" * 5000).hexdigest()


def test_a_moved_file_is_renamed_into_a_local_store_and_copied_to_s3(tmp_path, target):
    """``move``: the caller is done with the file. A local store on its file system takes
    the file itself, the same inode, so no byte is copied; S3 gets an upload and the file
    stays where it was."""
    src = tmp_path / "part.rec"
    src.write_bytes(b"moved " * 2000)
    body, inode = src.read_bytes(), src.stat().st_ino
    digest = storage.upload(src, target, move=True)
    assert digest == hashlib.sha256(body).hexdigest()
    assert storage.get_bytes(target) == body
    if storage.is_s3(target):
        assert src.read_bytes() == body
    else:
        assert not src.exists()
        assert storage.local_path(target).stat().st_ino == inode


def test_a_move_across_file_systems_is_a_copy(tmp_path, monkeypatch):
    """A rename cannot join two file systems (EXDEV): the file is copied instead, through
    the partial name, and left where it was."""
    src = tmp_path / "part.rec"
    src.write_bytes(b"far " * 3000)
    real = Path.replace

    def other_file_system(self, dest):
        if self == src:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(self, dest)

    monkeypatch.setattr(Path, "replace", other_file_system)
    dest = tmp_path / "store" / "part.rec"
    storage.upload(src, str(dest), move=True)
    assert dest.read_bytes() == src.read_bytes() == b"far " * 3000
    assert dest.stat().st_ino != src.stat().st_ino
    assert sorted(p.name for p in dest.parent.iterdir()) == ["part.rec"]


def test_a_failed_rename_other_than_across_file_systems_raises(tmp_path):
    src = tmp_path / "part.rec"
    src.write_bytes(b"x")
    dest = tmp_path / "store" / "part.rec"
    dest.mkdir(parents=True)  # a folder where the file should go: the rename cannot replace it
    with pytest.raises(OSError):
        storage.upload(src, str(dest), move=True)
    assert src.read_bytes() == b"x"
