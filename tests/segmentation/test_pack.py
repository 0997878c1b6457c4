"""Aligned image/mask packing: same keys and order, lossless single-channel masks, nearest
resize, quarantine of bad pairs, MXNet's readers, merge and validation."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from recforge import storage
from recforge.format import paired, recordio
from recforge.imaging import PackOptions
from recforge.segmentation import pack as segpack
from recforge.segmentation.masks import MaskConverter, UnknownMaskValues
from recforge.segmentation.pack import SegPackOptions, SegPair
from recforge.stages import merge
from tests.common.segdata import block_ids, coord_image, png

W, H = 64, 48


def pairs(n, start=0, w=W, h=H):
    out = []
    for k in range(start, start + n):
        img = np.roll(coord_image(w, h), k, axis=1)  # each image differs
        out.append(SegPair(k, f"img/{k}.png", png(img),
                           png(block_ids(w, h, range(10), block=4, seed=k)),
                           {"source_key": f"img/{k}.png", "mask_key": f"gt/{k}.png"}))
    return out


LOSSLESS = SegPackOptions(PackOptions(resize=0, encoding=".png", quality=1))


def test_resize_uses_nearest_for_masks_and_keeps_alignment(tmp_path):
    w, h = 200, 120
    img = coord_image(w, h)
    mask = (np.mgrid[0:h, 0:w][1] % 250).astype(np.uint8)  # mask value = x
    pair = SegPair(0, "a.png", png(img), png(mask), {})
    opts = SegPackOptions(PackOptions(resize=48, encoding=".png", interpolation="area"))
    segpack.pack_pairs([pair], tmp_path, opts)
    _, ib = recordio.unpack_image_record(next(recordio.iter_records(tmp_path / "part.rec"))[1])
    _, mb = recordio.unpack_image_record(
        next(recordio.iter_records(tmp_path / "part_mask.rec"))[1])
    ri = cv2.imdecode(np.frombuffer(ib, np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
    rm = cv2.imdecode(np.frombuffer(mb, np.uint8), cv2.IMREAD_UNCHANGED)
    assert rm.shape == ri.shape[:2] == (48, 80)
    assert set(np.unique(rm)) <= set(np.unique(mask))      # nearest never invents values
    # the image's averaged x coordinate and the mask's sampled x agree to within a pixel
    assert np.abs(ri[..., 0].astype(int) - rm.astype(int)).max() <= 1


def test_bad_pairs_are_quarantined_with_both_keys(tmp_path):
    good = pairs(2)
    small_mask = SegPair(2, "img/2.png", png(coord_image(W, H)),
                         png(np.zeros((H // 2, W // 2), np.uint8)),
                         {"source_key": "img/2.png", "mask_key": "gt/2.png"})
    broken = SegPair(3, "img/3.png", b"\x89PNG\r\n\x1a\nbroken", good[0].mask,
                     {"source_key": "img/3.png", "mask_key": "gt/3.png"})
    missing = SegPair(4, "img/4.png", good[0].image, FileNotFoundError("gt/4.png"),
                      {"source_key": "img/4.png", "mask_key": "gt/4.png"})
    got = segpack.pack_pairs([good[0], small_mask, broken, missing, good[1]], tmp_path,
                             LOSSLESS)
    assert got == {"packed": 2, "quarantined": 6}
    q = [json.loads(x) for x in (tmp_path / "quarantine.jsonl").read_text().splitlines()]
    by_key = {e["source_key"]: e for e in q}
    assert set(by_key) == {"img/2.png", "gt/2.png", "img/3.png", "gt/3.png", "img/4.png",
                           "gt/4.png"}
    assert by_key["gt/2.png"]["reason"] == "mask_size_mismatch"
    assert "image is 64x48 but its mask is 32x24" in by_key["img/2.png"]["detail"]
    assert by_key["img/4.png"]["reason"] == "missing"
    assert [k for k, _ in recordio.read_idx(tmp_path / "part_mask.idx")] == [0, 1]


def test_colour_masks_converted_at_pack_time_and_unknown_fails(tmp_path):
    conv = MaskConverter.from_config("voc")
    palette = np.array([lab.color for lab in conv.colormap.labels][:21], np.uint8)
    ids = block_ids(W, H, range(21), block=4)
    p = SegPair(0, "a.png", png(coord_image(W, H)), png(palette[ids]), {})
    assert segpack.pack_pairs([p], tmp_path, LOSSLESS, converter=conv)["packed"] == 1
    assert paired.validate_mask_split(tmp_path, "part", num_classes=21) == []
    bad = palette[ids].copy()
    bad[0, 0] = (1, 2, 3)
    with pytest.raises(UnknownMaskValues, match="colour \\(1, 2, 3\\)"):
        segpack.pack_pairs([SegPair(0, "a.png", p.image, png(bad), {"mask_key": "gt/a.png"})],
                           tmp_path / "x", LOSSLESS, converter=conv)


def test_pack_pair_rows_from_storage(tmp_path):
    src = tmp_path / "src"
    rows = []
    for p in pairs(3):
        (src / "img").mkdir(parents=True, exist_ok=True)
        (src / "gt").mkdir(parents=True, exist_ok=True)
        (src / p.row["source_key"]).write_bytes(p.image)
        (src / p.row["mask_key"]).write_bytes(p.mask)
        rows.append({**p.row, "record_key": p.key, "name": p.name})
    rows[1] = {**rows[1], "mask_uri": str(src / rows[1]["mask_key"]), "mask_key": "unused"}
    got = segpack.pack_pair_rows(rows, str(src), tmp_path / "w", LOSSLESS, fetch_threads=2)
    assert got == {"packed": 3, "quarantined": 0}


def test_merge_and_validate(tmp_path):
    d0, d1 = tmp_path / "train-00000", tmp_path / "train-00001"
    segpack.pack_pairs(pairs(3), d0, LOSSLESS)
    segpack.pack_pairs(pairs(2, start=3), d1, LOSSLESS)
    out = tmp_path / "out"
    out.mkdir()
    shards = [merge.Shard.of_folder(d) for d in (d0, d1)]
    with storage.HashingWriter(tmp_path / "records.jsonl") as sink:
        merge.merge_split(shards, str(out), "train", tmp_path, sink, merge.Reconciler())
    records = storage.read_jsonl(str(tmp_path / "records.jsonl"))  # images and masks
    assert [k for k, _ in recordio.read_idx(out / "train_mask.idx")] == \
        [r["key"] for r in records] == [0, 1, 2, 3, 4]
    assert [r["mask_offset"] for r in records] == \
        [o for _, o in recordio.read_idx(out / "train_mask.idx")]
    assert paired.validate_mask_split(out, "train", num_classes=10) == []
    assert paired.validate_mask_split(out, "train", num_classes=5)[0].startswith(
        "train_mask.rec: key 0: mask values [5, 6, 7, 8, 9] outside [0, 5)")
    # a mask index out of step with the images is caught
    lines = (out / "train_mask.idx").read_text().splitlines()
    (out / "train_mask.idx").write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")
    fails = paired.validate_mask_split(out, "train")
    assert "not aligned" in fails[0] and "position 0" in fails[0]
    (out / "train_mask.rec").unlink()
    assert paired.validate_mask_split(out, "train") == ["train_mask.rec missing"]

