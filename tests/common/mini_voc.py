"""A Pascal VOC miniature in the shape the 2007 and 2012 tars unpack into one
``VOCdevkit/``: ``VOC<year>/JPEGImages``, ``Annotations`` (the devkit's XML: folder,
filename, source, size, segmented, objects with pose, truncated, difficult, bndbox in
1-based pixel indices), ``ImageSets/Main/{train,val,trainval}.txt`` (2007 also
``test.txt``) with the per-class ``<class>_<set>.txt`` lists, ``ImageSets/Segmentation`` and
``ImageSets/Action`` lists, ``SegmentationClass`` / ``SegmentationObject`` PNGs, and an
action-only image (listed under ``ImageSets/Action`` only)."""

from __future__ import annotations

import cv2
import numpy as np

from tests.common.detection import put_all

COLOURS = {"person": (0, 0, 255), "dog": (255, 0, 0), "car": (0, 255, 0),
           "chair": (0, 255, 255)}  # BGR

# year → id → (width, height, [(class, x0, y0, x1, y1 continuous pixels, difficult)])
IMAGES = {
    2007: {
        "000001": (64, 48, [("dog", 4, 6, 30, 40, 0), ("person", 34, 2, 60, 46, 0)]),
        "000004": (48, 64, [("car", 2, 2, 40, 30, 0)]),
        "000012": (64, 48, [("car", 10, 10, 50, 30, 0), ("chair", 52, 30, 62, 46, 1)]),
        "000017": (56, 56, [("person", 8, 8, 40, 50, 0)]),
    },
    2012: {
        "2008_000002": (64, 48, [("dog", 1, 1, 30, 20, 0)]),
        "2008_000003": (48, 48, [("person", 5, 5, 30, 44, 0), ("chair", 30, 30, 46, 46, 0)]),
        "2011_003276": (64, 48, [("person", 10, 4, 40, 44, 0)]),  # action only
    },
}
MAIN = {  # year → set → ids
    2007: {"train": ["000012"], "val": ["000017"], "trainval": ["000012", "000017"],
           "test": ["000001", "000004"]},
    2012: {"train": ["2008_000002"], "val": ["2008_000003"],
           "trainval": ["2008_000002", "2008_000003"]},
}
ACTION_ONLY = ("VOC2012", "2011_003276")
SEGMENTED = {2007: "000012", 2012: "2008_000002"}


def xml(year: int, ident: str, width: int, height: int, boxes: list[tuple]) -> bytes:
    """The devkit's annotation XML (bndbox: 1-based inclusive pixel indices)."""
    objs = "".join(
        f"<object><name>{n}</name><pose>Unspecified</pose><truncated>0</truncated>"
        f"<difficult>{d}</difficult><bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}</ymin>"
        f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
        for n, x0, y0, x1, y1, d in boxes)
    return (f"<annotation><folder>VOC{year}</folder><filename>{ident}.jpg</filename>"
            f"<source><database>The VOC{year} Database</database><annotation>PASCAL VOC{year}"
            f"</annotation><image>flickr</image></source><size><width>{width}</width>"
            f"<height>{height}</height><depth>3</depth></size><segmented>"
            f"{int(SEGMENTED.get(year) == ident)}</segmented>{objs}</annotation>\n").encode()


def _jpeg(width: int, height: int, boxes: list[tuple], shade: int) -> bytes:
    img = np.full((height, width, 3), shade, np.uint8)
    for n, x0, y0, x1, y1, _ in boxes:
        img[y0:y1, x0:x1] = COLOURS[n]
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()


def _lines(ids: list[str]) -> bytes:
    return "".join(f"{i}\n" for i in ids).encode()


def objects() -> dict[str, bytes]:
    """Every object of the miniature by key, relative to VOCdevkit/."""
    out: dict[str, bytes] = {}
    shade = 60
    png = cv2.imencode(".png", np.zeros((48, 64), np.uint8))[1].tobytes()
    for year, images in IMAGES.items():
        root = f"VOC{year}/"
        for ident, (w, h, boxes) in images.items():
            shade += 11  # every image's pixels differ
            out[f"{root}JPEGImages/{ident}.jpg"] = _jpeg(w, h, boxes, shade)
            out[f"{root}Annotations/{ident}.xml"] = xml(year, ident, w, h, boxes)
        for name, ids in MAIN[year].items():
            out[f"{root}ImageSets/Main/{name}.txt"] = _lines(ids)
            out[f"{root}ImageSets/Main/dog_{name}.txt"] = "".join(
                f"{i} {1 if any(b[0] == 'dog' for b in images[i][2]) else -1}\n"
                for i in ids).encode()
        out[f"{root}ImageSets/Segmentation/trainval.txt"] = _lines([SEGMENTED[year]])
        out[f"{root}SegmentationClass/{SEGMENTED[year]}.png"] = png
        out[f"{root}SegmentationObject/{SEGMENTED[year]}.png"] = png
    out["VOC2012/ImageSets/Action/trainval.txt"] = _lines([ACTION_ONLY[1]])
    out["VOC2012/ImageSets/Action/jumping_trainval.txt"] = f"{ACTION_ONLY[1]} 1 1\n".encode()
    return out


def upload(uri: str) -> dict[str, bytes]:
    made = objects()
    put_all(uri, made)
    return made


def truth(image_sets: dict[str, list[str]]) -> dict[str, tuple[str, int, int, list[tuple]]]:
    """image key → (split, width, height, [(class, x0, y0, x1, y1, difficult)]) of the
    images the chosen sets of every year name."""
    out = {}
    for split, names in image_sets.items():
        for year, sets in MAIN.items():
            for name in names:
                for ident in sets.get(name, ()):
                    w, h, boxes = IMAGES[year][ident]
                    out[f"VOC{year}/JPEGImages/{ident}.jpg"] = (split, w, h, boxes)
    return out
