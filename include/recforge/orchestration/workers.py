"""Worker identity for Airflow's ``[core] hostname_callable``."""

from __future__ import annotations

import os
import socket


def worker_hostname() -> str:
    """``RECFORGE_WORKER_NAME`` if set, else the FQDN.

    Several Celery workers on one host (compose, the test tier) then report distinct
    hostnames on their task instances, so a run shows which worker ran what.
    """
    return os.environ.get("RECFORGE_WORKER_NAME") or socket.getfqdn()
