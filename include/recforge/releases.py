"""The read side of published versions: where they are, which is latest, what they held.

``<publish.uri>/<name>/latest.json`` points at ``<publish.uri>/<name>/<version>/``. A version
exists once its ``manifest.json`` does (publish writes it last, once, conditionally); a
folder without one is an incomplete publish and is invisible here: :func:`versions` skips
it, :func:`read_latest` never resolves to it. Stages that build on the previous release
(stable label ids, stable segmentation classes) read it here; only the publish stage writes.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from recforge import storage
from recforge.format import names

if TYPE_CHECKING:  # readers import this module where pydantic may be absent
    from recforge.spec import DatasetSpec


def dataset_root(spec: DatasetSpec) -> str:
    return storage.join(spec.publish.uri, spec.name)


def version_uri(spec: DatasetSpec, version: str, *parts: str) -> str:
    return storage.join(dataset_root(spec), version, *parts)


def latest_uri(spec: DatasetSpec) -> str:
    return storage.join(dataset_root(spec), names.LATEST)


def read_manifest(version_uri_: str) -> dict | None:
    """A version's ``manifest.json``, or None while it is incomplete (or does not exist)."""
    uri = storage.join(version_uri_, names.MANIFEST)
    return storage.read_json(uri) if storage.exists(uri) else None


def order_key(doc: dict) -> tuple[str, str]:
    """Versions are ordered by when they came to exist (their manifest's ``published_at``),
    then by name; ``latest.json`` only ever moves forward in this order."""
    return doc.get("published_at") or "", doc.get("version") or ""


def versions(root_uri: str) -> list[dict]:
    """The complete versions under a dataset prefix (their manifests), oldest first."""
    found = [m for v in storage.list_dirs(root_uri)
             if (m := read_manifest(storage.join(root_uri, v))) is not None]
    return sorted(found, key=order_key)


def resolve_latest(root_uri: str) -> dict | None:
    """``latest.json`` under a dataset prefix (``version``, ``uri``, ``run_id``), if the
    version it names is complete; else the newest complete version; None before any."""
    uri = storage.join(root_uri, names.LATEST)
    if storage.exists(uri):
        latest = storage.read_json(uri)
        latest.setdefault("uri", storage.join(root_uri, latest["version"]))
        if read_manifest(latest["uri"]) is not None:
            return latest
    complete = versions(root_uri)
    if not complete:
        return None
    m = complete[-1]
    return {"version": m["version"], "uri": storage.join(root_uri, m["version"]),
            "run_id": m.get("run_id"), "published_at": m.get("published_at")}


def resolve_version(uri: str) -> str | None:
    """The version folder ``uri`` names (it holds ``manifest.json``), else the latest complete
    version of the dataset prefix ``uri`` names (:func:`resolve_latest`); None when it is
    neither. What the command line takes wherever it needs one published version."""
    if read_manifest(uri) is not None:
        return uri
    latest = resolve_latest(uri)
    return latest["uri"] if latest else None


def read_latest(spec: DatasetSpec) -> dict | None:
    """The latest complete version of the spec's dataset, or None before the first publish."""
    return resolve_latest(dataset_root(spec))


def previous_classes(spec: DatasetSpec) -> tuple[str, dict] | None:
    """``(version, classes.json)`` of the latest published version, or None."""
    latest = read_latest(spec)
    if not latest:
        return None
    return latest["version"], storage.read_json(
        version_uri(spec, latest["version"], names.CLASSES))


def check_file(uri: str, entry: dict, *, name: str | None = None,
               source: storage.ObjectInfo | None = None, hash_up_to: int | None = None,
               threads: int = 1) -> str | None:
    """What is wrong with one object against its manifest / checksums entry (``size`` and
    ``sha256``, or ``parts``: ``[{size, sha256}, …]`` checked with one ranged GET each), or
    None. The store's own SHA-256 checksum, where it keeps one, must match the record (and
    the entry's ``checksum``); ``source``: the object this one is a copy of, whose checksum
    it must have, or its ETag where the store keeps no checksums (an ETag is no digest under
    SSE-KMS). ``hash_up_to``: hash only objects up to this size (larger ones: size and
    checksum or ETag only); ``threads``: parts read and hashed at once (every part is hashed
    either way; the first wrong one, in order, is the one reported)."""
    name = name or entry.get("name") or uri
    info = storage.head(uri)
    if info is None:
        return f"{name}: missing"
    if info.size != entry["size"]:
        return f"{name}: {info.size} bytes, expected {entry['size']}"
    wrong = storage.checksum_problem(name, info.checksum, entry,
                                     source.checksum if source else None)
    if wrong:
        return wrong
    if entry.get("checksum") and info.checksum is None:
        return f"{name}: the store keeps no checksum; {entry['checksum']} was recorded"
    if source is not None and (info.checksum is None or source.checksum is None) \
            and info.etag != source.etag:
        return f"{name}: ETag {info.etag}, expected {source.etag}"
    if hash_up_to is not None and info.size > hash_up_to:
        return None
    parts = entry.get("parts") or [{"size": entry["size"], "sha256": entry.get("sha256")}]
    if sum(p["size"] for p in parts) != entry["size"]:
        return f"{name}: its parts add up to {sum(p['size'] for p in parts)} bytes, not " \
               f"{entry['size']}"
    # the parts up to the first one without a SHA-256 (the verdict, in order, is as if they
    # were read one after the other)
    hashable = next((i for i, p in enumerate(parts) if not p.get("sha256")), len(parts))
    starts = [0, *itertools.accumulate(p["size"] for p in parts)]
    with ThreadPoolExecutor(max(1, min(threads, hashable))) as pool:
        digests = list(pool.map(lambda i: storage.sha256_range(uri, starts[i], parts[i]["size"])[1],
                                range(hashable)))
    offset = 0
    for i, part in enumerate(parts, 1):
        if i > hashable:
            return f"{name}: no SHA-256 recorded"
        digest = digests[i - 1]
        if digest != part["sha256"]:
            where = f" part {i} (bytes {offset}-{offset + part['size'] - 1})" \
                if "parts" in entry else ""
            return f"{name}:{where} SHA-256 {digest}, expected {part['sha256']}"
        offset += part["size"]
    return None
