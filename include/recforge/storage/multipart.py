"""Multipart uploads: S3's limits, and one upload's life (create, parts, complete or abort),
each request through the retry rule.

Retrying a part is safe (the same bytes under the same number). Retrying
``CompleteMultipartUpload`` is not quite: when the first attempt completed but its answer was
lost, the repeat finds no such upload; :meth:`Upload.complete` then accepts the object that is
there if it has this upload's part count, which only this upload can have given it.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

from recforge.storage import checksums, client, retry
from recforge.storage.errors import is_no_such_upload
from recforge.storage.uri import split_s3

MIN_PART = 5 * 1024**2  # S3: every part of a multipart upload but the last is at least this
MAX_PART = 5 * 1024**3  # S3: the largest part, and the largest range one UploadPartCopy copies
MAX_PARTS = 10_000  # S3: parts in one multipart upload
UPLOAD_PART = 16 * 1024**2  # the part size of a local file's upload (4 in memory at most)
UPLOAD_THREADS = 4


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


def upload_file(path: str | os.PathLike, uri: str, part_size: int = UPLOAD_PART,
                sha256: str | None = None) -> None:
    """A local file as one object: one PUT up to ``part_size`` (with ``sha256``, its hex
    SHA-256, for the store to check), parts of ``part_size`` above (``UPLOAD_THREADS`` at a
    time, each read from the file when it is sent, each with its own SHA-256)."""
    size = os.path.getsize(path)
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
