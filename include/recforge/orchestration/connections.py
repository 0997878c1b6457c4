"""S3 through an Airflow connection: the tasks' boto3 clients get their credentials, region and
endpoint from the AWS connection (``aws_conn_id``), resolved by the amazon provider's hook.

Which connection: the spec's ``aws_conn_id``, else the deployment's ``[recforge] aws_conn_id``
(``AIRFLOW__RECFORGE__AWS_CONN_ID``), else ``aws_default``. When that connection does not
exist, nothing changes: boto3's own chain (``AWS_*`` variables, profiles, instance roles)
stays in charge, exactly as in the CLI.

The connection is looked up once per task, in the task's own process; what the hook resolved
(frozen credentials, region, endpoint, TLS verification) goes to ``storage.configure_s3`` as
a plain factory, so the per-thread and forked-worker clients never call back into Airflow.
Credentials from an assumed role are frozen for the task, which retries when they expire.
"""

from __future__ import annotations

import functools
import logging

from recforge import storage

log = logging.getLogger(__name__)
DEFAULT_CONN_ID = "aws_default"


def conn_id_for(spec_conn_id: str | None) -> str:
    if spec_conn_id:
        return spec_conn_id
    from airflow.configuration import conf

    return conf.get("recforge", "aws_conn_id", fallback=DEFAULT_CONN_ID) or DEFAULT_CONN_ID


def _client(**kwargs):
    import boto3

    return boto3.client("s3", config=storage.client_config(), **kwargs)


def client_factory(conn_id: str):
    """A factory of boto3 S3 clients from Airflow connection ``conn_id``; ``None`` when there is
    no such connection (boto3's own chain applies)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    hook = S3Hook(aws_conn_id=conn_id)
    wrapper = hook.conn_config  # looks the connection up; warns and stays empty if missing
    if not isinstance(wrapper.conn_id, str):
        return None
    creds = hook.get_credentials(region_name=wrapper.region_name)  # masked in task logs
    kwargs = {"region_name": wrapper.region_name,
              "endpoint_url": wrapper.get_service_endpoint_url(service_name="s3"),
              "aws_access_key_id": creds.access_key, "aws_secret_access_key": creds.secret_key,
              "aws_session_token": creds.token}
    if wrapper.verify is not None:
        kwargs["verify"] = wrapper.verify
    return functools.partial(_client, **{k: v for k, v in kwargs.items() if v is not None})


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
