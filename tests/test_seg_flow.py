"""The segmentation stages chained over a real ``Run`` (local storage) the way the DAG will
chain them: ingest → pairs → classes → plan → convert masks → pack → merge → validate →
Gluon, with exact reconciliation (every listed object packed or quarantined once)."""

from __future__ import annotations

import numpy as np
import pytest
from segdata import block_ids, coord_image, png
from test_masks import cityscapes_color, expected_train_ids

from recforge import ingest, merge, quarantine, segstages, storage, validate
from recforge.imaging import PackOptions
from recforge.masks import MaskConverter
from recforge.run import Run
from recforge.segpack import SegPackOptions
from recforge.segpairs import PairRule
from recforge.spec import parse_spec


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "src"
    ids_of = {}
    for n in range(6):
        stem = f"train/city/c_{n:06d}"
        ids = block_ids(64, 48, [*range(34), 255], block=4, seed=n)
        img_key = f"leftImg8bit/{stem}_leftImg8bit.png"
        mask = png(cityscapes_color(ids))
        if n == 4:  # a mask at half size: the pair is quarantined at pack time
            mask = png(cityscapes_color(ids[::2, ::2]))
        if n == 5:  # an undecodable mask: quarantined by the mask stage
            mask = b"\x89PNG\r\n\x1a\n garbage"
        ids_of[img_key] = ids
        for key, data in ((img_key, png(coord_image(64, 48))),
                          (f"gtFine/{stem}_gtFine_color.png", mask),
                          (f"gtFine/{stem}_gtFine_labelIds.png", png(ids))):
            (src / key).parent.mkdir(parents=True, exist_ok=True)
            (src / key).write_bytes(data)
    return src, ids_of


def test_segmentation_run(tmp_path, source):
    src, ids_of = source
    spec = parse_spec({"name": "city", "source": {"uri": str(src)},
                       "publish": {"uri": str(tmp_path / "pub")}})
    run = Run(spec, "t1")
    conv = MaskConverter.from_config("cityscapes", target="trainId")
    ingest.ingest(run)
    rule = PairRule("leftImg8bit", "gtFine", "_leftImg8bit.png", "_gtFine_color.png")
    assert segstages.flatten_pairs(run, rule) == {"items": 6, "quarantined": 6}
    assert segstages.write_classes(run, conv)["num_classes"] == 19

    # plan (the lead's split stage does this; label 0 for segmentation records)
    items = storage.read_jsonl(run.items)
    rows = [{**it, "split": "train", "record_key": k, "label": 0} for k, it in enumerate(items)]
    shards = {"train-00000": rows[:3], "train-00001": rows[3:]}
    for sid, plan in shards.items():
        storage.write_jsonl(run.shard_plan(sid), plan)
        segstages.convert_masks_shard(run, sid, conv)
        segstages.pack_seg_shard(run, sid, SegPackOptions(PackOptions(resize=0,
                                                                      encoding=".png")))
    assert storage.exists(segstages.masks_uri(run, "train-00000",
                                              "gtFine/train/city/c_000000_gtFine_color.png"))

    # merge (what merge.merge must add for segmentation, see the report)
    work = tmp_path / "merge"
    dirs = []
    entries = []
    for stage in ("ingest", "flatten"):
        entries += quarantine.loads(storage.get_bytes(run.stage_quarantine(stage)))
    entries += segstages.mask_stage_quarantine(run, list(shards))
    for sid in shards:
        for name in ("part.rec", "part.idx", "part.lst", "records.jsonl", "quarantine.jsonl"):
            storage.download(run.shard_output(sid, name), work / sid / name)
        entries += quarantine.loads((work / sid / "quarantine.jsonl").read_bytes())
        dirs.append(work / sid)
    out = work / "out"
    out.mkdir()
    records = merge.merge_split(dirs, out, "train")
    for ext in ("rec", "idx", "lst"):
        storage.upload(out / f"train.{ext}", run.output(f"train.{ext}"))
    assert segstages.merge_mask_split(run, "train", list(shards), work) == len(records) == 4
    storage.write_json(run.output("classes.json"), storage.read_json(run.classes))
    listed = [r["key"] for r in storage.read_jsonl(run.source_manifest)]
    counts = merge.reconcile(listed, segstages.packed_keys(records),
                             [e.source_key for e in entries])
    assert counts == {"listed": 18, "packed": 8, "quarantined": 10}
    reasons = sorted(e.reason for e in entries)
    assert reasons == ["mask_size_mismatch"] * 2 + ["not_selected"] * 6 + ["undecodable"] * 2

    # validate: classification checks on the images and mask checks on the pair
    report = validate.validate_prefix(run.uri("out"))
    assert report["ok"], report["failures"]

    # train
    from recforge.gluon import SegmentationRecordDataset

    ds = SegmentationRecordDataset.from_split(run.uri("out"), "train")
    assert len(ds) == 4 and ds.num_classes == 19
    key_to_src = {r["key"]: r["source_key"] for r in records}
    for i, key in enumerate(ds.keys):
        img, mask = ds[i]
        np.testing.assert_array_equal(mask, expected_train_ids(ids_of[key_to_src[key]]))
        np.testing.assert_array_equal(img, coord_image(64, 48))


def test_validate_checks_masks(tmp_path):
    from recforge import segpack

    pairs = [segpack.SegPair(k, f"{k}.png", png(coord_image(8, 8)),
                             png(np.full((8, 8), k, np.uint8)), {}) for k in range(3)]
    segpack.pack_pairs(pairs, tmp_path, SegPackOptions(), name="train")
    (tmp_path / "classes.json").write_text('{"num_classes": 2, "ignore_index": 255}')
    report = validate.validate_local(tmp_path)
    assert not report["ok"]
    assert report["failures"] == ["train: train_mask.rec: key 2: mask values [2] outside "
                                  "[0, 2) and ignore 255"]
    (tmp_path / "train_mask.idx").unlink()
    assert "train_mask.idx missing" in validate.validate_local(tmp_path)["failures"][0]
