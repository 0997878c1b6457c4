"""COCO detection: ``annotations/*.json`` instances files naming the images
(``recforge.detection.sources.flatten_coco``)."""

from __future__ import annotations

from recforge.detection.sources import annotation_extensions, flatten_coco
from recforge.layouts import Flattened, Layout


def flatten(rows: list[dict], spec) -> Flattened:
    items, refused, used = flatten_coco(rows, spec)
    return Flattened(items, refused, used=used)


LAYOUT = Layout("coco", flatten, lambda spec: annotation_extensions("coco"),
                lambda spec: "<prefix>/annotations/instances_*.json with the images at "
                "<prefix>/images/<file_name>")
