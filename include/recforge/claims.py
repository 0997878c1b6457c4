"""Who owns a version folder before it exists: ``<version>/_claim.json``.

A version exists once its ``manifest.json`` does (``recforge.releases``); before that its
folder is invisible to readers and belongs to the run whose claim the store kept — written
with ``If-None-Match: *``, so of two runs choosing one version exactly one gets it, before
either has written anything there. Merge claims the version it composes the splits into
(one server-side pass per version: publish then moves no dataset bytes), and publish claims
it again, which resumes this run's own claim. Both go through :func:`claim_version`, the one
sequence: no version with a manifest, the store's conditional writes proved, then the claim.

A claim says when its run was last alive (``alive_at``): each stage between merge and
publish touches it. A folder without a manifest whose claim has not been touched for
``ORPHAN_GRACE_S`` belongs to a dead run and is deleted by the next publish of the dataset
(:func:`clean_orphans`). A live run whose claim was removed finds out at its next touch and
fails naming the fix; it never publishes into a folder it no longer owns.

A claim is the publish protocol's, not a stage's output: it is written unrecorded
(``storage.unrecorded``), so no stage's ``checksums.json`` lists it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from recforge import releases, run_state, storage
from recforge.errors import VersionExistsError
from recforge.format import names

if TYPE_CHECKING:
    from recforge.spec import DatasetSpec

log = logging.getLogger(__name__)
# > the longest stage between merge and publish (the checklist's timeout at 10 M records is
# 3 h) plus a queue wait: an older untouched claim is a dead run
ORPHAN_GRACE_S = 12 * 3600
THREADS = 8


class ClaimLost(VersionExistsError):
    """This run's claimed version folder was removed (as an orphan) or taken over."""


def exists_error(target: str, owner: str | None, claimed: bool = False) -> VersionExistsError:
    what = "is claimed (being built, or a dead run's)" if claimed else "was already published"
    return VersionExistsError(f"{target} {what} by run {owner!r}; published versions are "
                              "never overwritten — choose another version")


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _write(uri: str, doc: dict, **conditions) -> None:
    with storage.unrecorded():
        storage.write_json(uri, doc, **conditions)


class Claimed(NamedTuple):
    """What :func:`claim_version` found: the version folder, its manifest where the run
    itself already published it (then nothing was claimed), and what ``prepare`` returned."""
    target: str
    manifest: dict | None
    prepared: Any = None


def claim_version(run_id: str, spec: DatasetSpec, version: str, *, own_published: bool = False,
                  prepare: Callable[[], Any] | None = None) -> Claimed:
    """Own ``version``'s folder for ``run_id``, in order: a version with a manifest is never
    written into (``VersionExistsError``; with ``own_published``, one this run published is
    returned as it is, claiming nothing); ``prepare()`` (what the caller checks before
    anything is written); the proof that the store honours conditional writes (unless the
    spec sets ``publish.conditional_writes: unchecked``); then :func:`claim`."""
    target = releases.version_uri(spec, version)
    manifest = releases.read_manifest(target)
    if manifest is not None:
        if own_published and manifest.get("run_id") == run_id:
            return Claimed(target, manifest)
        raise exists_error(target, manifest.get("run_id"))
    prepared = prepare() if prepare else None
    if spec.publish.conditional_writes == "required":
        storage.prove_conditional_writes(spec.publish.uri)
    claim(run_id, target)
    return Claimed(target, None, prepared)


def claim(run_id: str, target: str) -> None:
    """Own ``target`` (``If-None-Match: *``), or raise ``VersionExistsError`` having written
    nothing there. This run's own claim (a retry, or publish after merge) is resumed and
    touched."""
    uri = storage.join(target, names.CLAIM)
    doc = {"run_id": run_id, "claimed_at": _now()}
    doc["alive_at"] = doc["claimed_at"]
    for _ in range(3):  # a claim can vanish between our write and our read: a refused
        try:            # publish removing its partial version; then the version is free
            _write(uri, doc, if_none_match=True)
        except storage.PreconditionFailed:
            pass
        held = storage.read_json(uri) if storage.exists(uri) else None
        if held is not None:
            break
    if (held or {}).get("run_id") != run_id:  # read back: the one the server kept owns it
        manifest = releases.read_manifest(target)
        raise exists_error(target, (manifest or held or {}).get("run_id"),
                           claimed=not manifest)
    if held.get("claimed_at") != doc["claimed_at"]:
        log.info("resuming run %s's claim of %s", run_id, target)
        touch(run_id, target)


