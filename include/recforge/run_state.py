"""What a run has chosen and recorded in its staging, read and written here: the version it
publishes under (``publish/version.json``), where merge put the merged dataset
(``merge/home.json``: the version folder it claimed, or staging ``out/``) and what each stage
wrote into it (``<stage>/checksums.json``). ``recforge.run.Run`` only names these files.

Where the dataset lives is read once per ``Run`` object (merge's own ``set_out`` fills it), as
every stage asks for it file by file; a ``Run`` made afresh reads it again.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator

from recforge import releases, storage
from recforge.format import names
from recforge.run import Run, new_version

_homes: dict[int, dict] = {}  # id(run) → what this Run object read or wrote of its home.json
_lock = threading.Lock()


def _home(run: Run) -> dict:
    with _lock:
        key = id(run)
        if key not in _homes:
            _homes[key] = {}
            weakref.finalize(run, _homes.pop, key, None)
        return _homes[key]


def version(run: Run) -> str:
    """The version name ``run`` publishes under: chosen once, kept in staging, so the
    benchmark, the checklist and a retried publish all name the same version."""
    chosen = run.version_choice
    if storage.exists(chosen):
        return storage.read_json(chosen)["version"]
    content = storage.read_json(run.content) if storage.exists(run.content) else {}
    chosen_now = new_version(run_id=run.run_id, content_id=content.get("content_id"))
    storage.write_json(chosen, {"version": chosen_now})
    return chosen_now


def published_version(run: Run) -> str | None:
    """The version ``run`` already published (its chosen version holds a manifest naming
    the run), else None: a re-run of such a run only finishes its publish
    (``latest.json``), and never writes into the published folder again."""
    chosen = run.version_choice
    if run.dry_run or not storage.exists(chosen):
        return None
    name = storage.read_json(chosen)["version"]
    manifest = releases.read_manifest(releases.version_uri(run.spec, name))
    return name if manifest and manifest.get("run_id") == run.run_id else None


def pin_version(run: Run, name: str) -> str:
    """Choose ``name`` explicitly as ``run``'s version (replaces an earlier choice)."""
    storage.write_json(run.version_choice, {"version": name})
    return name


def set_out(run: Run, claimed: str | None) -> None:
    """Record where merge writes the dataset: the ``claimed`` version's folder, or staging
    ``out/`` (None)."""
    storage.write_json(run.home, {"version": claimed})
    _home(run).update(version=claimed)


def out_version(run: Run) -> str | None:
    """The version whose folder :func:`out` is (merge claimed it), or None."""
    home = _home(run)
    if "version" not in home and storage.exists(run.home):
        home.update(storage.read_json(run.home))
    return home.get("version")


def out(run: Run) -> str:
    """Where the merged dataset lives, exactly as it will be published: the version folder
    merge claimed, or staging ``out/`` (a dry run; before merge)."""
    claimed = out_version(run)
    return releases.version_uri(run.spec, claimed) if claimed else run.uri("out")


def output(run: Run, name: str) -> str:
    return storage.join(out(run), name)


def quality_docs(run: Run) -> str:
    """Where the checklist's Data Docs land (in the dataset, so they are published)."""
    return storage.join(out(run), names.QUALITY_DIR)


@contextlib.contextmanager
def recording_outputs(run: Run, stage: str, checked: dict | None = None) -> Iterator[dict]:
    """Record what the block writes into the dataset (sizes, SHA-256s, ETags) as ``stage``'s
    ``checksums.json``, written when the block succeeds. The earlier attempt's record is
    deleted first, so a killed attempt leaves none for publish to trust. ``checked``,
    filled by the block: ``{file: SHA-256}`` of other stages' outputs its own outputs
    describe (publish refuses when they changed since)."""
    record = run.checksums(stage)
    if storage.exists(record):
        storage.delete(record)
    with storage.record_writes(out(run)) as written:
        yield written
    storage.write_json(record, {"files": written, **({"checked": checked} if checked
                                                     else {})})
