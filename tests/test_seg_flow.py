"""The segmentation stages chained the way the DAG will chain them (local storage): pair →
convert masks into staging → pack shards → merge → validate → read with Gluon."""

from __future__ import annotations

import json

import numpy as np
from recforge import masks, merge, segpack, segpairs, storage, validate
from recforge.imaging import PackOptions
from recforge.masks import MaskConverter
from recforge.segpack import SegPackOptions
from segdata import block_ids, coord_image, png
from test_masks import cityscapes_color, expected_train_ids


def test_cityscapes_style_flow(tmp_path):
    src = tmp_path / "src"
    ids_of = {}
    for n in range(5):
        stem = f"train/city/c_{n:06d}"
        ids = block_ids(64, 48, [*range(34), 255], block=4, seed=n)
        ids_of[f"leftImg8bit/{stem}_leftImg8bit.png"] = ids
        for key, data in ((f"leftImg8bit/{stem}_leftImg8bit.png", png(coord_image(64, 48))),
                          (f"gtFine/{stem}_gtFine_color.png", png(cityscapes_color(ids))),
                          (f"gtFine/{stem}_gtFine_labelIds.png", png(ids))):
            (src / key).parent.mkdir(parents=True, exist_ok=True)
            (src / key).write_bytes(data)
    listed = [{"key": o.key, "size": o.size, "etag": o.etag}
              for o in storage.list_objects(str(src))]

    # flatten (layout): pairs + quarantine
    rule = segpairs.PairRule("leftImg8bit", "gtFine", "_leftImg8bit.png", "_gtFine_color.png")
    items, refused = segpairs.pair_by_rule(listed, rule)
    assert len(items) == 5 and {e.reason for e in refused} == {"not_selected"}

    # labels: classes.json from the label definition
    conv = MaskConverter.from_config("cityscapes", target="trainId")
    classes = conv.classes_document()

    # split/plan (two shards of one split) → mask conversion stage → pack stage
    rows = [{**it, "split": "train", "record_key": k, "label": 0} for k, it in enumerate(items)]
    shards = {"train-00000": rows[:3], "train-00001": rows[3:]}
    staging = tmp_path / "staging"
    dirs = []
    for sid, plan in shards.items():
        out_uri = str(staging / "masks" / sid)
        masks.convert_rows(plan, str(src), out_uri, conv)
        converted = storage.read_jsonl(f"{out_uri}/converted.jsonl")
        work = staging / "shards" / sid
        opts = SegPackOptions(PackOptions(resize=0, encoding=".png", quality=1))
        assert segpack.pack_pair_rows(converted, str(src), work, opts)["packed"] == len(plan)
        dirs.append(work)

    # merge: images via merge.merge_split, masks via segpack.merge_mask_parts
    out = staging / "out"
    out.mkdir()
    records = merge.merge_split(dirs, out, "train")
    assert segpack.merge_mask_parts(dirs, out, "train") == len(records) == 5
    (out / "classes.json").write_text(json.dumps(classes))

    # validate: the classification checks on the images, the mask checks on the pair
    report = validate.validate_local(out)
    assert report["ok"], report["failures"]
    assert list(report["splits"]) == ["train"]  # train_mask.idx is not taken as a split
    assert segpack.validate_mask_split(out, "train", classes["num_classes"],
                                       classes["ignore_index"]) == []

    # train: the Gluon dataset gives back exactly the expected trainId masks
    from recforge.gluon import SegmentationRecordDataset

    ds = SegmentationRecordDataset.from_split(out, "train")
    assert ds.num_classes == 19 and ds.ignore_index == 255
    by_name = {r["key"]: r["source_key"] for r in records}
    for i, key in enumerate(ds.keys):
        img, mask = ds[i]
        np.testing.assert_array_equal(mask, expected_train_ids(ids_of[by_name[key]]))
        np.testing.assert_array_equal(img, coord_image(64, 48))
