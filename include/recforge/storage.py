"""Object storage by URI: ``s3://bucket/prefix`` over the real S3 protocol, or a local path.

The S3 endpoint comes from boto3's own configuration (``AWS_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL_S3``, profiles), so the same code talks to the local dev server, MinIO and
AWS; :func:`configure_s3` replaces that with another client factory (in Airflow: the
connection, ``recforge.orchestration.connections``). Local paths (``/abs/dir`` or
``file:///abs/dir``) exist for the CLI and for inspecting published data; the pipeline's
staging and publishing normally use S3.
"""

from __future__ import annotations

import collections
import os
import shutil
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

_local = threading.local()


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key relative to the listed prefix, size and ETag."""

    key: str
    size: int
    etag: str


def client_config():
    """The botocore settings every recforge S3 client uses (adaptive retries, path style)."""
    from botocore.config import Config

    return Config(retries={"max_attempts": 8, "mode": "adaptive"},
                  s3={"addressing_style": "path"})


def default_client():
    """boto3's own chain: ``AWS_*`` variables / ``AWS_ENDPOINT_URL``, profiles, roles."""
    import boto3

    return boto3.client("s3", config=client_config())


_factory: dict = {"make": default_client, "generation": 0}


def configure_s3(factory=None) -> None:
    """Make every S3 client with ``factory()`` (a callable returning a boto3 S3 client) from
    now on, in every thread; ``None`` restores boto3's default chain. Airflow's edge uses it to
    hand over an Airflow connection; the CLI never calls it."""
    _factory["make"] = factory or default_client
    _factory["generation"] += 1


def s3_client():
    """A boto3 S3 client per thread (clients are not safe to share across fork/threads)."""
    key = (os.getpid(), _factory["generation"])
    cached = getattr(_local, "client", None)
    if cached is None or cached[0] != key:
        client = _factory["make"]()
        _local.client = (key, client)
        return client
    return cached[1]


