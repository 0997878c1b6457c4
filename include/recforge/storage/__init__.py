"""Object storage by URI: ``s3://bucket/prefix`` over the real S3 protocol, or a local path.

The S3 endpoint comes from boto3's own configuration (``AWS_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL_S3``, profiles), so the same code talks to the local dev server, Ceph RGW,
MinIO and AWS; :func:`configure_s3` replaces that with another client factory (in Airflow:
the connection, ``recforge.orchestration.connections``). Local paths (``/abs/dir`` or
``file:///abs/dir``) exist for the CLI and for inspecting published data; the pipeline's
staging and publishing normally use S3.

This is the wing's façade: callers use ``storage.X``. Floors, lowest first: ``uri.py`` (what
a URI names), ``write_options.py`` (what a locked-down bucket asks of every request),
``client.py`` (clients and byte accounting), ``errors.py`` (what an error means),
``checksums.py`` (S3's SHA-256 per object), ``retry.py`` (the one retry rule every request
goes through, so where requests are counted), ``connections.py`` (HTTP/1.1 GETs on kept-alive
sockets), ``http_get.py`` (the GET of an object or a range, signed by recforge and sent on
``connections``: a fraction of botocore's CPU a request),
``recording.py`` (what a stage wrote),
``multipart.py`` (one multipart upload), ``listing.py`` (an S3 prefix's pages, its folders
side by side), ``objects.py`` (single objects and listings), ``documents.py`` (JSON, JSON
lines), ``bulk.py`` (prefetch, the coalesced ranged read, the download in parts),
``copies.py`` (server-side copies and composition), ``guarantees.py`` (what a store honours,
proved).
"""

from recforge.storage.bulk import (
    coalesce,
    download,
    iter_range,
    plan_reads,
    prefetch,
    read_spans,
    slice_read,
)
from recforge.storage.checksums import problem as checksum_problem
from recforge.storage.checksums import sha256_hex
from recforge.storage.client import (
    client_config,
    configure_s3,
    parse_timestamp,
    s3_client,
    transferred,
)
from recforge.storage.copies import (
    COPY_PART_THREADS,
    compose,
    copy,
    copy_exact,
    part_offsets,
    plan_compose,
)
from recforge.storage.documents import (
    iter_jsonl,
    iter_lines,
    json_bytes,
    jsonl_bytes,
    jsonl_line,
    parse_jsonl,
    read_json,
    read_jsonl,
    write_json,
    write_jsonl,
)
from recforge.storage.errors import (
    DeleteRefused,
    PreconditionFailed,
    explain,
    is_transient,
)
from recforge.storage.guarantees import prove_conditional_writes
from recforge.storage.listing import LIST_THREADS
from recforge.storage.multipart import MAX_PART, MIN_PART, Reusable, plan_reusing
from recforge.storage.objects import (
    ObjectInfo,
    browser_url,
    delete,
    delete_many,
    delete_prefix,
    ensure_bucket,
    exists,
    get_bytes,
    get_range,
    get_with_etag,
    head,
    list_dirs,
    list_objects,
    put_bytes,
    sha256_range,
    size_of,
    upload,
)
from recforge.storage.recording import (
    HashingWriter,
    file_digest,
    record_writes,
    unrecorded,
)
from recforge.storage.retry import counts as request_counts
from recforge.storage.uri import is_s3, join, local_path, split_s3
from recforge.storage.write_options import WriteOptions, use_write_options

__all__ = [
    "COPY_PART_THREADS",
    "DeleteRefused",
    "HashingWriter",
    "LIST_THREADS",
    "MAX_PART",
    "MIN_PART",
    "ObjectInfo",
    "PreconditionFailed",
    "Reusable",
    "WriteOptions",
    "browser_url",
    "checksum_problem",
    "client_config",
    "coalesce",
    "compose",
    "configure_s3",
    "copy",
    "copy_exact",
    "delete",
    "delete_many",
    "delete_prefix",
    "download",
    "ensure_bucket",
    "exists",
    "explain",
    "file_digest",
    "get_bytes",
    "get_range",
    "get_with_etag",
    "head",
    "is_s3",
    "is_transient",
    "iter_jsonl",
    "iter_lines",
    "iter_range",
    "join",
    "json_bytes",
    "list_dirs",
    "list_objects",
    "local_path",
    "parse_timestamp",
    "part_offsets",
    "plan_compose",
    "plan_reads",
    "plan_reusing",
    "prefetch",
    "prove_conditional_writes",
    "put_bytes",
    "read_json",
    "read_jsonl",
    "jsonl_bytes",
    "jsonl_line",
    "parse_jsonl",
    "read_spans",
    "record_writes",
    "request_counts",
    "s3_client",
    "sha256_hex",
    "sha256_range",
    "size_of",
    "slice_read",
    "split_s3",
    "transferred",
    "unrecorded",
    "upload",
    "use_write_options",
    "write_json",
    "write_jsonl",
]
