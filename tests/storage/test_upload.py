"""A file whose SHA-256 the caller knows (hashed as it was written) is uploaded without
being read a second time to hash it: the value goes with the request as the object's
SHA-256 checksum, and is what the upload records."""

from __future__ import annotations

import hashlib

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

