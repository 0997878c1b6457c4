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
import contextlib
import functools
import hashlib
import itertools
import os
import shutil
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

_local = threading.local()


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key relative to the listed prefix, size, ETag and (listings
    only) when it was last written, in seconds since the epoch."""

    key: str
    size: int
    etag: str
    modified: float | None = None


RETRY_MODE = "adaptive"  # botocore's: standard retries plus client-side rate limiting
MAX_ATTEMPTS = 8  # per call, botocore's own retries (5xx, throttling, connection errors)
BACKOFF_S = 0.2  # first pause of recforge's retries around what botocore does not retry


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
    return Config(retries={"max_attempts": attempts, "mode": mode},
                  s3={"addressing_style": "path"})


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


def s3_client():
    """A boto3 S3 client per thread (clients are not safe to share across fork/threads),
    made again when the factory, or the endpoint, credentials or retry settings in the
    environment change."""
    key = (_factory["generation"], *_env_key(), retry_settings())
    cached = getattr(_local, "client", None)
    if cached is None or cached[0] != key:
        client = _factory["make"]()
        _count_transfers(client)
        _local.client = (key, client)
        return client
    return cached[1]


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


def _count_transfers(client) -> None:
    """botocore event hooks: the key rides in the call's context from parameter build to
    after-call; uploads are counted from the request's Content-Length as it is sent."""
    def remember_key(params, context, **_):
        context["recforge_key"] = params.get("Key", "")

    def got(parsed, context, **_):
        n = int(parsed.get("ContentLength") or 0) if isinstance(parsed, dict) else 0
        suffix = Path(context.get("recforge_key", "")).suffix
        with _TRANSFER_LOCK:
            _TRANSFER.down += n
            _TRANSFER.down_by_suffix[suffix] = _TRANSFER.down_by_suffix.get(suffix, 0) + n

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


def _listing(prefix_uri: str, **kwargs) -> tuple[str, Iterator[dict]]:
    """``(prefix with its trailing slash, pages of list_objects_v2)`` for an S3 prefix; each
    page is retried on its own, so a fault late in a long listing does not start it over."""
    bucket, prefix = split_s3(prefix_uri)
    if prefix and not prefix.endswith("/"):
        prefix += "/"

    def pages() -> Iterator[dict]:
        token: dict = {}
        while True:
            page = _retrying(lambda t=token: s3_client().list_objects_v2(
                Bucket=bucket, Prefix=prefix, **kwargs, **t), prefix_uri)
            yield page
            if not page.get("IsTruncated"):
                return
            token = {"ContinuationToken": page["NextContinuationToken"]}

    return prefix, pages()


def list_objects(prefix_uri: str) -> Iterator[ObjectInfo]:
    """Every object under a prefix (paginated; keys relative to the prefix, sorted)."""
    if is_s3(prefix_uri):
        prefix, pages = _listing(prefix_uri)
        for page in pages:
            for obj in page.get("Contents", []):
                yield ObjectInfo(obj["Key"][len(prefix):], obj["Size"], obj["ETag"].strip('"'),
                                 obj["LastModified"].timestamp())
        return
    root = local_path(prefix_uri)
    if not root.exists():
        return
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        st = path.stat()
        yield ObjectInfo(path.relative_to(root).as_posix(), st.st_size, _local_etag(st),
                         st.st_mtime)


TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                             "RequestTimeTooSkewed", "InternalError", "ServiceUnavailable",
                             "503", "500", "502", "504"})
TRANSIENT_TYPES = frozenset({"ResponseStreamingError", "IncompleteReadError", "ReadTimeoutError",
                             "ConnectTimeoutError", "EndpointConnectionError",
                             "ConnectionClosedError", "ProtocolError", "IncompleteRead"})
READ_ATTEMPTS = 5  # recforge's attempts around each call, on top of botocore's (see _retrying)


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


# Not reaching the server at all: botocore has already spent its attempts on these, and
# trying again here would only delay the clear error of an endpoint that is down.
UNREACHABLE_TYPES = frozenset({"EndpointConnectionError", "ConnectTimeoutError",
                               "ConnectionClosedError"})


