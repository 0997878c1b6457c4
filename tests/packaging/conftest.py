"""The distribution as users get it: a wheel built from the files the Docker images copy, and
new virtual environments (``uv venv``) it is installed into, non-editable.

Installs resolve from uv's cache (the versions of ``constraints.txt`` are already there after
``make venv``), so a new environment takes seconds. Every command runs outside the
repository, without ``PYTHONPATH``, so ``import recforge`` can only find the installed copy.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.packaging.envs import REPO, SOURCE, sh


@pytest.fixture(scope="session")
def uv() -> Path:
    found = Path(sys.executable).with_name("uv")
    if not found.exists():
        which = shutil.which("uv")
        if which is None:
            pytest.skip("uv is not installed (make venv installs it into .venv)")
        found = Path(which)
    return found


@pytest.fixture(scope="session")
def wheel(uv, tmp_path_factory) -> Path:
    """``uv build`` of a copy of :data:`SOURCE`: the sdist, then the wheel built from the
    sdist (so both are checked), with build isolation as any installer does it."""
    root = tmp_path_factory.mktemp("source")
    for name in SOURCE:
        src, dst = REPO / name, root / name
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dst)
    dist = tmp_path_factory.mktemp("dist")
    sh(uv, "build", "-q", "--out-dir", dist, root)
    (built,) = dist.glob("recforge-*.whl")
    return built
