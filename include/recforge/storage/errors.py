"""What an S3 error means: transient (a retry can fix it), a lost condition, no such object,
or one of the errors people hit first, explained with its fix."""

from __future__ import annotations

import os
from urllib.parse import urlparse

TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                             "RequestTimeTooSkewed", "InternalError", "ServiceUnavailable",
                             "503", "500", "502", "504"})


TRANSIENT_TYPES = frozenset({"ResponseStreamingError", "IncompleteReadError", "ReadTimeoutError",
                             "ConnectTimeoutError", "EndpointConnectionError",
                             "ConnectionClosedError", "ProtocolError", "IncompleteRead"})


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


class PreconditionFailed(Exception):
    """A conditional write lost: the object already exists (``if_none_match``) or is no
    longer the version it was read as (``if_match``)."""


class DeleteRefused(OSError):
    """Objects the store would not delete (``DeleteObjects`` answers 200 and lists them,
    each with its code: ``AccessDenied`` from a policy, a legal hold); ``errors`` holds
    those entries (``Key``, ``Code``, ``Message``), the message names the first few."""

    SHOWN = 3

    def __init__(self, errors: list[dict], named: int, where: str):
        shown = "; ".join(f"{e.get('Key')!r}: {e.get('Code')} {e.get('Message') or ''}".rstrip()
                          for e in errors[:self.SHOWN])
        more = f"; and {len(errors) - self.SHOWN} more" if len(errors) > self.SHOWN else ""
        super().__init__(f"could not delete {len(errors)} of {named} objects in {where}: "
                         f"{shown}{more}")
        self.errors, self.named, self.where = errors, named, where

    def __reduce__(self):  # crosses a process pool whole
        return type(self), (self.errors, self.named, self.where)


def is_precondition(exc: BaseException) -> bool:
    response = getattr(exc, "response", None)
    code = str(response.get("Error", {}).get("Code")) if isinstance(response, dict) else ""
    # 409 ConditionalRequestConflict: AWS saw a concurrent conditional write to the key
    return code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


def is_not_found(exc: BaseException) -> bool:
    response = getattr(exc, "response", None)
    return isinstance(response, dict) and response.get("Error", {}).get("Code") in (
        "404", "NoSuchKey", "NotFound")


def is_no_such_upload(exc: BaseException) -> bool:
    """The multipart upload is gone: completed or aborted already (or never made)."""
    response = getattr(exc, "response", None)
    return isinstance(response, dict) and response.get("Error", {}).get("Code") in (
        "NoSuchUpload", "404")


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
                    "may read the source and write the publish and staging prefixes; a "
                    "bucket whose policy requires encryption (SSE-KMS and its key), a "
                    "storage class or the bucket owner condition needs them in the spec's "
                    "publish.s3 / staging_s3 (docs/spec.md)")
    return None
