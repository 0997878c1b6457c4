"""Shared fixtures: a real S3-compatible server on loopback (moto server mode) for the session,
and, for modules marked ``both_stores``, a real S3 implementation beside it (Ceph RGW,
``tests/common/rgw.py``): their tests run once against each, ids ``[moto]`` and ``[rgw]``.

Every test that touches storage talks HTTP to it through boto3, exactly as production talks
to AWS, MinIO or Ceph. ``bucket`` gives each test its own empty bucket.

The tiers (``tests/common/tiers.py``): a bare ``pytest`` leaves the slow ones out; the [rgw]
cases carry the ``rgw`` marker; under xdist the tests that share state run on one worker
(``pytest_xdist_make_scheduler``).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from recforge.dev import s3server
from tests.common import tiers
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


STORES = ("moto", "rgw")


def pytest_addoption(parser):
    tiers.addoption(parser)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads -n
def pytest_cmdline_main(config):
    tiers.spread_default_tier(config)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "both_stores: run the module's S3 tests against moto and Ceph RGW "
        "(``s3_endpoint`` parametrized, ids [moto]/[rgw])")
    config.addinivalue_line(
        "markers", "moto_only(reason): in a both_stores module, the test runs on moto only "
        "(its [rgw] case skips with the reason)")
    config.addinivalue_line(
        "markers", "rgw_xfail(reason): in a both_stores module, recforge is known to fail on "
        "Ceph RGW here: the [rgw] case is a strict xfail (it fails the run once it passes)")


def pytest_collection_modifyitems(config, items):
    tiers.deselect_slow(config, items)


def pytest_terminal_summary(terminalreporter, config):
    line = tiers.summary_line(config)
    if line:
        terminalreporter.write_line(line, yellow=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return tiers.make_scheduler(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    tiers.configure_node(node)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    tiers.node_down(node)


def pytest_sessionfinish(session):
    tiers.worker_finished(session)


def _reason(mark) -> str:
    return mark.kwargs.get("reason") or mark.args[0]


def pytest_generate_tests(metafunc):
    """A ``both_stores`` test that uses S3 runs once per store; ``moto_only`` skips [rgw].
    The [rgw] case carries the ``rgw`` marker (a slow tier: it starts a Ceph cluster)."""
    if "s3_endpoint" not in metafunc.fixturenames or \
            not metafunc.definition.get_closest_marker("both_stores"):
        return
    marks = [pytest.mark.rgw]
    only = metafunc.definition.get_closest_marker("moto_only")
    if only:
        marks.append(pytest.mark.skip(reason=f"moto only: {_reason(only)}"))
    known = metafunc.definition.get_closest_marker("rgw_xfail")
    if known:
        marks.append(pytest.mark.xfail(reason=f"on Ceph RGW: {_reason(known)}", strict=True))
    rgw = pytest.param("rgw", id="rgw", marks=marks)
    metafunc.parametrize("s3_endpoint", [pytest.param("moto", id="moto"), rgw],
                         indirect=True, scope="session")


@pytest.fixture(scope="session")
def moto_server():
    """The moto server for the session: its endpoint and credentials."""
    with s3server.running_server() as endpoint:
        yield {**s3server.DEV_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}


@pytest.fixture(scope="session")
def rgw_server(tmp_path_factory):
    """A Ceph cluster with one RADOS Gateway for the session (``tests/common/rgw.py``): its
    endpoint and credentials. Where Ceph is not installed the [rgw] tests skip, except under
    CI, where they fail: the RGW tier must not vanish quietly."""
    from tests.common import rgw

    reason = rgw.unavailable()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI needs the Ceph RGW tier: {reason}", pytrace=False)
        pytest.skip(reason)
    with rgw.running_rgw(tmp_path_factory.mktemp("rgw")) as up:
        yield up.env()


@pytest.fixture(scope="session")
def s3_endpoint(request):
    """The S3 store the test talks to, set in ``os.environ`` (``AWS_ENDPOINT_URL`` and
    credentials) while its tests run: moto, or Ceph RGW for the [rgw] case of a
    ``both_stores`` module."""
    store = getattr(request, "param", "moto")
    env = request.getfixturevalue(f"{store}_server")
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env["AWS_ENDPOINT_URL"]
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
