"""Pascal VOC detection as shipped: one year folder (``…/VOC2012``: ``JPEGImages/<id>.<ext>``
with ``Annotations/<id>.xml``, ``ImageSets/Main/<set>.txt``), or VOCdevkit with a
``VOC<year>/`` folder per year of ``source.voc.years``
(``recforge.detection.sources.voc_found``)."""

from __future__ import annotations

from recforge.detection.sources import (
    annotation_extensions,
    voc_found,
    voc_image_sets,
    voc_roots,
)
from recforge.layouts import Flattened, Layout, NotUsed


def flatten(rows: list[dict], spec) -> Flattened:
    out = voc_found(rows, spec)
    return Flattened(out.items, out.refused, [NotUsed(*n) for n in out.set_aside], out.used)


def _expected(spec) -> str:
    roots = voc_roots(spec)
    where = "<prefix>/" if roots == [""] else " and ".join(f"<prefix>/{r}" for r in roots)
    text = f"{where} holding JPEGImages/<id>.<ext> with Annotations/<id>.xml"
    if spec.splits.from_source:
        sets = sorted({n for names in voc_image_sets(spec).values() for n in names})
        text += f", the images listed in ImageSets/Main/{{{','.join(sets)}}}.txt"
    if roots == [""]:
        text += " (a VOCdevkit of VOC<year>/ folders needs source.voc.years)"
    return text


def _labels(spec) -> str:
    chosen = (spec.detection.classes if spec.detection is not None else None)
    return ("objects from each `Annotations/<id>.xml`: the `<name>` of an `<object>` is its "
            "class, its `<bndbox>` its box (`difficult` kept)"
            + (f"; classes limited to {', '.join(chosen)}" if chosen else ""))


LAYOUT = Layout("voc", flatten, lambda spec: annotation_extensions("voc"), _expected,
                _labels)
