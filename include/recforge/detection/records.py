"""The label of one detection record, decided where the image's bytes are: its annotated
size against the JPEG's, its boxes normalised, turned with the pixels and checked.

The pack stage decodes and resizes an image with the same engine as every task, then asks
:class:`DetectionLabels` for the record's label (``format.detection_label``'s array), the
manifest's extra fields and the entries of the objects it refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from recforge.detection.boxes import check_objects, transposes
from recforge.format import detection_label
from recforge.imaging import EncodedImage, ImageRejected, PackOptions, probe
from recforge.quarantine import QuarantineEntry


class ObjectsRefused(ImageRejected):
    """The image is refused, and these parts of its annotation with it."""

    def __init__(self, reason: str, detail: str, parts: list[QuarantineEntry]):
        super().__init__(reason, detail)
        self.parts = parts


@dataclass(frozen=True)
class DetectionLabels:
    """``ids`` class name → id; ``spec`` the spec's ``detection`` section; ``opts`` the pack
    options (the EXIF orientation is applied to the pixels for ``color`` 0/1, as for every
    task, so only then are the boxes turned)."""

    ids: dict[str, int]
    spec: object
    opts: PackOptions

    def frames(self, data: bytes) -> tuple[tuple[int, int], tuple[int, int], int]:
        """(stored size, displayed size, orientation applied to the pixels)."""
        info = probe(data)
        orientation = info.orientation if info is not None and self.opts.color in (0, 1) \
            else 1
        if info is None or not info.width or not info.height:
            raise ImageRejected("undecodable", "no image header to read the size from")
        stored = (info.width, info.height)
        shown = (stored[1], stored[0]) if transposes(orientation) else stored
        return stored, shown, orientation

    def __call__(self, row: dict, data: bytes, img: EncodedImage
                 ) -> tuple[list[float], dict, list[QuarantineEntry]]:
        stored, shown, orientation = self.frames(data)
        frame, other = (stored, shown) if self.spec.box_frame == "stored" else (shown, stored)
        annotated = tuple(row["annotated_size"]) if row.get("annotated_size") else None
        where = row.get("annotation_key") or row.get("annotation_file") or "its annotation"
        if annotated is not None and annotated != frame:
            if annotated == other:
                raise ImageRejected("annotation_frame", (
                    f"{where} gives {annotated[0]} x {annotated[1]}, the image's size after its "
                    f"EXIF orientation {orientation}; it is stored {stored[0]} x {stored[1]} "
                    f"(detection.box_frame is {self.spec.box_frame})"))
            raise ImageRejected("annotation_size_mismatch", (
                f"{where} gives {annotated[0]} x {annotated[1]}, the image is "
                f"{frame[0]} x {frame[1]}"))
        turn = orientation if self.spec.box_frame == "stored" else 1
        checked = check_objects(row["objects"], self.ids, frame, turn,
                                self.spec.min_box_pixels, source_key=row["source_key"])
        if not checked.rows and self.spec.empty_images == "quarantine":
            raise ObjectsRefused("no_objects", (
                f"{where} has no usable object ({len(checked.refused)} refused)"
                if checked.refused else f"{where} has no object"), checked.refused)
        label = detection_label.encode(img.width, img.height, checked.rows)
        return label, {"annotation_key": row.get("annotation_key"),
                       "num_objects": len(checked.rows)}, checked.refused
