"""Multipart uploads: S3's limits, and one upload's life (create, parts, complete or abort),
each request through the retry rule.

Retrying a part is safe (the same bytes under the same number). Retrying
``CompleteMultipartUpload`` is not quite: when the first attempt completed but its answer was
lost, the repeat finds no such upload; :meth:`Upload.complete` then accepts the object that is
there if it has this upload's part count, which only this upload can have given it.
"""

from __future__ import annotations

import hashlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from recforge.storage import checksums, client, retry
from recforge.storage.errors import is_no_such_upload, is_not_found, is_precondition
from recforge.storage.uri import split_s3

MIN_PART = 5 * 1024**2  # S3: every part of a multipart upload but the last is at least this
MAX_PART = 5 * 1024**3  # S3: the largest part, and the largest range one UploadPartCopy copies
MAX_PARTS = 10_000  # S3: parts in one multipart upload
UPLOAD_PART = 16 * 1024**2  # the part size of a local file's upload (4 in memory at most)
UPLOAD_THREADS = 4

log = logging.getLogger(__name__)


class Upload:
    """One multipart upload to ``uri``; ``with Upload(uri) as up:`` aborts it on any error."""

    def __init__(self, uri: str, **create):
        self.uri = uri
        self.bucket, self.key = split_s3(uri)
        self.upload_id = retry.call("create_multipart_upload", uri, Bucket=self.bucket,
                                    Key=self.key, ChecksumAlgorithm=checksums.ALGORITHM,
                                    **create)["UploadId"]

    def _common(self, number: int) -> dict:
        return {"Bucket": self.bucket, "Key": self.key, "UploadId": self.upload_id,
                "PartNumber": number}

    def part(self, number: int, body) -> dict:
        """Send part ``number`` (bytes, or a binary file read from its start at each
        attempt) with its SHA-256; returns its entry for :meth:`complete`."""
        digest = hashlib.sha256()
        if hasattr(body, "seek"):
            body.seek(0)
            while block := body.read(1 << 20):
                digest.update(block)
        else:
            digest.update(body)
        value = checksums.of_hex(digest.hexdigest())

        def send():
            if hasattr(body, "seek"):
                body.seek(0)
            return client.s3_client().upload_part(**self._common(number), Body=body,
                                                  ChecksumAlgorithm=checksums.ALGORITHM,
                                                  ChecksumSHA256=value)

        got = retry.retrying(send, self.uri, "upload_part")
        return {"PartNumber": number, "ETag": got["ETag"],
                "ChecksumSHA256": checksums.of_response(got) or value}

    def part_copy(self, number: int, source: str, start: int, end: int, **extra) -> dict:
        """Part ``number`` is bytes ``start..end-1`` of the S3 object ``source``, copied
        server-side."""
        src_bucket, src_key = split_s3(source)
        got = retry.call("upload_part_copy", self.uri, **self._common(number),
                         CopySource={"Bucket": src_bucket, "Key": src_key},
                         CopySourceRange=f"bytes={start}-{end - 1}", **extra)
        result = got["CopyPartResult"]
        return {"PartNumber": number, "ETag": result["ETag"],
                **({"ChecksumSHA256": result["ChecksumSHA256"]}
                   if checksums.of_response(result) else {})}

    def complete(self, parts: list[dict]) -> None:
        """Complete with ``parts``; their checksums go along only when every part has one
        (a store that computes none for copied parts gets none for any)."""
        if not all(p.get("ChecksumSHA256") for p in parts):
            parts = [{k: v for k, v in p.items() if k != "ChecksumSHA256"} for p in parts]
        try:
            retry.call("complete_multipart_upload", self.uri, Bucket=self.bucket,
                       Key=self.key, UploadId=self.upload_id,
                       MultipartUpload={"Parts": parts})
        except Exception as exc:
            if not is_no_such_upload(exc) or not self._completed_as(len(parts)):
                raise

    def _completed_as(self, n_parts: int) -> bool:
        """Whether the object is there as this upload made it (its answer was lost)."""
        try:
            got = retry.call("head_object", self.uri, Bucket=self.bucket, Key=self.key)
        except Exception:  # noqa: BLE001 - the caller raises the original error
            return False
        return got["ETag"].strip('"').endswith(f"-{n_parts}")

    def abort(self) -> None:
        try:
            retry.call("abort_multipart_upload", self.uri, Bucket=self.bucket, Key=self.key,
                       UploadId=self.upload_id)
        except Exception as exc:
            if not is_no_such_upload(exc):
                raise

    def __enter__(self) -> Upload:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not None:
            self.abort()


class Reusable(NamedTuple):
    """Bytes ``start .. start+length-1`` of a file about to be uploaded are bytes from
    ``source_start`` of the S3 object ``source`` while its ETag is ``etag``: the store can copy
    them (``UploadPartCopy``) instead of receiving them again."""
    start: int
    length: int
    source: str
    source_start: int
    etag: str


