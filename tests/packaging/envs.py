"""Helpers of the packaging tests: commands run outside the repository, new environments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What a build needs, and all it gets: the Dockerfiles copy exactly these into the image
SOURCE = ("pyproject.toml", "README.md", "LICENSE", "include/recforge")


def clean_env(**extra: str) -> dict:
    """This process's environment without what would point Python at the source tree or at
    another environment."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(extra)
    return env


def sh(*cmd, cwd: Path | None = None, env: dict | None = None, check: bool = True,
       timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``cmd`` (outside the repository unless told) and fail with its output."""
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd or Path("/"), env=env or clean_env(),
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited with {proc.returncode}:\n"
                    f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def new_venv(uv: Path, path: Path) -> Path:
    """A new, empty environment of this interpreter's Python; returns its ``python``."""
    sh(uv, "venv", "-q", "--python", sys.executable, path)
    return path / "bin" / "python"


def pip_install(uv: Path, python: Path, *args) -> None:
    sh(uv, "pip", "install", "-q", "--python", python, *args)
