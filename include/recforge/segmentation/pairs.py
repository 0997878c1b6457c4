"""Segmentation source layout: pair each image with its mask, from a listing or a list file.

Two layouts:

* ``paired_folders``: images under ``<images>/`` and masks under ``<masks>/`` with the same
  relative stem, after removing ``image_suffix`` / ``mask_suffix`` (Cityscapes:
  ``leftImg8bit/train/aachen/aachen_000000_000019_leftImg8bit.png`` ↔
  ``gtFine/train/aachen/aachen_000000_000019_gtFine_color.png``; VOC:
  ``JPEGImages/2007_000032.jpg`` ↔ ``SegmentationClass/2007_000032.png``).
* ``pair_list``: a text file of ``image_key<TAB or ,>mask_key`` lines.

Every listed object ends up in exactly one place — a pair, or the quarantine with a reason
(an image without a mask, a mask without an image, a file the rule does not select) — so the
run's counts still reconcile (listed = packed + quarantined).
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass

from recforge.quarantine import QuarantineEntry


@dataclass(frozen=True)
class PairRule:
    """``images``/``masks``: folders under the source prefix ('' = the prefix itself is not
    allowed for both); suffixes are removed from names to find the shared stem. An empty
    suffix means "any extension": the stem is the name without its extension."""

    images: str
    masks: str
    image_suffix: str = ""
    mask_suffix: str = ""

    def __post_init__(self):
        if self.images.strip("/") == self.masks.strip("/") and \
                self.image_suffix == self.mask_suffix:
            raise ValueError(
                f"images and masks both live in {self.images!r} with the same suffix "
                f"{self.image_suffix!r}: set different folders or different suffixes")

    def _stem(self, key: str, folder: str, suffix: str) -> str | None:
        folder = folder.strip("/")
        if folder:
            if not key.startswith(folder + "/"):
                return None
            key = key[len(folder) + 1:]
        if suffix:
            return key[: -len(suffix)] if key.endswith(suffix) else None
        return posixpath.splitext(key)[0]

    def image_stem(self, key: str) -> str | None:
        return self._stem(key, self.images, self.image_suffix)

    def mask_stem(self, key: str) -> str | None:
        return self._stem(key, self.masks, self.mask_suffix)

    def in_mask_folder(self, key: str) -> bool:
        return not self.masks.strip("/") or key.startswith(self.masks.strip("/") + "/")


def flat_name(stem: str, ext: str) -> str:
    """``train/aachen/a_000019`` → ``train__aachen__a_000019.png``: unique, stable."""
    return stem.replace("/", "__") + ext


def _item(img: dict, mask: dict, stem: str) -> dict:
    return {"source_key": img["key"], "etag": img["etag"], "size": img["size"],
            "mask_key": mask["key"], "mask_etag": mask["etag"], "mask_size": mask["size"],
            "name": flat_name(stem, posixpath.splitext(img["key"])[1].lower()),
            "class_name": ""}


def pair_by_rule(rows: list[dict], rule: PairRule,
                 stage: str = "flatten") -> tuple[list[dict], list[QuarantineEntry]]:
    """Listed objects (``key``, ``size``, ``etag``) → pair items (sorted by image key) and
    quarantine entries for everything that is not part of a pair."""
    images: dict[str, dict] = {}
    masks: dict[str, dict] = {}
    refused: list[QuarantineEntry] = []
    for row in sorted(rows, key=lambda r: r["key"]):
        key = row["key"]
        istem, mstem = rule.image_stem(key), rule.mask_stem(key)
        if istem is not None and mstem is None:
            bucket, stem, what = images, istem, "image"
        elif mstem is not None and istem is None:
            bucket, stem, what = masks, mstem, "mask"
        elif istem is not None:  # same folder, both suffixes match: the longer suffix wins
            is_mask = len(rule.mask_suffix) > len(rule.image_suffix)
            bucket, stem, what = (masks, mstem, "mask") if is_mask else (images, istem, "image")
        else:
            reason = "not_selected" if rule.in_mask_folder(key) else "outside_pair_folders"
            refused.append(QuarantineEntry(key, stage, reason, _why(key, rule, reason)))
            continue
        if stem in bucket:  # a.jpg and a.png both images of one stem: keep the first
            refused.append(QuarantineEntry(key, stage, "duplicate_stem",
                                           f"{what} stem {stem!r} already taken by "
                                           f"{bucket[stem]['key']}"))
            continue
        bucket[stem] = row
    items = []
    for stem, img in sorted(images.items(), key=lambda kv: kv[1]["key"]):
        mask = masks.pop(stem, None)
        if mask is None:
            refused.append(QuarantineEntry(img["key"], stage, "mask_missing",
                                           f"no mask for stem {stem!r} under {rule.masks!r} "
                                           f"with suffix {rule.mask_suffix!r}"))
            continue
        items.append(_item(img, mask, stem))
    for stem, mask in masks.items():
        refused.append(QuarantineEntry(mask["key"], stage, "orphan_mask",
                                       f"no image for stem {stem!r} under {rule.images!r} "
                                       f"with suffix {rule.image_suffix!r}"))
    _dedupe_names(items)
    return items, refused


def _why(key: str, rule: PairRule, reason: str) -> str:
    if reason == "not_selected":
        return (f"in the mask folder but not ending with mask_suffix {rule.mask_suffix!r} "
                "(e.g. Cityscapes *_labelIds.png when converting *_color.png)")
    return f"neither under images {rule.images!r} nor masks {rule.masks!r}"


def _dedupe_names(items: list[dict]) -> None:
    seen: set[str] = set()
    for it in items:
        if it["name"] in seen:
            digest = hashlib.sha1(it["source_key"].encode()).hexdigest()[:8]
            stem, ext = posixpath.splitext(it["name"])
            it["name"] = f"{stem}_{digest}{ext}"
        seen.add(it["name"])


def pair_by_list(rows: list[dict], list_text: str,
                 stage: str = "flatten") -> tuple[list[dict], list[QuarantineEntry]]:
    """Pairs named by a list file (``image_key<TAB or ,>mask_key`` per line, '#' comments);
    listed objects the file does not name are quarantined as ``not_selected``; a named key
    that is not in the listing makes its pair ``mask_missing`` (or is an error if the image
    is absent)."""
    by_key = {r["key"]: r for r in rows}
    used: set[str] = set()
    items, refused = [], []
    for n, line in enumerate(list_text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in (line.split("\t") if "\t" in line else line.split(","))]
        if len(parts) != 2:
            raise ValueError(f"pair list line {n}: expected 'image_key<TAB>mask_key', got "
                             f"{line!r}")
        ikey, mkey = parts
        if ikey not in by_key:
            raise ValueError(f"pair list line {n}: image {ikey!r} is not in the source listing")
        if ikey in used or mkey in used:
            raise ValueError(f"pair list line {n}: {ikey!r} or {mkey!r} is listed twice")
        used.update((ikey, mkey))
        if mkey not in by_key:
            refused.append(QuarantineEntry(ikey, stage, "mask_missing",
                                           f"pair list line {n}: mask {mkey!r} is not listed"))
            continue
        items.append(_item(by_key[ikey], by_key[mkey], posixpath.splitext(ikey)[0]))
    for key in sorted(set(by_key) - used):
        refused.append(QuarantineEntry(key, stage, "not_selected",
                                       "not named in the pair list"))
    _dedupe_names(items)
    return sorted(items, key=lambda i: i["source_key"]), refused
