"""Boxes stay on their objects' pixels: solid boxes of known colours, packed through the real
stages (through the local S3 server, or local folders), under resizes and every EXIF
orientation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recforge import run_state, storage
from recforge.detection.boxes import coco_box, orient, voc_box
from recforge.format import names
from tests.common.detection import (
    COLOURS,
    DISPLAY,
    boxed_image,
    build,
    coco_document,
    colour_box,
    pixel_boxes,
    put_all,
    records,
    spec,
    voc_xml,
)

BOXES = [("red", 10, 12, 90, 70), ("green", 120, 30, 200, 150), ("blue", 30, 100, 70, 190)]
W, H = 240, 200


def _classes(run) -> list[str]:
    return storage.read_json(storage.join(run_state.out(run), names.CLASSES))["classes"]


def _check_on_pixels(img, label, classes, tolerance_px: float):
    for cls, x0, y0, x1, y1 in pixel_boxes(img, label):
        found = colour_box(img, COLOURS[classes[cls]])
        assert found is not None, classes[cls]
        assert np.allclose((x0, y0, x1, y1), found, atol=tolerance_px), (classes[cls], found)
        inner = img[int(y0) + 2:int(y1) - 2, int(x0) + 2:int(x1) - 2].reshape(-1, 3)
        assert np.abs(inner.astype(int) - COLOURS[classes[cls]]).max(axis=1).mean() < 40


def test_voc_conventions():
    assert voc_box(1, 1, 10, 20, origin=1) == (0, 0, 10, 20)
    assert voc_box(0, 0, 9, 19, origin=0) == (0, 0, 10, 20)
    assert coco_box(5.5, 2, 10, 3) == (5.5, 2, 15.5, 5)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orient_moves_a_box_as_the_pixels_move(orientation):
    stored = np.zeros((20, 30), np.uint8)
    stored[2:8, 3:12] = 1  # box (3, 2, 12, 8) of a 30 x 20 image
    shown = DISPLAY[orientation](stored[..., None])[..., 0]
    ys, xs = np.nonzero(shown)
    h, w = shown.shape
    want = (xs.min() / w, ys.min() / h, (xs.max() + 1) / w, (ys.max() + 1) / h)
    assert np.allclose(orient((3 / 30, 2 / 20, 12 / 30, 8 / 20), orientation), want)


@pytest.mark.parametrize("resize", [0, 100, 333])
def test_voc_boxes_within_a_pixel_and_on_their_colour(bucket, resize):
    """Through the local S3 server."""
    src, pub = f"s3://{bucket}/src", f"s3://{bucket}/pub"
    put_all(src, {"JPEGImages/a.jpg": boxed_image(W, H, BOXES),
                  "Annotations/a.xml": voc_xml(W, H, BOXES)})
    run = build(spec(src, pub, **{"pack.resize": resize, "pack.upscale": True}))
    img, label = records(run_state.out(run))["JPEGImages/a.jpg"]
    scale = img.shape[1] / W
    # against the source annotation, in source pixels: within 1 px
    classes = _classes(run)
    got = sorted((classes[c], x0 / scale, y0 / scale, x1 / scale, y1 / scale)
                 for c, x0, y0, x1, y1 in pixel_boxes(img, label))
    for (n, *box), (m, *want) in zip(got, sorted(BOXES), strict=True):
        assert n == m and np.allclose(box, want, atol=1.0)
    _check_on_pixels(img, label, classes, tolerance_px=max(1.5, 1.5 * scale))


@pytest.fixture(scope="module")
def rotated(tmp_path_factory) -> tuple[dict, list[str]]:
    """One build of the boxed image under every EXIF orientation, ``r<orientation>.jpg``, its
    boxes as stored: the records and the classes."""
    root = tmp_path_factory.mktemp("rotated")
    src, pub = str(root / "src"), str(root / "pub")
    objects = {}
    for orientation in range(1, 9):
        objects[f"JPEGImages/r{orientation}.jpg"] = boxed_image(W, H, BOXES,
                                                                orientation=orientation)
        objects[f"Annotations/r{orientation}.xml"] = voc_xml(W, H, BOXES)
    put_all(src, objects)
    run = build(spec(src, pub))
    return records(run_state.out(run)), _classes(run)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_rotated_boxes_follow_the_pixels(rotated, orientation):
    found, classes = rotated
    img, label = found[f"JPEGImages/r{orientation}.jpg"]
    assert img.shape[:2] == ((W, H) if orientation >= 5 else (H, W))
    _check_on_pixels(img, label, classes, tolerance_px=1.5)


def test_displayed_frame_annotations_are_kept(tmp_path):
    """box_frame: displayed: the boxes were drawn on the rotated image; they are not turned."""
    src, pub = str(tmp_path / "src"), str(tmp_path / "pub")
    stored = boxed_image(W, H, BOXES, orientation=6)
    shown_boxes = [(n, H - y1, x0, H - y0, x1) for n, x0, y0, x1, y1 in BOXES]
    put_all(src, {"JPEGImages/r.jpg": stored,
                  "Annotations/r.xml": voc_xml(H, W, shown_boxes)})
    run = build(spec(src, pub, **{"detection.box_frame": "displayed"}))
    img, label = records(run_state.out(run))["JPEGImages/r.jpg"]
    _check_on_pixels(img, label, _classes(run), tolerance_px=1.5)


def test_displayed_size_with_stored_frame_is_named(tmp_path):
    src, pub = str(tmp_path / "src"), str(tmp_path / "pub")
    put_all(src, {"JPEGImages/r.jpg": boxed_image(W, H, BOXES, orientation=6),
                  "Annotations/r.xml": voc_xml(H, W, BOXES[:1]),
                  "JPEGImages/ok.jpg": boxed_image(W, H, BOXES),
                  "Annotations/ok.xml": voc_xml(W, H, BOXES)})
    run = build(spec(src, pub))
    entries = [json.loads(x) for x in storage.get_bytes(
        storage.join(run_state.out(run), names.QUARANTINE)).splitlines()]
    frame = [e for e in entries if e["reason"] == "annotation_frame"]
    assert {e["source_key"] for e in frame} == {"JPEGImages/r.jpg", "Annotations/r.xml"}
    assert "box_frame: displayed" in frame[0]["fix"]


@pytest.mark.parametrize("resize", [0, 120])
def test_coco_boxes_on_their_colour(bucket, resize):
    """Through the local S3 server."""
    src, pub = f"s3://{bucket}/src", f"s3://{bucket}/pub"
    put_all(src, {"images/a.jpg": boxed_image(W, H, BOXES),
                  "annotations/instances.json": coco_document([("a.jpg", W, H, BOXES)])})
    run = build(spec(src, pub, layout="coco", **{"pack.resize": resize}))
    img, label = records(run_state.out(run))["images/a.jpg"]
    _check_on_pixels(img, label, _classes(run), tolerance_px=1.5)
    assert _classes(run) == list(COLOURS)  # every category, in category id order


def test_negatives_kept_with_one_padding_row(tmp_path):
    src, pub = str(tmp_path / "src"), str(tmp_path / "pub")
    put_all(src, {"JPEGImages/a.jpg": boxed_image(W, H, BOXES),
                  "Annotations/a.xml": voc_xml(W, H, BOXES),
                  "JPEGImages/empty.jpg": boxed_image(W, H, []),
                  "Annotations/empty.xml": voc_xml(W, H, [])})
    run = build(spec(src, pub, **{"detection.empty_images": "keep"}))
    img, label = records(run_state.out(run))["JPEGImages/empty.jpg"]
    assert label[4:] == [-1.0] * 6 and label[2:4] == [W, H]
    quarantined = storage.get_bytes(storage.join(run_state.out(run), names.QUARANTINE))
    assert b"no_objects" not in quarantined


def test_pack_in_a_child_process_labels_the_same(tmp_path):
    """After a pack attempt that died, images decode in a child (crash isolation): the
    labels must not change."""
    from recforge.stages import entry

    src, pub = str(tmp_path / "src"), str(tmp_path / "pub")
    put_all(src, {"JPEGImages/r.jpg": boxed_image(W, H, BOXES, orientation=6),
                  "Annotations/r.xml": voc_xml(W, H, BOXES)})
    s = spec(src, pub)
    plain = records(run_state.out(build(s, "plain")))["JPEGImages/r.jpg"][1]
    run = build(s, "isolated")
    shard = storage.read_json(run.shard_list)["shards"][0]
    storage.delete_prefix(run.cache(""))  # nothing to reuse: the shard is packed again
    # the marker a dead attempt leaves: this attempt decodes each image in a child
    storage.put_bytes(run.shard_output(shard, names.PACK_ATTEMPT), b"{}")
    entry("pack")(run, shard)
    entry("merge")(run)
    assert records(run_state.out(run))["JPEGImages/r.jpg"][1] == plain
