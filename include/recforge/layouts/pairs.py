"""Segmentation: image/mask pairs by the spec's pair rule or pair list
(``recforge.segmentation.pairs``)."""

from __future__ import annotations

from recforge import storage
from recforge.layouts import Flattened, Layout
from recforge.segmentation.pairs import PairRule, pair_by_list, pair_by_rule


def flatten(rows: list[dict], spec) -> Flattened:
    p = spec.source.pairs
    if p.layout == "pair_list":
        items, refused = pair_by_list(rows, storage.get_bytes(p.list_uri).decode("utf-8"))
    else:
        items, refused = pair_by_rule(rows, PairRule(p.images, p.masks, p.image_suffix,
                                                     p.mask_suffix))
    return Flattened(items, refused)


def _expected(spec) -> str:
    p = spec.source.pairs
    if p.layout == "pair_list":
        return f"the image and mask keys of the pair list {p.list_uri}"
    return (f"<prefix>/{p.images}/<path>{p.image_suffix or '.<ext>'} with "
            f"<prefix>/{p.masks}/<path>{p.mask_suffix or '.png'}")


LAYOUT = Layout("pairs", flatten, lambda spec: (), _expected)
