"""Detection test data made in code: images with solid boxes of known colours, their VOC and
COCO annotations, EXIF orientations, and a stage-by-stage build up to validate."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from recforge import storage
from recforge.dev.detection_sample import with_exif_orientation
from recforge.format import detection_label, names, recordio
from recforge.run import Run
from recforge.spec import parse_spec
from recforge.stages import entry

# class → BGR colour of its solid box (far apart, so JPEG never confuses them)
COLOURS = {"red": (0, 0, 255), "green": (0, 255, 0), "blue": (255, 0, 0),
           "yellow": (0, 255, 255)}
BACKGROUND = 128

# EXIF orientation → the numpy operation that displays the stored pixels
DISPLAY = {1: lambda a: a, 2: lambda a: a[:, ::-1], 3: lambda a: a[::-1, ::-1],
           4: lambda a: a[::-1], 5: lambda a: a.transpose(1, 0, 2),
           6: lambda a: np.rot90(a, -1), 7: lambda a: np.rot90(a, -1)[::-1],
           8: lambda a: np.rot90(a, 1)}


def boxed_image(width: int, height: int, boxes: list[tuple], quality: int = 95,
                orientation: int = 1) -> bytes:
    """A grey JPEG with each ``(class, x0, y0, x1, y1)`` (continuous pixels) filled solid."""
    img = np.full((height, width, 3), BACKGROUND, np.uint8)
    for name, x0, y0, x1, y1 in boxes:
        img[y0:y1, x0:x1] = COLOURS[name]
    data = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes()
    return with_exif_orientation(data, orientation) if orientation != 1 else data


def voc_xml(width: int, height: int, boxes: list[tuple], origin: int = 1,
            size: tuple[int, int] | None = None, extra: str = "") -> bytes:
    """VOC XML: inclusive pixel indices from ``origin``."""
    w, h = size or (width, height)
    objs = "".join(
        f"<object><name>{n}</name><difficult>0</difficult><truncated>0</truncated><bndbox>"
        f"<xmin>{x0 + origin}</xmin><ymin>{y0 + origin}</ymin><xmax>{x1 - 1 + origin}</xmax>"
        f"<ymax>{y1 - 1 + origin}</ymax></bndbox></object>" for n, x0, y0, x1, y1 in boxes)
    return (f"<annotation><size><width>{w}</width><height>{h}</height><depth>3</depth>"
            f"</size>{objs}{extra}</annotation>").encode()


def coco_document(images: list[tuple[str, int, int, list[tuple]]]) -> dict:
    """A COCO instances document for ``(file_name, width, height, boxes)``."""
    cats = [{"id": i + 10, "name": n} for i, n in enumerate(COLOURS)]
    ids = {c["name"]: c["id"] for c in cats}
    doc = {"images": [], "annotations": [], "categories": cats}
    for i, (file_name, w, h, boxes) in enumerate(images, 1):
        doc["images"].append({"id": i, "file_name": file_name, "width": w, "height": h})
        for n, x0, y0, x1, y1 in boxes:
            doc["annotations"].append({"id": len(doc["annotations"]) + 1, "image_id": i,
                                       "category_id": ids[n], "iscrowd": 0,
                                       "bbox": [x0, y0, x1 - x0, y1 - y0]})
    return doc


def spec(source: str, publish: str, layout: str = "voc", **overrides) -> object:
    data = {"name": "boxes", "task": "detection", "schedule": None,
            "source": {"uri": source, "layout": layout}, "publish": {"uri": publish},
            "splits": {"val_ratio": 0.0}, "pack": {"resize": 0, "quality": 95}}
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return parse_spec(data)


def build(spec_, run_id: str = "t") -> Run:
    """ingest → validate through the real stages; returns the run (its ``out`` is merged)."""
    run = Run(spec_, run_id)
    for task in ("ingest", "flatten", "remap_labels", "split"):
        entry(task)(run)
    for shard in storage.read_json(run.shard_list)["shards"]:
        entry("pack")(run, shard)
    entry("merge")(run)
    entry("validate")(run)
    return run


def put_all(uri: str, objects: dict[str, bytes | dict]) -> None:
    storage.ensure_bucket(uri)
    for key, data in objects.items():
        body = json.dumps(data).encode() if isinstance(data, dict) else data
        storage.put_bytes(storage.join(uri, key), body)


def records(out: str, split: str = "train") -> dict[str, tuple[np.ndarray, list]]:
    """source key → (decoded record image, label array) of one split of ``out``."""
    import tempfile

    rows = {r["key"]: r for r in storage.iter_jsonl(storage.join(out, names.RECORDS))
            if r["split"] == split}
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / names.rec(split)
        storage.download(storage.join(out, names.rec(split)), rec)
        for _offset, payload in recordio.iter_records(rec):
            header, image = recordio.unpack_image_record(payload)
            img = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
            found[rows[header.id]["source_key"]] = (img, list(header.label))
    return found


def pixel_boxes(img: np.ndarray, label: list) -> list[tuple[int, float, float, float, float]]:
    """The label's objects in the record image's pixels: (class id, x0, y0, x1, y1)."""
    (w, h), objects = detection_label.decode(label)
    assert (w, h) == (img.shape[1], img.shape[0])
    return [(int(o[0]), o[1] * w, o[2] * h, o[3] * w, o[4] * h) for o in objects]


def colour_box(img: np.ndarray, colour: tuple) -> tuple[int, int, int, int] | None:
    """The bounding box (continuous pixels) of the pixels near ``colour``."""
    near = (np.abs(img.astype(int) - np.array(colour)).max(axis=2) < 60)
    ys, xs = np.nonzero(near)
    if not len(xs):
        return None
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1
