"""Packed image/mask pairs read by MXNet's own readers: aligned keys, PNG masks whose values
MXNet's C++ iterator keeps, RGB images as packed."""

from __future__ import annotations

import json

import cv2
import numpy as np

from recforge.format import recordio
from recforge.segmentation import pack as segpack
from tests.common.segdata import block_ids, coord_image
from tests.segmentation.test_pack import LOSSLESS, H, W, pairs


def test_pack_pairs_aligned_and_readable_by_mxnet(tmp_path):
    import mxnet as mx

    got = segpack.pack_pairs(pairs(5), tmp_path, LOSSLESS, name="train")
    assert got == {"packed": 5, "quarantined": 0}
    for f in ("train.rec", "train.idx", "train_mask.rec", "train_mask.idx", "train.lst"):
        assert (tmp_path / f).exists()
    ikeys = [k for k, _ in recordio.read_idx(tmp_path / "train.idx")]
    assert ikeys == [k for k, _ in recordio.read_idx(tmp_path / "train_mask.idx")]
    assert ikeys == list(range(5))
    imgs = mx.recordio.MXIndexedRecordIO(str(tmp_path / "train.idx"),
                                         str(tmp_path / "train.rec"), "r")
    msks = mx.recordio.MXIndexedRecordIO(str(tmp_path / "train_mask.idx"),
                                         str(tmp_path / "train_mask.rec"), "r")
    for p in pairs(5):
        mhead, mbytes = mx.recordio.unpack(msks.read_idx(p.key))
        ihead, ibytes = mx.recordio.unpack(imgs.read_idx(p.key))
        assert mhead.id == ihead.id == p.key
        assert mbytes[:8] == b"\x89PNG\r\n\x1a\n"
        mask = cv2.imdecode(np.frombuffer(mbytes, np.uint8), cv2.IMREAD_UNCHANGED)
        assert mask.ndim == 2
        np.testing.assert_array_equal(mask, block_ids(W, H, range(10), block=4, seed=p.key))
        img = mx.image.imdecode(ibytes).asnumpy()  # RGB
        np.testing.assert_array_equal(img, np.roll(coord_image(W, H), p.key, axis=1))
    rows = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r["key"] for r in rows] == list(range(5))
    assert sum(rows[0]["class_pixels"].values()) == W * H

    # MXNet's C++ iterator reads the mask file as 1-channel images, values intact
    it = mx.io.ImageRecordIter(path_imgrec=str(tmp_path / "train_mask.rec"),
                               path_imgidx=str(tmp_path / "train_mask.idx"),
                               data_shape=(1, H, W), batch_size=5, shuffle=False,
                               preprocess_threads=1)
    batch = it.next().data[0].asnumpy()
    for k in range(5):
        np.testing.assert_array_equal(batch[k, 0].astype(np.uint8),
                                      block_ids(W, H, range(10), block=4, seed=k))
    it = mx.io.ImageRecordIter(path_imgrec=str(tmp_path / "train.rec"),
                               data_shape=(3, H, W), batch_size=5, preprocess_threads=1)
    assert it.next().data[0].shape == (5, 3, H, W)
