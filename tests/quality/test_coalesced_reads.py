"""The re-read sample in coalesced reads: the same verdicts as one GET per record."""

from __future__ import annotations

import pandas as pd
import pytest

from recforge import storage
from recforge.quality.inputs import load_inputs, verify_records
from tests.quality.test_quality import write_packed


def test_coalesce_groups_near_spans_and_slices_back_their_bytes():
    data = bytes(range(256)) * 64  # 16 KiB
    spans = [(900, 50), (0, 100), (120, 30), (5000, 10), (16380, 100), (100, 20)]
    reads = storage.coalesce(spans, max_gap=64, max_read=4096)
    assert sorted(i for _, _, m in reads for i in m) == list(range(len(spans)))
    assert [(s, n) for s, n, _ in reads] == [(0, 150), (900, 50), (5000, 10), (16380, 100)]
    for start, length, members in reads:
        got = data[start:start + length]  # what get_range returns (short at the end)
        for i in members:
            s, n = spans[i]
            assert storage.slice_read(got, start, s, n) == data[s:s + n]
    # a read never grows past max_read: a long run of touching spans is cut
    run = [(i * 100, 100) for i in range(100)]
    assert all(n <= 1000 for _, n, _ in storage.coalesce(run, max_gap=0, max_read=1000))
    assert len(storage.coalesce(run, max_gap=0, max_read=1000)) == 10


@pytest.mark.parametrize("corrupt", [None, 2])
def test_coalesced_re_read_equals_one_read_per_record(tmp_path, monkeypatch, corrupt):
    write_packed(tmp_path, corrupt_key=corrupt)
    inputs = load_inputs(str(tmp_path))
    records = pd.DataFrame(inputs.records)
    records.loc[4, "offset"] = 10 ** 7  # past the end: read, and wrong
    records.loc[5, "key"] = 999  # the header's id is not the manifest's

    calls = []
    real = storage.get_range
    monkeypatch.setattr(storage.objects, "get_range",
                        lambda *a: calls.append(a) or real(*a))
    coalesced = verify_records(records.copy(), inputs.rec_uris, None)
    n_coalesced = len(calls)
    calls.clear()
    monkeypatch.setattr(storage.bulk, "coalesce", lambda spans, **_: [
        (s, n, [i]) for i, (s, n) in enumerate(spans)])  # one read per record: as before
    one_each = verify_records(records.copy(), inputs.rec_uris, None)
    assert len(calls) == len(records) > n_coalesced
    pd.testing.assert_frame_equal(coalesced, one_each)
    status = list(coalesced["rec_status"])
    assert status[4] == "bad_record" and coalesced.loc[5, "rec_id_ok"] is False
    if corrupt is not None:
        assert status[corrupt] == "undecodable"
