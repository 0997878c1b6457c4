"""A COCO 2017 miniature in the shape cocodataset.org ships it: ``train2017/`` and
``val2017/`` of 12-digit file names, ``annotations/instances_{train,val}2017.json`` (info,
licenses, images, annotations with polygon or RLE segmentation, categories with id gaps),
the captions and person keypoints files beside them, ``test2017/`` with only
``image_info_test2017.json``, and a panoptic file with its PNG folder."""

from __future__ import annotations

import cv2
import numpy as np

from tests.common.detection import put_all

# COCO's own ids for these classes: gaps as in the real 80 (id 1 person … 18 dog)
CATEGORIES = [{"supercategory": "person", "id": 1, "name": "person"},
              {"supercategory": "vehicle", "id": 2, "name": "bicycle"},
              {"supercategory": "vehicle", "id": 3, "name": "car"},
              {"supercategory": "animal", "id": 18, "name": "dog"}]
CATEGORY_ORDER = ["person", "bicycle", "car", "dog"]  # by id: GluonCV's CLASSES order
COLOURS = {1: (0, 0, 255), 2: (0, 255, 255), 3: (0, 255, 0), 18: (255, 0, 0)}  # BGR

# split → [(image id, width, height, [(annotation id, category id, bbox, iscrowd)])]
IMAGES = {
    "train": [
        (9, 64, 48, [(1001, 1, [4, 6, 20, 30], 0), (1002, 18, [30.5, 10.25, 25, 20.5], 0)]),
        (25, 48, 64, [(1003, 3, [2, 2, 40, 30], 0)]),
        (30, 64, 48, [(1004, 2, [10, 10, 30, 20], 0), (1005, 1, [40, 4, 20, 40], 0),
                      (1006, 1, [0, 20, 30, 28], 1)]),  # a crowd of people (RLE)
        (34, 56, 56, [(1007, 18, [8, 8, 40, 40], 0)]),
        (36, 64, 40, [(1008, 3, [1, 1, 30, 20], 0), (1009, 3, [33, 15, 30, 24], 0)]),
    ],
    "val": [
        (139, 64, 48, [(2001, 1, [10, 5, 15, 35], 0)]),
        (285, 48, 48, [(2002, 18, [5, 5, 30, 30], 0)]),
        (632, 64, 48, [(2003, 2, [2, 10, 40, 30], 0), (2004, 3, [44, 2, 18, 14], 0)]),
    ],
}
TEST_IMAGES = [(1, 64, 48), (16, 48, 48)]  # test2017: image_info_test2017.json only


def file_name(image_id: int) -> str:
    return f"{image_id:012d}.jpg"


def _jpeg(width: int, height: int, anns: list, shade: int) -> bytes:
    img = np.full((height, width, 3), shade, np.uint8)
    for _, cid, (x, y, w, h), _ in anns:
        img[int(y):int(y + h), int(x):int(x + w)] = COLOURS[cid]
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()


def _image_entry(image_id: int, width: int, height: int, split: str) -> dict:
    name = file_name(image_id)
    return {"license": 3, "file_name": name,
            "coco_url": f"http://images.cocodataset.org/{split}2017/{name}",
            "height": height, "width": width, "date_captured": "2013-11-14 11:18:45",
            "flickr_url": f"http://farm1.staticflickr.com/1/{image_id}_z.jpg", "id": image_id}


def _annotation(aid: int, image_id: int, cid: int, bbox: list, crowd: int) -> dict:
    x, y, w, h = bbox
    if crowd:  # crowd regions carry run-length encoded masks
        segmentation = {"counts": [int(x * h), int(w * h), 100], "size": [64, 64]}
    else:
        segmentation = [[x, y, x + w, y, x + w, y + h, x, y + h]]
    return {"segmentation": segmentation, "area": float(w * h), "iscrowd": crowd,
            "image_id": image_id, "bbox": bbox, "category_id": cid, "id": aid}


