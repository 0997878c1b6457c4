"""Pascal VOC annotation XML → the image's annotated size and objects.

Read with the standard library's expat parser after a size cap (an annotation is a few
kilobytes, so one of ``MAX_XML_BYTES`` is refused unread, by its listed size before it is
fetched) and after a first expat pass that refuses any DTD or entity declaration in the
decoded document, whatever its encoding (VOC files declare none). A class name longer than
``MAX_NAME_CHARS`` refuses its object, and past ``MAX_REFUSED_PARTS`` refused objects one
entry counts the rest, so a hostile file's report stays small. Only ``size``, ``object/name``,
``object/bndbox``, ``object/difficult`` and ``object/truncated`` are read; ``truncated``
is kept in nothing packed (MXNet's readers have no place for it).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from recforge.detection.annotation import MAX_NAME_CHARS, Annotation, AnnotationUnparsable
from recforge.detection.boxes import voc_box
from recforge.quarantine import MAX_REFUSED_PARTS, PartCap

MAX_XML_BYTES = 16 * 1024 * 1024


def _number(node, tag: str) -> float | None:
    text = node.findtext(tag)
    try:
        value = float(text.strip()) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


class _Declared(Exception):
    pass


def _refuse_declarations(data: bytes) -> None:
    """Refuse a document type or entity declaration wherever it stands, in whatever
    encoding the document declares (expat decodes UTF-16 and the rest, and reports every
    declaration before any entity could be expanded into a name)."""
    from xml.parsers import expat

    def declared(*_):
        raise _Declared

    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = declared
    parser.EntityDeclHandler = declared
    try:
        parser.Parse(data, True)
    except _Declared:
        raise AnnotationUnparsable(
            f"declares a DTD or entities (byte {parser.CurrentByteIndex:,}), which VOC files "
            "never do") from None
    except expat.ExpatError as exc:
        raise AnnotationUnparsable(f"not well-formed XML: {exc}") from None


def parse(data: bytes, image_key: str, origin: int = 1, stage: str = "flatten",
          max_name_chars: int = MAX_NAME_CHARS, max_refused: int = MAX_REFUSED_PARTS
          ) -> Annotation:
    """Parse one VOC file; refused objects are parts of ``image_key``'s entry, at most
    ``max_refused`` of them (then one entry counts the rest); a name longer than
    ``max_name_chars`` refuses its object. Raises ``AnnotationUnparsable``."""
    if len(data) > MAX_XML_BYTES:
        raise AnnotationUnparsable(f"{len(data)} bytes is more than a VOC annotation holds "
                                   f"(at most {MAX_XML_BYTES})")
    _refuse_declarations(data)
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
    objects, refused = [], PartCap(image_key, stage, max_refused)
    for i, obj in enumerate(root.iter("object")):
        part = f"object {i}"
        name = (obj.findtext("name") or "").strip()
        bnd = obj.find("bndbox")
        coords = [_number(bnd, t) for t in ("xmin", "ymin", "xmax", "ymax")] \
            if bnd is not None else [None]
        if not name or None in coords or len(name) > max_name_chars:
            what = "no name" if not name else \
                f"a name of {len(name):,} characters (at most {max_name_chars:,})" \
                if len(name) > max_name_chars else "no bndbox" if bnd is None else \
                "a bndbox value that is not a number"
            box = tuple(coords) if None not in coords else None
            refused.add("bad_object", f"{part}: {what}", part, box)
            continue
        difficult = _number(obj, "difficult") or 0
        objects.append([name, *voc_box(*coords, origin), 1 if difficult else 0, part])
    return Annotation(size, objects, refused.entries())