def _retrying(call, what: str):
    """``call()``, again with jittered exponential back-off while it fails transiently.

    botocore retries a call's request, but not a body that breaks mid-read (a streamed
    GET), and it stops retrying when its retry quota runs dry under a burst of 5xx; this
    outer loop covers both. Every call it wraps is idempotent (GET, HEAD, LIST, a PUT or
    COPY of the same bytes to the same key, DELETE)."""
    import random
    import time

    backoff = retry_settings()[2]
    for attempt in range(READ_ATTEMPTS):
        try:
            return call()
        except Exception as exc:
            if (attempt == READ_ATTEMPTS - 1 or not is_transient(exc)
                    or type(exc).__name__ in UNREACHABLE_TYPES):
                raise
            time.sleep(min(backoff * 2 ** attempt, 5.0) * (0.5 + random.random() / 2))
    raise AssertionError(f"unreachable: {what}")


def get_bytes(uri: str) -> bytes:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return _retrying(lambda: s3_client().get_object(Bucket=bucket, Key=key)["Body"].read(),
                         uri)
    return local_path(uri).read_bytes()


class PreconditionFailed(Exception):
    """A conditional write lost: the object already exists (``if_none_match``) or is no
    longer the version it was read as (``if_match``)."""


def _is_precondition(exc: BaseException) -> bool:
    response = getattr(exc, "response", None)
    code = str(response.get("Error", {}).get("Code")) if isinstance(response, dict) else ""
    # 409 ConditionalRequestConflict: AWS saw a concurrent conditional write to the key
    return code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


def put_bytes(uri: str, data: bytes, content_type: str = "application/octet-stream", *,
              if_none_match: bool = False, if_match: str | None = None) -> str:
    """Write ``data``; returns its SHA-256 (hex). ``if_none_match``: only if the object does
    not exist; ``if_match``: only if its ETag is still this one — otherwise
    :class:`PreconditionFailed`. On S3 both are decided by the server, atomically; on a local
    path ``if_none_match`` is atomic (a hard link), ``if_match`` is a check, then a rename."""
    digest = hashlib.sha256(data).hexdigest()
    if is_s3(uri):
        bucket, key = split_s3(uri)
        cond = {"IfNoneMatch": "*"} if if_none_match else {}
        if if_match:
            cond["IfMatch"] = if_match
        try:
            resp = _retrying(lambda: s3_client().put_object(
                Bucket=bucket, Key=key, Body=data, ContentType=content_type, **cond), uri)
        except Exception as exc:
            if cond and _is_precondition(exc):
                raise PreconditionFailed(f"{uri}: {exc}") from exc
            raise
        _record(uri, len(data), digest, resp.get("ETag", "").strip('"'))
        return digest
    path = local_path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    tmp.write_bytes(data)
    try:
        if if_none_match:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise PreconditionFailed(f"{uri} exists") from None
        else:
            current = head(uri)
            if if_match and (current is None or current.etag != if_match):
                raise PreconditionFailed(f"{uri} changed (ETag is not {if_match})")
            tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    if _recorders:
        _record(uri, len(data), digest, head(uri).etag)
    return digest


def download(uri: str, dest: str | os.PathLike) -> None:
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    if is_s3(uri):
        bucket, key = split_s3(uri)
        _retrying(lambda: s3_client().download_file(bucket, key, str(dest)), uri)
    else:
        shutil.copyfile(local_path(uri), dest)


def upload(src: str | os.PathLike, uri: str) -> str:
    """Upload a local file; returns its SHA-256 (hex), hashed from the file it sent."""
    digest = sha256_file(src)
    if is_s3(uri):
        bucket, key = split_s3(uri)
        _retrying(lambda: s3_client().upload_file(str(src), bucket, key), uri)
    else:
        path = local_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".partial")
        shutil.copyfile(src, tmp)
        tmp.replace(path)
    if _recorders:
        info = head(uri)
        _record(uri, info.size, digest, info.etag)
    return digest


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# ---- what a stage wrote: sizes, SHA-256s and ETags, recorded where the bytes are written
_recorders: list[tuple[str, dict]] = []
_recorders_lock = threading.Lock()


@contextlib.contextmanager
def record_writes(prefix_uri: str) -> Iterator[dict[str, dict]]:
    """Collect every object this process writes under ``prefix_uri`` (``put_bytes`` and
    ``upload``, from any thread) while the block runs: ``{key relative to the prefix:
    {"size", "sha256", "etag"}}``. The digest is of the bytes sent, so nothing is read back."""
    written: dict[str, dict] = {}
    entry = (prefix_uri.rstrip("/") + "/", written)
    with _recorders_lock:
        _recorders.append(entry)
    try:
        yield written
    finally:
        with _recorders_lock:
            _recorders.remove(entry)


