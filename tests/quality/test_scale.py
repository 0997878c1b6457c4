"""The gate at size: records streamed into compact columns, the near-duplicate search
bounded, a check set to ``off`` costing nothing, and deterministic errors not retried."""

from __future__ import annotations

import json

import pytest

from recforge import phash, storage
from recforge.dev.scale import write_records
from recforge.errors import RecforgeFailure, ValidationFailed
from recforge.quality import GateError, run_checks, run_quality_gate
from recforge.quality.inputs import read_records
from recforge.spec.quality import QualitySpec
from tests.quality.test_quality import _near_duplicate_across_splits, clean_inputs


def test_gate_streams_the_manifest_into_columns(tmp_path, monkeypatch):
    write_records(tmp_path, 20_000, val=0.05, test=0.05, idx=True)

    def whole(uri):
        raise AssertionError(f"read whole: {uri}")

    monkeypatch.setattr(storage, "read_jsonl", whole)  # streamed, never one string
    frame = read_records(str(tmp_path / "records.jsonl"))
    assert len(frame) == 20_000 and "name" not in frame and "phash" not in frame
    assert frame["phash_u64"].dtype == "uint64" and frame["phash_ok"].all()
    splits = frame["split"].to_numpy(object)
    assert len({id(s) for s in splits}) == 3  # one string object per split name

    result = run_quality_gate(str(tmp_path), QualitySpec(
        decode_sample=0, severity={"near_duplicates": "warn"}), docs_dir=tmp_path / "docs")
    checks = result["checks"]
    assert checks["index"]["status"] == "passed", checks["index"]
    assert checks["labels"]["status"] == "passed", checks["labels"]
    near = checks["near_duplicates"]  # bursts straddle the splits: many near-duplicates
    assert near["status"] == "warning" and near["evidence"], near
    assert result["ok"]


def test_near_duplicates_off_does_no_work(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(phash, "nearest_across", lambda *a, **k: calls.append(a))
    inputs = clean_inputs()
    _near_duplicate_across_splits(inputs)
    result = run_checks(inputs, QualitySpec(severity={"near_duplicates": "off"}),
                        docs_dir=tmp_path, pack={"resize": 256, "color": 1})
    assert calls == [] and result["checks"]["near_duplicates"]["status"] == "off"
    assert "near_duplicates" not in result["failed"]


def test_a_deterministic_gate_error_is_not_retried(tmp_path):
    (tmp_path / "records.jsonl").write_text(json.dumps({"key": 0, "split": "train"})
                                            + "\n{not json\n")
    with pytest.raises(GateError, match="quality gate could not check") as err:
        run_quality_gate(str(tmp_path), docs_dir=tmp_path / "docs")
    # the Airflow edge fails a RecforgeFailure at once, without retries
    assert isinstance(err.value, ValidationFailed) and isinstance(err.value, RecforgeFailure)
