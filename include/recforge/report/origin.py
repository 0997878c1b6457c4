"""Where a version's splits came from and what of its source it set aside, in words.

From the spec as the manifest records it (``DatasetSpec.public_dump``: plain JSON data) and
``summary.json``: the splits drawn by a hash of the source key, or kept as the source
defines them (``splits.from: source``: split folders, list files, COCO's
``instances_<split>`` files, VOC's ImageSets); and the accounting ``listed = packed +
quarantined + not used``.
"""

from __future__ import annotations

from recforge.spec.dataset import SPLIT_FOLDERS


def splits_from_source(spec: dict | None) -> bool:
    """Whether the spec keeps the source's own splits (``splits.from: source``)."""
    return ((spec or {}).get("splits") or {}).get("from") == "source"


def split_origin(spec: dict | None) -> str:
    """One line: how every split of this version was made, e.g. ``by a hash of the source
    key (val_ratio 0.1, test_ratio 0.0, seed 0)`` or ``from the source: split folders …``.
    Empty when the spec is not known (a version without a manifest)."""
    if not spec:
        return ""
    splits = spec.get("splits") or {}
    if not splits_from_source(spec):
        return (f"by a hash of the source key (val_ratio {splits.get('val_ratio', 0.1)}, "
                f"test_ratio {splits.get('test_ratio', 0.0)}, seed {splits.get('seed', 0)})")
    source = spec.get("source") or {}
    layout = source.get("layout", "class_folders")
    if layout == "list":
        lists = source.get("lists")
        if lists:
            return "from the source: one list file per split (" + "; ".join(
                f"{s}: {uri}" for s, uri in lists.items()) + ")"
        column = (source.get("columns") or {}).get("split")
        return (f"from the source: the split column ({column!r}) of the list file "
                f"{source.get('list_uri')}")
    if layout == "coco":
        return ("from the source: COCO's annotation files, annotations/instances_<split>"
                "<year>.json (train2017 → train, val2017 → val)")
    if layout == "voc":
        sets = ((source.get("voc") or {}).get("image_sets")
                or {"train": ["train"], "val": ["val"]})
        return "from the source: VOC's ImageSets/Main lists (" + "; ".join(
            f"{s}: " + ", ".join(f"{n}.txt" for n in names) for s, names in sets.items()) + ")"
    folders = splits.get("folders") or SPLIT_FOLDERS
    return ("from the source: split folders, <prefix>/<split folder>/<class>/… (" + "; ".join(
        f"{s}: " + ", ".join(f"{n}/" for n in names) for s, names in folders.items()) + ")")


def by_reason(counts: dict) -> str:
    """``reason n, reason n`` by count, largest first."""
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def accounting(summary: dict) -> str:
    """``listed N = packed P + quarantined Q + not used U`` from ``summary.json``; the not
    used by reason after it. Empty without a summary."""
    if not summary or summary.get("listed") is None:
        return ""
    not_used = summary.get("not_used", 0)
    line = (f"listed {summary['listed']:,} = packed {summary.get('packed', 0):,} + "
            f"quarantined {summary.get('quarantined', 0):,} + not used {not_used:,}")
    reasons = summary.get("not_used_by_reason") or {}
    if not_used and reasons:
        line += f" (not used: {by_reason(reasons)})"
    return line
