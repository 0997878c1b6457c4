"""The ``flatten`` task: source objects → a flat list of items to pack.

Classification (``class_folders``): a class-folder tree of any depth → labelled items. The
class is the first folder under the source prefix; deeper folders belong to it
(``dog/puppies/a.jpg`` is a dog). This differs on purpose from ``im2rec --recursive``, which
makes every folder that holds files its own class. Flat names are unique and stable (derived
from the key alone), and provenance (source key, ETag) is kept.

Segmentation: image/mask pairs by the spec's pair rule or pair list
(``recforge.segmentation.pairs``); every object that pairs with nothing is quarantined.

Detection: images with their VOC or COCO annotations (``recforge.detection.sources``).
"""

from __future__ import annotations

import hashlib
import logging

from recforge import quarantine, storage
from recforge.detection.sources import flatten_coco, flatten_voc
from recforge.errors import SourceEmpty
from recforge.quarantine import QuarantineEntry
from recforge.run import Run
from recforge.segmentation.pairs import PairRule, pair_by_list, pair_by_rule

log = logging.getLogger(__name__)


def flat_name(key: str) -> str:
    """``dog/a/b/x.jpg`` → ``dog/a__b__x.jpg``: one folder per class, stable per key."""
    cls, *rest = key.split("/")
    return f"{cls}/{'__'.join(rest)}"


def flatten_keys(rows: list[dict]) -> tuple[list[dict], list[QuarantineEntry]]:
    items, refused, seen = [], [], {}
    for row in sorted(rows, key=lambda r: r["key"]):
        key = row["key"]
        if "/" not in key:
            refused.append(QuarantineEntry(key, "flatten", "not_in_class_folder",
                                           "object sits directly under the source prefix"))
            continue
        name = flat_name(key)
        if name in seen:  # 'a/b__c.jpg' and 'a/b/c.jpg' would collide: disambiguate both ways
            digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:8]
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}_{digest}.{ext}" if dot else f"{name}_{digest}"
        seen[name] = key
        items.append({"source_key": key, "etag": row["etag"], "size": row["size"],
                      "class_name": key.split("/", 1)[0], "name": name})
    return items, refused


def flatten(run: Run) -> dict:
    """Items for the spec's task (``run.items``) + this stage's quarantine."""
    rows = storage.read_jsonl(run.ingested)
    if run.spec.task == "segmentation":
        items, refused = flatten_pairs(rows, run)
    elif run.spec.task == "detection":
        items, refused = flatten_annotated(rows, run)
    else:
        items, refused = flatten_keys(rows)
    storage.write_jsonl(run.items, items)
    storage.put_bytes(run.stage_quarantine("flatten"), quarantine.dumps(refused))
    classes = sorted({i["class_name"] for i in items if i.get("class_name")} |
                     {o[0] for i in items for o in i.get("objects", ())})
    parts = sum(1 for e in refused if e.is_part)
    log.info("flatten: %d items%s, %d quarantined%s", len(items),
             f" in {len(classes)} classes" if classes else "", len(refused) - parts,
             f" and {parts} annotated object(s) refused" if parts else "")
    return {"items": len(items), "classes": len(classes), "quarantined": len(refused) - parts,
            **({"objects_refused": parts} if parts else {})}


def flatten_pairs(rows: list[dict], run: Run) -> tuple[list[dict], list[QuarantineEntry]]:
    """Segmentation: pair images with masks by the spec's rule or list."""
    p = run.spec.source.pairs
    if p.layout == "pair_list":
        items, refused = pair_by_list(rows, storage.get_bytes(p.list_uri).decode("utf-8"))
        how = f"pair list {p.list_uri}"
    else:
        rule = PairRule(p.images, p.masks, p.image_suffix, p.mask_suffix)
        items, refused = pair_by_rule(rows, rule)
        how = f"pair rule {rule}"
    if not items:
        raise SourceEmpty(f"no image/mask pairs under {run.spec.source.uri}; check the {how} "
                          "against the quarantine report")
    return items, refused


def flatten_annotated(rows: list[dict], run: Run) -> tuple[list[dict], list[QuarantineEntry]]:
    """Detection: images with their VOC or COCO annotations (``recforge.detection.sources``);
    the COCO files used are kept for merge's accounting."""
    spec = run.spec
    if spec.source.layout == "voc":
        items, refused = flatten_voc(rows, spec)
        used: list[str] = []
    else:
        items, refused, used = flatten_coco(rows, spec)
    storage.write_json(run.annotation_files, {"used": used})
    if not items:
        raise SourceEmpty(f"no annotated image under {spec.source.uri} ({spec.source.layout} "
                          "layout); check the layout against docs/detection.md and the "
                          "quarantine report")
    return items, refused
