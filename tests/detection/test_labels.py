"""The detection label array, and the check of each object against its image."""

from __future__ import annotations

import numpy as np
import pytest

from recforge.detection.boxes import check_objects
from recforge.format import detection_label


def test_encode_decode_round_trip():
    label = detection_label.encode(640, 480, [(2, 0.1, 0.2, 0.5, 0.6, 0), (0, 0, 0, 1, 1, 1)])
    assert label[:4] == [4.0, 6.0, 640.0, 480.0] and len(label) == 16
    (w, h), objects = detection_label.decode(label)
    assert (w, h) == (640, 480) and objects.shape == (2, 6)
    assert np.allclose(objects[0], [2, 0.1, 0.2, 0.5, 0.6, 0])
    assert detection_label.problem(label, 3) is None


def test_negative_is_one_padding_row():
    label = detection_label.encode(10, 10, [])
    assert label[4:] == [-1.0] * 6
    assert detection_label.decode(label)[1].shape == (0, 6)
    assert detection_label.problem(label, 3) is None


def test_values_are_what_a_lst_says():
    label = detection_label.encode(7, 3, [(0, 1 / 3, 1 / 7, 2 / 3, 6 / 7, 0)])
    assert all(float(np.float32(float(f"{v:f}"))) == v for v in label)


@pytest.mark.parametrize("label, words", [
    ([4, 6, 10, 10, 0, 0.1, 0.1, 0.2], "at least"),
    ([2, 5, 0, 0.1, 0.1, 0.2, 0.2, 0, 0, 0], "A=2"),
    ([4, 6, 10, 10, 3, 0.1, 0.1, 0.2, 0.2, 0], "class id 3"),
    ([4, 6, 10, 10, 0, 0.3, 0.1, 0.2, 0.2, 0], "xmin < xmax"),
    ([4, 6, 10, 10, 0, 0.1, 0.1, 1.2, 0.2, 0], "inside"),
    ([4, 6, 10, 10, 0, 0.1, 0.1, 0.2, 0.2, 0.5], "difficult"),
    ([4, 6, 10, 10, 0, 0.1, 0.1, 0.2, 0.2, 0, -1, -1, -1, -1, -1, -1], "padding"),
    ([4, 6, 10, 10, 0, 0.1, float("nan"), 0.2, 0.2, 0], "NaN"),
])
def test_problems(label, words):
    assert words in detection_label.problem(label, 3)


def test_check_objects():
    objects = [["a", 0, 0, 50, 40, 0, "object 0"], ["a", -0.4, 10, 100.4, 20, 1, "object 1"],
               ["a", 90, 10, 130, 20, 0, "object 2"], ["a", 10, 10, 10.5, 20, 0, "object 3"],
               ["a", 30, 10, 20, 20, 0, "object 4"]]
    checked = check_objects(objects, {"a": 0}, (100, 50), 1, 1.0, source_key="i.jpg")
    assert checked.rows == [(0.0, 0.0, 0.0, 0.5, 0.8, 0.0), (0.0, 0.0, 0.2, 1.0, 0.4, 1.0)]
    assert [(e.part, e.reason) for e in checked.refused] == [
        ("object 2", "box_outside_image"), ("object 3", "degenerate_box"),
        ("object 4", "degenerate_box")]
    assert checked.refused[0].box == (90.0, 10.0, 130.0, 20.0)
