"""Shared fixtures: a real S3-compatible server on loopback (moto server mode) for the session.

Every test that touches storage talks HTTP to it through boto3, exactly as production talks
to AWS or MinIO. ``bucket`` gives each test its own empty bucket.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from recforge.dev import s3server
from tests.common.browser import artifacts, browser, page, pytest_runtest_setup  # noqa: F401
from tests.common.receivers import (  # noqa: F401  (fixtures)
    flaky_webhook_server,
    smtp_server,
    webhook_server,
)

# the MXNet environment `make venv` builds, unless the caller names another
_MXNET_VENV = Path(__file__).resolve().parents[1] / ".venv-mxnet" / "bin" / "python"
if "RECFORGE_MXNET_PYTHON" not in os.environ and _MXNET_VENV.exists():
    os.environ["RECFORGE_MXNET_PYTHON"] = str(_MXNET_VENV)

# tests/mxnet/ imports MXNet in-process: the MXNet environment runs it (tests/test_mxnet_tier.py)
collect_ignore = ["mxnet"]


@pytest.fixture(scope="session")
def s3_endpoint():
    with s3server.running_server() as endpoint:
        old = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", *s3server.DEV_CREDENTIALS)}
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        os.environ.update(s3server.DEV_CREDENTIALS)
        yield endpoint
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def bucket(s3_endpoint) -> str:
    """A fresh bucket; returns its name."""
    from recforge import storage

    name = f"t-{uuid.uuid4().hex[:12]}"
    storage.s3_client().create_bucket(Bucket=name)
    return name
