"""Storage URIs and keys: everything after an S3 URI's bucket is the object's key."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from recforge import storage
from recforge.storage import client


@pytest.mark.parametrize("key", ["a/photo#2.jpg", "why?.jpg", "100%25.jpg", "a;b=c&d.png",
                                 "x//y/.z", "n01440764/n01440764_0.JPEG", ""])
def test_an_s3_uri_splits_into_its_bucket_and_the_whole_key(key):
    assert storage.split_s3(f"s3://bkt/{key}") == ("bkt", key)
    assert storage.split_s3(storage.join("s3://bkt/raw", key)) == (
        "bkt", f"raw/{key}".rstrip("/"))


@pytest.mark.parametrize("name", ["photo#2.jpg", "why?.jpg", "a;b.jpg", "100%25.jpg"])
def test_a_file_under_a_file_uri_root_keeps_its_whole_name(tmp_path, name):
    (tmp_path / name).write_bytes(b"mine")
    (tmp_path / "photo").write_bytes(b"another")
    for root in (f"file://{tmp_path}", f"file://localhost{tmp_path}", str(tmp_path)):
        uri = storage.join(root, name)
        assert storage.local_path(uri) == tmp_path / name
        assert storage.get_bytes(uri) == b"mine"


@pytest.mark.parametrize("uri", ["bkt/key", "s3:///key", "s3://", "file:///a/b", "/a/b"])
def test_what_is_not_an_s3_uri_is_refused(uri):
    with pytest.raises(ValueError, match="not an S3 URI"):
        storage.split_s3(uri)


@pytest.mark.parametrize("key", ["a.jpg", "a/b.rec", "x/y.tar.gz", "a.", ".hidden",
                                 "a/.hidden", "a..b", "..", "a/..", "a/b.c/", "abc", "",
                                 "a.b ", "a/b.c//", "n/a. b"])
def test_a_gets_bytes_are_counted_under_its_keys_suffix(key):
    assert client._suffix(key) == PurePosixPath(key).suffix
