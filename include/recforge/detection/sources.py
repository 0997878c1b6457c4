"""The flatten stage for detection: the listing's images paired with their annotations.

``voc``: ``JPEGImages/<id>.<ext>`` pairs with ``Annotations/<id>.xml`` by the path between
folder and extension (``<id>`` may hold folders), in one year folder (``…/VOC2012``) or in
each ``VOC<year>/`` of a VOCdevkit (``source.voc.years``). With ``splits.from: source`` an
image's split is the ``ImageSets/Main/<set>.txt`` list that names it
(``source.voc.image_sets``); an image in no chosen list is no part of the dataset. The
``ImageSets/`` lists not read and the ``SegmentationClass/`` / ``SegmentationObject/`` PNGs
are set aside (not used).

``coco``: each ``annotations/instances_*.json`` is an instances file; its images are at
``<split><year>/<file_name>`` where the file's name gives a split and year and that folder
is listed (COCO 2017: ``instances_val2017.json`` → ``val2017/``), else at
``images/<file_name>``. With ``splits.from: source`` its images take its split. Files are
read in key order and the first entry of an image wins. COCO's other annotation files
(captions, keypoints, panoptic, stuff, test image info) and the images of a folder no
instances file names (``test2017/``: COCO ships no boxes for it) are set aside (not used).
``detection.crowd`` decides the ``iscrowd`` regions: dropped (counted), packed difficult,
or kept; the class order is the categories' id order (``Found.class_order``).

Every listed object ends as part of an item (an image with its annotation), as a used file
(a COCO instances file, a VOC image set list), set aside, or in the quarantine with its
reason; a refused object of an annotation is a *part* entry and its image is still packed.
Annotations are read here (they are small beside the images, and the class list must be
known before anything is packed), in parallel, streamed.
"""

from __future__ import annotations

import logging
import posixpath
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from recforge import quarantine, storage
from recforge.detection import voc
from recforge.detection.annotation import Annotation, AnnotationUnparsable
from recforge.errors import SpecError
from recforge.quarantine import QuarantineEntry
from recforge.spec.dataset import VocSpec

log = logging.getLogger(__name__)
VOC_IMAGES, VOC_ANNOTATIONS = "JPEGImages/", "Annotations/"
VOC_SETS, VOC_MAIN = "ImageSets/", "ImageSets/Main/"
VOC_SEGMENTATION = ("SegmentationClass/", "SegmentationObject/")
VOC_YEAR = re.compile(r"VOC\d{4}")
COCO_IMAGES, COCO_ANNOTATIONS = "images/", "annotations/"
# COCO's annotation files that hold no boxes: set aside by name, never downloaded
COCO_NOT_INSTANCES = {"captions_": "captions", "person_keypoints_": "person keypoints",
                      "panoptic_": "panoptic segmentation", "stuff_": "stuff segmentation",
                      "image_info_": "image list without annotations"}
COCO_INSTANCES = re.compile(r"instances_([A-Za-z]+?)(\d{4})?\.json")
COCO_IMAGE_FOLDER = re.compile(r"[A-Za-z]+\d{4}")  # train2017, test2017, unlabeled2017
ANNOTATION_EXTENSIONS = {"voc": (".xml", ".txt"), "coco": (".json",)}
FETCH_THREADS = 16  # annotations are a few KB each: latency-bound GETs


@dataclass
class Found:
    """What a detection source's listing made (``recforge.layouts.Flattened``'s parts): the
    items, the refusals, the objects set aside as ``(key, reason, detail)``, the files used
    whole, the source's class order and counts."""

    items: list[dict]
    refused: list[QuarantineEntry]
    set_aside: list[tuple[str, str, str]] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    class_order: list[str] | None = None
    counts: dict[str, int] = field(default_factory=dict)


def _aside(key: str, reason: str, detail: str) -> tuple[str, str, str]:
    """An object set aside: no part of this dataset, not bad data."""
    return key, reason, detail


def annotation_extensions(layout: str) -> tuple[str, ...]:
    """What ingest accepts beside the images for ``layout``."""
    return ANNOTATION_EXTENSIONS.get(layout, ())


def _outside(key: str, layout: str) -> QuarantineEntry:
    where = ("JPEGImages/ (images) or Annotations/ (.xml)" if layout == "voc"
             else "an instances file's image folder or annotations/ (.json)")
    return QuarantineEntry(key, "flatten", "not_in_detection_layout",
                           f"{layout} layout: not under {where}")


