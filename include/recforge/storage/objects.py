"""Single objects and listings by URI, on S3 (every request through ``retry``) or a local
path.

A local write goes to :func:`partial_path` first and is renamed when whole, and a local
listing skips those files and any removed since the walk: a reader of a folder sees whole
objects only, as on S3, even beside a writer."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from recforge.storage import checksums, client, http_get, listing, multipart, recording, retry
from recforge.storage.errors import (
    TRANSIENT_CODES,
    DeleteRefused,
    PreconditionFailed,
    is_not_found,
    is_precondition,
    is_transient,
)
from recforge.storage.uri import is_s3, join, local_path, split_s3

# partial_path's names, matched exactly: a file of one's own called ``x.partial`` is listed
_PARTIAL = re.compile(r".+\.[0-9]+\.[0-9]+\.partial", re.S)


def partial_path(path: str | os.PathLike) -> Path:
    """Where a local write to ``path`` puts its bytes before the rename: beside it (same
    file system, so the rename is atomic), named for this process and thread so two writers
    never share one."""
    path = Path(path)
    return path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.partial")


def _local_files(root: Path) -> list[Path]:
    """The files under ``root`` (sorted), writes in progress left out; ``os.walk`` passes
    over a folder removed mid-walk."""
    return sorted(Path(folder, name) for folder, _, files in os.walk(root)
                  for name in files if not _PARTIAL.fullmatch(name))


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key relative to the listed prefix, size, ETag, (listings
    only) when it was last written, in seconds since the epoch, and (``head`` only) the
    store's SHA-256 checksum (``checksums``; None where the store keeps none)."""

    key: str
    size: int
    etag: str
    modified: float | None = None
    checksum: str | None = None


def list_objects(prefix_uri: str, threads: int = 1) -> Iterator[ObjectInfo]:
    """Every object under a prefix (keys relative to the prefix, sorted). On S3 paginated,
    each page retried on its own; ``threads`` > 1 lists the prefix's folders that many at a
    time (``listing.s3_rows``: a source of a million images is thousands of pages)."""
    if is_s3(prefix_uri):
        for key, size, etag, modified in listing.s3_rows(prefix_uri, threads):
            yield ObjectInfo(key, size, etag, modified)
        return
    root = local_path(prefix_uri)
    for path in _local_files(root):
        try:
            st = path.stat()
        except FileNotFoundError:  # removed since the walk
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        yield ObjectInfo(path.relative_to(root).as_posix(), st.st_size, _local_etag(st),
                         st.st_mtime)


def list_dirs(prefix_uri: str) -> list[str]:
    """The immediate sub-folders of a prefix (names, sorted): one delimiter listing on S3."""
    if is_s3(prefix_uri):
        prefix, pages = listing.pages(prefix_uri, Delimiter="/")
        return sorted(p["Prefix"][len(prefix):].rstrip("/")
                      for page in pages for p in page.get("CommonPrefixes", []))
    root = local_path(prefix_uri)
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def get_bytes(uri: str) -> bytes:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return retry.retrying(lambda: http_get.get(bucket, key), uri, "get_object",
                              http_get.attempts())
    return local_path(uri).read_bytes()


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
            resp = retry.call("put_object", uri, Bucket=bucket, Key=key, Body=data,
                              ContentType=content_type, **checksums.to_send(digest), **cond)
        except Exception as exc:
            if cond and is_precondition(exc):
                raise PreconditionFailed(f"{uri}: {exc}") from exc
            raise
        recording.record(uri, len(data), digest, resp.get("ETag", "").strip('"'),
                         checksums.of_response(resp))
        return digest
    path = local_path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(path)
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
    if recording.active():
        recording.record(uri, len(data), digest, head(uri).etag)
    return digest


def upload(src: str | os.PathLike, uri: str,
           reusing: Iterable[multipart.Reusable] = (), sha256: str | None = None,
           move: bool = False) -> str:
    """Upload a local file; returns its SHA-256 (hex), hashed from the file it sent, or
    ``sha256`` where the caller hashed it as it wrote it (it goes with a one-request upload
    as the object's checksum, which S3 checks the bytes against). ``reusing``: runs of it
    the store already holds, copied there rather than sent (``multipart.upload_file``; S3
    only). ``move``: the caller is done with ``src``, so a local destination on its file
    system takes the file itself (a rename: atomic, no byte copied) and ``src`` is gone;
    elsewhere ``src`` is copied and left as it was."""
    digest = sha256 or recording.sha256_file(src)
    if is_s3(uri):
        multipart.upload_file(src, uri, sha256=digest, reusing=list(reusing))
    else:
        path = local_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not (move and _renamed(Path(src), path)):
            tmp = partial_path(path)
            try:
                shutil.copyfile(src, tmp)
                tmp.replace(path)
            finally:
                tmp.unlink(missing_ok=True)
    if recording.active():
        info = head(uri)
        recording.record(uri, info.size, digest, info.etag, info.checksum)
    return digest


