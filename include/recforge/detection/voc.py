"""Pascal VOC annotation XML → the image's annotated size and objects.

Read with the standard library's expat parser, which refuses external entities and caps
entity expansion (no billion-laughs), after a size cap: an annotation is a few kilobytes,
so one of ``MAX_XML_BYTES`` is refused unread. Only ``size``, ``object/name``,
``object/bndbox``, ``object/difficult`` and ``object/truncated`` are read; ``truncated``
is kept in nothing packed (MXNet's readers have no place for it).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from recforge.detection.annotation import Annotation, AnnotationUnparsable
from recforge.detection.boxes import voc_box
from recforge.quarantine import QuarantineEntry

MAX_XML_BYTES = 16 * 1024 * 1024


def _number(node, tag: str) -> float | None:
    text = node.findtext(tag)
    try:
        value = float(text.strip()) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def parse(data: bytes, image_key: str, origin: int = 1, stage: str = "flatten") -> Annotation:
    """Parse one VOC file; refused objects are parts of ``image_key``'s entry. Raises
    ``AnnotationUnparsable``."""
    if len(data) > MAX_XML_BYTES:
        raise AnnotationUnparsable(f"{len(data)} bytes is more than a VOC annotation holds "
                                   f"(at most {MAX_XML_BYTES})")
    if b"<!DOCTYPE" in data[:4096] or b"<!ENTITY" in data:
        raise AnnotationUnparsable("declares a DTD or entities, which VOC files never do")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise AnnotationUnparsable(f"not well-formed XML: {exc}") from None
    if root.tag != "annotation":
        raise AnnotationUnparsable(f"the root element is <{root.tag}>, not <annotation>")
    size = None
    node = root.find("size")
    if node is not None:
        w, h = _number(node, "width"), _number(node, "height")
        if w is None or h is None or w < 0 or h < 0 or w != int(w) or h != int(h):
            raise AnnotationUnparsable(f"<size> has width {node.findtext('width')!r} and height "
                                       f"{node.findtext('height')!r}, not whole numbers")
        size = (int(w), int(h)) if w and h else None  # 0 x 0: the tool did not know
    objects, refused = [], []
    for i, obj in enumerate(root.iter("object")):
        part = f"object {i}"
        name = (obj.findtext("name") or "").strip()
        bnd = obj.find("bndbox")
        coords = [_number(bnd, t) for t in ("xmin", "ymin", "xmax", "ymax")] \
            if bnd is not None else [None]
        if not name or None in coords:
            what = "no name" if not name else "no bndbox" if bnd is None else \
                "a bndbox value that is not a number"
            box = tuple(coords) if None not in coords else None
            refused.append(QuarantineEntry(image_key, stage, "bad_object", f"{part}: {what}",
                                           part=part, box=box))
            continue
        difficult = _number(obj, "difficult") or 0
        objects.append([name, *voc_box(*coords, origin), 1 if difficult else 0, part])
    return Annotation(size, objects, refused)
