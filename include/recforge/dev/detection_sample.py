"""The embedded detection sample: scenes with objects whose boxes are known exactly.

Each scene is a background cut from one of scikit-image's bundled photos (no download) with
objects pasted in: crops of other bundled photos, opaque, so each object's box is exactly
the rectangle it was pasted into. The annotations are written as Pascal VOC
(``JPEGImages/`` + ``Annotations/``) or COCO (``images/`` + ``annotations/*.json``), and a
few deliberately bad objects exercise the detection quarantine: an unparsable annotation,
an image without annotation and an annotation without image, a size that disagrees with the
JPEG, an image with no objects, a truncated JPEG, boxes outside the image or degenerate, and
one EXIF-rotated JPEG annotated as stored (its box must move with its pixels).
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import dataclass, field

from recforge import storage

log = logging.getLogger(__name__)

# class name → skimage.data loader of the object's photo
OBJECT_PHOTOS = {"cat": "chelsea", "rocket": "rocket", "coffee": "coffee",
                 "astronaut": "astronaut", "camera": "camera"}
BACKGROUNDS = ("grass", "gravel", "brick")
LAYOUTS = ("voc", "coco")

# the deliberately bad objects (per layout) and the quarantine reason each must produce
BAD_OBJECTS = {
    "voc": {
        "JPEGImages/bad_xml.jpg": "annotation_unparsable",
        "Annotations/bad_xml.xml": "annotation_unparsable",
        "JPEGImages/no_annotation.jpg": "annotation_missing",
        "Annotations/no_image.xml": "orphan_annotation",
        "JPEGImages/size_mismatch.jpg": "annotation_size_mismatch",
        "Annotations/size_mismatch.xml": "annotation_size_mismatch",
        "JPEGImages/no_objects.jpg": "no_objects",
        "Annotations/no_objects.xml": "no_objects",
        "JPEGImages/truncated.jpg": "truncated",
        "Annotations/truncated.xml": "truncated",
        "README.txt": "not_in_detection_layout",  # .txt is read (ImageSets), not at the top
    },
    "coco": {
        "annotations/broken.json": "annotation_unparsable",
        "images/no_annotation.jpg": "annotation_missing",
        "images/size_mismatch.jpg": "annotation_size_mismatch",
        "images/no_objects.jpg": "no_objects",
        "images/truncated.jpg": "truncated",
        "README.txt": "unsupported_extension",
    },
}
# refused objects of annotated images: (image stem, reason); the image itself is packed
BAD_PARTS = (("scene_0001", "box_outside_image"), ("scene_0002", "degenerate_box"))
EXIF_SCENE = "scene_exif6"  # stored transposed with EXIF orientation 6, boxes as stored


@dataclass
class Scene:
    """One generated image: its bytes and its objects' exact boxes (continuous pixels of the
    stored image: ``[name, xmin, ymin, xmax, ymax]``)."""

    stem: str
    jpeg: bytes
    width: int
    height: int
    boxes: list[list] = field(default_factory=list)


def _photo(name: str):
    import numpy as np
    import skimage.data

    img = getattr(skimage.data, name)()
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return img[..., :3][..., ::-1].copy()


def _scene(rng, photos: dict, stem: str, n_objects: int) -> tuple:
    import cv2
    import numpy as np

    w, h = int(rng.integers(420, 800)), int(rng.integers(320, 600))
    bg = photos[BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]]
    img = cv2.resize(bg, (w, h), interpolation=cv2.INTER_AREA)
    boxes = []
    names = list(OBJECT_PHOTOS)
    for _ in range(n_objects):
        name = names[int(rng.integers(len(names)))]
        ow, oh = int(rng.integers(48, w // 2)), int(rng.integers(48, h // 2))
        x, y = int(rng.integers(0, w - ow + 1)), int(rng.integers(0, h - oh + 1))
        img[y:y + oh, x:x + ow] = cv2.resize(photos[OBJECT_PHOTOS[name]], (ow, oh),
                                             interpolation=cv2.INTER_AREA)
        boxes = [b for b in boxes if not _covered(b, x, y, x + ow, y + oh)]
        boxes.append([name, x, y, x + ow, y + oh])
    return np.ascontiguousarray(img), boxes


def _covered(box, x0, y0, x1, y1) -> bool:
    """A box hidden for the most part by a later paste is dropped from the truth."""
    ix = max(0, min(box[3], x1) - max(box[1], x0))
    iy = max(0, min(box[4], y1) - max(box[2], y0))
    return ix * iy > 0.5 * (box[3] - box[1]) * (box[4] - box[2])


def with_exif_orientation(jpeg: bytes, orientation: int) -> bytes:
    """The JPEG with an EXIF APP1 segment holding only the orientation tag."""
    tiff = b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", 1) + \
        struct.pack("<HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack("<I", 0)
    app1 = b"Exif\0\0" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(app1) + 2) + app1 + jpeg[2:]


def scenes(count: int = 60, seed: int = 0) -> list[Scene]:
    """``count`` good scenes (1-4 objects each) plus the EXIF-rotated one."""
    import cv2
    import numpy as np

    rng = np.random.default_rng(seed)
    photos = {n: _photo(n) for n in (*BACKGROUNDS, *OBJECT_PHOTOS.values())}
    out = []
    for i in range(count):
        img, boxes = _scene(rng, photos, f"scene_{i:04d}", int(rng.integers(1, 5)))
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 92])
        out.append(Scene(f"scene_{i:04d}", buf.tobytes(), img.shape[1], img.shape[0], boxes))
    # displayed upright after a 90-degree clockwise turn (orientation 6): stored turned
    # counter-clockwise, its box given in the stored pixels
    img, boxes = _scene(rng, photos, EXIF_SCENE, 1)
    stored = np.ascontiguousarray(np.rot90(img, 1))  # counter-clockwise
    name, x0, y0, x1, y1 = boxes[0]
    turned = [[name, y0, img.shape[1] - x1, y1, img.shape[1] - x0]]  # as stored
    ok, buf = cv2.imencode(".jpg", stored, [cv2.IMWRITE_JPEG_QUALITY, 92])
    out.append(Scene(EXIF_SCENE, with_exif_orientation(buf.tobytes(), 6), stored.shape[1],
                     stored.shape[0], turned))
    return out


def voc_xml(scene: Scene, boxes: list[list] | None = None,
            size: tuple[int, int] | None = None) -> bytes:
    """Pascal VOC XML for a scene: 1-based inclusive pixel indices."""
    w, h = size or (scene.width, scene.height)
    objs = "".join(
        f"<object><name>{n}</name><pose>Unspecified</pose><truncated>0</truncated>"
        f"<difficult>0</difficult><bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}</ymin>"
        f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
        for n, x0, y0, x1, y1 in (scene.boxes if boxes is None else boxes))
    return (f"<annotation><folder>VOC</folder><filename>{scene.stem}.jpg</filename><size>"
            f"<width>{w}</width><height>{h}</height><depth>3</depth></size>{objs}"
            "</annotation>").encode()


def _with_bad_parts(scene: Scene) -> list[list]:
    boxes = [list(b) for b in scene.boxes]
    if scene.stem == BAD_PARTS[0][0]:
        boxes.append([boxes[0][0], scene.width - 20, 10, scene.width + 40, 60])
    if scene.stem == BAD_PARTS[1][0]:
        boxes.append([boxes[0][0], 50, 40, 50, 90])  # zero width
    return boxes


def generate(layout: str = "voc", count: int = 60, seed: int = 0) -> dict[str, bytes]:
    """key → bytes of the detection sample in ``layout`` (good scenes plus the bad ones)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: choose one of {LAYOUTS}")
    made = scenes(count + 4, seed)
    good, spare = made[:count] + [made[-1]], made[count:-1]
    extra = {"no_annotation": spare[0], "size_mismatch": spare[1], "no_objects": spare[2],
             "truncated": spare[3]}
    return _voc(good, extra) if layout == "voc" else _coco(good, extra)


