"""The synthetic staging the scale benchmarks merge (``recforge.dev.scale.stage_local``) is a
real one: exactly the records asked for, uneven shards, merged and validated by composition."""

from __future__ import annotations

from recforge import storage
from recforge.dev.scale import stage_local
from recforge.format import names
from recforge.stages import merge, validate


def test_stage_local_merges_and_validates(tmp_path):
    run = stage_local(tmp_path, 2_503, shards=7)
    summary = merge.merge(run)
    assert (summary["listed"], summary["packed"], summary["quarantined"]) == (2_503, 2_503, 0)
    assert summary["splits"] == {"train": 2_503}
    assert validate.validate(run) == {"ok": True, "checked": "composition",
                                      "splits": {"train": 2_503}}
    assert storage.read_json(run.checksums("merge"))["files"][names.rec("train")]["size"] == \
        2_503 * 40
