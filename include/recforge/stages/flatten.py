"""The ``flatten`` task: source objects → a flat list of items to pack.

The source's layout (``recforge.layouts``: class folders, list files, VOC, COCO, image/mask
pairs) sorts every accepted object into an item, the quarantine, a file used whole, or the
objects set aside as no part of the dataset. Class names are normalised here
(``labels.case``); with ``splits.from: source`` every item carries its source's split.

When nothing matches the layout, the run fails naming the paths the layout expected and the
first keys it found, after writing this stage's quarantine report (the failed run's
``quarantine.jsonl``).
"""

from __future__ import annotations

import logging

from recforge import layouts, quarantine, storage
from recforge.errors import SourceEmpty
from recforge.run import Run

log = logging.getLogger(__name__)
FOUND_SHOWN = 5  # keys named in the error of a source where nothing matched


def normalise_names(items: list[dict], labels) -> None:
    """``labels.case``: class and object names as the dataset numbers them."""
    if labels.case == "preserve":
        return
    for item in items:
        if item.get("class_name"):
            item["class_name"] = labels.name(item["class_name"])
        if item.get("objects"):
            item["objects"] = [[labels.name(o[0]), *o[1:]] for o in item["objects"]]


def flatten(run: Run) -> dict:
    """Items for the spec's task (``run.items``) + this stage's quarantine, the objects set
    aside (``run.not_used``) and the files used whole (``run.annotation_files``, with the
    source's class order and the layout's counts)."""
    spec = run.spec
    rows = storage.read_jsonl(run.ingested)
    layout = layouts.for_spec(spec)
    out = layout.flatten(rows, spec)
    limit = spec.detection.max_refused_parts if spec.detection else quarantine.MAX_REFUSED_PARTS
    out.refused = quarantine.capped(out.refused, limit)  # a hostile file's report stays small
    normalise_names(out.items, spec.labels)
    storage.put_bytes(run.stage_quarantine("flatten"), quarantine.dumps(out.refused))
    storage.write_jsonl(run.not_used, [n.row() for n in out.not_used])
    order = list(dict.fromkeys(map(spec.labels.name, out.class_order))) \
        if out.class_order else None  # the source's class order, as the names are numbered
    storage.write_json(run.annotation_files, {"used": out.used, "class_order": order,
                                              **({"counts": out.counts} if out.counts else {})})
    if not out.items:
        found = sorted(r["key"] for r in rows)[:FOUND_SHOWN]
        raise SourceEmpty(
            f"nothing under {spec.source.uri} matches the {layout.name} layout: it expects "
            f"{layout.expected(spec)}; found {len(rows)} object(s)"
            f"{', first ' + ', '.join(found) if found else ''}. See docs/datasets.md; "
            f"this run's quarantine report: {run.stage_quarantine('flatten')}")
    if spec.splits.from_source:
        missing = [i["source_key"] for i in out.items if i.get("split") is None]
        if missing:  # a layout bug, never data: every layout gives source splits
            raise RuntimeError(f"{layout.name} gave no split to {missing[:5]}")
    storage.write_jsonl(run.items, out.items)
    classes = sorted({i["class_name"] for i in out.items if i.get("class_name")} |
                     {o[0] for i in out.items for o in i.get("objects", ())})
    parts = sum(1 for e in out.refused if e.is_part)
    log.info("flatten: %d items%s, %d quarantined%s, %d not used%s", len(out.items),
             f" in {len(classes)} classes" if classes else "", len(out.refused) - parts,
             f" and {parts} annotated object(s) refused" if parts else "", len(out.not_used),
             "".join(f", {k} {v}" for k, v in out.counts.items()))
    return {"items": len(out.items), "classes": len(classes),
            "quarantined": len(out.refused) - parts,
            **({"objects_refused": parts} if parts else {}),
            **({"not_used": len(out.not_used)} if out.not_used else {}), **out.counts}
