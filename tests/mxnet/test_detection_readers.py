"""Detection records (``recforge.format.detection_label``) read by the readers detection users
train with, in the MXNet environment: ``mx.io.ImageDetRecordIter``, ``mx.image.ImageDetIter``
and GluonCV's ``RecordFileDetection``; and ``recforge im2rec --pack-label`` beside MXNet
1.9.1's own ``tools/im2rec.py --pack-label`` on the same detection ``.lst``.

The scenes are coloured boxes on noise (one colour per class, ``tests.bench.
test_detection_bench``), so each reader's boxes are checked against the pixels it hands out:
the centre of every box it reports has the class colour. What each reader does with a
negative (one padding row of -1s) is pinned here and described in docs/detection.md.
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import cv2
import mxnet as mx
import numpy as np
import pytest

from recforge import im2rec, imaging
from recforge.format import detection_label as dl
from recforge.format import names, recordio
from tests.bench.test_detection_bench import COLOURS_BGR, scene_jpeg

MX_IM2REC = os.path.join(importlib.util.find_spec("mxnet").submodule_search_locations[0],
                         "tools", "im2rec.py")

# (file, width, height, objects): sizes of real photos (landscape, portrait, VOC's 500x375),
# boxes touching the image's edges, a negative, an image smaller than the readers' shape
SCENES = [
    ("street.jpg", 640, 480, [(0, .08, .20, .30, .70, 0), (2, .40, .10, .62, .90, 1),
                              (1, .70, .30, .97, .60, 0)]),
    ("portrait.jpg", 333, 500, [(1, .20, .10, .80, .55, 0)]),
    ("empty.jpg", 500, 375, []),
    ("corner.jpg", 480, 640, [(2, 0.0, 0.0, .40, .30, 0), (0, .55, .65, 1.0, 1.0, 0)]),
    ("small.jpg", 200, 150, [(0, .30, .25, .60, .75, 0)]),
]
NEGATIVE = 2  # the index of the scene without objects
DATA_SHAPE = (3, 180, 240)  # C, H, W: not square, so a swapped H and W shows
COLOURS_RGB = {c: bgr[::-1] for c, bgr in COLOURS_BGR.items()}


def assert_on_colours(img_rgb: np.ndarray, boxes: np.ndarray) -> None:
    """Each box (``class, xmin, ymin, xmax, ymax`` in pixels of ``img_rgb``, HWC) has its
    class colour at its centre: the box marks the object the reader's pixels show."""
    for cls, x0, y0, x1, y1 in boxes:
        cx, cy = int((x0 + x1) / 2), int((y0 + y1) / 2)
        patch = img_rgb[cy - 1:cy + 2, cx - 1:cx + 2].reshape(-1, 3).astype(float).mean(0)
        assert np.abs(patch - COLOURS_RGB[int(cls)]).max() < 40, (cls, x0, y0, x1, y1, patch)


def objects_of(label) -> np.ndarray:
    return dl.decode(label)[1]


def as_pixels(objects: np.ndarray, width: int, height: int) -> np.ndarray:
    """(class, xmin, ymin, xmax, ymax) with the box in pixels of a width x height image."""
    out = objects[:, :5].astype(float).copy()
    out[:, (1, 3)] *= width
    out[:, (2, 4)] *= height
    return out


def records(rec: Path) -> list[tuple[recordio.IRHeader, bytes]]:
    return [recordio.unpack_image_record(p) for _, p in recordio.iter_records(rec)]


