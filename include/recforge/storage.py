"""Object storage by URI: ``s3://bucket/prefix`` over the real S3 protocol, or a local path.

The S3 endpoint comes from boto3's own configuration (``AWS_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL_S3``, profiles), so the same code talks to the local dev server, MinIO and
AWS. Local paths (``/abs/dir`` or ``file:///abs/dir``) exist for the CLI and for inspecting
published data; the pipeline's staging and publishing normally use S3.
"""

from __future__ import annotations

import collections
import itertools
import os
import shutil
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

_local = threading.local()


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key relative to the listed prefix, size and ETag."""

    key: str
    size: int
    etag: str


def s3_client():
    """A boto3 S3 client per thread (clients are not safe to share across fork/threads)."""
    pid = os.getpid()
    cached = getattr(_local, "client", None)
    if cached is None or cached[0] != pid:
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3",
            config=Config(retries={"max_attempts": 8, "mode": "adaptive"},
                          s3={"addressing_style": "path"}),
        )
        _count_transfers(client)
        _local.client = (pid, client)
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


def json_bytes(obj) -> bytes:
    """The bytes ``write_json`` writes for ``obj``."""
    import json

    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def write_json(uri: str, obj) -> None:
    put_bytes(uri, json_bytes(obj), "application/json")


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
    """An object's bytes, streamed in chunks of at most ``size``."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        body = s3_client().get_object(Bucket=bucket, Key=key)["Body"]
        try:
            yield from body.iter_chunks(size)
        finally:
            body.close()
        return
    with open(local_path(uri), "rb") as f:
        while chunk := f.read(size):
            yield chunk


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
