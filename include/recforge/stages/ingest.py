"""The ``ingest`` task: list the source prefix and decide which objects are candidate images.

Writes the full source manifest (every listed object: key, size, ETag) and the accepted
subset; hidden files, empty objects, unsafe keys and non-image extensions (a detection
source's annotation files excepted) are quarantined here with their reason. The listing is
paginated, so prefixes of any size work, and on S3 a source's folders (classes, splits) are
listed ``storage.LIST_THREADS`` at a time: a million images are a thousand pages.
"""

from __future__ import annotations

import logging
import posixpath

from recforge import layouts, quarantine, storage
from recforge.errors import SourceEmpty
from recforge.quarantine import QuarantineEntry
from recforge.run import Run
from recforge.storage.uri import unsafe_key_reason

log = logging.getLogger(__name__)
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
    # the files a layout reads or knows beside the images (annotations, lists): flatten
    # decides where they belong
    extensions = spec.source.extensions + layouts.for_spec(spec).extensions(spec)
    for obj in storage.list_objects(spec.source.uri, threads=storage.LIST_THREADS):
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
