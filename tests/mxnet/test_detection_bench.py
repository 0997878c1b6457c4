"""The loader benchmark's detection loader in-process (the MXNet environment runs this file):
``mx.io.ImageDetRecordIter`` timed over a tiny detection split, its value check, the size
warning, the refusal of a classification split, and reuse."""

from __future__ import annotations

import pytest

from recforge.bench import LoaderBenchError, loader, measure
from recforge.format import detection_label as dl
from recforge.spec.bench import BenchOptions
from tests.bench.test_bench import pack
from tests.bench.test_detection_bench import DET_FAST, object_counts, pack_detection
from tests.mxnet.test_bench_mxnet import measure_here


@pytest.fixture(scope="module")
def det_split(tmp_path_factory):
    root = tmp_path_factory.mktemp("det-bench") / "ds"
    return root, pack_detection(root)


def test_detection_loader_measures_and_checks_every_object(det_split):
    root, labels = det_split
    objects, negatives = object_counts(labels)
    res = measure_here(root, BenchOptions(**DET_FAST))
    assert res["loader"] == loader.DET_ITER and res["problems"] == [], res["problems"]
    run = res["runs"][0]
    assert run["observed_threads"] == 1 and run["window"]["batches"] == 4
    assert run["label_pad_width"] == max(len(lab) for lab in labels)
    assert all(b["shape"] == [8, 3, 48, 64] for b in run["batches"])
    # one epoch in record order: every object and every negative exactly once
    det = res["value_check"]["detection"]
    assert (det["objects"], det["images_without_objects"]) == (objects, negatives)
    assert res["value_check"]["records_covered"] == len(labels)
    assert res["label_range"] == [0.0, 2.0]
    assert res["image_sizes"]["smaller_than_data_shape"] == 0

    again = measure.measure(str(root), str(root), res["options"], {
        "sample": res["dataset"]["sample"], "download_seconds": None, "downloaded_bytes": 0},
        None, res, res["created_at"])
    assert again["reused_from"]["why"].startswith("the loader would read byte-identical")


def test_random_crop_keeps_boxes_normalised_and_small_images_are_named(det_split):
    """rand_crop (ImageDetRecordIter's sampler, scales from iter_kwargs as a list) moves the
    boxes, within [0, 1]; images below data_shape get the force-resize warning."""
    root, _ = det_split
    res = measure_here(root, BenchOptions(**{
        **DET_FAST, "rand_crop": True, "data_shape": (3, 72, 96),
        "iter_kwargs": {"min_crop_scales": [0.5], "label_pad_width": 40}}))
    assert res["problems"] == [], res["problems"]
    assert res["runs"][0]["label_pad_width"] == 40
    det = res["value_check"]["detection"]
    assert det["objects"] > 0 and 0.0 <= det["box_min"] <= det["box_max"] <= 1.0
    assert any("ImageDetRecordIter does not fail on these" in w and "32 of 32" in w
               for w in res["warnings"])


def test_a_classification_split_is_refused_with_the_fix(tmp_path):
    pack(tmp_path, n=16)
    with pytest.raises(LoaderBenchError, match="not detection label arrays"):
        measure_here(tmp_path, BenchOptions(**DET_FAST))


def test_detection_objects_reads_the_iterators_rows():
    import numpy as np

    lab = dl.encode(64, 48, [(1, .1, .2, .3, .4, 0), (0, .5, .5, .9, .9, 1)])
    rows = np.full((3, 4 + 30), -1, np.float32)
    rows[0, :4 + len(lab)] = [3, 48, 64, len(lab), *lab]
    rows[1, :8] = [3, 48, 64, 4, 4, 6, 64, 48]  # a negative: the header only
    rows[2, :8] = rows[1, :8]
    objects, per_image = loader.detection_objects(rows)
    assert per_image.tolist() == [2, 0, 0]
    assert objects[:, 0].tolist() == [1.0, 0.0]
    stats = loader.label_stats(rows, BenchOptions(loader="detection"), pad=1)
    assert (stats["objects"], stats["negatives"], stats["label_min"]) == (2, 1, 0.0)