def _renamed(src: Path, dest: Path) -> bool:
    """``src`` renamed to ``dest`` (replacing it), or False where they are on two file
    systems, which a rename cannot join."""
    try:
        src.replace(dest)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            return False
        raise
    return True


def _unless_missing(request):
    """``request()``'s answer, or None if it found no object."""
    from botocore.exceptions import ClientError

    try:
        return request()
    except ClientError as exc:
        if is_not_found(exc):
            return None
        raise


def _local_etag(st: os.stat_result) -> str:
    return f"{int(st.st_mtime_ns)}-{st.st_size}"


def head(uri: str) -> ObjectInfo | None:
    """One object's size, ETag and store checksum (key: the URI's last part), or None if
    it does not exist."""
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    if is_s3(uri):
        bucket, key = split_s3(uri)
        r = _unless_missing(lambda: retry.call("head_object", uri, Bucket=bucket, Key=key,
                                               ChecksumMode="ENABLED"))
        return None if r is None else ObjectInfo(name, r["ContentLength"],
                                                 r["ETag"].strip('"'), None,
                                                 checksums.of_response(r))
    path = local_path(uri)
    if not path.is_file():
        return None
    st = path.stat()
    return ObjectInfo(name, st.st_size, _local_etag(st))


def get_with_etag(uri: str) -> tuple[bytes, str] | None:
    """An object's bytes and the ETag of exactly those bytes (for a compare-and-swap with
    ``put_bytes(if_match=...)``), or None if it does not exist."""
    if is_s3(uri):
        bucket, key = split_s3(uri)

        def read() -> tuple[bytes, str]:  # the body with its GET: a break mid-read is retried
            r = client.s3_client().get_object(Bucket=bucket, Key=key)
            return r["Body"].read(), r["ETag"].strip('"')

        return _unless_missing(lambda: retry.retrying(read, uri, "get_object"))
    info = head(uri)
    return None if info is None else (local_path(uri).read_bytes(), info.etag)


def exists(uri: str) -> bool:
    if is_s3(uri):
        return head(uri) is not None
    return local_path(uri).exists()


def size_of(uri: str) -> int:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return int(retry.call("head_object", uri, Bucket=bucket, Key=key)["ContentLength"])
    return local_path(uri).stat().st_size


def get_range(uri: str, start: int, length: int, if_match: str | None = None) -> bytes:
    """``length`` bytes from byte ``start`` (fewer at the end of the object): one ranged GET
    on S3, so checking a sample of records never downloads a whole ``.rec``. ``if_match``
    (an ETag, S3 only): only from that version of the object, else S3's 412
    ``PreconditionFailed`` (a read in parts never mixes two versions)."""
    if length <= 0:
        return b""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return retry.retrying(lambda: http_get.get(
            bucket, key, f"bytes={start}-{start + length - 1}", if_match), uri, "get_object",
            http_get.attempts())
    with open(local_path(uri), "rb") as f:
        f.seek(start)
        return f.read(length)


def iter_chunks(uri: str, size: int = 1 << 20) -> Iterator[bytes]:
    """An object's bytes, streamed in chunks of at most ``size``. On S3 a body that breaks
    mid-read is resumed with a ranged GET from the first byte not yet received
    (``retry.READ_ATTEMPTS`` times per object), so a network fault never truncates a stream."""
    if not is_s3(uri):
        with open(local_path(uri), "rb") as f:
            while chunk := f.read(size):
                yield chunk
        return
    bucket, key = split_s3(uri)
    pos, failures = 0, 0
    while True:
        extra = {"Range": f"bytes={pos}-"} if pos else {}
        body = retry.call("get_object", uri, Bucket=bucket, Key=key, **extra)["Body"]
        try:
            for data in body.iter_chunks(size):
                pos += len(data)
                yield data
            return
        except Exception as exc:
            failures += 1
            if failures >= retry.READ_ATTEMPTS or not is_transient(exc):
                raise
        finally:
            body.close()


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
            body = client.s3_client().get_object(Bucket=bucket, Key=key, **extra)["Body"]
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

    return retry.retrying(read, uri, "get_object") if is_s3(uri) else read()


