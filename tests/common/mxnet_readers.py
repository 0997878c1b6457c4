"""MXNet's own readers over files the core suite wrote, run in the MXNet environment.

The core suite (numpy 2) cannot import MXNet; it calls these through :func:`read` — one
child process per call, JSON in and out, exactly as the loader benchmark reaches MXNet.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def read(name: str, **kwargs):
    """Call ``name`` below in the MXNet environment (``$RECFORGE_MXNET_PYTHON``)."""
    from recforge.bench import environment

    return environment.call(f"tests.common.mxnet_readers:{name}", kwargs,
                            pythonpath=[str(REPO)])


def iter_labels(rec: str, idx: str | None, data_shape: list[int], shuffle: bool = False,
                seed: int = 0) -> list[float]:
    """Every record's first label through ``mx.io.ImageRecordIter``, one per batch."""
    import mxnet as mx

    kw = {"path_imgidx": idx} if idx else {}
    it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=tuple(data_shape), batch_size=1,
                               shuffle=shuffle, seed=seed, **kw)
    return [float(b.label[0].asnumpy()[0]) for b in it]


def iter_batch(rec: str, idx: str, data_shape: list[int], batch_size: int) -> dict:
    """The first batch of ``mx.io.ImageRecordIter``: its data shape and labels."""
    import mxnet as mx

    it = mx.io.ImageRecordIter(path_imgrec=rec, path_imgidx=idx, data_shape=tuple(data_shape),
                               batch_size=batch_size, shuffle=False)
    batch = next(iter(it))
    return {"shape": list(batch.data[0].shape),
            "labels": [float(x) for x in batch.label[0].asnumpy().ravel()]}


def indexed(idx: str, rec: str) -> dict:
    """``mx.recordio.MXIndexedRecordIO``: its keys, and each record's header and body size."""
    import mxnet as mx

    reader = mx.recordio.MXIndexedRecordIO(idx, rec, "r")
    rows = []
    for key in reader.keys:
        header, body = mx.recordio.unpack(reader.read_idx(key))
        label = header.label
        rows.append({"key": key, "id": int(header.id), "body_bytes": len(body),
                     "label": [float(x) for x in label] if hasattr(label, "__len__")
                     else float(label)})
    reader.close()
    return {"keys": list(reader.keys), "records": rows}


def gluon_dataset(rec: str) -> dict:
    """``mx.gluon.data.vision.ImageRecordDataset``: its length and first label."""
    import mxnet as mx

    ds = mx.gluon.data.vision.ImageRecordDataset(rec)
    return {"length": len(ds), "first_label": float(ds[0][1])}


def segmentation_pairs(root: str, split: str) -> dict:
    """``SegmentationRecordDataset`` (MXNet's ``MXIndexedRecordIO`` underneath): the split's
    keys, ``num_classes``, and each record's decoded image and mask as nested lists."""
    from recforge.segmentation.dataset import SegmentationRecordDataset

    ds = SegmentationRecordDataset.from_split(root, split)
    pairs = [ds[i] for i in range(len(ds))]
    return {"num_classes": ds.num_classes, "keys": [int(k) for k in ds.keys],
            "images": [img.tolist() for img, _ in pairs],
            "masks": [mask.tolist() for _, mask in pairs]}


def joint_transforms_follow_the_pixels(root: str, split: str, blue: int) -> list[dict]:
    """Flip, scale and padded crop through Gluon ``DataLoader`` workers, over images whose
    pixels encode their own coordinates (R = x, G = y, B = ``blue``): per sample, whether it
    holds real and padded pixels, whether the padding is ignore (255) in the mask, and whether
    every real pixel's mask value is the published mask at the coordinate it encodes."""
    import numpy as np
    from mxnet.gluon.data import DataLoader

    from recforge.segmentation.dataset import (
        JointCompose,
        RandomCrop,
        RandomFlipLeftRight,
        RandomScale,
        SegmentationRecordDataset,
    )

    plain = SegmentationRecordDataset.from_split(root, split)
    masks = [plain[i][1] for i in range(len(plain))]
    moved = SegmentationRecordDataset.from_split(root, split, transform=JointCompose([
        RandomFlipLeftRight(), RandomScale([64], multiple=32, image_interp="nearest"),
        RandomCrop((72, 96), pad_image=0, ignore_index=255)]))
    out = []
    for i, (img, mask) in enumerate(DataLoader(moved, batch_size=1, num_workers=2,
                                               shuffle=False)):
        img, mask = img.asnumpy()[0], mask.asnumpy()[0]
        real = img[..., 2] == blue
        xs, ys = img[..., 0][real].astype(int), img[..., 1][real].astype(int)
        out.append({"real": bool(real.any()), "padded": bool((~real).any()),
                    "padding_ignored": bool((mask[~real] == 255).all()),
                    "mask_follows": bool(np.array_equal(mask[real], masks[i][ys, xs]))})
    return out


def detection_labels(rec: str, idx: str, data_shape: list[int] | None = None) -> dict:
    """``mx.image.ImageDetIter`` over a detection split, one record per batch, no
    augmentation: record key → its objects ``[cls, xmin, ymin, xmax, ymax, difficult]`` as
    the iterator returns them (its -1 padding rows dropped)."""
    import mxnet as mx

    keys = mx.recordio.MXIndexedRecordIO(idx, rec, "r").keys
    it = mx.image.ImageDetIter(batch_size=1, data_shape=tuple(data_shape or (3, 64, 64)),
                               path_imgrec=rec, path_imgidx=idx, shuffle=False)
    out = {}
    for key, batch in zip(keys, it, strict=False):
        rows = batch.label[0].asnumpy()[0]
        out[str(key)] = [[float(v) for v in r] for r in rows if not (r == -1).all()]
    return out


def decoded(idx: str, rec: str) -> dict:
    """``MXIndexedRecordIO`` + ``mx.recordio.unpack`` + ``mx.image.imdecode`` (RGB): per
    record, in ``.idx`` order, its key, header (flag, label, id, id2) and pixels as lists."""
    import mxnet as mx

    reader = mx.recordio.MXIndexedRecordIO(idx, rec, "r")
    rows = []
    for key in reader.keys:
        header, body = mx.recordio.unpack(reader.read_idx(key))
        label = header.label
        rows.append({"key": int(key), "flag": int(header.flag), "id": int(header.id),
                     "id2": int(header.id2),
                     "label": [float(x) for x in label] if hasattr(label, "__len__")
                     else float(label),
                     "image": mx.image.imdecode(body).asnumpy().tolist()})
    reader.close()
    return {"records": rows}