def _even(start: int, nbytes: int, most: int) -> list[tuple[int, int]]:
    """``(start, nbytes)`` of the fewest near-equal pieces of at most ``most`` bytes."""
    n = -(-nbytes // most)
    cuts = [start + nbytes * j // n for j in range(n + 1)]
    return [(a, b - a) for a, b in zip(cuts, cuts[1:], strict=False)]


def plan_reusing(size: int, runs: list[Reusable], part_size: int = UPLOAD_PART
                 ) -> list[tuple]:
    """The pieces of a multipart upload of a ``size``-byte file whose ``runs`` (in file
    order, not overlapping) the store already has: ``("copy", run, offset in it, nbytes)``
    and ``("send", file offset, nbytes)``, in file order.

    Every piece but the last must hold 5 MiB, so the bytes sent before a run take in what
    they lack from the run's start (or, where that would leave too little of the run, from
    the end of the copy before it), and a run is copied only where 5 MiB of it is left (any
    part of it, when it ends the file); a shorter one is sent with the bytes around it.
    Sends are near-equal pieces of at most ``part_size`` (the memory one part holds; at
    least 10 MiB, so that each holds 5), copies at most 5 GiB. Empty when nothing would be
    copied."""
    spans: list[list] = []  # [kind, file offset, nbytes, run], before the size limits
    pos = 0  # the first byte no span holds yet
    for i, run in enumerate(runs):
        start = max(run.start, pos)  # runs never overlap; if they did, the later starts after
        length = run.start + run.length - start
        gap = start - pos
        lend = MIN_PART - gap if 0 < gap < MIN_PART else 0
        least = 1 if start + length >= size else MIN_PART  # the last part has no minimum
        if (lend and length - lend < least <= length and spans and spans[-1][0] == "copy"
                and spans[-1][2] - lend >= MIN_PART):
            spans[-1][2] -= lend  # the copy before gives its end to the send instead
            pos, lend = pos - lend, 0
        if length - lend < least:
            continue
        if start + lend > pos:
            spans.append(["send", pos, start + lend - pos, None])
        spans.append(["copy", start + lend, length - lend, i])
        pos = start + length
    if not spans:
        return []
    if pos < size:
        spans.append(["send", pos, size - pos, None])
    pieces: list[tuple] = []
    for kind, offset, nbytes, i in spans:
        if kind == "send":
            pieces += [("send", a, n) for a, n in _even(offset, nbytes, max(part_size,
                                                                            2 * MIN_PART))]
        else:
            pieces += [("copy", i, a - runs[i].start, n)
                       for a, n in _even(offset, nbytes, MAX_PART)]
    if len(pieces) > MAX_PARTS:
        raise ValueError(f"a {size}-byte upload in {len(pieces)} pieces: S3 allows at most "
                         f"{MAX_PARTS}")
    return pieces


class SourceChanged(Exception):
    """A reused run's source object is no longer the version it was read as."""


def upload_file(path: str | os.PathLike, uri: str, part_size: int = UPLOAD_PART,
                sha256: str | None = None, reusing: list[Reusable] = ()) -> None:
    """A local file as one object: one PUT up to ``part_size`` (with ``sha256``, its hex
    SHA-256, for the store to check), parts of ``part_size`` above (``UPLOAD_THREADS`` at a
    time, each read from the file when it is sent, each with its own SHA-256).

    ``reusing``: runs of the file the store already holds (:class:`Reusable`), copied
    server-side where :func:`plan_reusing` can make them parts, each pinned to its source's
    ETag; the rest is sent. A source that changed since is not trusted: the whole file is
    sent instead."""
    size = os.path.getsize(path)
    pieces = plan_reusing(size, list(reusing), part_size) if reusing else []
    if pieces:
        try:
            _upload_reusing(path, uri, pieces, list(reusing))
            return
        except SourceChanged as exc:
            log.warning("upload %s: %s; sending every byte instead", uri, exc)
    _upload_whole(path, uri, size, part_size, sha256)


def _upload_reusing(path: str | os.PathLike, uri: str, pieces: list[tuple],
                    runs: list[Reusable]) -> None:
    """The planned upload. Each source is checked at its ETag first (a HEAD), and every copy
    is pinned to it (``CopySourceIfMatch``, which AWS honours and moto and Ceph RGW 16.2
    ignore); a source changed or gone raises :class:`SourceChanged`."""
    for source, etag in sorted({(runs[p[1]].source, runs[p[1]].etag)
                                for p in pieces if p[0] == "copy"}):
        bucket, key = split_s3(source)
        try:
            now = retry.call("head_object", source, Bucket=bucket, Key=key)["ETag"]
        except Exception as exc:
            if is_not_found(exc):
                raise SourceChanged(f"{source} is gone") from exc
            raise
        if now.strip('"') != etag.strip('"'):
            raise SourceChanged(f"{source} is no longer ETag {etag}")

    def one(number: int) -> dict:
        piece = pieces[number - 1]
        if piece[0] == "copy":
            _, i, offset, nbytes = piece
            run = runs[i]
            start = run.source_start + offset
            etag = run.etag if run.etag.startswith('"') else f'"{run.etag}"'
            try:
                return up.part_copy(number, run.source, start, start + nbytes,
                                    CopySourceIfMatch=etag)
            except Exception as exc:
                if is_precondition(exc) or is_not_found(exc):
                    raise SourceChanged(f"{run.source} is no longer ETag {run.etag}") from exc
                raise
        _, offset, nbytes = piece
        with open(path, "rb") as f:
            f.seek(offset)
            return up.part(number, f.read(nbytes))

    with Upload(uri) as up, ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        up.complete(list(pool.map(one, range(1, len(pieces) + 1))))
    copied = sum(p[3] for p in pieces if p[0] == "copy")
    log.info("upload %s: %d of %d bytes copied server-side, %d pieces", uri, copied,
             os.path.getsize(path), len(pieces))


def _upload_whole(path: str | os.PathLike, uri: str, size: int, part_size: int,
                  sha256: str | None) -> None:
    bucket, key = split_s3(uri)
    if size <= part_size:
        with open(path, "rb") as f:
            data = f.read()
        retry.call("put_object", uri, Bucket=bucket, Key=key, Body=data,
                   **checksums.to_send(sha256 or hashlib.sha256(data).hexdigest()))
        return

    def send(number: int) -> dict:
        with open(path, "rb") as f:
            f.seek((number - 1) * part_size)
            return up.part(number, f.read(part_size))

    with Upload(uri) as up, ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        up.complete(list(pool.map(send, range(1, -(-size // part_size) + 1))))
