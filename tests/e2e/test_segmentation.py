"""The segmentation DAG end to end: Cityscapes-style colour masks in S3 → RGB→ID stage →
aligned image/mask RecordIO pairs published → read back pixel-exact with the Gluon dataset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from recforge import storage
from recforge.dev import demo
from tests.common import mxnet_readers
from tests.common.segdata import (
    block_ids,
    cityscapes_color,
    coord_image,
    expected_train_ids,
    png,
)
from tests.common.sources import SMALL_BENCH

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def test_segmentation_dag_publishes_aligned_pairs(bucket, tmp_path):
    ids_of = {}
    client = storage.s3_client()
    for n in range(8):
        stem = f"train/city/c_{n:06d}"
        ids = block_ids(64, 48, [*range(34), 255], block=4, seed=n)
        mask = png(cityscapes_color(ids))
        if n == 7:
            mask = png(cityscapes_color(ids[::2, ::2]))  # wrong size: quarantined, both keys
        img_key = f"leftImg8bit/{stem}_leftImg8bit.png"
        ids_of[img_key] = ids
        client.put_object(Bucket=bucket, Key=f"raw/{img_key}", Body=png(coord_image(64, 48)))
        client.put_object(Bucket=bucket, Key=f"raw/gtFine/{stem}_gtFine_color.png", Body=mask)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "city.yaml").write_text(yaml.safe_dump({
        "name": "city", "task": "segmentation", "schedule": None,
        "source": {"uri": f"s3://{bucket}/raw",
                   "pairs": {"images": "leftImg8bit", "masks": "gtFine",
                             "image_suffix": "_leftImg8bit.png",
                             "mask_suffix": "_gtFine_color.png"}},
        "segmentation": {"colormap": "cityscapes", "target": "trainId"},
        "splits": {"val_ratio": 0.0},
        "pack": {"resize": 0, "encoding": ".png", "shard_size": 3},
        "bench": SMALL_BENCH,
        "publish": {"uri": f"s3://{bucket}/datasets"},
    }))
    env = demo.airflow_env(REPO, {"AIRFLOW_HOME": str(tmp_path / "airflow"),
                                  "RECFORGE_SPECS_DIR": str(specs)})
    ok, out = demo.run_dag_test("recforge__city", env)
    assert ok, out[-5000:]
    assert "convert_masks" in out

    version = storage.read_json(f"s3://{bucket}/datasets/city/latest.json")["uri"]
    local = tmp_path / "pub"
    for obj in storage.list_objects(version):
        storage.download(f"{version}/{obj.key}", local / obj.key)
    summary = json.loads((local / "summary.json").read_text())
    # counts are objects: each record packs an image and its mask
    assert summary == {**summary, "listed": 16, "packed": 14, "quarantined": 2}
    assert summary["splits"] == {"train": 7}
    assert (local / "train_mask.rec").exists() and (local / "train_mask.idx").exists()

    records = [json.loads(ln) for ln in (local / "records.jsonl").read_text().splitlines()]
    key_to_src = {r["key"]: r["source_key"] for r in records}
    ds = mxnet_readers.read("segmentation_pairs", root=str(local), split="train")
    assert len(ds["keys"]) == 7 and ds["num_classes"] == 19
    for key, img, mask in zip(ds["keys"], ds["images"], ds["masks"], strict=True):
        np.testing.assert_array_equal(mask, expected_train_ids(ids_of[key_to_src[key]]))
        np.testing.assert_array_equal(img, coord_image(64, 48))

    # joint transforms (flip, scale pool, crop with padding) through DataLoader workers: every
    # output pixel's mask value is the published mask at the coordinate the image pixel
    # encodes (R = x, G = y), and padding is ignore in the mask wherever the image is padding
    from tests.common.segdata import BLUE

    checked = mxnet_readers.read("joint_transforms_follow_the_pixels", root=str(local),
                                 split="train", blue=BLUE)
    assert len(checked) == 7
    assert all(c == {"real": True, "padded": True, "padding_ignored": True,
                     "mask_follows": True} for c in checked), checked
