"""The S3 client: one per process, shared by its threads, made by boto3's own chain or by the
factory the Airflow edge installs (``configure_s3``), with recforge's botocore settings, byte
accounting and the run's write options (``write_options``)."""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime

from recforge.storage import write_options

RETRY_MODE = "adaptive"  # botocore's: standard retries plus client-side rate limiting


MAX_ATTEMPTS = 8  # per call, botocore's own attempts, the first included (5xx, throttling,
# connection errors)


BACKOFF_S = 0.2  # first pause of recforge's retries around what botocore does not retry


# > the threads of one process that call S3 at once (publish: 8 files, each up to 8 parts
# read back; merge: 8 composes beside 8 reads), so none opens a connection it then drops
POOL_CONNECTIONS = 64


def retry_settings() -> tuple[str, int, float]:
    """``(mode, max_attempts, backoff_s)``: the defaults above, or the environment's
    ``RECFORGE_S3_RETRY_MODE`` / ``RECFORGE_S3_MAX_ATTEMPTS`` / ``RECFORGE_S3_BACKOFF_S``
    (the fault tests shorten them)."""
    env = os.environ
    return (env.get("RECFORGE_S3_RETRY_MODE") or RETRY_MODE,
            int(env.get("RECFORGE_S3_MAX_ATTEMPTS") or MAX_ATTEMPTS),
            float(env.get("RECFORGE_S3_BACKOFF_S") or BACKOFF_S))


def client_config():
    """The botocore settings every recforge S3 client uses (retries as ``retry_settings``,
    path-style addressing)."""
    from botocore.config import Config

    mode, attempts, _ = retry_settings()
    # total_max_attempts counts the first request; botocore's max_attempts counts retries
    return Config(retries={"total_max_attempts": attempts, "mode": mode},
                  s3={"addressing_style": "path"}, max_pool_connections=POOL_CONNECTIONS)


def _env_key() -> tuple:
    return (os.getpid(), os.environ.get("AWS_ENDPOINT_URL"),
            os.environ.get("AWS_ENDPOINT_URL_S3"), os.environ.get("AWS_ACCESS_KEY_ID"))


def default_client():
    """boto3's own chain: ``AWS_*`` variables / ``AWS_ENDPOINT_URL``, profiles, roles."""
    return _session(_env_key()).client("s3", config=client_config())


_factory: dict = {"make": default_client, "generation": 0}


def configure_s3(factory=None) -> None:
    """Make every S3 client with ``factory()`` (a callable returning a boto3 S3 client) from
    now on, in every thread; ``None`` restores boto3's default chain. Airflow's edge uses it to
    hand over an Airflow connection; the CLI never calls it."""
    _factory["make"] = factory or default_client
    _factory["generation"] += 1


_clients: dict = {}


_clients_lock = threading.Lock()


def s3_client():
    """The S3 client of this process, shared by its threads (botocore's clients are
    thread-safe once made; making one costs ~12 ms of CPU, and every stage runs short-lived
    thread pools), made again when the factory, or the endpoint, credentials or retry
    settings in the environment change. A forked child makes its own: a client's
    connections are not shared across processes."""
    key = (_factory["generation"], *_env_key(), retry_settings())
    made = _clients.get(key)
    if made is not None:
        return made
    with _clients_lock:  # made once: botocore's sessions are not safe to make clients
        made = _clients.get(key)  # from in several threads at once
        if made is None:
            made = _factory["make"]()
            _count_transfers(made)
            write_options.register(made)  # boto3's chain's clients and a factory's alike
            if len(_clients) >= 8:  # superseded configurations (tests switch endpoints)
                _clients.clear()
            _clients[key] = made
        return made


