"""The report and Data Docs of a DAG run in Airflow's UI, read from S3 by the api-server.

This module owns the FastAPI app the plugin (``recforge.orchestration.plugin``) mounts on
Airflow's api-server at :data:`PREFIX`, and the rule that maps a DAG run to the folder its
report is in. A run's page gets a "Dataset report" tab that frames
``<PREFIX>/runs/<dag_id>/<run_id>/report.html``; every other file of the folder is served
under the same ``<PREFIX>/runs/<dag_id>/<run_id>/`` root, so the report's relative link to
``quality/index.html`` (Data Docs) and Data Docs' links back to ``../report.html`` resolve
to this app as they resolve inside the version folder.

Who may read: Airflow's own authentication and authorization, nothing of recforge's. The
browser's ``_token`` cookie (or a bearer token) names the user (``security.get_user``), and
the user must be allowed to read the DAG's runs (``requires_access_dag("GET", RUN)``); the
browser never sees an S3 credential or a presigned URL. The api-server reads S3 through the
dataset's Airflow connection (the spec's ``aws_conn_id``, else ``[recforge] aws_conn_id``),
as the tasks do.

Which folder: the dag id names the spec (the specs folder the DAG factory reads); the run's
conf is applied to it exactly as the tasks apply it (overrides checked against the spec's
bounds, ``stage.checked_overrides``), so the folder is always one of the dataset's own
prefixes: the version the run published (``run_state.published_version``), else where the run's
merged dataset is (``run_state.out``: a dry run's or a failed gate's staging ``out/``, or the
version folder it claimed). Nothing in the request names a bucket or a prefix.

What is served: only files of the web types in :data:`CONTENT_TYPES` (never a ``.rec``), at
most :data:`MAX_BYTES` each, under a path of plain relative segments (no ``..``, ``.``, empty
segment, backslash or control character). Every response forbids scripts and outside
requests (:data:`CSP`): a report is data from a bucket, served on Airflow's origin.
"""

from __future__ import annotations

import posixpath
import re
import threading
import time
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import RedirectResponse, Response

from recforge import releases, run_state, storage
from recforge.errors import SpecError
from recforge.format import names
from recforge.orchestration import connections, specs
from recforge.run import Run
from recforge.spec import DatasetSpec, load_specs

PREFIX = "/recforge"  # where the plugin mounts the app on the api-server
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8", ".json": "application/json",
    ".txt": "text/plain; charset=utf-8", ".png": "image/png", ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg", ".gif": "image/gif", ".svg": "image/svg+xml",
    ".webp": "image/webp", ".ico": "image/x-icon", ".woff": "font/woff", ".woff2": "font/woff2",
}
MAX_BYTES = 64 << 20  # a report with its inline thumbnails is a few MB; Data Docs pages less
# no script, no request off Airflow's origin, not framed by another site
CSP = ("default-src 'none'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
       "font-src 'self' data:; frame-ancestors 'self'; base-uri 'none'; form-action 'none'")
SEGMENT = re.compile(r"^[^\x00-\x1f\x7f\\/]+$")
CONNECTION_TTL_S = 300  # how long one connection's clients serve before it is looked up again


def safe_path(path: str) -> str:
    """``path`` as plain relative segments, or ``HTTPException(404)``: nothing a request
    sends can leave the run's folder."""
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") or not SEGMENT.match(p) for p in parts):
        raise HTTPException(404, f"{path!r} is not a file of a dataset version: a path of "
                                 "plain relative names is expected (no '..', '.', '//' or '\\')")
    if posixpath.splitext(parts[-1])[1].lower() not in CONTENT_TYPES:
        raise HTTPException(404, f"{path!r} is not served here: only the report, Data Docs "
                                 f"and their pages and images ({', '.join(CONTENT_TYPES)})")
    return "/".join(parts)


def spec_for_dag(dag_id: str, directory: str | Path | None = None) -> DatasetSpec:
    """The dataset spec whose DAG is ``dag_id`` in the specs folder the DAG factory reads."""
    folder = specs.specs_dir(directory)
    found = {s.dag_id: s for s in load_specs(folder)[0]} if folder.is_dir() else {}
    if dag_id not in found:
        raise HTTPException(404, f"{dag_id} is not the DAG of a dataset spec under {folder}: "
                                 "only recforge dataset runs have a report")
    return found[dag_id]


def run_of(spec: DatasetSpec, run_id: str, conf: dict | None) -> Run:
    """The run as its tasks saw it: the spec with the run's checked overrides."""
    from recforge.orchestration.stage import checked_overrides

    try:
        overrides = checked_overrides(spec, conf)
        return Run(spec.with_overrides(overrides) if overrides else spec, run_id,
                   dry_run=bool((conf or {}).get("dry_run")))
    except SpecError as exc:
        raise HTTPException(404, f"run {run_id} has no report: {exc}") from None


