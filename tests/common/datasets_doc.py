"""The specs of docs/datasets.md, as the tests build them: the first ```yaml block under a
``## `` heading, with its ``s3://`` URIs moved into a test's bucket (their paths kept)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from recforge.spec import parse_spec

DOC = Path(__file__).resolve().parents[2] / "docs" / "datasets.md"


def spec_doc(heading: str, bucket: str, **overrides) -> dict:
    """The spec under ``## <heading>`` (the heading's start is enough) as a dict, every
    ``s3://<bucket>/`` URI moved to ``s3://<bucket>/`` of the test; ``overrides`` are dotted
    paths set after (``{"pack.resize": 64}``)."""
    text = DOC.read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.M)
    section = next((s for s in sections if s.startswith(heading)), None)
    assert section is not None, f"docs/datasets.md has no section {heading!r}"
    block = re.search(r"```yaml\n(.*?)```", section, flags=re.S)
    assert block is not None, f"docs/datasets.md's {heading!r} section has no yaml block"
    moved = re.sub(r"s3://[a-z0-9.\-]+/", f"s3://{bucket}/", block.group(1))
    data = yaml.safe_load(moved)
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return data


def spec_from_doc(heading: str, bucket: str, **overrides):
    return parse_spec(spec_doc(heading, bucket, **overrides), origin=f"docs/datasets.md "
                      f"({heading})")