def instances(split: str) -> dict:
    """``instances_<split>2017.json``."""
    rows = IMAGES[split]
    return {"info": {"description": "COCO 2017 Dataset", "year": 2017, "version": "1.0"},
            "licenses": [{"url": "http://creativecommons.org/licenses/by/2.0/", "id": 3,
                          "name": "Attribution License"}],
            "images": [_image_entry(i, w, h, split) for i, w, h, _ in rows],
            "annotations": [_annotation(a, i, c, b, k) for i, _, _, anns in rows
                            for a, c, b, k in anns],
            "categories": CATEGORIES}


def _captions(split: str) -> dict:
    rows = IMAGES[split]
    return {"info": {"year": 2017}, "licenses": [],
            "images": [_image_entry(i, w, h, split) for i, w, h, _ in rows],
            "annotations": [{"image_id": i, "id": n, "caption": "A dog on a street."}
                            for n, (i, *_rest) in enumerate(rows)]}


def _keypoints(split: str) -> dict:
    doc = instances(split)
    doc["categories"] = [{"supercategory": "person", "id": 1, "name": "person",
                          "keypoints": ["nose", "left_eye"], "skeleton": [[1, 2]]}]
    doc["annotations"] = [{**a, "num_keypoints": 1, "keypoints": [5, 5, 2, 0, 0, 0]}
                          for a in doc["annotations"] if a["category_id"] == 1]
    return doc


def objects() -> dict[str, bytes | dict]:
    """Every object of the miniature by key."""
    out: dict[str, bytes | dict] = {}
    shade = 60
    for split, rows in IMAGES.items():
        out[f"annotations/instances_{split}2017.json"] = instances(split)
        out[f"annotations/captions_{split}2017.json"] = _captions(split)
        out[f"annotations/person_keypoints_{split}2017.json"] = _keypoints(split)
        for image_id, w, h, anns in rows:
            shade += 11  # every image's pixels differ
            out[f"{split}2017/{file_name(image_id)}"] = _jpeg(w, h, anns, shade)
    out["annotations/image_info_test2017.json"] = {
        "info": {"year": 2017}, "licenses": [], "categories": CATEGORIES,
        "images": [_image_entry(i, w, h, "test") for i, w, h in TEST_IMAGES]}
    for image_id, w, h in TEST_IMAGES:
        shade += 11
        out[f"test2017/{file_name(image_id)}"] = _jpeg(w, h, [], shade)
    out["annotations/panoptic_val2017.json"] = {"info": {}, "images": [], "annotations": [],
                                               "categories": []}
    png = cv2.imencode(".png", np.zeros((48, 64, 3), np.uint8))[1].tobytes()
    out["annotations/panoptic_val2017/000000000139.png"] = png
    return out


def upload(uri: str) -> dict[str, bytes | dict]:
    made = objects()
    put_all(uri, made)
    return made


def truth() -> dict[str, tuple[str, int, int, list[tuple]]]:
    """image key → (split, width, height, [(class, x0, y0, x1, y1)]) of what is packed
    (crowd regions dropped)."""
    names = {c["id"]: c["name"] for c in CATEGORIES}
    return {f"{split}2017/{file_name(i)}": (
        split, w, h, [(names[c], x, y, x + bw, y + bh) for _, c, (x, y, bw, bh), k in anns
                      if not k])
        for split, rows in IMAGES.items() for i, w, h, anns in rows}


# set aside (key → reason)
NOT_USED = {
    **{f"annotations/{kind}_{split}2017.json": "not_instances"
       for kind in ("captions", "person_keypoints") for split in IMAGES},
    "annotations/image_info_test2017.json": "not_instances",
    "annotations/panoptic_val2017.json": "not_instances",
    "annotations/panoptic_val2017/000000000139.png": "not_instances",
    **{f"test2017/{file_name(i)}": "no_annotations_file" for i, _, _ in TEST_IMAGES},
}
USED = [f"annotations/instances_{split}2017.json" for split in IMAGES]
CROWD_REGIONS = 1