def _record(uri: str, size: int, sha256: str, etag: str) -> None:
    with _recorders_lock:
        for prefix, written in _recorders:
            if uri.startswith(prefix):
                written[uri[len(prefix):]] = {"size": size, "sha256": sha256, "etag": etag}


def _not_found(exc: BaseException) -> bool:
    response = getattr(exc, "response", None)
    return isinstance(response, dict) and response.get("Error", {}).get("Code") in (
        "404", "NoSuchKey", "NotFound")


def _s3_or_none(call: str, uri: str) -> dict | None:
    """``s3_client().<call>(Bucket=, Key=)``'s response, or None if there is no object."""
    from botocore.exceptions import ClientError

    bucket, key = split_s3(uri)
    try:
        return _retrying(lambda: getattr(s3_client(), call)(Bucket=bucket, Key=key), uri)
    except ClientError as exc:
        if _not_found(exc):
            return None
        raise


def _local_etag(st: os.stat_result) -> str:
    return f"{int(st.st_mtime_ns)}-{st.st_size}"


def head(uri: str) -> ObjectInfo | None:
    """One object's size and ETag (key: the URI's last part), or None if it does not exist."""
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    if is_s3(uri):
        r = _s3_or_none("head_object", uri)
        return None if r is None else ObjectInfo(name, r["ContentLength"],
                                                 r["ETag"].strip('"'))
    path = local_path(uri)
    if not path.is_file():
        return None
    st = path.stat()
    return ObjectInfo(name, st.st_size, _local_etag(st))


def get_with_etag(uri: str) -> tuple[bytes, str] | None:
    """An object's bytes and the ETag of exactly those bytes (for a compare-and-swap with
    ``put_bytes(if_match=...)``), or None if it does not exist."""
    if is_s3(uri):
        r = _s3_or_none("get_object", uri)
        return None if r is None else (r["Body"].read(), r["ETag"].strip('"'))
    info = head(uri)
    return None if info is None else (local_path(uri).read_bytes(), info.etag)


def sha256_range(uri: str, start: int = 0, length: int | None = None,
                 chunk: int = 1 << 20) -> tuple[int, str]:
    """``(bytes read, SHA-256 hex)`` of the object (or of ``length`` bytes from ``start``),
    streamed: one (ranged) GET on S3, never the whole object in memory."""
    if length == 0:
        return 0, hashlib.sha256().hexdigest()

    def read() -> tuple[int, str]:
        h, n = hashlib.sha256(), 0
        if is_s3(uri):
            bucket, key = split_s3(uri)
            extra = {} if length is None and start == 0 else {
                "Range": f"bytes={start}-" + ("" if length is None else f"{start + length - 1}")}
            body = s3_client().get_object(Bucket=bucket, Key=key, **extra)["Body"]
            for block in body.iter_chunks(chunk):
                h.update(block)
                n += len(block)
            return n, h.hexdigest()
        with open(local_path(uri), "rb") as f:
            f.seek(start)
            left = length
            while left is None or left > 0:
                block = f.read(chunk if left is None else min(chunk, left))
                if not block:
                    break
                h.update(block)
                n += len(block)
                left = None if left is None else left - len(block)
        return n, h.hexdigest()

    return _retrying(read, uri)


def exists(uri: str) -> bool:
    if is_s3(uri):
        return head(uri) is not None
    return local_path(uri).exists()