def item(image: dict, annotation: Annotation, names_allowed: set[str] | None, **where
         ) -> tuple[dict, list[QuarantineEntry]]:
    """The item of an image and its annotation; objects of names not allowed (or empty
    names) are refused as parts."""
    objects, refused = [], list(annotation.refused)
    for obj in annotation.objects:
        name = obj[0]
        if names_allowed is not None and name not in names_allowed:
            refused.append(QuarantineEntry(
                image["key"], "flatten", "unknown_class",
                f"{obj[6]}: class {name!r} is not in detection.classes", part=obj[6],
                box=tuple(float(v) for v in obj[1:5])))
            continue
        objects.append(obj)
    row = {"source_key": image["key"], "etag": image["etag"], "size": image["size"],
           "name": image["key"], "class_name": None, **where,
           "annotated_size": list(annotation.size) if annotation.size else None,
           "objects": objects}
    return row, refused


# ---------------------------------------------------------------- Pascal VOC

def voc_roots(spec) -> list[str]:
    """The year folders read: ``[""]`` for a prefix that is one year folder."""
    years = spec.source.voc.years if spec.source.voc is not None else None
    return [f"VOC{y}/" for y in years] if years else [""]


def voc_image_sets(spec) -> dict[str, tuple[str, ...]]:
    """split → the ``ImageSets/Main`` sets whose images it holds."""
    return dict((spec.source.voc or VocSpec()).image_sets)


class _VocListing:
    """The listing sorted by year folder and kind."""

    def __init__(self, rows: list[dict], spec):
        self.roots = voc_roots(spec)
        exts = spec.source.extensions
        self.images: dict[tuple[str, str], list[dict]] = {}
        self.xmls: dict[tuple[str, str], dict] = {}
        self.sets: dict[str, dict] = {}  # ImageSets/**.txt by key
        self.refused: list[QuarantineEntry] = []
        self.not_used: list[tuple[str, str, str]] = []  # set aside
        for row in sorted(rows, key=lambda r: r["key"]):
            self._sort(row, exts)

    def _root(self, key: str) -> tuple[str, str] | None:
        if self.roots == [""]:
            return "", key
        top = key.split("/", 1)[0] + "/"
        if top in self.roots and "/" in key:
            return top, key[len(top):]
        if VOC_YEAR.fullmatch(top[:-1]):
            self.not_used.append(_aside(key, "year_not_chosen", f"{top} is not one of "
                                        f"source.voc.years ({', '.join(self.roots)})"))
        else:
            self.refused.append(QuarantineEntry(
                key, "flatten", "not_in_detection_layout",
                f"voc layout with source.voc.years: not under {', '.join(self.roots)}"))
        return None

    def _sort(self, row: dict, exts: tuple[str, ...]) -> None:
        key = row["key"]
        found = self._root(key)
        if found is None:
            return
        root, rel = found
        stem, ext = posixpath.splitext(rel)
        if rel.startswith(VOC_IMAGES) and ext.lower() in exts:
            self.images.setdefault((root, stem[len(VOC_IMAGES):]), []).append(row)
        elif rel.startswith(VOC_ANNOTATIONS) and ext.lower() == ".xml":
            self.xmls[(root, stem[len(VOC_ANNOTATIONS):])] = row
        elif rel.startswith(VOC_SETS) and ext.lower() == ".txt":
            self.sets[key] = row
        elif rel.startswith(VOC_SEGMENTATION):
            self.not_used.append(_aside(key, "segmentation_mask", "a VOC segmentation "
                                        "mask: no part of a detection dataset"))
        else:
            self.refused.append(_outside(key, "voc"))