def run_folder(run: Run) -> tuple[str, str | None]:
    """Where the run's report and Data Docs are, and the version it published (None: not
    published; the folder is its merged dataset, staging ``out/`` or a claimed version)."""
    version = run_state.published_version(run)
    if version:
        return releases.version_uri(run.spec, version), version
    return run_state.out(run), None


class _S3:
    """``storage`` reads through one dataset's connection at a time. storage's client
    factory is per process, so requests for datasets on different connections take turns
    (reads are a report's few MB); the factory is kept while the same connection is asked
    for, and looked up again after :data:`CONNECTION_TTL_S`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conn_id: str | None = None
        self.since = 0.0

    def use(self, spec: DatasetSpec) -> None:
        """Point storage at ``spec``'s connection; the caller holds :attr:`lock`."""
        wanted = connections.conn_id_for(spec.aws_conn_id)
        if wanted != self.conn_id or time.monotonic() - self.since > CONNECTION_TTL_S:
            connections.use_connection(spec.aws_conn_id)
            self.conn_id, self.since = wanted, time.monotonic()


S3 = _S3()


def read_file(spec: DatasetSpec, run_id: str, conf: dict | None, path: str,
              cached_etag: str | None = None) -> tuple[bytes | None, str, str | None]:
    """``path`` of the run's folder: its bytes (None when its ETag is ``cached_etag``: the
    browser's copy is current and nothing is fetched), its ETag and the published version;
    404 when the run has no such file (no report yet), 413 over :data:`MAX_BYTES`. The run
    is made under the lock too: it sets the process's storage options for its spec."""
    with S3.lock:
        S3.use(spec)
        run = run_of(spec, run_id, conf)
        folder, version = run_folder(run)
        uri = storage.join(folder, path)
        info = storage.head(uri)
        if info is None:
            if path == names.REPORT:
                raise HTTPException(404, f"run {run_id} has no report yet: the quality gate "
                                         f"writes it once the dataset is merged (looked in "
                                         f"{folder})")
            raise HTTPException(404, f"run {run_id} has no file {path} (in {folder})")
        if info.size > MAX_BYTES:
            raise HTTPException(413, f"{path} is {info.size:,} bytes: more than the "
                                     f"{MAX_BYTES:,} served here; read it from {uri}")
        if info.etag == cached_etag:
            return None, info.etag, version
        return storage.get_bytes(uri), info.etag, version


def run_conf(dag_id: str, run_id: str) -> dict:
    """The run's conf (its trigger params), from Airflow's database; 404 when there is no
    such run."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session(scoped=False) as session:
        conf = session.scalar(select(DagRun.conf).where(DagRun.dag_id == dag_id,
                                                        DagRun.run_id == run_id))
        known = conf is not None or session.scalar(
            select(DagRun.id).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if not known:
        raise HTTPException(404, f"DAG {dag_id} has no run {run_id!r}")
    return dict(conf or {})


def can_read_runs():
    """Airflow's check: the request's user may read the DAG's runs (401 without a user)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    return requires_access_dag("GET", DagAccessEntity.RUN)


def create_app(authorize=None, specs_dir: str | Path | None = None) -> FastAPI:
    """The app. ``authorize``: the dependency that admits a request (default: Airflow's
    :func:`can_read_runs`); ``specs_dir``: the specs folder (default: the DAG factory's)."""
    app = FastAPI(title="recforge: dataset reports", docs_url=None, redoc_url=None,
                  openapi_url=None)
    allowed = [Depends(authorize or can_read_runs())]

    @app.get("/runs/{dag_id}/{run_id}/", dependencies=allowed)
    def run_home(dag_id: str, run_id: str) -> RedirectResponse:
        return RedirectResponse(names.REPORT, status_code=307)

    @app.get("/runs/{dag_id}/{run_id}/{path:path}", dependencies=allowed)
    def run_file(dag_id: str, run_id: str, path: str, request: Request,
                 conf: Annotated[dict, Depends(run_conf)]) -> Response:
        """A file of the run's report folder: ``report.html``, ``quality/…`` (Data Docs)."""
        path = safe_path(path)
        cached = (request.headers.get("if-none-match") or "").strip('"') or None
        body, etag, version = read_file(spec_for_dag(dag_id, specs_dir), run_id, conf, path,
                                        cached)
        headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                   "Cache-Control": "private, no-cache", "ETag": f'"{etag}"',
                   "X-Recforge-Version": version or "unpublished"}
        if body is None:  # the browser's copy is current
            return Response(status_code=304, headers=headers)
        media = CONTENT_TYPES[posixpath.splitext(path)[1].lower()]
        return Response(body, media_type=media, headers=headers)

    return app