def delete(uri: str) -> None:
    """Delete one object (nothing happens if it does not exist)."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        s3_client().delete_object(Bucket=bucket, Key=key)
    else:
        local_path(uri).unlink(missing_ok=True)


def delete_many(uris: Iterable[str]) -> int:
    """Delete objects (absent ones are no error): on S3 one ``DeleteObjects`` request per
    1,000 keys of a bucket, not one request each; returns how many were named."""
    by_bucket: dict[str, list[str]] = {}
    n = 0
    for uri in uris:
        n += 1
        if is_s3(uri):
            bucket, key = split_s3(uri)
            by_bucket.setdefault(bucket, []).append(key)
        else:
            local_path(uri).unlink(missing_ok=True)
    for bucket, keys in by_bucket.items():
        refused = _delete_keys(bucket, keys, f"s3://{bucket}")
        if refused:  # DeleteObjects answers 200 and lists the keys it could not delete
            e = refused[0]
            raise OSError(f"could not delete {len(refused)} of {len(keys)} objects in "
                          f"s3://{bucket}, first {e.get('Key')!r}: {e.get('Code')} "
                          f"{e.get('Message')}")
    return n


def _delete_keys(bucket: str, keys: list[str], uri: str) -> list[dict]:
    """Batches of 1,000; returns the per-key errors S3 reported."""
    refused: list[dict] = []
    for i in range(0, len(keys), 1000):
        batch = {"Objects": [{"Key": k} for k in keys[i:i + 1000]]}
        refused += _retrying(lambda b=batch: s3_client().delete_objects(
            Bucket=bucket, Delete=b), uri).get("Errors", [])
    return refused


def delete_prefix(prefix_uri: str) -> int:
    """Delete every object under a prefix; returns how many were deleted."""
    if is_s3(prefix_uri):  # keys as listed, never re-parsed from a URI
        bucket, prefix = split_s3(prefix_uri)
        keys = [join(prefix, o.key) for o in list_objects(prefix_uri)]
        _delete_keys(bucket, keys, prefix_uri)
        return len(keys)
    root = local_path(prefix_uri)
    n = sum(1 for p in root.rglob("*") if p.is_file()) if root.exists() else 0
    shutil.rmtree(root, ignore_errors=True)
    return n


def list_dirs(prefix_uri: str) -> list[str]:
    """The immediate sub-folders of a prefix (names, sorted): one delimiter listing on S3."""
    if is_s3(prefix_uri):
        prefix, pages = _listing(prefix_uri, Delimiter="/")
        return sorted(p["Prefix"][len(prefix):].rstrip("/")
                      for page in pages for p in page.get("CommonPrefixes", []))
    root = local_path(prefix_uri)
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def ensure_bucket(uri: str) -> None:
    """Create the bucket of an S3 URI if it does not exist (dev servers start empty)."""
    if not is_s3(uri):
        return
    from botocore.exceptions import ClientError

    bucket, _ = split_s3(uri)
    try:
        _retrying(lambda: s3_client().head_bucket(Bucket=bucket), uri)
    except ClientError as exc:
        if is_transient(exc):
            raise
        _retrying(lambda: s3_client().create_bucket(Bucket=bucket), uri)


def read_json(uri: str):
    import json

    return json.loads(get_bytes(uri).decode("utf-8"))


def json_bytes(obj) -> bytes:
    """The bytes ``write_json`` writes for ``obj``."""
    import json

    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def write_json(uri: str, obj, **conditions) -> str:
    """Write ``obj`` as JSON; returns its SHA-256. ``conditions``: see :func:`put_bytes`."""
    return put_bytes(uri, json_bytes(obj), "application/json", **conditions)


def iter_lines(uri: str, digest=None) -> Iterator[bytes]:
    """The lines of an object (split on ``\\n`` only, without it), streamed; ``digest`` (a
    ``hashlib`` object) sees every byte on the way, so one read both parses and checksums."""
    pending = b""
    for chunk in iter_chunks(uri):
        if digest is not None:
            digest.update(chunk)
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        yield from lines
    if pending:
        yield pending


def iter_jsonl(uri: str) -> Iterator[dict]:
    """The rows of a JSON-lines object one by one, without holding the whole text."""
    import json

    for line in iter_lines(uri):
        if line.strip():
            yield json.loads(line)


class HashingWriter:
    """A local binary file that keeps its size and SHA-256 as it is written (a context
    manager); ``digest()`` is ``file_digest``'s answer without reading the file again."""

    def __init__(self, path: str | os.PathLike):
        import hashlib

        self._f = open(path, "wb")  # noqa: SIM115 (closed by close/__exit__)
        self._h = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._f.write(data)
        self._h.update(data)
        self.size += len(data)

    def digest(self) -> dict:
        return {"size": self.size, "sha256": self._h.hexdigest()}

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> HashingWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_jsonl(uri: str) -> list[dict]:
    import json

    return [json.loads(line) for line in get_bytes(uri).decode("utf-8").splitlines() if line]


