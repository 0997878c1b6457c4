"""Storage URIs: ``s3://bucket/key`` or a local path (``/abs/dir``, ``file:///abs/dir``)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse


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
