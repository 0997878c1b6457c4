"""What people read: the Data Docs site where they can open it, and the checklist as text.

:func:`upload_data_docs` copies a built site to S3 (or a folder) with its content types;
:func:`format_table` prints a result as one row per check (CLI, task log); :func:`iter_failed`
walks its failed and warned checks (alerts).
"""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Iterable
from pathlib import Path

from recforge import storage
from recforge.quality.verdict import FAILED, NOT_RUN, OFF, PASSED, WARNING, gate_verdict

log = logging.getLogger(__name__)


def upload_data_docs(docs_dir: str | Path, dest_uri: str, threads: int = 8) -> str:
    """Copy a built Data Docs site to ``dest_uri`` (S3 or local); returns its index.html URI.

    HTML and CSS get their content types, so an S3 website or a presigned link renders them.
    """
    from concurrent.futures import ThreadPoolExecutor

    root = Path(docs_dir)
    if not (root / "index.html").exists():
        raise FileNotFoundError(f"{root}/index.html does not exist: build the Data Docs first "
                                "(run_quality_gate writes them into docs_dir)")
    files = sorted(p for p in root.rglob("*") if p.is_file())

    def put(path: Path) -> None:
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        storage.put_bytes(storage.join(dest_uri, path.relative_to(root).as_posix()),
                          path.read_bytes(), ctype)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, files))
    index = storage.join(dest_uri, "index.html")
    log.info("quality: Data Docs (%d files) uploaded to %s", len(files), index)
    return index


STATUS_MARK = {PASSED: "ok", FAILED: "FAIL", WARNING: "warn", NOT_RUN: "-", OFF: "off"}


def format_table(result: dict) -> str:
    """The checklist as a plain-text table, one row per check, evidence under failures."""
    lines = [f"{'item':<5} {'check':<18} {'severity':<8} {'status':<8} observed"]
    for name, e in result["checks"].items():
        lines.append(f"{e['item']:<5} {name:<18} {e['severity']:<8} "
                     f"{STATUS_MARK.get(e['status'], e['status']):<8} {e['observed']}")
        if e["status"] in (FAILED, WARNING):
            lines.extend(f"{'':<42}- {ev}" for ev in e.get("evidence", []))
    lines.append(f"Data Docs: {result.get('data_docs')}")
    lines.append(gate_verdict(result))
    return "\n".join(lines)


def iter_failed(result: dict) -> Iterable[tuple[str, dict]]:
    """(name, check) for failed and warned checks, failures first (for alerts)."""
    for status in (FAILED, WARNING):
        for name, e in result.get("checks", {}).items():
            if e.get("status") == status:
                yield name, e
