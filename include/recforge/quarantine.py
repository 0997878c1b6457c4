"""The quarantine report: every input object that was not packed, with a reason and a fix.

Nothing is dropped in silence: each stage that refuses an object records a
``QuarantineEntry``; the published ``quarantine.jsonl`` is their union, and the run's
counts reconcile exactly (listed = packed + quarantined).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from recforge import storage

# reason → the fix we suggest to the user
FIXES = {
    "hidden_file": "hidden files (name starts with '.') are never packed; delete or rename it",
    "zero_bytes": "the object is empty; re-upload the image",
    "unsafe_key": "the key escapes the dataset root ('..', absolute or empty segment) or holds "
    "control characters or over-long names; rename it",
    "unsupported_extension": "not an image extension listed in source.extensions; "
    "add the extension to the spec or remove the object",
    "not_in_class_folder": "class_folders layout needs <prefix>/<class>/<image>; "
    "move the file into a class folder",
    "unknown_class": "the class is not in the class map; add it or allow new classes",
    "undecodable": "the bytes are not an image the decoder understands; re-export the image",
    "truncated": "the image data ends early (cut-off upload or copy); re-upload or re-export it",
    "corrupt": "the decoder reported corrupt image data (damaged bytes); re-export the image",
    "too_many_pixels": "larger than pack.max_pixels (decompression-bomb guard), or would be "
    "once resized; downscale or crop it, or raise pack.max_pixels",
    "zero_size": "the header gives the image no pixels (width or height 0); re-export it",
    "decoder_crashed": "the image crashed, exhausted or stalled the decoder (a process of its "
    "own died on it; the detail says how); it is damaged or crafted: re-export it from the "
    "original, or remove it",
    "jpeg_size_limit": "JPEG cannot hold a side over 65,500 pixels; crop or downscale it, or "
    "pack as PNG (pack.encoding / --encoding .png)",
    "not_regular_file": "a FIFO, device, socket or directory, not an image file; list only "
    "regular files",
    "missing": "the object vanished between listing and packing; re-run",
    "read_error": "the object could not be read; check permissions and re-run",
    # segmentation pairs (both the image and its mask are quarantined together)
    "mask_missing": "the image has no mask under the pair rule; add the mask or fix the rule",
    "orphan_mask": "a mask with no image under the pair rule; add the image or remove the mask",
    "mask_size_mismatch": "the mask's size differs from its image's; re-export the mask at "
    "the image's size",
    "mask_lossy": "the mask is a JPEG (lossy: edges get invented colours); export it as PNG",
    "mask_mode_unsupported": "save masks as palette (P), grayscale ids (L) or RGB colour PNGs",
    "mask_values_out_of_range": "class masks must be 8-bit (ids 0-255); re-export the mask",
    "mask_not_converted": "the packer got a colour mask; convert masks to class ids first",
    "split_mismatch": "the image and its mask are filed under different split folders "
    "(splits.from: source); move the mask into its image's split folder",
    "not_in_split_folder": "with splits.from: source images and masks live under "
    "<images>/<split>/… and <masks>/<split>/…; move it into a split folder, or use "
    "splits.from: hash",
    "outside_pair_folders": "not under the spec's images or masks folder; move or remove it",
    "duplicate_stem": "two images (or masks) share one name stem; rename one",
    "outside_root": "the .lst path is absolute, climbs out of ROOT with '..', or is a "
    "symbolic link that leads out of ROOT; list it relative to ROOT, or copy the file in",
    "bad_lst_line": "the .lst line is not 'index<TAB>label(s)<TAB>path' with an integer index "
    ">= 0 and float32 labels; fix or regenerate the .lst",
    "duplicate_key": "an earlier .lst line has the same index, and an .idx key must be "
    "unique; renumber the .lst",
    # classification list files (layout: list; docs/datasets.md)
    "listed_image_missing": "a list row names an image that is not under source.uri "
    "(columns.key_match: stem matches it without its extension); upload the image, fix the "
    "row, or point source.uri at the folder the list's keys are relative to",
    "list_key_ambiguous": "with columns.key_match name or stem the row's key fits several "
    "images (one name in two folders); list the images by path (key_match: path)",
    "bad_list_row": "the list row has no key (too few cells, or an empty key cell); fix the "
    "row, or name the right columns in source.columns",
    "list_no_label": "the image's list row has no label (an empty or missing label cell); "
    "label it in the list, or remove its row",
    "list_conflict": "two list rows (or a list row and the image's class folder) give the "
    "image different labels or splits; keep one row per image",
    "list_unknown_split": "the list row's split is a name splits.folders maps to no split; "
    "map it there (e.g. {val: [val, dev]}) or fix the row",
    # detection annotations (docs/detection.md)
    "annotation_missing": "the image has no annotation (VOC: no Annotations/<id>.xml; COCO: "
    "no images entry in the instances file of its folder); add it, or remove the image",
    "orphan_annotation": "an annotation with no image (VOC: no JPEGImages/<id>.<ext>); add "
    "the image or remove the annotation",
    "annotation_unparsable": "the annotation file is not well-formed VOC XML / COCO JSON (the "
    "detail says where); re-export it from the labelling tool",
    "not_in_detection_layout": "voc needs JPEGImages/ and Annotations/ (in each VOC<year>/ of "
    "source.voc.years), coco annotations/instances_*.json and images/ or <split><year>/; "
    "move the object there or remove it",
    "image_set_missing": "a VOC ImageSets/Main list names an image id with neither "
    "JPEGImages/<id>.<ext> nor Annotations/<id>.xml; upload both, or use the list of the "
    "download it came with",
    "image_missing": "the annotation file names an image that is not in the source; upload "
    "the image, or remove its entry from the annotation file",
    "bad_object": "the object's entry is incomplete (no name, no box, or a value that is not "
    "a number); fix it in the labelling tool",
    "unknown_category": "a COCO annotation's category_id is not in the file's categories; add "
    "the category or fix the id",
    "duplicate_image_entry": "a second annotation entry for an image that already has one "
    "(two COCO files, or one twice); keep one entry per image",
    "box_outside_image": "the box reaches outside the image; fix it in the labelling tool (VOC "
    "0-based coordinates: set detection.voc_pixel_origin: 0)",
    "degenerate_box": "xmin >= xmax or ymin >= ymax, or narrower than detection.min_box_pixels; "
    "redraw the box or lower min_box_pixels",
    "annotation_size_mismatch": "the annotation's image size differs from the image's; "
    "re-annotate the image, or re-export the annotation from the image as stored",
    "annotation_frame": "the annotation's size is the EXIF-rotated one: the boxes were drawn on "
    "the displayed image; set detection.box_frame: displayed",
    "too_many_refused": "the annotation refuses more objects than are reported one by one; "
    "fix the labelling tool's export (the first ones listed show what is wrong)",
    "no_objects": "the image has no usable object; annotate it, or set detection.empty_images: "
    "keep to pack it as a negative",
    "too_large": "the record is 2^29 bytes (512 MiB) or more, RecordIO's limit; downscale "
    "the image",
}


MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
MAX_DETAIL_CHARS = 1000  # a quarantine entry's detail, past which it is cut
MAX_PART_CHARS = 200  # the part it names (``object 3``, ``image <file name>``)


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(f"… ({len(text):,} more characters cut)"))
    return f"{text[:keep]}… ({len(text) - keep:,} more characters cut)"


def fetch_reason(exc: Exception) -> tuple[str, str]:
    """The one rule for an object that could not be fetched: ``(reason, detail)``.

    ``missing`` when the object is gone (a local ``FileNotFoundError`` or S3's ``NoSuchKey`` /
    404, however botocore words it), else ``read_error`` (e.g. access denied on the object).
    A transient error (network, 5xx, throttling: ``storage.is_transient``) is re-raised, never
    turned into a reason: a network blip must fail the task (Airflow retries it), not shrink
    the dataset. Every stage that fetches source objects (mask conversion, pack, for
    classification and segmentation) uses this, so the same object gets the same fate.
    """
    if storage.is_transient(exc):
        raise exc
    code = getattr(exc, "response", {}).get("Error", {}).get("Code") \
        if isinstance(getattr(exc, "response", None), dict) else None
    missing = isinstance(exc, FileNotFoundError) or str(code) in MISSING_CODES
    return ("missing" if missing else "read_error"), repr(exc)[:300]


@dataclass(frozen=True)
class QuarantineEntry:
    """One refused input object; ``source_key`` is relative to the source prefix.

    An entry with ``part`` refuses a part of an object, not the object: one object of a
    detection annotation (``object 3`` of a VOC file, ``annotation 1234`` or ``image 42`` of
    a COCO file), ``box`` its box in source pixels ``[xmin, ymin, xmax, ymax]`` where it
    has one. The object itself is still accounted for (packed, or refused by an entry of
    its own), so parts never count in ``listed = packed + quarantined``."""

    source_key: str
    stage: str
    reason: str
    detail: str = ""
    part: str | None = None
    box: tuple[float, float, float, float] | None = None

    def __post_init__(self):
        # a detail quotes the input (a class name, a parser message): bounded, so one
        # hostile file cannot grow the report, the log and quarantine.jsonl with its size
        for name, limit in (("detail", MAX_DETAIL_CHARS), ("part", MAX_PART_CHARS)):
            value = getattr(self, name)
            if value is not None and len(value) > limit:
                object.__setattr__(self, name, cut(value, limit))

    @property
    def fix(self) -> str:
        return FIXES.get(self.reason, "")

    @property
    def is_part(self) -> bool:
        return self.part is not None

    def to_json(self) -> str:
        doc = {k: v for k, v in asdict(self).items()
               if v is not None or k not in ("part", "box")}
        return storage.jsonl_line({**doc, "fix": self.fix})

    @classmethod
    def from_dict(cls, d: dict) -> QuarantineEntry:
        box = d.get("box")
        return cls(d["source_key"], d["stage"], d["reason"], d.get("detail", ""),
                   d.get("part"), tuple(box) if box is not None else None)


def dumps(entries: list[QuarantineEntry]) -> bytes:
    return "".join(e.to_json() + "\n" for e in entries).encode("utf-8")


def loads(data: bytes) -> list[QuarantineEntry]:
    return [QuarantineEntry.from_dict(d) for d in storage.parse_jsonl(data)]


MAX_REFUSED_PARTS = 1000  # refused parts of one annotation reported one by one; then counted


class PartCap:
    """The refused objects of one annotation, at most ``limit`` reported one by one; past
    it one entry counts the rest by reason, so a file of 500,000 broken objects makes a
    report of ``limit`` + 1 lines, not 500,000."""

    def __init__(self, image_key: str, stage: str, limit: int = MAX_REFUSED_PARTS):
        self.image_key, self.stage, self.limit = image_key, stage, limit
        self.kept: list[QuarantineEntry] = []
        self.cut: dict[str, int] = {}

    def add(self, reason: str, detail: str, part: str, box=None) -> None:
        if len(self.kept) < self.limit:
            self.kept.append(QuarantineEntry(self.image_key, self.stage, reason, detail,
                                             part=part, box=box))
        else:
            self.cut[reason] = self.cut.get(reason, 0) + 1

    def entries(self) -> list[QuarantineEntry]:
        if not self.cut:
            return self.kept
        total = sum(self.cut.values())
        by_reason = ", ".join(f"{n:,} {r}" for r, n in sorted(self.cut.items()))
        return [*self.kept, QuarantineEntry(
            self.image_key, self.stage, "too_many_refused",
            f"{total:,} more refused objects not listed one by one ({by_reason})",
            part=f"{total:,} more objects")]


def capped(entries: list[QuarantineEntry], limit: int = MAX_REFUSED_PARTS
           ) -> list[QuarantineEntry]:
    """``entries`` with at most ``limit`` parts per source key listed one by one (see
    :class:`PartCap`); whole-object entries, and the counts a parser's own cap already
    wrote (``too_many_refused``), are kept as they are."""
    caps: dict[str, PartCap] = {}
    whole = []
    for e in entries:
        if not e.is_part or e.reason == "too_many_refused":
            whole.append(e)
            continue
        cap = caps.setdefault(e.source_key, PartCap(e.source_key, e.stage, limit))
        if len(cap.kept) < limit:
            cap.kept.append(e)
        else:
            cap.cut[e.reason] = cap.cut.get(e.reason, 0) + 1
    return whole + [x for cap in caps.values() for x in cap.entries()]
