"""SegmentationRecordDataset + joint transforms through MXNet's DataLoader with worker
processes: every output pixel of the image must sit on the mask pixel of the same source
coordinate (images encode their own coordinates: R = x, G = y)."""

from __future__ import annotations

import numpy as np
import pytest

from recforge.imaging import PackOptions
from recforge.segmentation import pack as segpack
from recforge.segmentation.pack import SegPackOptions, SegPair
from tests.common.segdata import BLUE, coord_class, coord_image, exact_mask, png

mx = pytest.importorskip("mxnet")
from recforge.segmentation import dataset as rg  # noqa: E402

SIZES = [(96, 64), (128, 80), (80, 120), (40, 40), (200, 150)]  # (w, h); one smaller than crop


def _pack(root, mask_fn, n=10):
    pairs = []
    for k in range(n):
        w, h = SIZES[k % len(SIZES)]
        pairs.append(SegPair(k, f"{k}.png", png(coord_image(w, h)), png(mask_fn(w, h)), {}))
    opts = SegPackOptions(PackOptions(resize=0, encoding=".png", quality=1))
    segpack.pack_pairs(pairs, root, opts, name="train")
    return root / "train.rec"


@pytest.fixture(scope="module")
def exact_rec(tmp_path_factory):
    return _pack(tmp_path_factory.mktemp("exact"), exact_mask)


@pytest.fixture(scope="module")
def xramp_rec(tmp_path_factory):
    return _pack(tmp_path_factory.mktemp("xramp"),
                 lambda w, h: np.mgrid[0:h, 0:w][1].astype(np.uint8))


def _transform(interp, seed=None):
    return rg.JointCompose([
        rg.RandomScale(range(32, 129, 32), image_interp=interp, seed=seed),
        rg.RandomFlipLeftRight(seed=seed),
        rg.RandomCrop((64, 64), pad_image=0, ignore_index=255, seed=seed),
    ])


def _params(img):
    """(flip, x0, y0, scale) recovered from a transformed coordinate image."""
    r = img[..., 0].astype(int)
    valid = img[..., 2] == BLUE
    row = r[valid.any(1).argmax()]
    return (bool(row[0] > row[1]) if valid[0, 1] else None, int(r[0, 0]), int(img[0, 0, 1]),
            int(valid.sum()))


def test_dataset_reads_pairs(exact_rec):
    ds = rg.SegmentationRecordDataset(exact_rec)
    assert len(ds) == 10
    img, mask = ds[1]
    w, h = SIZES[1]
    np.testing.assert_array_equal(img, coord_image(w, h))  # RGB, not BGR
    np.testing.assert_array_equal(mask, exact_mask(w, h))


def test_pixel_exact_alignment_through_dataloader_workers(exact_rec):
    ds = rg.SegmentationRecordDataset(exact_rec).transform(_transform("nearest"))
    loader = mx.gluon.data.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2,
                                      last_batch="keep")
    flips, checked = set(), 0
    for _epoch in range(2):
        for imgs, masks in loader:
            imgs, masks = imgs.asnumpy(), masks.asnumpy()
            assert imgs.shape[1:] == (64, 64, 3) and masks.shape[1:] == (64, 64)
            for img, mask in zip(imgs, masks, strict=True):
                real = img[..., 2] == BLUE
                # padding: image 0, mask ignore; everywhere else the mask is the class of
                # the very source pixel the image pixel came from
                assert (mask[~real] == 255).all() and (img[~real] == 0).all()
                want = coord_class(img[..., 0][real], img[..., 1][real])
                np.testing.assert_array_equal(mask[real], want)
                checked += int(real.sum())
                flips.add(_params(img)[0])
    assert checked > 20 * 64 * 64 // 2
    assert {True, False} <= flips


class _Draw(rg._Random):
    """Returns its raw random draw, to compare the streams of the workers."""

    def __call__(self, img, mask):
        return np.array([self.rng().random()]), mask[:1, :1]


def test_each_worker_has_its_own_random_stream(exact_rec):
    ds = rg.SegmentationRecordDataset(exact_rec).transform(_Draw())
    ds[0]  # the parent's stream exists before the fork; workers must not inherit it
    loader = mx.gluon.data.DataLoader(ds, batch_size=1, num_workers=2)
    draws = [float(d.asnumpy()[0, 0]) for _ in range(2) for d, _m in loader]
    assert len(draws) == 20 and len(set(draws)) == 20


def test_linear_image_resize_stays_within_a_pixel(xramp_rec):
    ds = rg.SegmentationRecordDataset(xramp_rec).transform(_transform("linear", seed=3))
    loader = mx.gluon.data.DataLoader(ds, batch_size=5, num_workers=2)
    for imgs, masks in loader:
        imgs, masks = imgs.asnumpy().astype(int), masks.asnumpy().astype(int)
        real = (imgs[..., 2] == BLUE) & (masks != 255)
        assert np.abs(imgs[..., 0] - masks)[real].max() <= 1


def test_seeded_transforms_reproduce_in_one_process(exact_rec):
    ds = rg.SegmentationRecordDataset(exact_rec)
    a = [_params(_transform("nearest", seed=7)(*ds.read(i))[0]) for i in range(len(ds))]
    b = [_params(_transform("nearest", seed=7)(*ds.read(i))[0]) for i in range(len(ds))]
    assert a == b


def test_to_tensor():
    img = np.full((2, 3, 3), 255, np.uint8)
    x, m = rg.ToTensor(mean=(0, 0, 0), std=(1, 1, 1))(img, np.ones((2, 3), np.uint8))
    assert x.shape == (3, 2, 3) and x.dtype == np.float32 and np.allclose(x, 1.0)
    assert m.dtype == np.int32


def test_crop_pads_image_with_mean_and_mask_with_ignore():
    img = np.full((10, 10, 3), 7, np.uint8)
    out, mask = rg.RandomCrop(16, pad_image="mean", ignore_index=250)(img, np.zeros((10, 10),
                                                                                   np.uint8))
    assert out.shape == (16, 16, 3) and mask.shape == (16, 16)
    assert (mask[10:] == 250).all() and tuple(out[15, 15]) == (124, 116, 104)
    assert (out[:10, :10] == 7).all() and (mask[:10, :10] == 0).all()


def test_argument_errors(exact_rec, tmp_path):
    with pytest.raises(ValueError, match=r"sizes \[500\] are not positive multiples of 32"):
        rg.RandomScale([512, 500])
    with pytest.raises(ValueError, match="crop size"):
        rg.RandomCrop((0, 4))
    root = exact_rec.parent
    (tmp_path / "train.rec").write_bytes((root / "train.rec").read_bytes())
    (tmp_path / "train.idx").write_bytes((root / "train.idx").read_bytes())
    (tmp_path / "train_mask.rec").write_bytes((root / "train_mask.rec").read_bytes())
    lines = (root / "train_mask.idx").read_text().splitlines()
    (tmp_path / "train_mask.idx").write_text("\n".join(lines[::-1]) + "\n")
    with pytest.raises(ValueError, match="not aligned"):
        rg.SegmentationRecordDataset(tmp_path / "train.rec")
    with pytest.raises(FileNotFoundError, match="_mask.rec"):
        rg.SegmentationRecordDataset(tmp_path / "nope.rec")