@dataclass
class Transfer:
    """Body bytes this process moved through S3 clients: ``down`` (GetObject responses),
    ``up`` (PutObject/UploadPart requests), ``down_by_suffix`` (``.rec``: ...). A server-side
    copy (CopyObject, UploadPartCopy) moves none."""

    down: int = 0
    up: int = 0
    down_by_suffix: dict[str, int] = field(default_factory=dict)

    def minus(self, before: Transfer) -> Transfer:
        return Transfer(self.down - before.down, self.up - before.up, {
            k: v - before.down_by_suffix.get(k, 0) for k, v in self.down_by_suffix.items()
            if v != before.down_by_suffix.get(k, 0)})


_TRANSFER = Transfer()


_TRANSFER_LOCK = threading.Lock()


def transferred() -> Transfer:
    """A snapshot of the bytes moved so far; ``transferred().minus(before)`` is one task's."""
    with _TRANSFER_LOCK:
        return Transfer(_TRANSFER.down, _TRANSFER.up, dict(_TRANSFER.down_by_suffix))


def count_down(key: str, n: int) -> None:
    """Count ``n`` body bytes of a GET of ``key`` (botocore's hook and ``http_get`` alike)."""
    suffix = _suffix(key)
    with _TRANSFER_LOCK:
        _TRANSFER.down += n
        _TRANSFER.down_by_suffix[suffix] = _TRANSFER.down_by_suffix.get(suffix, 0) + n


def _suffix(key: str) -> str:
    """``PurePosixPath(key).suffix``, without building a path for every GET."""
    name = key.rstrip("/").rpartition("/")[2]
    dot = name.rfind(".")
    return name[dot:] if 0 < dot < len(name) - 1 else ""


def _count_transfers(client) -> None:
    """botocore event hooks: the key rides in the call's context from parameter build to
    after-call; uploads are counted from the request's Content-Length as it is sent."""
    def remember_key(params, context, **_):
        context["recforge_key"] = params.get("Key", "")

    def got(parsed, context, **_):
        n = int(parsed.get("ContentLength") or 0) if isinstance(parsed, dict) else 0
        count_down(context.get("recforge_key", ""), n)

    def sent(request, **_):
        n = int(request.headers.get("Content-Length") or 0)
        with _TRANSFER_LOCK:
            _TRANSFER.up += n

    events = client.meta.events
    events.register("before-parameter-build.s3.GetObject", remember_key)
    events.register("after-call.s3.GetObject", got)
    for op in ("PutObject", "UploadPart"):
        events.register(f"before-send.s3.{op}", sent)


_sessions: dict = {}


_sessions_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A child forked while another thread held a lock here gets it held forever: new ones."""
    global _clients_lock, _sessions_lock
    _clients_lock, _sessions_lock = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _session(key: tuple):
    """One boto3 session per process and environment: a session resolves credentials once
    and keeps them, so boto3's default one would sign with stale keys after a change."""
    import boto3

    with _sessions_lock:
        if key[:4] not in _sessions:
            session = boto3.session.Session()
            session._session.get_component("response_parser_factory").set_parser_defaults(
                timestamp_parser=parse_timestamp)
            _sessions[key[:4]] = session
        return _sessions[key[:4]]


def parse_timestamp(value):
    """botocore's timestamp parser, with a fast path for S3's ISO 8601 UTC form
    (``2026-12-01T02:00:00.000Z``): botocore hands every timestamp to dateutil, ~85 µs each,
    which made parsing ``LastModified`` half of the client's time in a listing (at 1.28 M
    objects, ~110 s of CPU). Same values (UTC, aware); anything else goes to botocore."""
    if isinstance(value, str) and value.endswith("Z") and "T" in value:
        try:
            parsed = datetime.fromisoformat(value[:-1])
        except ValueError:
            pass
        else:
            if parsed.tzinfo is None:
                return parsed.replace(tzinfo=_tzutc())
    from botocore.utils import parse_timestamp as botocore_parse

    return botocore_parse(value)


@functools.cache
def _tzutc():
    """dateutil's UTC, what botocore's parser attaches (imported once, not per timestamp)."""
    from dateutil.tz import tzutc

    return tzutc()