def _voc(good: list[Scene], extra: dict[str, Scene]) -> dict[str, bytes]:
    objects = {}
    for s in good:
        objects[f"JPEGImages/{s.stem}.jpg"] = s.jpeg
        objects[f"Annotations/{s.stem}.xml"] = voc_xml(s, _with_bad_parts(s))
    s = good[0]
    objects["JPEGImages/bad_xml.jpg"] = s.jpeg
    objects["Annotations/bad_xml.xml"] = b"<annotation><size><width>10</width>"
    objects["JPEGImages/no_annotation.jpg"] = extra["no_annotation"].jpeg
    objects["Annotations/no_image.xml"] = voc_xml(good[1])
    m = extra["size_mismatch"]
    objects["JPEGImages/size_mismatch.jpg"] = m.jpeg
    objects["Annotations/size_mismatch.xml"] = voc_xml(m, size=(m.width * 2, m.height * 2))
    e = extra["no_objects"]
    objects["JPEGImages/no_objects.jpg"] = e.jpeg
    objects["Annotations/no_objects.xml"] = voc_xml(e, boxes=[])
    t = extra["truncated"]
    objects["JPEGImages/truncated.jpg"] = t.jpeg[: len(t.jpeg) // 2]
    objects["Annotations/truncated.xml"] = voc_xml(t)
    objects["README.txt"] = b"detection sample generated by recforge.dev.detection_sample\n"
    return objects


def _coco(good: list[Scene], extra: dict[str, Scene]) -> dict[str, bytes]:
    cats = [{"id": i + 1, "name": n, "supercategory": "thing"}
            for i, n in enumerate(OBJECT_PHOTOS)]
    cat_id = {c["name"]: c["id"] for c in cats}
    images, anns, objects = [], [], {}

    def add(scene: Scene, boxes: list[list], size=None, file_name=None):
        image_id = len(images) + 1
        w, h = size or (scene.width, scene.height)
        images.append({"id": image_id, "file_name": file_name or f"{scene.stem}.jpg",
                       "width": w, "height": h})
        for n, x0, y0, x1, y1 in boxes:
            anns.append({"id": len(anns) + 1, "image_id": image_id, "category_id": cat_id[n],
                         "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                         "iscrowd": 0})

    for s in good:
        objects[f"images/{s.stem}.jpg"] = s.jpeg
        add(s, _with_bad_parts(s))
    objects["images/no_annotation.jpg"] = extra["no_annotation"].jpeg
    m = extra["size_mismatch"]
    objects["images/size_mismatch.jpg"] = m.jpeg
    add(m, m.boxes, size=(m.width * 2, m.height * 2), file_name="size_mismatch.jpg")
    e = extra["no_objects"]
    objects["images/no_objects.jpg"] = e.jpeg
    add(e, [], file_name="no_objects.jpg")
    t = extra["truncated"]
    objects["images/truncated.jpg"] = t.jpeg[: len(t.jpeg) // 2]
    add(t, t.boxes, file_name="truncated.jpg")
    add(good[0], good[0].boxes, file_name="not_uploaded.jpg")  # an entry without its image
    anns.append({"id": len(anns) + 1, "image_id": 1, "category_id": 99,
                 "bbox": [1, 1, 20, 20], "area": 400, "iscrowd": 0})  # unknown category
    doc = {"info": {"description": "recforge detection sample"}, "licenses": [],
           "images": images, "annotations": anns, "categories": cats}
    objects["annotations/instances_sample.json"] = json.dumps(doc).encode()
    objects["annotations/broken.json"] = json.dumps(doc).encode()[:200]
    objects["README.txt"] = b"detection sample generated by recforge.dev.detection_sample\n"
    return objects


def upload(uri: str, layout: str = "voc", count: int = 60, seed: int = 0) -> int:
    """Generate and write the detection sample under ``uri`` (S3 or local); returns count."""
    from concurrent.futures import ThreadPoolExecutor

    storage.ensure_bucket(uri)
    objects = generate(layout, count, seed)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: storage.put_bytes(storage.join(uri, kv[0]), kv[1]),
                      objects.items()))
    log.info("detection sample (%s): %d objects under %s", layout, len(objects), uri)
    return len(objects)