def join(base: str, *parts: str) -> str:
    """Join URI parts with single slashes."""
    out = base.rstrip("/")
    for p in parts:
        p = p.strip("/")
        if p:
            out = f"{out}/{p}"
    return out


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` → ``("bucket", "a/b")``."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"not an S3 URI: {uri!r} (expected s3://bucket/prefix)")
    return parsed.netloc, parsed.path.lstrip("/")


def local_path(uri: str) -> Path:
    if uri.startswith("file://"):
        return Path(urlparse(uri).path)
    if "://" in uri:
        raise ValueError(f"unsupported URI scheme in {uri!r}: use s3://bucket/prefix or a path")
    return Path(uri)


def list_objects(prefix_uri: str) -> Iterator[ObjectInfo]:
    """Every object under a prefix (paginated; keys relative to the prefix, sorted)."""
    if is_s3(prefix_uri):
        bucket, prefix = split_s3(prefix_uri)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        paginator = s3_client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                yield ObjectInfo(obj["Key"][len(prefix):], obj["Size"], obj["ETag"].strip('"'))
        return
    root = local_path(prefix_uri)
    if not root.exists():
        return
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        st = path.stat()
        yield ObjectInfo(path.relative_to(root).as_posix(), st.st_size,
                         f"{int(st.st_mtime_ns)}-{st.st_size}")


TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                             "RequestTimeTooSkewed", "InternalError", "ServiceUnavailable",
                             "503", "500", "502", "504"})
TRANSIENT_TYPES = frozenset({"ResponseStreamingError", "IncompleteReadError", "ReadTimeoutError",
                             "ConnectTimeoutError", "EndpointConnectionError",
                             "ConnectionClosedError", "ProtocolError", "IncompleteRead"})
READ_ATTEMPTS = 5  # a body that breaks mid-read is fetched again (botocore retries only calls)


def is_transient(exc: BaseException) -> bool:
    """A network or server condition that a retry can fix — never a fact about the object."""
    if type(exc).__name__ in TRANSIENT_TYPES:
        return True
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return status >= 500 or str(response.get("Error", {}).get("Code")) in TRANSIENT_CODES
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    return isinstance(exc, (ConnectionError, TimeoutError))


def _retrying(read, what: str):
    """``read()``, again with back-off while it fails transiently (a broken body mid-read)."""
    import time

    for attempt in range(READ_ATTEMPTS):
        try:
            return read()
        except Exception as exc:
            if attempt == READ_ATTEMPTS - 1 or not is_transient(exc):
                raise
            time.sleep(min(0.2 * 2 ** attempt, 5.0))
    raise AssertionError(f"unreachable: {what}")


def get_bytes(uri: str) -> bytes:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return _retrying(lambda: s3_client().get_object(Bucket=bucket, Key=key)["Body"].read(),
                         uri)
    return local_path(uri).read_bytes()


def put_bytes(uri: str, data: bytes, content_type: str = "application/octet-stream") -> None:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        s3_client().put_object(Bucket=bucket, Key=key, Body=data, ContentType=content_type)
        return
    path = local_path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_bytes(data)
    tmp.replace(path)


def download(uri: str, dest: str | os.PathLike) -> None:
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    if is_s3(uri):
        bucket, key = split_s3(uri)
        s3_client().download_file(bucket, key, str(dest))
    else:
        shutil.copyfile(local_path(uri), dest)


def upload(src: str | os.PathLike, uri: str) -> None:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        s3_client().upload_file(str(src), bucket, key)
    else:
        path = local_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".partial")
        shutil.copyfile(src, tmp)
        tmp.replace(path)


def exists(uri: str) -> bool:
    if is_s3(uri):
        from botocore.exceptions import ClientError

        bucket, key = split_s3(uri)
        try:
            s3_client().head_object(Bucket=bucket, Key=key)
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
    return local_path(uri).exists()


def delete_prefix(prefix_uri: str) -> int:
    """Delete every object under a prefix; returns how many were deleted."""
    if is_s3(prefix_uri):
        bucket, prefix = split_s3(prefix_uri)
        keys = [join(prefix, o.key) for o in list_objects(prefix_uri)]
        for i in range(0, len(keys), 1000):
            s3_client().delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]}
            )
        return len(keys)
    root = local_path(prefix_uri)
    n = sum(1 for p in root.rglob("*") if p.is_file()) if root.exists() else 0
    shutil.rmtree(root, ignore_errors=True)
    return n


def ensure_bucket(uri: str) -> None:
    """Create the bucket of an S3 URI if it does not exist (dev servers start empty)."""
    if not is_s3(uri):
        return
    from botocore.exceptions import ClientError

    bucket, _ = split_s3(uri)
    client = s3_client()
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError:
        client.create_bucket(Bucket=bucket)


def read_json(uri: str):
    import json

    return json.loads(get_bytes(uri).decode("utf-8"))


def write_json(uri: str, obj) -> None:
    import json

    put_bytes(uri, (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
              .encode("utf-8"), "application/json")


def iter_jsonl(uri: str) -> Iterator[dict]:
    """The rows of a JSON-lines object one by one, without holding the whole text."""
    import json

    if is_s3(uri):
        bucket, key = split_s3(uri)
        body = s3_client().get_object(Bucket=bucket, Key=key)["Body"]
        lines = body.iter_lines(chunk_size=1 << 20)
    else:
        lines = open(local_path(uri), "rb")  # noqa: SIM115 (closed when exhausted below)
    try:
        for line in lines:
            if line.strip():
                yield json.loads(line)
    finally:
        if hasattr(lines, "close"):
            lines.close()


def read_jsonl(uri: str) -> list[dict]:
    import json

    return [json.loads(line) for line in get_bytes(uri).decode("utf-8").splitlines() if line]


def write_jsonl(uri: str, rows) -> None:
    import json

    put_bytes(uri, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                           for r in rows).encode("utf-8"), "application/x-ndjson")


def copy(src_uri: str, dst_uri: str) -> None:
    """Server-side copy within S3 (multipart for large objects); otherwise via a temp file."""
    if is_s3(src_uri) and is_s3(dst_uri):
        sb, sk = split_s3(src_uri)
        db, dk = split_s3(dst_uri)
        s3_client().copy({"Bucket": sb, "Key": sk}, db, dk)
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        download(src_uri, Path(tmp) / "obj")
        upload(Path(tmp) / "obj", dst_uri)


def get_range(uri: str, start: int, length: int) -> bytes:
    """``length`` bytes from byte ``start`` (fewer at the end of the object): one ranged GET
    on S3, so checking a sample of records never downloads a whole ``.rec``."""
    if length <= 0:
        return b""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return _retrying(lambda: s3_client().get_object(
            Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")["Body"].read(),
            uri)
    with open(local_path(uri), "rb") as f:
        f.seek(start)
        return f.read(length)


def _get_or_error(uri: str) -> bytes | Exception:
    try:
        return get_bytes(uri)
    except Exception as exc:  # handed to the caller, who decides per object
        return exc


def prefetch(uris: Iterable[str], threads: int = 8, ahead: int | None = None
             ) -> Iterator[bytes | Exception]:
    """Each object's bytes (or the exception fetching it raised), in the order given.

    GETs are I/O-bound, so ``threads`` run in parallel, but never more than ``ahead``
    (default ``4 * threads``) objects are in memory: a shard of any size streams through
    with flat memory, and the consumer sees a deterministic order. The one prefetch every
    stage uses; ``quarantine.fetch_reason`` turns an exception into the object's reason.
    """
    ahead = max(1, ahead or 4 * threads)
    window: collections.deque = collections.deque()
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for uri in uris:
            window.append(pool.submit(_get_or_error, uri))
            if len(window) >= ahead:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def browser_url(uri: str, expires_s: int = 7 * 24 * 3600) -> str:
    """A link a browser can open: a presigned HTTPS URL for an S3 object (valid
    ``expires_s``, 7 days at most on AWS), ``file://`` for a local path."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return s3_client().generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s)
    return local_path(uri).resolve().as_uri()


def explain(exc: BaseException) -> str | None:
    """A message naming the object and the fix for the S3 errors people hit first (no
    credentials, an endpoint that does not answer, a bucket that does not exist, access
    denied); None for anything else."""
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return ("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
                "AWS_PROFILE); for the local dev server, `recforge dev-s3 start` prints the "
                "variables to export")
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError"):
        endpoint = getattr(exc, "kwargs", {}).get("endpoint_url", "the S3 endpoint")
        return (f"cannot reach {endpoint}: is the server running, and is AWS_ENDPOINT_URL "
                f"(now {os.environ.get('AWS_ENDPOINT_URL') or 'unset: AWS'}) right? "
                "`recforge dev-s3 start` starts the local one")
    error = getattr(exc, "response", None)
    if isinstance(error, dict):
        info = error.get("Error", {})
        code = str(info.get("Code"))
        if code == "NoSuchBucket":
            bucket = info.get("BucketName") or "the bucket"
            return (f"bucket {bucket!r} does not exist at "
                    f"{os.environ.get('AWS_ENDPOINT_URL') or 'AWS'}: create it, or fix the "
                    "URI (the spec's source.uri / publish.uri / staging_uri, or --source / "
                    "--publish)")
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return (f"S3 refused the request ({code}): check the credentials and that they "
                    "may read the source and write the publish and staging prefixes")
    return None
