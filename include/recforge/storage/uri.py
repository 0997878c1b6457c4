"""Storage URIs: ``s3://bucket/key`` or a local path (``/abs/dir``, ``file:///abs/dir``)."""

from __future__ import annotations

from pathlib import Path


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
    """``s3://bucket/a/b`` → ``("bucket", "a/b")``. Everything after the bucket is the key,
    ``#``, ``?`` and ``%`` included: an S3 key is not a URL path, and a URL parser would
    cut ``photo#2.jpg`` to ``photo`` (another object, or none)."""
    bucket, _, key = uri[5:].partition("/")
    if uri[:5].lower() != "s3://" or not bucket:
        raise ValueError(f"not an S3 URI: {uri!r} (expected s3://bucket/prefix)")
    return bucket, key.lstrip("/")


def local_path(uri: str) -> Path:
    """The path of a local URI: a path, or ``file://`` and a path (a host before it, as in
    ``file://localhost/data``, is dropped). What follows is the path as it is, ``#`` and
    ``?`` included: a file joined onto a ``file://`` root keeps its whole name."""
    if uri.startswith("file://"):
        rest = uri[len("file://"):]
        return Path(rest[rest.find("/"):] if "/" in rest else "")
    if "://" in uri:
        raise ValueError(f"unsupported URI scheme in {uri!r}: use s3://bucket/prefix or a path")
    return Path(uri)


MAX_KEY_BYTES = 1024  # S3's own limit
MAX_SEGMENT_BYTES = 255  # a file name on every common file system


def unsafe_key_reason(key: str) -> str | None:
    """Why a key would escape the work area, or None if it is safe to use as a path."""
    if not key:
        return "empty key"
    if key.startswith("/") or key.startswith("\\") or (len(key) > 1 and key[1] == ":"):
        return "absolute path"
    if "\\" in key:
        return "backslash in key (a path separator on Windows)"
    control = sorted({f"0x{ord(c):02x}" for c in key if ord(c) < 0x20 or ord(c) == 0x7F})
    if control:  # TAB/LF/CR would break the .lst line, NUL the path
        return f"control character(s) {', '.join(control)} in key"
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        return f"key of {len(key.encode('utf-8'))} bytes (at most {MAX_KEY_BYTES})"
    parts = key.split("/")
    if any(len(p.encode("utf-8")) > MAX_SEGMENT_BYTES for p in parts):
        return f"a path segment longer than {MAX_SEGMENT_BYTES} bytes (a file-name limit)"
    if any(p == ".." for p in parts):
        return "'..' segment"
    if any(p in ("", ".") for p in parts):
        return "empty or '.' segment"
    return None