def write_jsonl(uri: str, rows) -> str:
    import json

    return put_bytes(uri, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                           for r in rows).encode("utf-8"), "application/x-ndjson")


def copy(src_uri: str, dst_uri: str) -> None:
    """Server-side copy within S3 (multipart for large objects); otherwise via a temp file."""
    if is_s3(src_uri) and is_s3(dst_uri):
        sb, sk = split_s3(src_uri)
        db, dk = split_s3(dst_uri)
        _retrying(lambda: s3_client().copy({"Bucket": sb, "Key": sk}, db, dk), dst_uri)
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        download(src_uri, Path(tmp) / "obj")
        upload(Path(tmp) / "obj", dst_uri)


MAX_COPY_OBJECT = 5 * 1024 ** 3  # S3's limit for one CopyObject (and one PUT)
COPY_PART_THREADS = 8  # parts of one multipart object copied at once


def copy_exact(src_uri: str, dst_uri: str) -> ObjectInfo:
    """Server-side copy whose ETag is the source's, so comparing ETags checks the copy.

    A single-part object (at most 5 GB, S3's limit for one PUT) is one CopyObject, which
    keeps its MD5 ETag; a multipart one is copied with UploadPartCopy over the source's own
    part ranges (``HEAD ?partNumber=n``), which reproduces its ``<md5 of md5s>-<n>`` ETag;
    ``COPY_PART_THREADS`` parts at a time, since on S3 each part copy takes time in
    proportion to its bytes. No byte passes through this process. Returns the destination's
    size and ETag. Local paths: a plain copy (their ETags are mtimes; check those by
    hashing)."""
    if not (is_s3(src_uri) and is_s3(dst_uri)):
        copy(src_uri, dst_uri)
        return head(dst_uri)
    client = s3_client()
    (sb, sk), (db, dk) = split_s3(src_uri), split_s3(dst_uri)
    src = client.head_object(Bucket=sb, Key=sk)
    etag = src["ETag"].strip('"')
    n_parts = int(etag.rsplit("-", 1)[1]) if "-" in etag else 1
    if n_parts == 1 and src["ContentLength"] <= MAX_COPY_OBJECT:
        client.copy_object(CopySource={"Bucket": sb, "Key": sk}, Bucket=db, Key=dk,
                           CopySourceIfMatch=src["ETag"])
        return head(dst_uri)

    def part_size(n: int) -> int:
        return s3_client().head_object(Bucket=sb, Key=sk, PartNumber=n)["ContentLength"]

    def copy_part(n_range: tuple[int, int, int]) -> dict:
        n, start, size = n_range
        r = s3_client().upload_part_copy(
            Bucket=db, Key=dk, UploadId=upload_id, PartNumber=n,
            CopySource={"Bucket": sb, "Key": sk}, CopySourceIfMatch=src["ETag"],
            CopySourceRange=f"bytes={start}-{start + size - 1}")
        return {"PartNumber": n, "ETag": r["CopyPartResult"]["ETag"]}

    upload_id = client.create_multipart_upload(
        Bucket=db, Key=dk, ContentType=src.get("ContentType", "application/octet-stream")
    )["UploadId"]
    try:  # the parts' HEADs, then their copies, COPY_PART_THREADS at a time: a split of
        with ThreadPoolExecutor(COPY_PART_THREADS) as pool:  # 1,000 parts is 2,000 requests
            sizes = list(pool.map(part_size, range(1, n_parts + 1)))
            if sum(sizes) != src["ContentLength"]:
                raise OSError(f"{src_uri}: its {n_parts} parts add up to {sum(sizes)} bytes, "
                              f"the object has {src['ContentLength']}; copy it again")
            starts = [0, *itertools.accumulate(sizes)][:-1]
            parts = list(pool.map(copy_part, zip(range(1, n_parts + 1), starts, sizes,
                                                  strict=True)))
        client.complete_multipart_upload(Bucket=db, Key=dk, UploadId=upload_id,
                                         MultipartUpload={"Parts": parts})
    except BaseException:
        client.abort_multipart_upload(Bucket=db, Key=dk, UploadId=upload_id)
        raise
    return head(dst_uri)


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


COALESCE_GAP = 1 << 20  # bytes between two wanted ranges worth reading rather than a GET
COALESCE_MAX = 16 << 20  # bytes one coalesced read may span


