"""COCO detection as shipped: ``annotations/instances_<split><year>.json`` with the images
at ``<split><year>/<file_name>`` (COCO 2017), or ``annotations/*.json`` with the images at
``images/<file_name>`` (``recforge.detection.sources.coco_found``)."""

from __future__ import annotations

from recforge.detection.sources import annotation_extensions, coco_found
from recforge.layouts import Flattened, Layout, NotUsed


def flatten(rows: list[dict], spec) -> Flattened:
    out = coco_found(rows, spec)
    return Flattened(out.items, out.refused, [NotUsed(*n) for n in out.set_aside], out.used,
                     class_order=out.class_order, counts=out.counts)


def _expected(spec) -> str:
    found = ("; with splits.from: source each file's name gives its split" if
             spec.splits.from_source else "")
    return ("<prefix>/annotations/instances_<split><year>.json (COCO 2017: "
            "instances_train2017.json, instances_val2017.json) with the images at "
            "<prefix>/<split><year>/<file_name> (train2017/, val2017/), or "
            f"<prefix>/annotations/instances_*.json with them at <prefix>/images/<file_name>"
            f"{found}")


def _labels(spec) -> str:
    det = spec.detection
    chosen, crowd = (det.classes, det.crowd) if det is not None else (None, "drop")
    return ("objects from the instances files: the `categories` are the classes (numbered in "
            f"category-id order), each annotation's `bbox` a box, crowd regions: {crowd}"
            + (f"; classes limited to {', '.join(chosen)}" if chosen else ""))


LAYOUT = Layout("coco", flatten, lambda spec: annotation_extensions("coco"), _expected,
                _labels)
