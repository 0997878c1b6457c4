"""The parsed annotation of one image, the form VOC and COCO files both become."""

from __future__ import annotations

from dataclasses import dataclass, field

from recforge.quarantine import QuarantineEntry


class AnnotationUnparsable(ValueError):
    """The whole annotation (a VOC file, a COCO file) is unusable; the message says why and
    where. Its image(s) are quarantined; the run goes on."""


@dataclass(frozen=True)
class Annotation:
    """One image's annotation: its size as the file states it (width, height; None where it
    states none), its objects in ``detection.boxes``' row layout (``[name, xmin, ymin, xmax,
    ymax, difficult, part]``, continuous pixels of the annotation's frame) and the entries
    of the objects refused while reading it."""

    size: tuple[int, int] | None
    objects: list[list]
    refused: list[QuarantineEntry] = field(default_factory=list)


MAX_NAME_CHARS = 256  # a class name longer than this refuses its object (classes.json stays small)
