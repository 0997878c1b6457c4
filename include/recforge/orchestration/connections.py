"""S3 through an Airflow connection: the tasks' boto3 clients get their credentials, region and
endpoint from the AWS connection (``aws_conn_id``), resolved by the amazon provider's hook.

Which connection: the spec's ``aws_conn_id``, else the deployment's ``[recforge] aws_conn_id``
(``AIRFLOW__RECFORGE__AWS_CONN_ID``), else ``aws_default``. When that connection does not
exist, nothing changes: boto3's own chain (``AWS_*`` variables, profiles, instance roles)
stays in charge, exactly as in the CLI.

Credentials refresh. The connection is looked up once per task, in the task's own process,
and ``storage.configure_s3`` gets a :class:`ConnectionClients` factory. Its clients come from
the boto3 session the hook makes (``S3Hook.get_session``), not from a snapshot of keys: for
an assumed role (``role_arn``) or web identity that session holds botocore's
``RefreshableCredentials``, which fetch new keys before the old ones expire (botocore
refreshes 15 minutes ahead, and blocks for it in the last 10), so a merge, validation or
quality gate that runs for hours outlives a one-hour role session. A connection without keys
leaves the session on boto3's chain, whose instance, container and web-identity credentials
refresh the same way; static keys have nothing to refresh and are used as they are.

One session and one client per process. ``storage`` makes one client per process (and
again when its configuration changes) through the factory and shares it among the process's
threads; it comes from the factory's one session, with one credentials object, so a process
refreshes once however many threads it runs. boto3 sessions are not thread-safe, so clients
are made from it under a lock; using a client and its credentials from many threads is what
botocore designs them for.

Forked workers (the pack pool forks) get a session of their own. The parent's session is
not used across the fork: its credentials' refresh lock, or the factory's own lock, may be
held by another parent thread at the moment of the fork and would never be released in the
child. An at-fork hook therefore drops the session and the lock in the child, and the
child's first client makes a new session with ``get_session`` from the connection the hook
has already resolved (``conn_config``, cached: plain data), so a worker never calls back
into Airflow (it must not talk over the task's supervisor socket). Each worker assumes the
role once for itself and refreshes on its own from then on.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref

from recforge import settings, storage

log = logging.getLogger(__name__)
DEFAULT_CONN_ID = settings.AWS_CONN_ID.default


def conn_id_for(spec_conn_id: str | None) -> str:
    if spec_conn_id:
        return spec_conn_id
    return settings.get(settings.AWS_CONN_ID)


_LIVE: weakref.WeakSet = weakref.WeakSet()  # every factory of this process, for the fork hook


class ConnectionClients:
    """``factory()`` → a new boto3 S3 client from an Airflow connection's refreshing session.

    ``keywords`` are the client's arguments besides the config (``region_name``,
    ``endpoint_url``, ``verify``; never credentials); ``conn_id`` names the connection. The
    session is made now (so a role that cannot be assumed fails the task at once) and again
    once in each forked child."""

    def __init__(self, hook, keywords: dict) -> None:
        self.conn_id = hook.aws_conn_id
        self.keywords = dict(keywords)
        self._hook = hook
        self._forget()
        _LIVE.add(self)
        self.session()

    def _forget(self) -> None:
        """Drop the session and the lock (a new process: neither is safe to use here)."""
        self._lock = threading.Lock()
        self._session = None
        self._pid = None

    def _session_here(self):
        """This process's session; the caller holds ``self._lock``."""
        if self._session is None or self._pid != os.getpid():
            session = self._hook.get_session(region_name=self.keywords.get("region_name"))
            # the fast ISO 8601 parser boto3's own chain gets in ``storage`` (listings)
            session._session.get_component("response_parser_factory").set_parser_defaults(
                timestamp_parser=storage.parse_timestamp)
            self._session, self._pid = session, os.getpid()
        return self._session

    def session(self):
        """The boto3 session this process's clients share (its credentials refresh)."""
        with self._lock:
            return self._session_here()

    def __call__(self):
        with self._lock:
            return self._session_here().client("s3", config=storage.client_config(),
                                               **self.keywords)

    def __repr__(self) -> str:
        return f"ConnectionClients({self.conn_id!r}, {self.keywords!r})"


def _after_fork_in_child() -> None:
    for factory in list(_LIVE):
        factory._forget()


os.register_at_fork(after_in_child=_after_fork_in_child)


def client_factory(conn_id: str) -> ConnectionClients | None:
    """A factory of boto3 S3 clients from Airflow connection ``conn_id``, with credentials
    that refresh; ``None`` when there is no such connection (boto3's own chain applies)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    hook = S3Hook(aws_conn_id=conn_id)
    wrapper = hook.conn_config  # looks the connection up; warns and stays empty if missing
    if not isinstance(wrapper.conn_id, str):
        return None
    keywords = {"region_name": wrapper.region_name,
                "endpoint_url": wrapper.get_service_endpoint_url(service_name="s3"),
                "verify": wrapper.verify}
    return ConnectionClients(hook, {k: v for k, v in keywords.items() if v is not None})


def use_connection(spec_conn_id: str | None) -> str | None:
    """Point recforge's storage at the connection for this task; returns the connection id in
    use, or ``None`` when boto3's own configuration applies."""
    conn_id = conn_id_for(spec_conn_id)
    factory = client_factory(conn_id)
    storage.configure_s3(factory)
    if factory is None:
        log.info("S3: no Airflow connection %r; boto3's own configuration applies", conn_id)
        return None
    endpoint = factory.keywords.get("endpoint_url", "the AWS default endpoint")
    log.info("S3: Airflow connection %r (%s)", conn_id, endpoint)
    return conn_id
