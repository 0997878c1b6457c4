"""The loader benchmark's shared dataset: 64 images of 64x64 in 4 classes (``pack``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.test_bench import pack


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bench") / "ds"
    pack(root)
    return root
