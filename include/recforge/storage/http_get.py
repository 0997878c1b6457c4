"""The GET of one object, or one byte range of it, signed here with AWS Signature Version 4
and sent on ``connections``' kept-alive sockets: a fraction of the worker's CPU a botocore
``get_object`` spends (``benchmarks/bench_s3_clients.py``), which through S3 was a fifth of
what each image of a build cost.

It is the process's S3 client seen from the wire, not a second configuration: endpoint,
region, addressing style, credentials (refreshed as botocore refreshes them), TLS
verification and timeouts are read from ``client.s3_client()`` — boto3's chain or the
factory the Airflow edge installs — and a bucket's expected owner from ``write_options``.
Each call is one request, made under the one retry rule by its caller
(``objects.get_bytes`` / ``get_range``), and fails as botocore's ``get_object`` would:

* an S3 error answer raises botocore's ``ClientError`` with the same ``response`` (status,
  ``Error.Code``), so ``errors.is_transient`` / ``is_not_found`` / ``explain`` and
  ``quarantine.fetch_reason`` read it unchanged;
* a body cut short or a connection reset raises urllib3's ``ProtocolError`` and a stalled
  read its ``ReadTimeoutError`` (transient: the rule tries again); an endpoint that cannot
  be reached raises botocore's ``EndpointConnectionError`` / ``ConnectTimeoutError`` once
  the connection attempts are spent, as botocore does;
* a redirect or a 400 (a bucket in another region, a signature the store wants otherwise)
  is sent again through botocore, which knows those answers;
* the response's checksum (``x-amz-checksum-mode: ENABLED``, botocore's default
  ``when_supported``) is validated as botocore validates it — CRC64NVME, CRC32C (with the
  AWS CRT installed), CRC32, SHA-1, SHA-256, the first one the answer carries, never a
  composite one — and a mismatch raises botocore's ``FlexibleChecksumError``;
* the body's bytes are counted in ``client.transferred()``.

``RECFORGE_S3_GET=botocore`` sends every GET through botocore instead, and so does a client
this module cannot speak for: one that signs otherwise than SigV4, or that goes through an
HTTP proxy (:func:`enabled`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import threading
import time
import urllib.request
import zlib
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from recforge.storage import checksums, client, connections, retry, write_options

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
ENV = "RECFORGE_S3_GET"  # "botocore": every GET through botocore


def _crt(name: str):
    def digest(data: bytes) -> bytes:
        from awscrt import checksums  # installed with botocore[crt] only

        value = getattr(checksums, name)(data)
        return value.to_bytes(8 if name == "crc64nvme" else 4, "big")
    return digest


def _has_crt() -> bool:
    try:
        import awscrt.checksums  # noqa: F401
    except ImportError:
        return False
    return True


# botocore's order of preference for a response checksum (``httpchecksum``): the first one
# the answer carries that this process can compute is validated
CHECKSUMS = (("crc64nvme", _crt("crc64nvme"), True), ("crc32c", _crt("crc32c"), True),
             ("crc32", lambda d: zlib.crc32(d).to_bytes(4, "big"), False),
             ("sha1", lambda d: hashlib.sha1(d).digest(), False),
             ("sha256", lambda d: hashlib.sha256(d).digest(), False))


@dataclass(frozen=True)
class Target:
    """What the process's S3 client talks to, read once from it."""

    host: str  # host[:port], as the Host header carries it
    base_path: str  # the endpoint's own path, without a trailing '/'
    virtual: bool  # virtual-hosted addressing (the bucket in the host name)
    region: str
    credentials: object  # botocore's Credentials (refreshable), or None: unsigned
    pool: connections.Connections  # kept-alive connections to the endpoint's hosts
    attempts: int  # botocore's attempts per call in the client's configuration


_targets: dict = {}  # by client: a forked child makes its own client, so its own pool
_targets_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A child forked while another thread held the lock gets it held forever: a new one."""
    global _targets_lock
    _targets_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def enabled() -> bool:
    """Whether GETs go through this module: not where ``RECFORGE_S3_GET=botocore``, nor
    for a client that signs otherwise than SigV4 or reaches S3 through an HTTP proxy."""
    return _in_use() is not None


def _in_use() -> Target | None:
    """The target GETs go to now, or None where they go through botocore."""
    return None if _off() else target(client.s3_client())


def attempts() -> int:
    """The retry rule's attempts for a GET: with this module one request an attempt, so
    the rule's own (``retry.READ_ATTEMPTS``) times the ones botocore would make inside each
    (a store that throttles is waited for as long either way); through botocore, the
    rule's own."""
    where = _in_use()
    return retry.READ_ATTEMPTS * (where.attempts if where is not None else 1)


