"""The ``publish`` task: a verified, exclusive, versioned release of the run's dataset.

Layout: ``<publish.uri>/<name>/<version>/`` holds the splits, ``classes.json``, the record
manifest, the quarantine report, ``summary.json``, the report and Data Docs; ``manifest.json``
is written last and is what makes a version exist. Then ``<publish.uri>/<name>/latest.json``
moves to it. In order (``docs/reliability.md`` lists each guarantee and its test):

1. **What**: exactly the files the current attempt's stages recorded with their SHA-256s —
   merge's ``merge/checksums.json``, then each later stage's ``<stage>/checksums.json``
   (``run_state.recording_outputs``). Anything else in the dataset's folder (a killed attempt's
   leftovers) is not published. Each recorded file must still have its recorded size (and
   ETag).
2. **Proof** that the store honours conditional writes (``storage.prove_conditional_writes``,
   once per bucket and process): a store that ignores ``If-None-Match`` / ``If-Match``
   fails with ``StoreGuaranteeMissing`` before anything is written, unless the spec sets
   ``publish.conditional_writes: unchecked``.
   **Claim**: ``<version>/_claim.json`` naming the run, written with ``If-None-Match: *``
   (``claims.claim_version``: the version check, the proof and the claim, as merge runs
   them; publish reads what it publishes and ``latest.json`` before the proof). Merge took
   it already where it composed into the version folder; a version another run claimed
   raises ``VersionExistsError`` before this run has written anything there; this run's
   own claim resumes.
3. **Clean**: version folders without a manifest whose claim nobody touched for
   ``claims.ORPHAN_GRACE_S`` (a run that died before publishing) are deleted.
4. **Check in place, or copy then check.** Where merge composed into the version folder
   (``run_state.out`` is the version: the default) nothing is copied: every recorded file there
   must have its recorded size and SHA-256 (one up to ``HASH_UP_TO`` bytes is read back and
   hashed, whole or part by part, ``PART_THREADS`` parts at a time). Otherwise (a pinned
   version, staging on another store) files are copied server-side keeping the source's
   ETag with the store computing their SHA-256 (``storage.copy_exact``); each copy must
   have the recorded size and the store's checksum of it must be the recorded SHA-256 (or
   the source's composite checksum) — the source's ETag only where the store keeps no
   checksums, since under SSE-KMS an ETag is no digest and a copy gets another one — and is
   read back as above. A mismatch fails the publish naming the file
   (``ChecksumMismatch``), and removes the partial version this run owns.
   Then whatever else the version folder holds is deleted: an earlier attempt of this run
   that died before its manifest may have written files this attempt does not publish (a
   re-run quality gate writes its Data Docs pages under new names).
5. **manifest.json** (every file with its size, ``sha256`` or ``parts``, and the store's
   ``checksum`` where it keeps one) with
   ``If-None-Match: *``: a version is created once.
6. **latest.json** by compare-and-swap (``If-Match`` its ETag, ``If-None-Match: *`` when
   absent), and only forward (``releases.order_key``): a late retry of an older run never
   moves it back.
7. **Release** the run's staged ``*.rec`` files (``release_staging``): the version holds
   its own, and the cache the next night builds from is not per run; a folder this run
   merged into and then did not publish (its version was pinned to another) is removed.

A retried publish of the same run reuses its version (``run_state.version``); reading releases is
``recforge.releases``.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from recforge import claims, releases, run_state, storage
from recforge.errors import ChecksumMismatch
from recforge.format import names
from recforge.run import Run
from recforge.stages import stages_for

log = logging.getLogger(__name__)
HASH_UP_TO = 256 * 1024 ** 2  # copies up to this size are read back and hashed
CAS_ATTEMPTS = 20
COPY_THREADS = 8
PART_THREADS = 8  # parts of one composed file read back and hashed at once


def content_fields(run: Run) -> dict:
    """``content_id`` (what the next run compares with to skip a no-change night)."""
    if not storage.exists(run.content):
        return {}
    content = storage.read_json(run.content)
    return {"content_id": content["content_id"], "options_hash": content["options_hash"]}


def publish(run: Run, version: str | None = None, metadata: dict | None = None,
            orphan_grace_s: float = claims.ORPHAN_GRACE_S) -> dict:
    """Publish the run's recorded outputs as a new version, verified, then move
    ``latest.json``. ``version`` pins the version name (default: the run's choice)."""
    spec = run.spec
    version = run_state.pin_version(run, version) if version else run_state.version(run)
    summary = storage.read_json(run_state.output(run, names.SUMMARY))
    target, manifest, prepared = claims.claim_version(  # what to publish, read first
        run.run_id, spec, version, own_published=True,
        prepare=lambda: (staged_files(run), releases.read_latest(spec)))
    if manifest is None:
        files, previous = prepared
        claims.clean_orphans(releases.dataset_root(spec), version, orphan_grace_s)
        in_place = run_state.out(run) == target
        published = (_check_in_place if in_place else _copy_and_check)(run, target, files)
        _drop_strays(run, target, files)
        manifest = _write_manifest(run, target, version, published, summary, previous, metadata)
    else:
        log.info("publish: %s already published by this run; nothing to copy", target)
    pointer = {"version": version, "uri": target, "run_id": run.run_id,
               "published_at": manifest["published_at"],
               "updated_at": datetime.now(UTC).isoformat()}
    if advance_latest(releases.latest_uri(spec), pointer):
        log.info("publish: %s → %s (latest.json updated)", spec.name, target)
    out = {"version": version, "uri": target, "run_id": run.run_id,
           "records": summary.get("splits", {})}
    merged_into = run_state.out(run)
    if merged_into != target and claims.release(run.run_id, merged_into):  # merged into another
        log.info("publish: removed %s, which this run merged into before its version was "
                 "pinned to %s", merged_into, version)
    release_staging(run)
    report = storage.join(target, names.REPORT)
    if storage.exists(report):
        out["report"] = report
        log.info("publish: report %s", report)  # no presigned link: a bearer credential
    return out


def staged_files(run: Run) -> dict[str, dict]:
    """``{name: checksum entry}`` of the current attempt: merge's ``out/checksums.json``,
    then every later stage's record (a later record wins for a file both name). Every
    source must exist with its recorded size, and its recorded ETag when there is one."""
    merged = run.checksums("merge")
    if not storage.exists(merged):
        raise ChecksumMismatch(f"{merged} does not exist: nothing in out/ has a recorded "
                               "checksum, so nothing can be published; re-run merge")
    files: dict[str, dict] = {}
    checked: dict[str, tuple[str, str]] = {}  # file → (the stage that described it, SHA-256)
    for stage in stages_for(run.spec.task):
        record = run.checksums(stage.task_id)
        if stage.task_id == "merge" or storage.exists(record):
            doc = storage.read_json(record)
            files.update(doc["files"])
            checked.update({f: (stage.task_id, h) for f, h in doc.get("checked", {}).items()})
    files.pop(names.CHECKSUMS, None)
    problems = [f"{name}: {stage} checked the one with SHA-256 {sha[:12]}…, the staged one "
                f"is {files[name]['sha256'][:12]}… (it was written again since); clear "
                f"{stage} so it checks the staged one, then publish"
                for name, (stage, sha) in sorted(checked.items())
                if name in files and files[name].get("sha256") not in (None, sha)]
    for name, entry in sorted(files.items()):
        info = storage.head(run_state.output(run, name))
        if info is None:
            problems.append(f"{name}: recorded but missing from staging")
        elif info.size != entry["size"] or entry.get("etag") not in (None, info.etag):
            problems.append(f"{name}: staged object changed since it was written "
                            f"({info.size} bytes, ETag {info.etag}; recorded "
                            f"{entry['size']} bytes, ETag {entry.get('etag')})")
    if problems:
        raise ChecksumMismatch("publish refused; staged files differ from their records:\n"
                               + "\n".join(problems))
    return files


def _copy_and_check(run: Run, target: str, files: dict[str, dict]) -> list[dict]:
    """Copy every file server-side and check the copy; returns the manifest's entries."""
    def one(name: str) -> tuple[dict, str | None]:
        entry = files[name]
        src = storage.head(run_state.output(run, name))
        dst = storage.copy_exact(run_state.output(run, name), storage.join(target, name),
                                 [p["size"] for p in entry.get("parts", ())] or None)
        staged = {k: v for k, v in entry.items() if k != "checksum"}  # the source's
        problem = releases.check_file(
            storage.join(target, name), staged, name=name, hash_up_to=HASH_UP_TO,
            source=src if storage.is_s3(target) and storage.is_s3(run_state.out(run)) else None,
            threads=PART_THREADS)
        log.info("publish: copied %s (%d bytes)%s", name, dst.size,
                 f": {problem}" if problem else "")
        digest = {"parts": entry["parts"]} if "parts" in entry else {"sha256": entry["sha256"]}
        kept = {"checksum": dst.checksum} if dst.checksum else {}
        return {"name": name, "size": entry["size"], **digest, "etag": dst.etag, **kept}, \
            problem

    return _verdict(target, files, one, "the published copy is not what was staged")


def _check_in_place(run: Run, target: str, files: dict[str, dict]) -> list[dict]:
    """Check every file merge and the later stages wrote straight into the version folder
    (their size and SHA-256 as recorded; ``staged_files`` checked sizes and ETags); returns
    the manifest's entries. Nothing is copied."""
    def one(name: str) -> tuple[dict, str | None]:
        entry = files[name]
        uri = storage.join(target, name)
        problem = releases.check_file(uri, entry, name=name, hash_up_to=HASH_UP_TO,
                                      threads=PART_THREADS)
        info = storage.head(uri)
        digest = {"parts": entry["parts"]} if "parts" in entry else {"sha256": entry["sha256"]}
        kept = {"checksum": info.checksum} if info and info.checksum else {}
        return {"name": name, "size": entry["size"], **digest,
                "etag": info.etag if info else None, **kept}, problem

    return _verdict(target, files, one, "what is in the version folder is not what the "
                    "stages recorded; re-run the run from merge")


def _verdict(target: str, files: dict[str, dict], one, what: str) -> list[dict]:
    """``one(name)`` for every file, ``COPY_THREADS`` at a time → the manifest's entries; any
    problem removes the partial version this run owns and raises ``ChecksumMismatch``."""
    with ThreadPoolExecutor(COPY_THREADS) as pool:
        done = list(pool.map(one, sorted(files)))
    problems = [p for _, p in done if p]
    if problems:
        n = storage.delete_prefix(target)  # this run's claim and files: nothing to resume
        raise ChecksumMismatch(f"publish refused ({n} objects of {target} removed); {what}:\n"
                               + "\n".join(problems))
    return [e for e, _ in done]


def _drop_strays(run: Run, target: str, files: dict[str, dict]) -> None:
    """Delete what the version folder holds besides this attempt's files and the claim:
    the copies of an earlier attempt of this run that died before its manifest. The version
    is this run's (its claim), and not visible (no manifest), so nobody reads them."""
    keep = set(files) | {names.CLAIM}
    strays = [o.key for o in storage.list_objects(target) if o.key not in keep]
    if strays:
        storage.delete_many(storage.join(target, k) for k in strays)
        log.warning("publish: removed %d file(s) an earlier attempt of run %s left in %s and "
                    "this attempt does not publish (first: %s)", len(strays), run.run_id,
                    target, strays[0])


def _write_manifest(run: Run, target: str, version: str, files: list[dict], summary: dict,
                    previous: dict | None, metadata: dict | None) -> dict:
    spec = run.spec
    metadata = dict(metadata or {})
    if any(f["name"] == names.BENCH for f in files):
        bench = storage.read_json(run_state.output(run, names.BENCH))
        metadata.setdefault("loader", {"summary": bench.get("summary"),
                                       "recommendation": bench.get("recommendation"),
                                       "device": bench.get("device", {}).get("statement")})
    manifest = {
        "dataset": spec.name, "version": version, "run_id": run.run_id,
        "published_at": datetime.now(UTC).isoformat(), "task": spec.task,
        "files": files, "summary": summary, "spec": spec.public_dump(),
        "previous_uri": previous["uri"] if previous and previous["uri"] != target else None,
        **content_fields(run), **metadata,
    }
    try:
        storage.write_json(storage.join(target, names.MANIFEST), manifest, if_none_match=True)
    except storage.PreconditionFailed:
        existing = releases.read_manifest(target) or {}
        if existing.get("run_id") != run.run_id:
            raise claims.exists_error(target, existing.get("run_id")) from None
        return existing  # this run's own write whose answer was lost
    return manifest


def release_staging(run: Run) -> dict:
    """Delete the run's staged record files (``*.rec``: merge's composed splits, and
    segmentation shards) once its version is published: the version holds its own copies,
    and a nightly dataset would otherwise leave a full copy in staging every night. What a
    retried publish reads (the small files, the version choice) stays; so does the shard
    cache, which the next night builds from. A run that never publishes keeps its staging
    for diagnosis (``docs/operations.md``: expire it with a lifecycle rule)."""
    doomed = [(storage.join(prefix, o.key), o.size)  # where .rec files live; not masks/,
              for prefix in (run.uri("out"), run.uri("shards"))  # a staged PNG per image
              for o in storage.list_objects(prefix) if o.key.endswith(".rec")]
    storage.delete_many(uri for uri, _ in doomed)
    released = {"files": len(doomed), "bytes": sum(size for _, size in doomed)}
    if doomed:
        log.info("publish: released %d staged record files (%d bytes) of run %s",
                 released["files"], released["bytes"], run.run_id)
    return released


def advance_latest(latest_uri: str, pointer: dict) -> bool:
    """Point ``latest.json`` at ``pointer`` by compare-and-swap, only forward; returns
    whether it now points there (False: a newer version is already latest)."""
    for _ in range(CAS_ATTEMPTS):
        current = storage.get_with_etag(latest_uri)
        cond: dict = {"if_none_match": True}
        if current is not None:
            doc = json.loads(current[0])
            if (doc.get("version"), doc.get("run_id")) == (pointer["version"],
                                                           pointer["run_id"]):
                return True
            if releases.order_key(doc) > releases.order_key(pointer):
                log.info("publish: latest.json stays at the newer %s", doc.get("version"))
                return False
            cond = {"if_match": current[1]}
        try:
            storage.write_json(latest_uri, pointer, **cond)
            return True
        except storage.PreconditionFailed:
            continue  # someone moved it meanwhile: read again and decide again
    raise RuntimeError(f"{latest_uri} changed {CAS_ATTEMPTS} times while being updated")
