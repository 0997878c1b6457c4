"""The Celery-tier stack, shared by every test that asks for ``cluster``.

``cluster`` is session-scoped so that the REST API tests (test_celery_tier.py) and the UI test
(test_ui.py) use one running stack; the tests that use it are moved to the end of the run, so
the stack is stopped right after them instead of idling through the rest of the suite.
"""

from __future__ import annotations

import os

import pytest

from tests.e2e.cluster import running_cluster, scratch_database, services_up


def pytest_collection_modifyitems(config, items):
    users = [item for item in items if "cluster" in getattr(item, "fixturenames", ())]
    if users:
        chosen = {id(item) for item in users}
        items[:] = [item for item in items if id(item) not in chosen] + users


@pytest.fixture(scope="session")
def database():
    why = services_up()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL/Redis must be running for the Celery tier: {why}")
        pytest.skip(f"PostgreSQL/Redis not reachable: {why}")
    with scratch_database() as name:
        yield name


@pytest.fixture(scope="session")
def cluster(database, s3_endpoint, tmp_path_factory):
    with running_cluster(database, tmp_path_factory.mktemp("celery_airflow")) as running:
        yield running
