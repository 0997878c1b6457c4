"""Segmentation: image/mask pairs by the spec's pair rule or pair list
(``recforge.segmentation.pairs``), in the shapes datasets ship: Cityscapes
(``leftImg8bit/<split>/<city>/…`` with ``gtFine/<split>/<city>/…``), ADE20K
(``images/<split>/…`` with ``annotations/<split>/…``), VOC's ``SegmentationClass``.

With ``splits.from: source`` a pair's split is its split folder (``splits.folders``); the
files a download ships beside the masks it pairs (Cityscapes' colour, instance and polygon
files), its READMEs, licences and class lists, and a split folder the spec leaves out on
purpose are set aside as not used (docs/datasets.md).
"""

from __future__ import annotations

from recforge import storage
from recforge.errors import SpecError
from recforge.layouts import Flattened, Layout, NotUsed
from recforge.segmentation.pairs import SIDE_EXTENSIONS, PairRule, pair_by_list, pair_by_rule


def flatten(rows: list[dict], spec) -> Flattened:
    p = spec.source.pairs
    if p.layout == "pair_list":
        if spec.splits.from_source:
            raise SpecError("source.pairs.layout pair_list names no splits: use splits.from: "
                            "hash, or paired_folders over split folders (docs/datasets.md)")
        out = pair_by_list(rows, storage.get_bytes(p.list_uri).decode("utf-8"))
    else:
        out = pair_by_rule(rows, PairRule(p.images, p.masks, p.image_suffix, p.mask_suffix),
                           spec.splits, spec.source.uri)
    return Flattened(out.items, out.refused, [NotUsed(*n) for n in out.not_used])


def _extensions(spec) -> tuple[str, ...]:
    """paired_folders: the text and JSON files a download ships beside its images and masks
    (polygons, README, licence, class lists) are ingested and set aside as not used."""
    return SIDE_EXTENSIONS if spec.source.pairs.layout == "paired_folders" else ()


def _expected(spec) -> str:
    p = spec.source.pairs
    if p.layout == "pair_list":
        return f"the image and mask keys of the pair list {p.list_uri}"
    split = "<split>/" if spec.splits.from_source else ""
    text = (f"<prefix>/{p.images}/{split}<path>{p.image_suffix or '.<ext>'} with "
            f"<prefix>/{p.masks}/{split}<path>{p.mask_suffix or '.png'}")
    if split:
        text += " (split folders: " + ", ".join(
            f"{s}: {'/'.join(n)}" for s, n in spec.splits.folders.items()) + ")"
    return text


def _labels(spec) -> str:
    seg = spec.segmentation
    defs = ([f"colour map `{seg.colormap}`"] if seg.colormap else []) + (
        [f"id map of {len(seg.id_map)} ids"] if seg.id_map else [])
    return (f"each image's mask, its pixels' classes from the label definition "
            f"({', '.join(defs)}, target `{seg.target}`, ignore {seg.ignore_index})")


LAYOUT = Layout("pairs", flatten, _extensions, _expected, _labels)
