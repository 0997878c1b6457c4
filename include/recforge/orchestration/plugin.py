"""The Airflow plugin: a "Dataset report" tab on every DAG run's page.

Registered through the ``airflow.plugins`` entry point (``pyproject.toml``), so an Airflow
that has recforge installed loads it without a plugins folder. It adds:

* a FastAPI app on the api-server at ``/recforge`` (``recforge.orchestration.ui``): a run's
  report and Data Docs, read from S3 with the dataset's Airflow connection, behind Airflow's
  own authentication;
* an external view with destination ``dag_run``: a tab of the run page that frames
  ``/recforge/runs/{DAG_ID}/{RUN_ID}/report.html`` (the UI fills in the run).

Every Airflow process loads plugins (the scheduler, each task), so this module stays small:
the app is imported and built on the first request it gets (:class:`LazyApp`), which happens
on the api-server only.
"""

from __future__ import annotations

from urllib.parse import urlparse

from airflow.plugins_manager import AirflowPlugin

from recforge.format import names

URL_PREFIX = "/recforge"  # recforge.orchestration.ui.PREFIX (not imported: it loads FastAPI)


def base_path() -> str:
    """The api-server's path below its host (``[api] base_url``; empty at the root), which
    the UI's framed URL needs when Airflow is served under a sub-path."""
    from airflow.configuration import conf

    return urlparse(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


class LazyApp:
    """An ASGI app that builds ``recforge.orchestration.ui.create_app()`` on its first call."""

    def __init__(self) -> None:
        self._app = None

    async def __call__(self, scope, receive, send) -> None:
        if self._app is None:
            from recforge.orchestration.ui import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class RecforgePlugin(AirflowPlugin):
    name = "recforge"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX,
                     "name": "recforge dataset reports"}]
    external_views = [{
        "name": "Dataset report",
        "href": f"{base_path()}{URL_PREFIX}/runs/{{DAG_ID}}/{{RUN_ID}}/{names.REPORT}",
        "destination": "dag_run",
        "url_route": "recforge-report",
    }]
