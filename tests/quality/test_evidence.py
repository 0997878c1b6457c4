"""Evidence lines name whole rows: a line that would be too long drops rows, never cuts one."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from recforge.quality import gx


def test_evidence_keeps_whole_items():
    keys = [f"train/{i} some/rather/long/folder/name/image_{i:04d}.jpg" for i in range(5)]
    df = pd.DataFrame({"record": [k.split()[0] for k in keys],
                       "source_key": [k.split()[1] for k in keys]})
    refs = [{"record": k.split()[0], "near_dup_bits": 3.0} for k in keys]
    result = SimpleNamespace(exception_info=None, result={
        "partial_unexpected_index_list": refs, "unexpected_count": 8, "element_count": 560})
    line = gx._evidence_line("records", df, "no near-duplicate", result)
    assert len(line) <= gx.MAX_TEXT
    assert line.startswith("no near-duplicate: 8 of 560 unexpected, e.g. train/0 ")
    assert line.endswith(", …")
    items = line.split("e.g. ", 1)[1].removesuffix(", …").split(", ")
    full = {f"{k} [near_dup_bits=3]" for k in keys}
    assert items and all(item in full for item in items)  # none cut in the middle