def image_of(payload: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


# ---------------------------------------------------------------- side by side with im2rec.py


def im2rec_size(width: int, height: int, resize: int) -> tuple[int, int]:
    """The stored size tools/im2rec.py gives a width x height image at ``--resize``: short
    side ``resize``, long side ``long * resize // short``."""
    if not resize:
        return width, height
    if height > width:
        return resize, height * resize // width
    return width * resize // height, resize


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("photos")
    for i, (name, w, h, objects) in enumerate(SCENES):
        (root / name).write_bytes(scene_jpeg(w, h, objects, seed=i))
    return root


def write_lst(path: Path, resize: int) -> list[list[float]]:
    """A detection ``.lst`` of SCENES (keys 10, 11, ...; the header's width and height the
    stored image's, as im2rec will store it); returns the labels as float32 reads them."""
    lines, labels = [], []
    for i, (name, w, h, objects) in enumerate(SCENES):
        label = dl.encode(*im2rec_size(w, h, resize), objects)
        lines.append(names.lst_line(10 + i, label, name))
        # what both tools read back from the text: %f, then float32
        labels.append([float(x) for x in np.float32([float(v) for v in
                                                      lines[-1].split("\t")[1:-1]])])
    path.write_text("".join(lines), encoding="utf-8")
    return labels


IM2REC_CASES = {
    "pass-through": (["--pass-through"], 0, "bytes"),
    "resize": (["--resize", "300", "--quality", "90"], 300, "labels"),
    "resize-im2rec-pixels": (["--resize", "300", "--quality", "90", "--interpolation",
                              "linear", "--no-reduced-decode"], 300, "bytes"),
}


class TestPackLabelAgainstMXNetIm2rec:
    @pytest.mark.parametrize("case", list(IM2REC_CASES))
    def test_same_labels_and_sizes(self, tmp_path, photos, case):
        """Same .lst, same options: every record's header (key, flag = label length, the
        label array) is equal to float32, and the stored image has the header's size.
        recforge's default resampling (area, reduced decode) gives other pixels (PSNR
        checked); with im2rec's (bilinear, full decode) the files are byte-identical, as
        they are without a resize."""
        args, resize, same = IM2REC_CASES[case]
        mx_args = [a for a in args if a not in ("--interpolation", "linear",
                                                "--no-reduced-decode")]  # recforge's own
        for d in ("mx", "rf"):
            (tmp_path / d).mkdir()
            want = write_lst(tmp_path / d / "data.lst", resize)
        proc = subprocess.run([sys.executable, MX_IM2REC, str(tmp_path / "mx" / "data"),
                               str(photos), "--pack-label", *mx_args], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert im2rec.main([str(tmp_path / "rf" / "data"), str(photos), "--pack-label",
                            "--num-thread", "1", *args]) == 0
        mx_recs, rf_recs = (records(tmp_path / d / "data.rec") for d in ("mx", "rf"))
        assert len(mx_recs) == len(rf_recs) == len(SCENES)
        for (hm, pm), (hr, pr), label, (_, w, h, _) in zip(mx_recs, rf_recs, want, SCENES,
                                                           strict=True):
            assert (hr.flag, hr.id, hr.id2) == (hm.flag, hm.id, hm.id2)
            assert hr.flag == len(label) == dl.HEADER_WIDTH + dl.OBJECT_WIDTH * max(
                1, len(objects_of(label)))
            assert np.array_equal(np.asarray(hr.label, np.float32), np.float32(label))
            assert np.array_equal(np.asarray(hm.label, np.float32), np.float32(label))
            for payload in (pm, pr):
                ih, iw = image_of(payload).shape[:2]
                assert (iw, ih) == tuple(int(v) for v in label[2:4]) == im2rec_size(w, h,
                                                                                    resize)
        idx = [(tmp_path / d / "data.idx").read_text().split() for d in ("rf", "mx")]
        assert idx[0][::2] == idx[1][::2]  # the keys, in order
        if same == "bytes":
            for ext in (".rec", ".idx"):
                assert (tmp_path / "rf" / f"data{ext}").read_bytes() == \
                    (tmp_path / "mx" / f"data{ext}").read_bytes()
        else:  # other resampling: other JPEG bytes, so other .idx offsets; close pixels
            scores = [psnr(image_of(a), image_of(b))
                      for (_, a), (_, b) in zip(rf_recs, mx_recs, strict=True)]
            assert min(scores) > 30, scores


# ---------------------------------------------------------------- readers over recforge records


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> dict:
    """SCENES packed as the packer does (``imaging.process`` at resize 256, the label with
    the stored size): ``all.rec`` with the negative, ``positives.rec`` without it."""
    root = tmp_path_factory.mktemp("det-split")
    labels, sizes = [], []
    with recordio.RecordWriter(root / "all.rec", root / "all.idx") as w_all, \
            recordio.RecordWriter(root / "positives.rec", root / "positives.idx") as w_pos:
        for i, (_, w, h, objects) in enumerate(SCENES):
            enc = imaging.process(scene_jpeg(w, h, objects, seed=i),
                                  imaging.PackOptions(resize=256))
            label = dl.encode(enc.width, enc.height, objects)
            payload = recordio.pack_image_record(label, i, enc.data)
            w_all.write(i, payload)
            if objects:
                w_pos.write(i, payload)
            labels.append(label)
            sizes.append((enc.width, enc.height))
    return {"root": root, "labels": labels, "sizes": sizes}


def _rec(split: dict, name: str) -> dict:
    return {"path_imgrec": str(split["root"] / f"{name}.rec"),
            "path_imgidx": str(split["root"] / f"{name}.idx")}


class TestImageDetRecordIter:
    """``mx.io.ImageDetRecordIter``: each label row is ``[C, H, W, n, <the record's n label
    values>, -1...]`` (C, H, W: data_shape); the image is resized to data_shape (aspect not
    kept) and the normalised boxes are not moved. It takes no ``path_imgidx``."""

    def _batch(self, split: dict, **kw):
        it = mx.io.ImageDetRecordIter(path_imgrec=_rec(split, "all")["path_imgrec"],
                                      data_shape=DATA_SHAPE, batch_size=len(SCENES), **kw)
        return it.next()

    def test_returns_the_labels_written_and_drops_the_padding_row(self, split):
        batch = self._batch(split, label_pad_width=64)
        data, label = batch.data[0].asnumpy(), batch.label[0].asnumpy()
        assert data.shape == (len(SCENES), *DATA_SHAPE) and label.shape == (len(SCENES), 68)
        assert batch.pad == 0
        for i, (row, written) in enumerate(zip(label, split["labels"], strict=True)):
            assert list(row[:3]) == list(DATA_SHAPE)
            n = int(row[3])
            if i == NEGATIVE:
                # the padding row is gone: the header alone, then the iterator's own -1s
                assert n == dl.HEADER_WIDTH
                assert np.array_equal(row[4:8], np.float32(written[:4]))
            else:
                assert n == len(written)
                assert np.array_equal(row[4:4 + n], np.float32(written))
                objects = row[4 + dl.HEADER_WIDTH:4 + n].reshape(-1, dl.OBJECT_WIDTH)
                img = data[i].transpose(1, 2, 0)  # RGB, resized to data_shape
                assert_on_colours(img, as_pixels(objects, DATA_SHAPE[2], DATA_SHAPE[1]))
            assert (row[4 + n:] == -1).all()

    def test_pad_width_defaults_to_the_longest_label(self, split):
        label = self._batch(split).label[0].asnumpy()
        longest = max(len(lab) for lab in split["labels"])
        assert label.shape == (len(SCENES), 4 + longest)

    def test_mirror_moves_the_boxes_and_leaves_the_negative_empty(self, split):
        label = self._batch(split, label_pad_width=64, rand_mirror_prob=1.0).label[0].asnumpy()
        for i, (row, written) in enumerate(zip(label, split["labels"], strict=True)):
            n = int(row[3])
            if i == NEGATIVE:
                assert n == dl.HEADER_WIDTH and (row[8:] == -1).all()
                continue
            got = row[8:4 + n].reshape(-1, dl.OBJECT_WIDTH)
            want = objects_of(written)
            np.testing.assert_allclose(got[:, 1], 1 - want[:, 3], atol=1e-6)
            np.testing.assert_allclose(got[:, 3], 1 - want[:, 1], atol=1e-6)
            assert np.array_equal(got[:, (0, 2, 4, 5)], want[:, (0, 2, 4, 5)])


class TestImageDetIter:
    """``mx.image.ImageDetIter``: labels ``(batch, max objects, B)``, -1 rows as padding; the
    default augmenter force-resizes to data_shape and keeps the normalised boxes."""

    def test_reads_the_objects_of_a_split_without_negatives(self, split):
        positives = [i for i, s in enumerate(SCENES) if s[3]]
        it = mx.image.ImageDetIter(len(positives), DATA_SHAPE, **_rec(split, "positives"))
        assert it.label_shape == (3, dl.OBJECT_WIDTH)  # the most objects in one image: 3
        batch = it.next()
        data, label = batch.data[0].asnumpy(), batch.label[0].asnumpy()
        assert data.shape == (len(positives), *DATA_SHAPE) and batch.pad == 0
        for j, i in enumerate(positives):
            want = objects_of(split["labels"][i])
            assert np.array_equal(label[j, :len(want)], want)
            assert (label[j, len(want):] == -1).all()
            assert_on_colours(data[j].transpose(1, 2, 0),
                              as_pixels(want, DATA_SHAPE[2], DATA_SHAPE[1]))

    def test_refuses_a_split_with_a_negative(self, split):
        # the constructor parses every label to size its output; a padding row is no box
        with pytest.raises(RuntimeError, match="Encounter sample with no valid label"):
            mx.image.ImageDetIter(len(SCENES), DATA_SHAPE, **_rec(split, "all"))

    def test_skips_negatives_when_built_anyway(self, split):
        """Past the constructor (label shape given), a negative never reaches a batch: it is
        skipped (logged at debug level) and the batch fills from the next records."""

        class SizedDetIter(mx.image.ImageDetIter):
            def _estimate_label_shape(self):
                return (3, dl.OBJECT_WIDTH)

        positives = [i for i, s in enumerate(SCENES) if s[3]]
        it = SizedDetIter(len(positives), DATA_SHAPE, **_rec(split, "all"))
        label = it.next().label[0].asnumpy()
        for j, i in enumerate(positives):
            want = objects_of(split["labels"][i])
            assert np.array_equal(label[j, :len(want)], want)
        with pytest.raises(StopIteration):
            it.next()


def gluoncv_transform_label(label, height=None, width=None) -> np.ndarray:
    """GluonCV 0.10's ``gluoncv.data.recordio.detection._transform_label``, restated step for
    step (GluonCV is not installed in this environment): split off the header (``A`` values),
    reshape to objects of ``B`` values, move the class id behind the box (``xmin, ymin, xmax,
    ymax, class_id, extras...``) and scale the box to pixels."""
    label = np.array(label).ravel()
    header_len = int(label[0])
    label_width = int(label[1])
    if label_width < 5:
        raise ValueError(f"label width {label_width} < 5")
    if len(label) < header_len + 5:
        raise ValueError(f"label length {len(label)} < {header_len + 5}")
    if (len(label) - header_len) % label_width:
        raise ValueError(f"label of {len(label)} values is not header + whole objects")
    gcv = label[header_len:].reshape(-1, label_width)
    ids = gcv[:, 0].copy()
    gcv[:, :4] = gcv[:, 1:5]
    gcv[:, 4] = ids
    if height is not None:  # (sic: GluonCV tests height, then scales by width)
        gcv[:, (0, 2)] *= width
    if width is not None:
        gcv[:, (1, 3)] *= height
    return gcv


class RecordFileDetection(mx.gluon.data.vision.ImageRecordDataset):
    """GluonCV 0.10's ``RecordFileDetection`` (``coord_normalized=True``): the Gluon record
    dataset's image (HWC RGB, as stored) and the label through ``gluoncv_transform_label``
    with the decoded image's height and width."""

    def __getitem__(self, idx):
        img, label = super().__getitem__(idx)
        h, w, _ = img.shape
        return img, gluoncv_transform_label(label, h, w)


class TestGluonCVRecordFileDetection:
    def test_boxes_in_pixels_of_the_stored_image(self, split):
        ds = RecordFileDetection(_rec(split, "all")["path_imgrec"])
        assert len(ds) == len(SCENES)
        for i, (written, (w, h)) in enumerate(zip(split["labels"], split["sizes"],
                                                  strict=True)):
            img, label = ds[i]
            assert img.shape == (h, w, 3)
            assert (w, h) == (int(written[2]), int(written[3]))  # the header's size is true
            if i == NEGATIVE:
                # kept, not dropped: class -1 behind a box scaled to (-w, -h, -w, -h)
                assert np.array_equal(label, np.float32([[-w, -h, -w, -h, -1, -1]]))
                continue
            want = objects_of(written)
            assert np.array_equal(label[:, 4], want[:, 0])  # the class id, moved
            assert np.array_equal(label[:, 5], want[:, 5])  # difficult stays last
            np.testing.assert_allclose(label[:, :4], want[:, 1:5] * np.float32([w, h, w, h]),
                                       rtol=1e-6)
            assert_on_colours(img.asnumpy(), label[:, [4, 0, 1, 2, 3]])
