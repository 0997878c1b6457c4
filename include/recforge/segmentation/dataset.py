"""Gluon access to aligned segmentation records, with joint image/mask transforms.

``SegmentationRecordDataset`` reads ``<split>.rec`` and ``<split>_mask.rec`` in lockstep by
key (through MXNet's own ``MXIndexedRecordIO``, which reopens its handle in each DataLoader
worker) and returns ``(image, mask)``: HxWx3 RGB uint8 and HxW uint8 numpy arrays, which
the transforms below work on with OpenCV and ``DataLoader`` batches into NDArrays.

Joint transforms draw their random parameters once per sample and apply them to both
arrays; masks are always resized with nearest-neighbour (pixel-centre, the same geometry
as the image's linear resize) and padded with the ignore index. Each process (DataLoader
worker) gets its own random stream, so workers do not repeat each other's augmentations.

This is the only recforge module that imports mxnet.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import cv2
import mxnet as mx
import numpy as np
from mxnet.gluon.data import Dataset

from recforge.format import names

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_INTERP = {"nearest": cv2.INTER_NEAREST_EXACT, "linear": cv2.INTER_LINEAR,
                "area": cv2.INTER_AREA, "cubic": cv2.INTER_CUBIC}


def _idx_of(rec: str | Path) -> str:
    return str(Path(rec).with_suffix(".idx"))


class SegmentationRecordDataset(Dataset):
    """``(image, mask)`` pairs from an aligned ``.rec`` pair; ``transform(image, mask)``.

    ``mask_rec_path`` defaults to ``<rec stem>_mask.rec``. Construction fails if the two
    indexes do not list the same keys in the same order; an item fails if its image and
    mask sizes differ. ``classes.json`` next to the files (if present) sets ``classes``,
    ``num_classes`` and ``ignore_index``.
    """

    def __init__(self, rec_path: str | Path, mask_rec_path: str | Path | None = None,
                 transform=None):
        rec = Path(rec_path)
        mrec = (Path(mask_rec_path) if mask_rec_path
                else rec.with_name(names.rec(rec.stem, mask=True)))
        for p in (rec, mrec, Path(_idx_of(rec)), Path(_idx_of(mrec))):
            if not p.exists():
                raise FileNotFoundError(f"{p} does not exist; a segmentation split needs "
                                        "<split>.rec/.idx and <split>_mask.rec/.idx")
        self.rec_path, self.mask_rec_path = str(rec), str(mrec)
        self._images = mx.recordio.MXIndexedRecordIO(_idx_of(rec), str(rec), "r")
        self._masks = mx.recordio.MXIndexedRecordIO(_idx_of(mrec), str(mrec), "r")
        if list(self._images.keys) != list(self._masks.keys):
            raise ValueError(f"{mrec.name} is not aligned with {rec.name}: "
                             f"{len(self._masks.keys)} vs {len(self._images.keys)} keys or a "
                             "different order; re-pack the split")
        self.keys = list(self._images.keys)
        self._transform = transform
        meta = rec.with_name(names.CLASSES)
        doc = json.loads(meta.read_text()) if meta.exists() else {}
        self.classes = doc.get("classes", [])
        self.num_classes = doc.get("num_classes")
        self.ignore_index = doc.get("ignore_index", 255)

    @classmethod
    def from_split(cls, root: str | Path, split: str, transform=None):
        return cls(Path(root) / names.rec(split), transform=transform)

    def __len__(self) -> int:
        return len(self.keys)

    def read(self, idx: int) -> tuple[np.ndarray, np.ndarray]:
        """The untransformed pair of item ``idx``."""
        key = self.keys[idx]
        _, ibytes = mx.recordio.unpack(self._images.read_idx(key))
        mhead, mbytes = mx.recordio.unpack(self._masks.read_idx(key))
        img = cv2.imdecode(np.frombuffer(ibytes, np.uint8), cv2.IMREAD_COLOR)
        mask = cv2.imdecode(np.frombuffer(mbytes, np.uint8), cv2.IMREAD_UNCHANGED)
        if img is None or mask is None:
            raise ValueError(f"key {key}: undecodable {'image' if img is None else 'mask'}")
        if mask.ndim != 2:
            raise ValueError(f"key {key}: mask has shape {mask.shape}; expected a "
                             "single-channel class mask (pack with recforge)")
        if img.shape[:2] != mask.shape:
            raise ValueError(f"key {key}: image {img.shape[1]}x{img.shape[0]} and mask "
                             f"{mask.shape[1]}x{mask.shape[0]} differ (WxH)")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB), mask

    def __getitem__(self, idx: int):
        img, mask = self.read(idx)
        if self._transform is not None:
            return self._transform(img, mask)
        return img, mask


# ---- joint transforms ---------------------------------------------------------------------
class _Random:
    """A random stream per process: forked DataLoader workers must not share one."""

    def __init__(self, seed: int | None = None):
        self.seed = seed
        self._owner = os.getpid()
        self._pid: int | None = None
        self._gen: np.random.Generator | None = None

    def rng(self) -> np.random.Generator:
        pid = os.getpid()
        if self._gen is None or pid != self._pid:
            if self.seed is None:
                seq = np.random.SeedSequence()
            elif pid == self._owner:  # reproducible in the creating process (num_workers=0)
                seq = np.random.SeedSequence(self.seed)
            else:
                seq = np.random.SeedSequence(self.seed, spawn_key=(pid,))
            self._gen, self._pid = np.random.default_rng(seq), pid
        return self._gen

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_gen"] = d["_pid"] = None
        return d


class JointCompose:
    """Apply joint transforms in order: ``(image, mask) → (image, mask)``."""

    def __init__(self, transforms: Sequence):
        self.transforms = list(transforms)

    def __call__(self, img, mask):
        for t in self.transforms:
            img, mask = t(img, mask)
        return img, mask


class RandomFlipLeftRight(_Random):
    """Mirror both with probability ``p`` (a flip moves pixels; it never interpolates)."""

    def __init__(self, p: float = 0.5, seed: int | None = None):
        super().__init__(seed)
        self.p = p

    def __call__(self, img, mask):
        if self.rng().random() < self.p:
            return np.ascontiguousarray(img[:, ::-1]), np.ascontiguousarray(mask[:, ::-1])
        return img, mask


class RandomScale(_Random):
    """Resize so the short side is a size drawn from ``sizes`` (each a multiple of
    ``multiple``, the network's output stride); image with ``image_interp``, mask nearest."""

    def __init__(self, sizes: Sequence[int], multiple: int = 32, image_interp: str = "linear",
                 seed: int | None = None):
        super().__init__(seed)
        sizes = [int(s) for s in sizes]
        if not sizes:
            raise ValueError("RandomScale needs at least one size, e.g. range(512, 1025, 32)")
        bad = [s for s in sizes if s <= 0 or s % multiple]
        if bad:
            raise ValueError(f"sizes {bad} are not positive multiples of {multiple}; use e.g. "
                             f"{[max(multiple, round(s / multiple) * multiple) for s in bad]}")
        if image_interp not in IMAGE_INTERP:
            raise ValueError(f"image_interp {image_interp!r} is not one of {list(IMAGE_INTERP)}")
        self.sizes, self.image_interp = sizes, image_interp

    def __call__(self, img, mask):
        short = int(self.rng().choice(self.sizes))
        h, w = mask.shape
        if h <= w:
            nh, nw = short, max(1, round(w * short / h))
        else:
            nw, nh = short, max(1, round(h * short / w))
        if (nh, nw) == (h, w):
            return img, mask
        interp = IMAGE_INTERP[self.image_interp]
        if interp == cv2.INTER_AREA and nh > h:
            interp = cv2.INTER_LINEAR  # area is for shrinking
        return (cv2.resize(img, (nw, nh), interpolation=interp),
                cv2.resize(mask, (nw, nh), interpolation=cv2.INTER_NEAREST_EXACT))


class RandomCrop(_Random):
    """Crop ``size`` (h, w) at a random place; smaller inputs are first padded at the bottom
    and right, the image with ``pad_image`` (0, a grey level, an RGB triple, or "mean" for
    the ImageNet mean) and the mask with ``ignore_index`` so padding never counts as a class."""

    def __init__(self, size: int | Sequence[int], pad_image=0, ignore_index: int = 255,
                 seed: int | None = None):
        super().__init__(seed)
        self.size = (int(size), int(size)) if isinstance(size, int) else tuple(map(int, size))
        if len(self.size) != 2 or min(self.size) <= 0:
            raise ValueError(f"crop size {size!r} must be a positive int or (height, width)")
        if isinstance(pad_image, str):
            if pad_image != "mean":
                raise ValueError(f"pad_image {pad_image!r}: use 0, a value, (r, g, b) or 'mean'")
            pad_image = tuple(round(255 * m) for m in IMAGENET_MEAN)
        self.pad_image = pad_image
        self.ignore_index = ignore_index

    def __call__(self, img, mask):
        ch, cw = self.size
        h, w = mask.shape
        if h < ch or w < cw:
            ph, pw = max(ch - h, 0), max(cw - w, 0)
            value = self.pad_image if isinstance(self.pad_image, (int, float)) \
                else tuple(self.pad_image)
            img = cv2.copyMakeBorder(img, 0, ph, 0, pw, cv2.BORDER_CONSTANT, value=value)
            mask = cv2.copyMakeBorder(mask, 0, ph, 0, pw, cv2.BORDER_CONSTANT,
                                      value=self.ignore_index)
            h, w = mask.shape
        rng = self.rng()
        y = int(rng.integers(0, h - ch + 1))
        x = int(rng.integers(0, w - cw + 1))
        return img[y:y + ch, x:x + cw], mask[y:y + ch, x:x + cw]


class ToTensor:
    """Image HxWx3 uint8 → float32 3xHxW, scaled to [0, 1] then normalised by mean/std (the
    Gluon model-zoo convention: RGB, ImageNet statistics); mask → int32 HxW, unchanged."""

    def __init__(self, mean: Sequence[float] = IMAGENET_MEAN,
                 std: Sequence[float] = IMAGENET_STD):
        self.mean = np.asarray(mean, np.float32).reshape(3, 1, 1)
        self.std = np.asarray(std, np.float32).reshape(3, 1, 1)

    def __call__(self, img, mask):
        x = img.transpose(2, 0, 1).astype(np.float32) / 255.0
        return (x - self.mean) / self.std, mask.astype(np.int32)