def coalesce(spans: list[tuple[int, int]], max_gap: int = COALESCE_GAP,
             max_read: int = COALESCE_MAX) -> list[tuple[int, int, list[int]]]:
    """Group ``(start, length)`` spans into reads: ``(start, length, [span indices])``, in
    byte order. A span joins the read before it when it starts within ``max_gap`` bytes of
    that read's end and the read stays within ``max_read`` bytes (a longer span is a read of
    its own). Slicing each read gives exactly the bytes of its spans: a sample of 1,000
    records of one ``.rec`` costs a few GETs instead of 1,000."""
    reads: list[list] = []  # [start, end, members]
    for i in sorted(range(len(spans)), key=lambda i: spans[i]):
        start, length = spans[i]
        end = start + max(length, 0)
        last = reads[-1] if reads else None
        if last is not None and start <= last[1] + max_gap \
                and max(end, last[1]) - last[0] <= max_read:
            last[1] = max(end, last[1])
            last[2].append(i)
        else:
            reads.append([start, end, [i]])
    return [(start, end - start, members) for start, end, members in reads]


def plan_reads(spans: list[tuple[str, int, int]]) -> list[tuple[str, int, int, list[int]]]:
    """``(uri, start, length)`` spans over any objects → coalesced reads ``(uri, start,
    length, [span indices])``: :func:`coalesce` per object, objects in first-seen order."""
    by_uri: dict[str, list[int]] = {}
    for i, (uri, _, _) in enumerate(spans):
        by_uri.setdefault(uri, []).append(i)
    return [(uri, start, length, [mine[m] for m in members])
            for uri, mine in by_uri.items()
            for start, length, members in coalesce([spans[i][1:] for i in mine])]


def slice_read(data: bytes, read_start: int, start: int, length: int) -> bytes:
    """The bytes of span ``(start, length)`` out of a coalesced read that began at
    ``read_start`` (fewer, or none, where the object ended first: as ``get_range``)."""
    return data[start - read_start:start - read_start + max(length, 0)]


def file_digest(path: str | os.PathLike) -> dict:
    """``{"size": bytes, "sha256": hex}`` of a local file, read in 1 MiB chunks."""
    import hashlib

    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": h.hexdigest()}


def size_of(uri: str) -> int:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return int(s3_client().head_object(Bucket=bucket, Key=key)["ContentLength"])
    return local_path(uri).stat().st_size


def iter_chunks(uri: str, size: int = 1 << 20) -> Iterator[bytes]:
    """An object's bytes, streamed in chunks of at most ``size``. On S3 a body that breaks
    mid-read is resumed with a ranged GET from the first byte not yet received
    (``READ_ATTEMPTS`` times per object), so a network fault never truncates a stream."""
    if not is_s3(uri):
        with open(local_path(uri), "rb") as f:
            while chunk := f.read(size):
                yield chunk
        return
    bucket, key = split_s3(uri)
    pos, failures = 0, 0
    while True:
        extra = {"Range": f"bytes={pos}-"} if pos else {}
        body = _retrying(lambda e=extra: s3_client().get_object(
            Bucket=bucket, Key=key, **e)["Body"], uri)
        try:
            for data in body.iter_chunks(size):
                pos += len(data)
                yield data
            return
        except Exception as exc:
            failures += 1
            if failures >= READ_ATTEMPTS or not is_transient(exc):
                raise
        finally:
            body.close()


MIN_PART = 5 * 1024**2  # S3: every part of a multipart upload but the last is at least this
MAX_PART = 5 * 1024**3  # S3: the largest part, and the largest range one UploadPartCopy copies
MAX_PARTS = 10_000  # S3: parts in one multipart upload
COMPOSE_THREADS = 8