def _off() -> bool:
    return os.environ.get(ENV, "").strip().lower() == "botocore"


def target(s3) -> Target | None:
    """The :class:`Target` of a boto3 S3 client (made once per client), or None when this
    module cannot speak for it."""
    made = _targets.get(s3, False)
    if made is not False:
        return made
    with _targets_lock:
        made = _targets.get(s3, False)
        if made is False:
            made = _make_target(s3)
            if len(_targets) >= 8:  # superseded clients (tests switch endpoints)
                _targets.clear()
            _targets[s3] = made
        return made


def _make_target(s3) -> Target | None:
    import botocore

    meta = getattr(s3, "meta", None)
    if meta is None or not hasattr(s3, "_request_signer"):  # not a botocore client
        return None
    config = meta.config
    signature = getattr(config, "signature_version", None)
    if signature is botocore.UNSIGNED:
        credentials = None
    elif signature not in (None, "s3v4", "v4"):
        return None
    else:
        credentials = s3._request_signer._credentials  # noqa: SLF001 - refreshed by botocore
    url = urlsplit(s3.meta.endpoint_url)
    if _proxied(url) or getattr(config, "proxies", None):
        return None
    verify = getattr(s3._endpoint.http_session, "_verify", True)  # noqa: SLF001
    attempts = client.retry_settings()[1]  # part of the client's key: fixed per client
    pool = connections.Connections(
        url.scheme, url.port, s3.meta.endpoint_url, config.connect_timeout,
        config.read_timeout, attempts, client.POOL_CONNECTIONS,
        connections.tls_context(verify) if url.scheme == "https" else None)
    addressing = (config.s3 or {}).get("addressing_style", "auto")
    region = s3.meta.region_name or "us-east-1"
    return Target(url.netloc, url.path.rstrip("/"), addressing == "virtual",
                  "us-east-1" if region == "aws-global" else region, credentials, pool,
                  attempts)


def _proxied(url) -> bool:
    """Whether botocore would send requests to this endpoint through an HTTP proxy."""
    proxies = urllib.request.getproxies()
    return bool(proxies.get(url.scheme)) and not urllib.request.proxy_bypass(url.hostname or "")


def get(bucket: str, key: str, byte_range: str | None = None,
        if_match: str | None = None) -> bytes:
    """One GET of ``bucket``/``key`` (``byte_range``: ``bytes=a-b``; ``if_match``: an
    ETag), its body's bytes: as ``s3_client().get_object(...)["Body"].read()``."""
    s3 = client.s3_client()
    where = None if _off() or bucket in _elsewhere else target(s3)
    if where is None:
        return _botocore(s3, bucket, key, byte_range, if_match)
    host, path = _address(where, bucket, key)
    headers = {"host": host, "x-amz-content-sha256": EMPTY_SHA256,
               "x-amz-checksum-mode": "ENABLED"}
    if byte_range:
        headers["range"] = byte_range
    if if_match:
        headers["if-match"] = if_match
    owner = write_options.owner_of(bucket)
    if owner:
        headers["x-amz-expected-bucket-owner"] = owner
    sign(headers, path, where.region, where.credentials)
    response = _send(where, host, path, headers)
    status = response.status
    if status in (200, 206):
        body = response.data
        client.count_down(key, len(body))
        if status == 200:
            digest = validate(response.headers, body, f"s3://{bucket}/{key}")
            if digest is not None:
                return checksums.checked(body, digest.hex())
        return bytes(body)
    if 300 <= status < 400 or status == 400:  # another region, another signature: botocore
        _elsewhere.add(bucket)  # knows those answers, and remembers the bucket's region
        return _botocore(s3, bucket, key, byte_range, if_match)
    raise _client_error(status, response)


