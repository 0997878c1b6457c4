"""The loader benchmark on a detection split (``bench.options.loader: detection``): the spec's
options, MXNet's ``ImageDetRecordIter`` through the MXNet environment and DALI beside it.

``pack_detection`` writes the split the way the packer does (``recforge.imaging.process`` +
``recforge.format.detection_label``): scenes of coloured boxes on noise, one colour per
class, every fourth image a negative. The MXNet tier (``tests/mxnet/``) reads the same
scenes in-process.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from pydantic import ValidationError

from recforge import imaging
from recforge.format import detection_label as dl
from recforge.format import recordio
from recforge.spec.bench import BenchOptions, BenchSpec

pytestmark = pytest.mark.mxnet  # ImageDetRecordIter in the MXNet environment: a slow tier

NUM_CLASSES = 3
# one colour per class, so a box's pixels say which class it is: red, green, blue (BGR)
COLOURS_BGR = {0: (0, 0, 255), 1: (0, 255, 0), 2: (255, 0, 0)}
DET_FAST = dict(loader="detection", batch_size=8, data_shape=(3, 48, 64), warmup_batches=1,
                measure_batches=4, decode_records=32, thread_grid=(), preprocess_threads=1,
                rand_crop=False)


def scene(width: int, height: int, objects, seed: int = 0) -> np.ndarray:
    """A BGR image of ``width`` x ``height``: grey noise with each object a filled box of its
    class colour (``objects``: ``(class_id, xmin, ymin, xmax, ymax, difficult)``, normalised;
    later boxes are drawn over earlier ones)."""
    rng = np.random.default_rng(seed)
    img = cv2.GaussianBlur(rng.integers(80, 176, (height, width, 3), dtype=np.uint8), (3, 3), 0)
    for cls, x0, y0, x1, y1, _ in objects:
        cv2.rectangle(img, (round(x0 * width), round(y0 * height)),
                      (round(x1 * width) - 1, round(y1 * height) - 1),
                      COLOURS_BGR[int(cls)], thickness=-1)
    return img


def scene_jpeg(width: int, height: int, objects, seed: int = 0, quality: int = 95) -> bytes:
    ok, buf = cv2.imencode(".jpg", scene(width, height, objects, seed),
                           [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


def scene_objects(i: int, negatives_every: int = 4) -> list[tuple]:
    """Image ``i``'s objects: none for every ``negatives_every``-th image, else 1-3 boxes
    side by side (one per third of the width, not overlapping), classes cycling."""
    if negatives_every and i % negatives_every == negatives_every - 1:
        return []
    rng = np.random.default_rng(1000 + i)
    out = []
    for k in range(1 + i % 3):
        x0 = k / 3 + float(rng.uniform(0.01, 0.08))
        x1 = (k + 1) / 3 - float(rng.uniform(0.01, 0.08))
        y0 = float(rng.uniform(0.0, 0.35))
        y1 = float(rng.uniform(0.6, 1.0))
        out.append((float((i + k) % NUM_CLASSES), x0, y0, x1, y1, float(k == 2)))
    return out


def pack_detection(root: Path, n: int = 32, size: tuple[int, int] = (96, 72),
                   split: str = "train", resize: int = 64,
                   negatives_every: int = 4) -> list[list[float]]:
    """Write ``<split>.rec/.idx`` (+ classes.json) of ``n`` scenes of ``size`` (w, h),
    packed through ``imaging.process`` at ``resize``; returns each record's label list."""
    root.mkdir(parents=True, exist_ok=True)
    labels = []
    with recordio.RecordWriter(root / f"{split}.rec", root / f"{split}.idx") as w:
        for i in range(n):
            objects = scene_objects(i, negatives_every)
            enc = imaging.process(scene_jpeg(*size, objects, seed=i),
                                  imaging.PackOptions(resize=resize))
            label = dl.encode(enc.width, enc.height, objects)
            labels.append(label)
            w.write(i, recordio.pack_image_record(label, i, enc.data))
    (root / "classes.json").write_text(json.dumps({"num_classes": NUM_CLASSES}))
    return labels


def object_counts(labels: list[list[float]]) -> tuple[int, int]:
    """``(objects, negatives)`` of a split's labels."""
    objects = [len(dl.decode(lab)[1]) for lab in labels]
    return sum(objects), objects.count(0)


@pytest.fixture(scope="module")
def det_split(tmp_path_factory) -> tuple[Path, list[list[float]]]:
    root = tmp_path_factory.mktemp("det") / "ds"
    return root, pack_detection(root)


class TestSpec:
    def test_detection_loader_and_its_options(self):
        opts = BenchOptions(loader="detection",
                            iter_kwargs={"label_pad_width": 64, "min_crop_scales": [0.3]})
        assert opts.iter_kwargs["min_crop_scales"] == [0.3]
        with pytest.raises(ValidationError, match="ImageDetRecordIter does not have"):
            BenchOptions(loader="detection", max_crop_size=32)
        with pytest.raises(ValidationError, match="label_width=5"):
            BenchOptions(loader="detection", label_width=5)
        BenchOptions(max_crop_size=32, label_width=5)  # ImageRecordIter's own, as before

    def test_dali_reads_detection_but_not_segmentation(self):
        assert BenchSpec(loader="both", options=BenchOptions(loader="detection")).loader == "both"
        with pytest.raises(ValidationError, match="use bench.loader: mxnet"):
            BenchSpec(loader="dali", options=BenchOptions(loader="segmentation"))


def test_image_det_record_iter_and_dali_side_by_side(det_split):
    """One epoch of 32 records in batches of 8: the value checks see every object and every
    negative exactly once, in both loaders (no random crop, so no object is cut away)."""
    from recforge.bench import format_table, run_benchmark

    root, labels = det_split
    objects, negatives = object_counts(labels)
    res = run_benchmark(str(root), BenchOptions(**DET_FAST), loader="both")
    json.dumps(res)
    assert res["loader"] == "mx.io.ImageDetRecordIter"
    assert "ImageDetRecordIOParser::Init" in res["threads"]["cap_formula"]
    for doc in (res, res["dali"]):
        assert doc["problems"] == [], doc["problems"]
        assert doc["label_range"] == [0.0, NUM_CLASSES - 1.0]
        det = doc["value_check"]["detection"]
        assert (det["objects"], det["images_without_objects"]) == (objects, negatives)
        assert det["max_objects_per_image"] == 3 and det["boxes_ordered"]
        assert 0.0 <= det["box_min"] < det["box_max"] <= 1.0
        assert doc["value_check"]["shapes"] == [[8, 3, 48, 64]]
        assert doc["summary"]["images_per_sec"] > 0
    # the padding width the iterator logs: the longest label (4 + 3 objects x 6)
    assert res["runs"][0]["label_pad_width"] == dl.HEADER_WIDTH + 3 * dl.OBJECT_WIDTH
    assert res["dali"]["loader"].startswith("nvidia.dali fn.readers.mxnet")
    assert any("rand_crop and resize are not applied" in w for w in res["dali"]["warnings"])
    table = format_table(res)
    assert f"objects: {objects} " in table and f"{negatives} image(s) without objects" in table