def _set_ids(data: bytes) -> list[str]:
    """The image ids of an ``ImageSets/Main/<set>.txt`` (the first word of each line)."""
    text = data.decode("utf-8", "replace")
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def _read_image_sets(found: _VocListing, spec
                     ) -> tuple[dict[tuple[str, str], tuple[str, str]], list[str]]:
    """(root, id) → (split, set file key) of every id the chosen lists name, and the lists
    read. A chosen set in none of the year folders, or an id in two splits, is refused."""
    chosen = [(split, name) for split, names in voc_image_sets(spec).items() for name in names]
    for split, name in chosen:
        if not any(f"{root}{VOC_MAIN}{name}.txt" in found.sets for root in found.roots):
            where = ", ".join(f"{root}{VOC_MAIN}{name}.txt" for root in found.roots)
            raise SpecError(
                f"source.voc.image_sets.{split} names the set {name!r}, but {where} is not "
                f"under {spec.source.uri}; name a set the download has (VOC ships train, "
                "val, trainval; 2007 also test), or point source.uri at the year folder "
                "(or at VOCdevkit, with source.voc.years)")
    present = [(split, root, f"{root}{VOC_MAIN}{name}.txt") for split, name in chosen
               for root in found.roots if f"{root}{VOC_MAIN}{name}.txt" in found.sets]
    fetched = storage.prefetch((storage.join(spec.source.uri, k) for _, _, k in present),
                               FETCH_THREADS)
    split_of: dict[tuple[str, str], tuple[str, str]] = {}
    used = []
    for (split, root, key), data in zip(present, fetched, strict=True):
        if isinstance(data, Exception):  # a transient error re-raises: the task retries
            reason, detail = quarantine.fetch_reason(data)
            found.refused.append(QuarantineEntry(key, "flatten", reason, detail))
            continue
        used.append(key)
        for ident in _set_ids(data):
            before = split_of.setdefault((root, ident), (split, key))
            if before[0] != split:
                raise SpecError(
                    f"source.voc.image_sets puts {root}{ident} in {before[0]} ({before[1]}) "
                    f"and in {split} ({key}); an image has one split: choose sets that do "
                    "not overlap (train and val, or trainval and test)")
    return split_of, used


def _voc_select(found: _VocListing, spec) -> tuple[dict, list[str]]:
    """The (root, id) → (split, set key) to build (None: every annotated image, hash split)
    and the set lists used; the lists not read and the images of no chosen set are set
    aside."""
    if not spec.splits.from_source:
        found.not_used += [_aside(k, "image_set_list", "splits.from: hash: the ImageSets "
                                  "lists are not read") for k in found.sets]
        return None, []
    split_of, used = _read_image_sets(found, spec)
    read = set(used) | {e.source_key for e in found.refused}
    found.not_used += [_aside(k, "image_set_list", "not a list of source.voc.image_sets")
                       for k in found.sets if k not in read]
    sets = {split: list(names) for split, names in voc_image_sets(spec).items()}
    for where in sorted(set(found.images) | set(found.xmls)):
        if where in split_of:
            continue
        root, ident = where
        rows = found.images.pop(where, []) + ([found.xmls.pop(where)] if where in found.xmls
                                              else [])
        found.not_used += [_aside(r["key"], "not_in_image_set", f"{root}{ident} is in none "
                                  f"of the image sets {sets}") for r in rows]
    for where, (_, key) in sorted(split_of.items()):
        if where not in found.images and where not in found.xmls:
            root, ident = where
            found.refused.append(QuarantineEntry(
                key, "flatten", "image_set_missing",
                f"{key} lists {ident}, but there is no {root}{VOC_IMAGES}{ident}.<ext> and "
                f"no {root}{VOC_ANNOTATIONS}{ident}.xml", part=f"image {ident}"))
    return split_of, used


def _voc_pairs(found: _VocListing) -> list[tuple[tuple[str, str], dict, dict]]:
    """(where, image, xml) of every id with one image and its XML; the rest refused."""
    pairs = []
    for where, rows in found.images.items():
        root, ident = where
        xml = found.xmls.pop(where, None)
        if len(rows) > 1:  # a.jpg and a.png: which one the XML describes is unknown
            found.refused += [
                QuarantineEntry(r["key"], "flatten", "duplicate_stem",
                                f"images {[f['key'] for f in rows]} share id {ident}")
                for r in rows + ([xml] if xml else [])]
        elif xml is None:
            found.refused.append(QuarantineEntry(
                rows[0]["key"], "flatten", "annotation_missing",
                f"no {root}{VOC_ANNOTATIONS}{ident}.xml"))
        else:
            pairs.append((where, rows[0], xml))
    found.refused += [QuarantineEntry(x["key"], "flatten", "orphan_annotation",
                                      f"no {root}{VOC_IMAGES}{ident}.<image extension>")
                      for (root, ident), x in found.xmls.items()]
    return pairs