# buckets whose GETs were answered with a redirect or a 400 (a bucket in another region than
# the client's): botocore's from then on, without a wasted request each time
_elsewhere: set[str] = set()


def _botocore(s3, bucket, key, byte_range, if_match) -> bytes:
    extra = {"Range": byte_range} if byte_range else {}
    if if_match:
        extra["IfMatch"] = if_match
    return s3.get_object(Bucket=bucket, Key=key, **extra)["Body"].read()


def _address(where: Target, bucket: str, key: str) -> tuple[str, str]:
    """``(Host, canonical path)`` of an object: S3 signs the path encoded once, '/' kept."""
    quoted = quote(key, safe="/~")
    if where.virtual:
        return f"{bucket}.{where.host}", f"{where.base_path}/{quoted}"
    return where.host, f"{where.base_path}/{quote(bucket, safe='')}/{quoted}"


def _send(where: Target, host: str, path: str, headers: dict):
    """One request on a kept connection to ``host``; ``path`` goes as it is (S3 keys may
    hold ``.`` segments that a URL library would remove)."""
    return where.pool.get(host, path, headers)


_ERROR_FIELD = re.compile(rb"<(Code|Message|BucketName)>([^<]*)</\1>")


def _client_error(status: int, response):
    """botocore's ``ClientError`` for an S3 error answer, with botocore's ``response``."""
    from botocore.exceptions import ClientError

    fields = {k.decode(): v.decode("utf-8", "replace")
              for k, v in _ERROR_FIELD.findall(response.data[:4096] or b"")}
    error = {"Code": fields.get("Code") or str(status), "Message": fields.get("Message", "")}
    if "BucketName" in fields:
        error["BucketName"] = fields["BucketName"]
    return ClientError({"Error": error, "ResponseMetadata": {
        "HTTPStatusCode": status, "HTTPHeaders": dict(response.headers)}}, "GetObject")


def validate(headers, body: bytes, uri: str) -> bytes | None:
    """The response checksum check botocore makes on a whole object's GET: the first of
    :data:`CHECKSUMS` the answer carries (a composite one, of a multipart object's parts,
    is not a checksum of the bytes and is skipped). Returns the SHA-256 digest where that
    was the one checked (``checksums.sha256_hex`` hands it on), else None."""
    if headers.get("x-amz-checksum-type", "").upper() == "COMPOSITE":
        return None
    for name, digest, needs_crt in CHECKSUMS:
        expected = headers.get(f"x-amz-checksum-{name}")
        if not expected or "-" in expected or (needs_crt and not _HAS_CRT):
            continue
        value = digest(body)
        got = base64.b64encode(value).decode("ascii")
        if got != expected:
            from botocore.exceptions import FlexibleChecksumError

            raise FlexibleChecksumError(error_msg=(
                f"{uri}: expected {name} checksum {expected}, the body's is {got}"))
        return value if name == "sha256" else None
    return None


_HAS_CRT = _has_crt()


def sign(headers: dict, path: str, region: str, credentials, now: float | None = None,
         query: str = "") -> None:
    """Add SigV4's ``x-amz-date`` and ``Authorization`` (and a session token) to a GET's
    ``headers`` (lower-case names, ``host`` among them); nothing for unsigned credentials."""
    if credentials is None:
        return
    frozen = credentials.get_frozen_credentials()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    headers["x-amz-date"] = stamp
    if frozen.token:
        headers["x-amz-security-token"] = frozen.token
    names = sorted(headers)
    canonical = "\n".join(("GET", path, query, *(f"{n}:{str(headers[n]).strip()}"
                                                 for n in names),
                           "", ";".join(names), headers["x-amz-content-sha256"]))
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(("AWS4-HMAC-SHA256", stamp, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()))
    key = _signing_key(frozen.secret_key, stamp[:8], region)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={frozen.access_key}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")


_keys: dict[tuple[str, str, str], bytes] = {}


def _signing_key(secret: str, day: str, region: str) -> bytes:
    made = _keys.get((secret, day, region))
    if made is None:
        made = ("AWS4" + secret).encode()
        for part in (day, region, "s3", "aws4_request"):
            made = hmac.new(made, part.encode(), hashlib.sha256).digest()
        if len(_keys) > 16:
            _keys.clear()
        _keys[(secret, day, region)] = made
    return made
