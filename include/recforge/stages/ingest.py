"""The ``ingest`` task: list the source prefix and decide which objects are candidate images.

Writes the full source manifest (every listed object: key, size, ETag) and the accepted
subset; hidden files, empty objects, unsafe keys and non-image extensions (a detection
source's annotation files excepted) are quarantined here with their reason. The listing is
paginated, so prefixes of any size work.
"""

from __future__ import annotations

import logging
import posixpath

from recforge import quarantine, storage
from recforge.detection.sources import annotation_extensions
from recforge.errors import SourceEmpty
from recforge.quarantine import QuarantineEntry
from recforge.run import Run

log = logging.getLogger(__name__)
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


def classify_object(key: str, size: int, extensions: tuple[str, ...]) -> QuarantineEntry | None:
    """The quarantine entry for an object that must not be packed, else None."""
    why = unsafe_key_reason(key)
    if why:
        return QuarantineEntry(key, "ingest", "unsafe_key", why)
    if any(p.startswith(".") for p in key.split("/")):
        return QuarantineEntry(key, "ingest", "hidden_file", "a path segment starts with '.'")
    ext = posixpath.splitext(key)[1].lower()
    if ext not in extensions:
        return QuarantineEntry(key, "ingest", "unsupported_extension",
                               f"extension {ext or '(none)'!r} not in {list(extensions)}")
    if size == 0:
        return QuarantineEntry(key, "ingest", "zero_bytes", "object has 0 bytes")
    return None


def ingest(run: Run) -> dict:
    spec = run.spec
    listed, accepted, refused = [], [], []
    # detection: the annotation files are inputs too (flatten checks where they lie)
    extensions = spec.source.extensions + annotation_extensions(spec.source.layout)
    for obj in storage.list_objects(spec.source.uri):
        row = {"key": obj.key, "size": obj.size, "etag": obj.etag}
        listed.append(row)
        entry = classify_object(obj.key, obj.size, extensions)
        (refused.append(entry) if entry else accepted.append(row))
        if len(listed) % 10_000 == 0:
            log.info("ingest: listed %d objects so far", len(listed))
    if not listed:
        raise SourceEmpty(
            f"ingest: no objects under {spec.source.uri}; check source.uri and credentials"
        )
    storage.write_jsonl(run.source_manifest, listed)
    storage.write_jsonl(run.ingested, accepted)
    storage.put_bytes(run.stage_quarantine("ingest"), quarantine.dumps(refused))
    for e in refused:
        log.warning("quarantined %s: %s (%s)", e.source_key, e.reason, e.detail)
    log.info("ingest: listed %d, accepted %d, quarantined %d from %s",
             len(listed), len(accepted), len(refused), spec.source.uri)
    return {"listed": len(listed), "accepted": len(accepted), "quarantined": len(refused),
            "manifest": run.source_manifest}