def voc_found(rows: list[dict], spec) -> Found:
    """VOC: sort the listing, choose the image sets' images, pair images and XML files by
    id, read every XML (parallel GETs)."""
    det = spec.detection
    found = _VocListing(rows, spec)
    split_of, used = _voc_select(found, spec)
    pairs = _voc_pairs(found)
    refused = found.refused
    allowed = set(det.classes) if det.classes is not None else None
    items = []
    oversize = [(w, i, x) for w, i, x in pairs if x["size"] > voc.MAX_XML_BYTES]
    for _, image, xml in oversize:  # refused by the listing's size, never fetched
        refused += [QuarantineEntry(k, "flatten", "annotation_unparsable",
                                    f"{xml['key']}: {xml['size']:,} bytes is more than a VOC "
                                    f"annotation holds (at most {voc.MAX_XML_BYTES:,})")
                    for k in (image["key"], xml["key"])]
    pairs = [p for p in pairs if p[2]["size"] <= voc.MAX_XML_BYTES]
    fetched = storage.prefetch((storage.join(spec.source.uri, x["key"]) for _, _, x in pairs),
                               FETCH_THREADS)
    for (where, image, xml), data in zip(pairs, fetched, strict=True):
        both = (image["key"], xml["key"])
        if isinstance(data, Exception):  # a transient error re-raises: the task retries
            reason, detail = quarantine.fetch_reason(data)
            refused += [QuarantineEntry(k, "flatten", reason, f"{xml['key']}: {detail}")
                        for k in both]
            continue
        try:
            annotation = voc.parse(data, image["key"], det.voc_pixel_origin,
                                   max_name_chars=det.max_name_chars,
                                   max_refused=det.max_refused_parts)
        except AnnotationUnparsable as exc:
            refused += [QuarantineEntry(k, "flatten", "annotation_unparsable",
                                        f"{xml['key']}: {exc}") for k in both]
            continue
        split = {"split": split_of[where][0]} if split_of is not None else {}
        row, parts = item(image, annotation, allowed, annotation_key=xml["key"],
                          annotation_etag=xml["etag"], **split)
        items.append(row)
        refused += parts
    return Found(items, refused, found.not_used, used)


def flatten_voc(rows: list[dict], spec) -> tuple[list[dict], list[QuarantineEntry]]:
    """The items and refusals of ``voc_found``."""
    out = voc_found(rows, spec)
    return out.items, out.refused


# ---------------------------------------------------------------- COCO

def coco_not_instances(name: str) -> str | None:
    """What a COCO annotation file (or folder) of another kind holds, by its name; None for
    an instances file."""
    return next((what for start, what in COCO_NOT_INSTANCES.items() if name.startswith(start)),
                None)


class _CocoListing:
    """The listing sorted: instances files (each with its image folder and split), the
    images by folder, the files and images set aside, the objects outside the layout."""

    def __init__(self, rows: list[dict], spec):
        rows = sorted(rows, key=lambda r: r["key"])
        tops = {r["key"].split("/", 1)[0] + "/" for r in rows if "/" in r["key"]}
        self.files: list[tuple[dict, str, str | None]] = []  # (row, image folder, split)
        self.images: dict[str, dict] = {}
        self.not_used: list[tuple[str, str, str]] = []  # set aside
        self.refused: list[QuarantineEntry] = []
        rest = []
        for row in rows:
            key = row["key"]
            if key.startswith(COCO_ANNOTATIONS):
                self._annotation(row, tops, spec)
            else:
                rest.append(row)
        self.folders = {folder for _, folder, _ in self.files} | {COCO_IMAGES}
        exts = spec.source.extensions
        for row in rest:
            key = row["key"]
            top = key.split("/", 1)[0] + "/" if "/" in key else ""
            if top in self.folders:
                if posixpath.splitext(key)[1].lower() in exts:
                    self.images[key] = row
                else:
                    self.refused.append(_outside(key, "coco"))
            elif COCO_IMAGE_FOLDER.fullmatch(top[:-1]):
                self.not_used.append(_aside(key, "no_annotations_file", (
                    f"no annotations/instances_{top[:-1]}.json gives boxes for {top} (COCO "
                    "ships test2017/ and unlabeled2017/ with image_info_*.json only)")))
            else:
                self.refused.append(_outside(key, "coco"))

    def _annotation(self, row: dict, tops: set[str], spec) -> None:
        key = row["key"]
        rel = key[len(COCO_ANNOTATIONS):]
        base = posixpath.basename(rel)
        kind = coco_not_instances(rel) or coco_not_instances(base)  # a file, or its folder
        if kind is not None:
            self.not_used.append(_aside(key, "not_instances", f"COCO {kind} annotations, "
                                        "not instances (boxes)"))
            return
        if posixpath.splitext(rel)[1].lower() != ".json":
            self.refused.append(_outside(key, "coco"))
            return
        named = COCO_INSTANCES.fullmatch(base)
        folder = COCO_IMAGES
        if named and f"{named[1]}{named[2] or ''}/" in tops:
            folder = f"{named[1]}{named[2] or ''}/"
        split = None
        if spec.splits.from_source:
            split = spec.splits.of_folder(named[1]) if named else None
            if split is None:
                raise SpecError(
                    f"splits.from: source takes a COCO image's split from its instances "
                    f"file's name, instances_<split>[<year>].json, but {key} names no split "
                    f"(known: { {s: list(n) for s, n in spec.splits.folders.items()} }). "
                    "Rename the file (instances_train2017.json), map the name in "
                    "splits.folders, or use splits.from: hash")
        self.files.append((row, folder, split))


