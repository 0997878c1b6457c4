"""The MXNet tier (tests/mxnet/) passes in the MXNet environment: MXNet's writer, readers,
Gluon dataset and the benchmark's in-process MXNet code, run where MXNet 1.9.1 lives."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.mxnet
@pytest.mark.timeout(1200)  # the tier's own run may take its 900 s
def test_the_mxnet_tier_passes_in_the_mxnet_environment():
    from recforge.bench.environment import mxnet_python

    python = mxnet_python()  # fails naming RECFORGE_MXNET_PYTHON when there is none
    proc = subprocess.run(
        [python, "-m", "pytest", "tests/mxnet", "--confcutdir", "tests/mxnet", "-q",
         "-p", "no:cacheprovider", "-x"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail, tail
    print(tail.strip().splitlines()[-1])
