"""Pascal VOC detection: ``JPEGImages/<id>.<ext>`` with ``Annotations/<id>.xml``
(``recforge.detection.sources.flatten_voc``)."""

from __future__ import annotations

from recforge.detection.sources import annotation_extensions, flatten_voc
from recforge.layouts import Flattened, Layout


def flatten(rows: list[dict], spec) -> Flattened:
    items, refused = flatten_voc(rows, spec)
    return Flattened(items, refused)


LAYOUT = Layout("voc", flatten, lambda spec: annotation_extensions("voc"),
                lambda spec: "<prefix>/JPEGImages/<id>.<ext> with <prefix>/Annotations/<id>.xml")