def plan_compose(sizes: list[int]) -> list[tuple[str, int, int, int]]:
    """The pieces of a multipart upload that concatenates parts of these sizes, in order:
    ``("copy", part, start, end)`` is a byte range of one part that S3 copies server-side
    (``UploadPartCopy``); ``("upload", first, last, nbytes)`` is parts ``first..last`` that
    are too small to be a piece alone, downloaded, concatenated and sent as one piece.

    Only the last piece may be under 5 MiB, so the last part is always copied, and a run of
    small parts before it takes in the parts after it until it holds 5 MiB: only small parts
    (and at most the one part that completes a run) move through this process. Empty parts
    are left out; parts over 5 GiB are copied in equal ranges."""
    pieces: list[tuple[str, int, int, int]] = []
    first, pending = None, 0
    last = max((i for i, size in enumerate(sizes) if size), default=-1)
    for i, size in enumerate(sizes):
        if not size:
            continue
        if first is not None or (size < MIN_PART and i != last):  # the last may be small
            first = i if first is None else first
            pending += size
            if pending >= MIN_PART:
                pieces.append(("upload", first, i, pending))
                first, pending = None, 0
            continue
        n = -(-size // MAX_PART)
        pieces += [("copy", i, size * j // n, size * (j + 1) // n) for j in range(n)]
    if first is not None:
        pieces.append(("upload", first, len(sizes) - 1, pending))
    if len(pieces) > MAX_PARTS:
        raise ValueError(f"composing {len(sizes)} parts needs {len(pieces)} multipart pieces; "
                         f"S3 allows at most {MAX_PARTS}: use fewer, larger parts")
    return pieces


def compose(parts: list[str], dest: str, sizes: list[int] | None = None) -> list[int]:
    """Write ``dest`` as the concatenation of ``parts`` (URIs, in order); returns each part's
    byte offset in ``dest``. ``sizes`` (the parts' sizes, when known) saves a HEAD each.

    Between S3 objects this is a multipart upload of server-side copies
    (``plan_compose``): the bytes of parts of 5 MiB or more never pass through this
    process. Anywhere else (a local ``dest`` or local parts) the bytes are concatenated."""
    import logging
    import tempfile

    from recforge.progress import Progress

    sizes = list(sizes) if sizes is not None else [size_of(p) for p in parts]
    bases = [0, *itertools.accumulate(sizes)][:len(sizes)]
    log = logging.getLogger(__name__)

    def concatenated(chosen: list[str], out) -> None:
        for uri in chosen:
            for chunk in iter_chunks(uri):
                out.write(chunk)

    pieces = plan_compose(sizes) if is_s3(dest) and all(map(is_s3, parts)) else []
    if len(pieces) == 1 and pieces[0][0] == "copy" and sizes[pieces[0][1]] == sum(sizes):
        copy(parts[pieces[0][1]], dest)
        return bases
    if not is_s3(dest):
        path = local_path(dest)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".partial")
        with open(tmp, "wb") as out:
            concatenated(parts, out)
        tmp.replace(path)
        return bases
    if len(pieces) <= 1:
        with tempfile.TemporaryDirectory(prefix="recforge-compose-") as tmp:
            joined = Path(tmp) / "joined"
            with open(joined, "wb") as out:
                concatenated(parts, out)
            upload(joined, dest)
        return bases

    bucket, key = split_s3(dest)
    progress = Progress(f"compose {dest}", len(pieces), log, unit="parts")

    def send(number: int) -> dict:
        kind, a, b, c = pieces[number - 1]
        client = s3_client()
        common = {"Bucket": bucket, "Key": key, "UploadId": upload_id, "PartNumber": number}
        if kind == "copy":
            src_bucket, src_key = split_s3(parts[a])
            got = client.upload_part_copy(**common, CopySource={"Bucket": src_bucket,
                                                                 "Key": src_key},
                                          CopySourceRange=f"bytes={b}-{c - 1}")
            etag = got["CopyPartResult"]["ETag"]
        else:
            with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
                concatenated(parts[a:b + 1], spool)
                spool.seek(0)
                etag = client.upload_part(**common, Body=spool)["ETag"]
        return {"PartNumber": number, "ETag": etag}

    client = s3_client()
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    try:
        done = []
        with ThreadPoolExecutor(COMPOSE_THREADS) as pool:
            for part in pool.map(send, range(1, len(pieces) + 1)):
                done.append(part)
                progress.update()
        client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                         MultipartUpload={"Parts": done})
    except BaseException:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        raise
    log.info("compose %s: %d parts, %d bytes, %d pieces (%d copied server-side)", dest,
             len(parts), sum(sizes), len(pieces), sum(p[0] == "copy" for p in pieces))
    return bases


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
        parsed = urlparse(endpoint)  # the server, not the request's path and query
        endpoint = f"{parsed.scheme}://{parsed.netloc}" if parsed.netloc else endpoint
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
