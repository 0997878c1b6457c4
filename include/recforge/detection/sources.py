"""The flatten stage for detection: the listing's images paired with their annotations.

``voc``: ``JPEGImages/<id>.<ext>`` pairs with ``Annotations/<id>.xml`` by the path between
folder and extension (``<id>`` may hold folders). ``coco``: every ``annotations/*.json``
is an instances file whose ``images`` entries name ``images/<file_name>``; files are read
in key order and the first entry of an image wins. Every listed object ends as part of an
item (an image with its annotation), as a used annotation file (COCO), or in the
quarantine with its reason; a refused object of an annotation is a *part* entry and its
image is still packed. Annotations are read here (they are small beside the images, and
the class list must be known before anything is packed), in parallel, streamed.
"""

from __future__ import annotations

import logging
import posixpath
import tempfile
from collections.abc import Iterable
from pathlib import Path

from recforge import quarantine, storage
from recforge.detection import voc
from recforge.detection.annotation import Annotation, AnnotationUnparsable
from recforge.quarantine import QuarantineEntry

log = logging.getLogger(__name__)
VOC_IMAGES, VOC_ANNOTATIONS = "JPEGImages/", "Annotations/"
COCO_IMAGES, COCO_ANNOTATIONS = "images/", "annotations/"
ANNOTATION_EXTENSIONS = {"voc": (".xml",), "coco": (".json",)}
FETCH_THREADS = 16  # annotations are a few KB each: latency-bound GETs


def annotation_extensions(layout: str) -> tuple[str, ...]:
    """What ingest accepts beside the images for ``layout``."""
    return ANNOTATION_EXTENSIONS.get(layout, ())


def _outside(key: str, layout: str) -> QuarantineEntry:
    where = ("JPEGImages/ (images) or Annotations/ (.xml)" if layout == "voc"
             else "images/ (images) or annotations/ (.json)")
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


def flatten_voc(rows: list[dict], spec) -> tuple[list[dict], list[QuarantineEntry]]:
    """VOC: pair images and XML files by id, read every XML (parallel GETs)."""
    det, exts = spec.detection, spec.source.extensions
    images: dict[str, list[dict]] = {}
    xmls: dict[str, dict] = {}
    refused: list[QuarantineEntry] = []
    for row in sorted(rows, key=lambda r: r["key"]):
        key = row["key"]
        stem, ext = posixpath.splitext(key)
        if key.startswith(VOC_IMAGES) and ext.lower() in exts:
            images.setdefault(stem[len(VOC_IMAGES):], []).append(row)
        elif key.startswith(VOC_ANNOTATIONS) and ext.lower() == ".xml":
            xmls[stem[len(VOC_ANNOTATIONS):]] = row
        else:
            refused.append(_outside(key, "voc"))
    pairs = []
    for ident, found in images.items():
        xml = xmls.pop(ident, None)
        if len(found) > 1:  # a.jpg and a.png: which one the XML describes is unknown
            refused += [QuarantineEntry(r["key"], "flatten", "duplicate_stem",
                                        f"images {[f['key'] for f in found]} share id {ident}")
                        for r in found + ([xml] if xml else [])]
        elif xml is None:
            refused.append(QuarantineEntry(found[0]["key"], "flatten", "annotation_missing",
                                           f"no {VOC_ANNOTATIONS}{ident}.xml"))
        else:
            pairs.append((found[0], xml))
    refused += [QuarantineEntry(x["key"], "flatten", "orphan_annotation",
                                f"no {VOC_IMAGES}{ident}.<image extension>")
                for ident, x in xmls.items()]
    allowed = set(det.classes) if det.classes is not None else None
    items = []
    fetched = storage.prefetch((storage.join(spec.source.uri, x["key"]) for _, x in pairs),
                               FETCH_THREADS)
    for (image, xml), data in zip(pairs, fetched, strict=True):
        both = (image["key"], xml["key"])
        if isinstance(data, Exception):  # a transient error re-raises: the task retries
            reason, detail = quarantine.fetch_reason(data)
            refused += [QuarantineEntry(k, "flatten", reason, f"{xml['key']}: {detail}")
                        for k in both]
            continue
        try:
            annotation = voc.parse(data, image["key"], det.voc_pixel_origin)
        except AnnotationUnparsable as exc:
            refused += [QuarantineEntry(k, "flatten", "annotation_unparsable",
                                        f"{xml['key']}: {exc}") for k in both]
            continue
        row, parts = item(image, annotation, allowed, annotation_key=xml["key"],
                          annotation_etag=xml["etag"])
        items.append(row)
        refused += parts
    return items, refused


def flatten_coco(rows: list[dict], spec, parse=None
                 ) -> tuple[list[dict], list[QuarantineEntry], list[str]]:
    """COCO: read each instances file as a stream (a local copy, one at a time), give each
    listed image its first entry; returns items, refusals and the files used."""
    if parse is None:
        from recforge.detection.coco import parse
    det, exts = spec.detection, spec.source.extensions
    images: dict[str, dict] = {}
    files: list[dict] = []
    refused: list[QuarantineEntry] = []
    for row in sorted(rows, key=lambda r: r["key"]):
        key = row["key"]
        ext = posixpath.splitext(key)[1].lower()
        if key.startswith(COCO_IMAGES) and ext in exts:
            images[key] = row
        elif key.startswith(COCO_ANNOTATIONS) and ext == ".json":
            files.append(row)
        else:
            refused.append(_outside(key, "coco"))
    allowed = set(det.classes) if det.classes is not None else None
    items: dict[str, dict] = {}
    used: list[str] = []
    with tempfile.TemporaryDirectory(prefix="recforge-coco-") as tmp:
        for f in files:
            local = Path(tmp) / "instances.json"
            try:
                storage.download(storage.join(spec.source.uri, f["key"]), local)
            except Exception as exc:  # noqa: BLE001 - transient errors re-raise in fetch_reason
                reason, detail = quarantine.fetch_reason(exc)
                refused.append(QuarantineEntry(f["key"], "flatten", reason, detail))
                continue
            try:
                parsed = parse(local, f["key"])
                found = list(_entries(parsed, f["key"]))
            except AnnotationUnparsable as exc:
                refused.append(QuarantineEntry(f["key"], "flatten", "annotation_unparsable",
                                               str(exc)))
                continue
            finally:
                local.unlink(missing_ok=True)
            used.append(f["key"])
            refused += parsed.refused  # parts that belong to no image of this file
            for key, annotation in found:
                if key not in images:
                    refused += annotation.refused
                    refused.append(QuarantineEntry(
                        f["key"], "flatten", "image_missing",
                        f"{f['key']} has an entry for {key}, which is not in the source",
                        part=f"image {key[len(COCO_IMAGES):]}"))
                    continue
                if key in items:
                    refused.append(QuarantineEntry(
                        key, "flatten", "duplicate_image_entry",
                        f"{f['key']} has a second entry for {key}; the one in "
                        f"{items[key]['annotation_file']} is used",
                        part=f"image {key[len(COCO_IMAGES):]}"))
                    continue
                row, parts = item(images[key], annotation, allowed, annotation_file=f["key"])
                items[key] = row
                refused += parts
    refused += [QuarantineEntry(k, "flatten", "annotation_missing",
                                "no images entry in any annotations/*.json names it")
                for k in sorted(images) if k not in items]
    log.info("flatten: %d COCO file(s) used of %d", len(used), len(files))
    return [items[k] for k in sorted(items)], refused, used


def _entries(parsed: Iterable[tuple[str, Annotation]], key: str):
    for file_name, annotation in parsed:
        yield COCO_IMAGES + file_name, annotation
