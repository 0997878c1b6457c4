"""Storage URIs and keys."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from recforge.storage import client


@pytest.mark.parametrize("key", ["a.jpg", "a/b.rec", "x/y.tar.gz", "a.", ".hidden",
                                 "a/.hidden", "a..b", "..", "a/..", "a/b.c/", "abc", "",
                                 "a.b ", "a/b.c//", "n/a. b"])
def test_a_gets_bytes_are_counted_under_its_keys_suffix(key):
    assert client._suffix(key) == PurePosixPath(key).suffix