def delete(uri: str) -> None:
    """Delete one object (nothing happens if it does not exist)."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        retry.call("delete_object", uri, Bucket=bucket, Key=key)
    else:
        local_path(uri).unlink(missing_ok=True)


def delete_many(uris: Iterable[str]) -> int:
    """Delete objects (absent ones are no error): on S3 one ``DeleteObjects`` request per
    1,000 keys of a bucket, not one request each; returns how many were named. Keys the
    store refused to delete raise :class:`DeleteRefused` once every other key is deleted."""
    by_bucket: dict[str, list[str]] = {}
    n = 0
    for uri in uris:
        n += 1
        if is_s3(uri):
            bucket, key = split_s3(uri)
            by_bucket.setdefault(bucket, []).append(key)
        else:
            local_path(uri).unlink(missing_ok=True)
    refused: list[dict] = []
    for bucket, keys in by_bucket.items():
        refused += _delete_keys(bucket, keys, f"s3://{bucket}")
    if refused:
        raise DeleteRefused(refused, n, ", ".join(f"s3://{b}" for b in by_bucket))
    return n


class _RefusedForNow(Exception):
    """Keys of a ``DeleteObjects`` answer refused for a transient reason (``SlowDown``,
    ``InternalError`` per key): the retry rule sends them again (``is_transient`` reads the
    code from ``response`` as from any S3 error)."""

    def __init__(self, errors: list[dict]):
        super().__init__(f"{len(errors)} keys refused for now, first {errors[0].get('Key')!r}: "
                         f"{errors[0].get('Code')}")
        self.errors = errors
        self.response = {"Error": {"Code": str(errors[0].get("Code"))}}


def _delete_keys(bucket: str, keys: list[str], uri: str) -> list[dict]:
    """Batches of 1,000; returns the per-key errors S3 reported (``DeleteObjects`` answers
    200 and lists the keys it did not delete) that retrying did not cure."""
    refused: list[dict] = []
    for i in range(0, len(keys), 1000):
        refused += _delete_batch(bucket, keys[i:i + 1000], uri)
    return refused


def _delete_batch(bucket: str, keys: list[str], uri: str) -> list[dict]:
    """One ``DeleteObjects`` under the retry rule; a key refused with a transient code is
    sent again (with the others so refused, not the whole batch) as a failed request
    would be, and stays refused when the attempts run out. Deleting is idempotent: a key
    deleted by an attempt whose answer was lost is no error the next time."""
    pending, refused = list(keys), []

    def send() -> None:
        nonlocal pending
        got = client.s3_client().delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in pending]})
        errors = got.get("Errors", [])
        again = [e for e in errors if str(e.get("Code")) in TRANSIENT_CODES]
        refused.extend(e for e in errors if str(e.get("Code")) not in TRANSIENT_CODES)
        pending = [e["Key"] for e in again]
        if again:
            raise _RefusedForNow(again)

    try:
        retry.retrying(send, uri, "delete_objects")
    except _RefusedForNow as exc:
        refused += exc.errors
    return refused


def delete_prefix(prefix_uri: str) -> int:
    """Delete every object under a prefix; returns how many were deleted. Objects the
    store refused to delete raise :class:`DeleteRefused` once the others are gone: a
    prefix reported empty is empty."""
    if is_s3(prefix_uri):  # keys as listed, never re-parsed from a URI
        bucket, prefix = split_s3(prefix_uri)
        keys = [join(prefix, o.key) for o in list_objects(prefix_uri)]
        refused = _delete_keys(bucket, keys, prefix_uri)
        if refused:
            raise DeleteRefused(refused, len(keys), prefix_uri)
        return len(keys)
    root = local_path(prefix_uri)
    n = sum(1 for _ in list_objects(prefix_uri))
    shutil.rmtree(root, onerror=_gone_is_fine)
    return n


def _gone_is_fine(function, path, exc_info) -> None:
    """``rmtree``'s error hook: a file or folder already gone (another remover, or no
    folder at all) is what was wanted; any other error (a permission) is raised."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def ensure_bucket(uri: str) -> None:
    """Create the bucket of an S3 URI if it does not exist (dev servers start empty)."""
    if not is_s3(uri):
        return
    from botocore.exceptions import ClientError

    bucket, _ = split_s3(uri)
    try:
        retry.call("head_bucket", uri, Bucket=bucket)
    except ClientError as exc:
        if is_transient(exc):
            raise
        retry.call("create_bucket", uri, Bucket=bucket)


def browser_url(uri: str, expires_s: int = 7 * 24 * 3600) -> str:
    """A link a browser can open: a presigned HTTPS URL for an S3 object (valid
    ``expires_s``, 7 days at most on AWS), ``file://`` for a local path."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return client.s3_client().generate_presigned_url(  # signed here: no request
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s)
    return local_path(uri).resolve().as_uri()