def _crowd(objects: list[list], policy: str) -> tuple[list[list], int]:
    """``detection.crowd`` on one image's objects (a crowd region comes out of the parser
    flagged difficult): the objects to pack and the number dropped."""
    if policy == "difficult":
        return objects, 0
    if policy == "keep":
        return [[*o[:5], 0, *o[6:]] for o in objects], 0
    kept = [o for o in objects if not o[5]]
    return kept, len(objects) - len(kept)


def _class_order(categories: dict[int, str]) -> list[str]:
    """Category names in id order (GluonCV's COCODetection.CLASSES order), each once."""
    return list(dict.fromkeys(categories[c] for c in sorted(categories)))


def coco_found(rows: list[dict], spec, parse=None) -> Found:  # noqa: C901
    """COCO: read each instances file as a stream (a local copy, one at a time), give each
    listed image of its folder its first entry."""
    if parse is None:
        from recforge.detection.coco import parse
    det = spec.detection
    found = _CocoListing(rows, spec)
    images, refused = found.images, found.refused
    allowed = set(det.classes) if det.classes is not None else None
    items: dict[str, dict] = {}
    used: list[str] = []
    categories: dict[int, str] = {}
    dropped = 0
    with tempfile.TemporaryDirectory(prefix="recforge-coco-") as tmp:
        for f, folder, split in found.files:
            local = Path(tmp) / "instances.json"
            try:
                storage.download(storage.join(spec.source.uri, f["key"]), local)
            except Exception as exc:  # noqa: BLE001 - transient errors re-raise in fetch_reason
                reason, detail = quarantine.fetch_reason(exc)
                refused.append(QuarantineEntry(f["key"], "flatten", reason, detail))
                continue
            try:
                parsed = parse(local, f["key"], image_prefix=folder,
                               max_name_chars=spec.detection.max_name_chars)
                entries = list(_entries(parsed, folder))
            except AnnotationUnparsable as exc:
                refused.append(QuarantineEntry(f["key"], "flatten", "annotation_unparsable",
                                               str(exc)))
                continue
            finally:
                local.unlink(missing_ok=True)
            used.append(f["key"])
            for cid, name in parsed.categories.items():
                categories.setdefault(cid, name)
            refused += parsed.refused  # parts that belong to no image of this file
            for key, annotation in entries:
                where = f"image {key[len(folder):]}"
                if key not in images:
                    refused += annotation.refused
                    refused.append(QuarantineEntry(
                        f["key"], "flatten", "image_missing",
                        f"{f['key']} has an entry for {key}, which is not in the source",
                        part=where))
                    continue
                if key in items:
                    refused.append(QuarantineEntry(
                        key, "flatten", "duplicate_image_entry",
                        f"{f['key']} has a second entry for {key}; the one in "
                        f"{items[key]['annotation_file']} is used", part=where))
                    continue
                objects, crowd = _crowd(annotation.objects, det.crowd)
                dropped += crowd
                annotation = Annotation(annotation.size, objects, annotation.refused)
                row, parts = item(images[key], annotation, allowed, annotation_file=f["key"],
                                  **({"split": split} if split else {}))
                items[key] = row
                refused += parts
    by_folder = {folder: [f["key"] for f, d, _ in found.files if d == folder]
                 for folder in found.folders}
    refused += [QuarantineEntry(k, "flatten", "annotation_missing", _no_entry(k, by_folder))
                for k in sorted(images) if k not in items]
    log.info("flatten: %d COCO instances file(s) used of %d; %d crowd region(s) dropped",
             len(used), len(found.files), dropped)
    return Found([items[k] for k in sorted(items)], refused, found.not_used, used,
                     class_order=_class_order(categories) or None,
                     counts={"crowd_dropped": dropped} if dropped else {})


def _no_entry(key: str, by_folder: dict[str, list[str]]) -> str:
    files = by_folder.get(key.split("/", 1)[0] + "/") or []
    return (f"no images entry in {', '.join(files)} names it" if files else
            "no instances file in annotations/ gives this folder's images")


def _entries(parsed: Iterable[tuple[str, Annotation]], folder: str):
    for file_name, annotation in parsed:
        yield folder + file_name, annotation
