"""The segmentation stages chained over a real ``Run`` (local storage) the way the DAG will
chain them: ingest → pairs → classes → plan → convert masks → pack → merge → validate →
Gluon, with exact reconciliation (every listed object packed or quarantined once)."""

from __future__ import annotations

import numpy as np
import pytest

from recforge import allocator, quarantine, run_state, storage
from recforge.format import validate
from recforge.run import Run
from recforge.spec import parse_spec
from recforge.stages import convert_masks, flatten, ingest, merge, pack, remap_labels, split
from tests.common import mxnet_readers
from tests.common.segdata import (
    block_ids,
    cityscapes_color,
    coord_image,
    expected_train_ids,
    png,
)


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


def test_segmentation_run(tmp_path, source, monkeypatch):
    src, ids_of = source
    kept = []  # each image stage's process keeps the memory one image frees for the next
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: kept.append(1) or True)
    spec = parse_spec({
        "name": "city", "task": "segmentation",
        "source": {"uri": str(src), "pairs": {
            "images": "leftImg8bit", "masks": "gtFine", "image_suffix": "_leftImg8bit.png",
            "mask_suffix": "_gtFine_color.png"}},
        "segmentation": {"colormap": "cityscapes", "target": "trainId"},
        "splits": {"val_ratio": 0.0}, "pack": {"resize": 0, "encoding": ".png", "shard_size": 3},
        "publish": {"uri": str(tmp_path / "pub")}})
    run = Run(spec, "t1")
    ingest.ingest(run)
    assert flatten.flatten(run) == {"items": 6, "classes": 0, "quarantined": 0, "not_used": 6}
    assert remap_labels.remap_labels(run)["num_classes"] == 19
    shards = split.split(run)["shards"]
    # content-defined shards (about pack.shard_size each): how many depends on the keys
    assert shards == [f"train-{n:05d}" for n in range(len(shards))] and len(shards) <= 6
    for sid in shards:
        convert_masks.convert_masks(run, sid)
        pack.pack(run, sid)
    assert len(kept) == 2 * len(shards)
    converted = storage.read_jsonl(run.converted_masks("train-00000"))
    assert all(storage.exists(r["mask_uri"]) and r["mask_uri"].startswith(run.masks("train-00000"))
               for r in converted)

    summary = merge.merge(run)
    assert {k: summary[k] for k in ("listed", "packed", "quarantined", "not_used")} == \
        {"listed": 18, "packed": 8, "quarantined": 4, "not_used": 6}
    assert summary["not_used_by_reason"] == {"not_selected": 6}  # the *_labelIds.png siblings
    assert summary["splits"] == {"train": 4}
    entries = quarantine.loads(storage.get_bytes(run_state.output(run, "quarantine.jsonl")))
    reasons = sorted(e.reason for e in entries)
    assert reasons == ["mask_size_mismatch"] * 2 + ["undecodable"] * 2
    records = storage.read_jsonl(run_state.output(run, "records.jsonl"))

    # validate: classification checks on the images and mask checks on the pair
    report = validate.validate_prefix(run_state.out(run))
    assert report["ok"], report["failures"]

    # train
    ds = mxnet_readers.read("segmentation_pairs", root=run_state.out(run), split="train")
    assert len(ds["keys"]) == 4 and ds["num_classes"] == 19
    key_to_src = {r["key"]: r["source_key"] for r in records}
    for key, img, mask in zip(ds["keys"], ds["images"], ds["masks"], strict=True):
        np.testing.assert_array_equal(mask, expected_train_ids(ids_of[key_to_src[key]]))
        np.testing.assert_array_equal(img, coord_image(64, 48))


def test_validate_checks_masks(tmp_path):
    from recforge.segmentation import pack as segpack

    pairs = [segpack.SegPair(k, f"{k}.png", png(coord_image(8, 8)),
                             png(np.full((8, 8), k, np.uint8)), {}) for k in range(3)]
    segpack.pack_pairs(pairs, tmp_path, segpack.SegPackOptions(), name="train")
    (tmp_path / "classes.json").write_text('{"num_classes": 2, "ignore_index": 255}')
    report = validate.validate_local(tmp_path)
    assert not report["ok"]
    assert report["failures"] == ["train: train_mask.rec: key 2: mask values [2] outside "
                                  "[0, 2) and ignore 255"]
    (tmp_path / "train_mask.idx").unlink()
    assert "train_mask.idx missing" in validate.validate_local(tmp_path)["failures"][0]
