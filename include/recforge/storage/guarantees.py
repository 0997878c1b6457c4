"""What a store honours, proved rather than trusted.

Publishing is exclusive because S3 decides ``If-None-Match: *`` (a version's claim and
manifest are created once) and ``If-Match`` (``latest.json`` moves by compare-and-swap) on
the server. A store that ignores the headers (older S3-compatible servers, some proxies and
gateways) would answer 200 to both and turn that into last-writer-wins without a word, so
before a process first publishes into a bucket it writes a probe object twice and expects the
second write, and a write under a wrong ETag, to be refused. The answer is kept per endpoint
and bucket for the life of the process (a publish task, or one ``recforge build``).
"""

from __future__ import annotations

import threading
import uuid

from recforge.errors import StoreGuaranteeMissing
from recforge.storage import client, objects
from recforge.storage.errors import PreconditionFailed
from recforge.storage.uri import is_s3, join, split_s3

PROBE_PREFIX = "_recforge_probe"  # under the publish root; each probe deletes its object

_proved: set[tuple] = set()
_lock = threading.Lock()


def store_name() -> str:
    """The endpoint this process's requests go to: the Airflow connection's, the
    environment's (``AWS_ENDPOINT_URL``) or AWS's, as the client resolved it."""
    return client.s3_client().meta.endpoint_url


def prove_conditional_writes(root_uri: str) -> None:
    """Raise :class:`StoreGuaranteeMissing` unless the store of ``root_uri`` refuses a second
    ``If-None-Match: *`` write of one key and a write ``If-Match`` a wrong ETag. Nothing to
    prove on a local path (its conditional writes are the filesystem's, ``put_bytes``)."""
    if not is_s3(root_uri):
        return
    key = (store_name(), split_s3(root_uri)[0])
    with _lock:
        if key in _proved:
            return
    probe = join(root_uri, PROBE_PREFIX, f"{uuid.uuid4().hex}.json")
    mine = f'{{"probe": "{uuid.uuid4().hex}"}}'.encode()
    try:
        missing = _refusals(probe, mine)
    finally:
        objects.delete(probe)
    if missing:
        raise StoreGuaranteeMissing(
            f"the object store at {key[0]} (bucket {key[1]!r}) accepted "
            + " and ".join(missing)
            + ": it ignores conditional writes, so two runs could both publish one version "
            "and latest.json could move backwards. Use a store that honours If-None-Match "
            "and If-Match (AWS S3, Ceph RGW, MinIO; a proxy in front of them must pass the "
            "headers on), or set publish.conditional_writes: unchecked in the spec to "
            "publish without that guarantee (docs/reliability.md)")
    with _lock:
        _proved.add(key)


def _refusals(probe: str, mine: bytes) -> list[str]:
    """The conditional writes of ``probe`` that the store should have refused and did not."""
    try:
        objects.put_bytes(probe, mine, "application/json", if_none_match=True)
    except PreconditionFailed:  # our own first write, whose answer was lost and retried
        if objects.get_bytes(probe) != mine:
            raise
    missing = []
    try:
        objects.put_bytes(probe, b"{}", "application/json", if_none_match=True)
        missing.append("a second write with If-None-Match: * (a version is created once)")
    except PreconditionFailed:
        pass
    try:
        objects.put_bytes(probe, b"{}", "application/json",
                          if_match='"00000000000000000000000000000000"')
        missing.append("a write with If-Match a wrong ETag (latest.json by compare-and-swap)")
    except PreconditionFailed:
        pass
    return missing
