"""The layout table and the accounting every layout shares: each layout the spec allows is
registered, an object set aside is accounted once (merge and the checklist), and a source
where nothing matches its layout fails naming what was expected and what was found, with
the failed run's quarantine report written."""

from __future__ import annotations

import typing

import pytest

from recforge import layouts, quarantine, storage
from recforge.errors import ReconciliationError, SourceEmpty
from recforge.quality.frames import _sources_frame
from recforge.quality.inputs import GateInputs
from recforge.run import Run
from recforge.spec import parse_spec
from recforge.spec.dataset import SourceSpec
from recforge.stages import entry
from recforge.stages.merge import Reconciler
from tests.common.helpers import jpeg


def test_every_layout_the_spec_allows_is_registered():
    allowed = set(typing.get_args(SourceSpec.model_fields["layout"].annotation))
    assert set(layouts.names()) == allowed | {"pairs"}
    for name in layouts.names():
        assert layouts._registry()[name].name == name


def test_not_used_objects_reconcile_once():
    acc = Reconciler()
    acc.account("a.jpg")
    acc.account("b.jpg", refused=True)
    acc.account("captions.json", not_used=True)
    assert acc.finish(["a.jpg", "b.jpg", "captions.json"]) == {
        "listed": 3, "packed": 1, "quarantined": 1, "not_used": 1}
    twice = Reconciler()
    twice.account("captions.json", not_used=True)
    twice.account("captions.json", refused=True)
    with pytest.raises(ReconciliationError, match="1 counted twice"):
        twice.finish(["captions.json"])
    lost = Reconciler()
    with pytest.raises(ReconciliationError, match="neither packed, quarantined nor set aside"):
        lost.finish(["orphan.txt"])


def test_checklist_accounts_not_used_and_used_files():
    import pandas as pd

    rec = pd.DataFrame([{"source_key": "train/dog/a.jpg", "source_etag": "e1"}])
    inputs = GateInputs(
        records=rec, not_used=[{"key": "README.txt", "reason": "not_listed", "detail": ""}],
        sources=[{"key": k, "etag": "e1"} for k in
                 ("train/dog/a.jpg", "README.txt", "labels.csv", "forgotten.jpg")],
        summary={"used": ["labels.csv"]})
    frame = _sources_frame(inputs, rec).set_index("source_key")
    assert frame["accounted"].to_dict() == {"train/dog/a.jpg": 1, "README.txt": 1,
                                            "labels.csv": 1, "forgotten.jpg": 0}


def test_nothing_matching_the_layout_fails_naming_expected_and_found(bucket):
    src = f"s3://{bucket}/raw"
    for key in ("a.jpg", "b.jpg"):
        storage.put_bytes(storage.join(src, key), jpeg(20, 20))
    spec = parse_spec({"name": "flat", "source": {"uri": src},
                       "publish": {"uri": f"s3://{bucket}/datasets"}})
    run = Run(spec, "nothing")
    entry("ingest")(run)
    with pytest.raises(SourceEmpty) as failed:
        entry("flatten")(run)
    message = str(failed.value)
    assert "class_folders layout" in message and "<prefix>/<class>/" in message
    assert "found 2 object(s), first a.jpg, b.jpg" in message
    assert run.stage_quarantine("flatten") in message
    written = quarantine.loads(storage.get_bytes(run.stage_quarantine("flatten")))
    assert {(e.source_key, e.reason) for e in written} == {
        ("a.jpg", "not_in_class_folder"), ("b.jpg", "not_in_class_folder")}


def test_a_detection_file_set_aside_is_not_also_counted_used():
    import pandas as pd

    rec = pd.DataFrame([{"source_key": "val2017/1.jpg", "source_etag": "e"}])
    keys = ("val2017/1.jpg", "annotations/instances_val2017.json",
            "annotations/captions_val2017.json")
    inputs = GateInputs(
        records=rec, sources=[{"key": k, "etag": "e"} for k in keys],
        not_used=[{"key": keys[2], "reason": "not_instances", "detail": ""}],
        summary={"used": [keys[1]]})
    frame = _sources_frame(inputs, rec, detection=True).set_index("source_key")
    assert frame["accounted"].to_dict() == dict.fromkeys(keys, 1)