def touch(run_id: str, target: str) -> None:
    """Mark this run's claim of ``target`` alive now (``If-Match`` the claim read), or raise
    ``ClaimLost`` when the claim is gone or another run's.

    A refused write whose claim is still this run's, touched since it was read, is done:
    only this run rewrites its claim, so either a stage of it running alongside (the loader
    benchmark beside validate or the checklist) touched it, or the store applied this very
    write and lost its answer (a connection reset), and the retry was refused."""
    uri = storage.join(target, names.CLAIM)
    found = storage.get_with_etag(uri)
    for _ in range(3):
        held = _held_by(run_id, target, found)
        try:
            _write(uri, {**held, "alive_at": _now()}, if_match=found[1])
            return
        except storage.PreconditionFailed:
            found = storage.get_with_etag(uri)  # rewritten meanwhile: read and decide again
            if _held_by(run_id, target, found).get("alive_at") != held.get("alive_at"):
                return
    raise ClaimLost(f"{uri} changed 3 times while run {run_id!r} touched it")


def _held_by(run_id: str, target: str, found: tuple[bytes, str] | None) -> dict:
    """The claim document read (``storage.get_with_etag``), if it is ``run_id``'s; else
    ``ClaimLost`` naming who holds it now and the fix."""
    held = json.loads(found[0]) if found else {}
    if held.get("run_id") != run_id:
        raise ClaimLost(
            f"{target} is no longer claimed by run {run_id!r} (now: "
            f"{held.get('run_id')!r}): a publish of this dataset removed it as a dead "
            f"run's after {ORPHAN_GRACE_S // 3600} h without a stage touching it; re-run "
            "this run from merge (or trigger a new run)")
    return held


def keep_alive(run) -> None:
    """Touch ``run``'s (a ``recforge.run.Run``) claim of the version folder merge composed
    into, if it did (each stage between merge and publish calls this first)."""
    if run_state.out_version(run) is not None:
        touch(run.run_id, run_state.out(run))


def release(run_id: str, target: str) -> int:
    """Delete ``target`` if it is an unpublished folder this run claims (a version it
    composed into and then did not publish there); returns the objects deleted."""
    uri = storage.join(target, names.CLAIM)
    held = storage.read_json(uri) if storage.exists(uri) else {}
    if held.get("run_id") != run_id or releases.read_manifest(target) is not None:
        return 0
    return storage.delete_prefix(target)


def clean_orphans(root: str, own: str, grace_s: float = ORPHAN_GRACE_S) -> list[str]:
    """Delete version folders without a manifest whose claim was last touched more than
    ``grace_s`` ago (or that have none): runs that died before publishing. Returns them."""
    now = datetime.now(UTC)
    others = [v for v in storage.list_dirs(root) if v != own]
    with ThreadPoolExecutor(THREADS) as pool:  # one HEAD a version: a nightly dataset
        complete = list(pool.map(  # has hundreds after a year
            lambda v: storage.exists(storage.join(root, v, names.MANIFEST)), others))
    removed = []
    for v, done in zip(others, complete, strict=True):
        base = storage.join(root, v)
        if done:
            continue
        claim_uri = storage.join(base, names.CLAIM)
        held = storage.read_json(claim_uri) if storage.exists(claim_uri) else {}
        since = max(filter(None, (held.get("claimed_at"), held.get("alive_at"))), default=None)
        age = (now - datetime.fromisoformat(since)).total_seconds() if since else float("inf")
        if age >= grace_s:
            n = storage.delete_prefix(base)
            removed.append(v)
            log.warning("removed incomplete version %s (%d objects, claimed by run %r, last "
                        "alive %s)", base, n, held.get("run_id"), since or "never")
    return removed
