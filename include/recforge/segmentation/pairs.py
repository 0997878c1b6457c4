"""Segmentation source layout: pair each image with its mask, from a listing or a list file.

Two layouts:

* ``paired_folders``: images under ``<images>/`` and masks under ``<masks>/`` with the same
  relative stem, after removing ``image_suffix`` / ``mask_suffix`` (Cityscapes:
  ``leftImg8bit/train/aachen/aachen_000000_000019_leftImg8bit.png`` ↔
  ``gtFine/train/aachen/aachen_000000_000019_gtFine_labelIds.png``; ADE20K:
  ``images/training/ADE_train_00000001.jpg`` ↔ ``annotations/training/ADE_train_00000001.png``;
  VOC: ``JPEGImages/2007_000032.jpg`` ↔ ``SegmentationClass/2007_000032.png``).
* ``pair_list``: a text file of ``image_key<TAB or ,>mask_key`` lines.

Every listed object ends up in exactly one place — a pair, the quarantine with a reason (an
image without a mask, a mask without an image, a mask in another split folder than its
image), or set aside as no part of the dataset (``not_used``, not bad data): the sibling
files a download ships beside the selected masks (Cityscapes' ``_gtFine_color.png``,
``_instanceIds.png``, ``_polygons.json``: ``not_selected``), its text and JSON files outside
the pair folders (``README``, ``license.txt``, ADE20K's ``objectInfo150.txt``:
``documentation``), and with ``splits.from: source`` a split folder the spec's
``splits.folders`` leaves out on purpose (Cityscapes' unlabelled ``test/``:
``split_not_mapped``). So the run's counts reconcile (listed = packed + quarantined + not used).

Splits (``splits``): with ``splits.from: source`` a pair's split is the first folder of its
stem (``train/aachen/…`` under both ``leftImg8bit/`` and ``gtFine/``), mapped by
``splits.folders``; a folder that names no split at all is refused naming it. With
``splits.from: hash`` a source whose image folders are two or more official splits is
refused: re-splitting by hash would mix the publisher's train and val.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass, field

from recforge.errors import SpecError
from recforge.quarantine import QuarantineEntry
from recforge.spec.dataset import SPLIT_FOLDERS

# files a download ships beside its images and masks (annotations in other forms, READMEs,
# licences, class lists): never an image or a mask, set aside as not used
SIDE_EXTENSIONS = (".json", ".txt", "")
KNOWN_SPLIT_FOLDERS = frozenset(n for names in SPLIT_FOLDERS.values() for n in names)


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

    def in_pair_folder(self, key: str) -> bool:
        return any(f and key.startswith(f + "/")
                   for f in (self.images.strip("/"), self.masks.strip("/")))

    def relative(self, key: str) -> str | None:
        """``key`` relative to the masks or images folder it lies in, else None."""
        for folder in (self.masks.strip("/"), self.images.strip("/")):
            if folder and key.startswith(folder + "/"):
                return key[len(folder) + 1:]
        if not self.images.strip("/") or not self.masks.strip("/"):
            return key  # one of the folders is the prefix itself
        return None


@dataclass
class Paired:
    """What pairing made of a listing: pair items, quarantine entries, and the objects set
    aside as no part of the dataset (``(key, reason, detail)``)."""

    items: list[dict] = field(default_factory=list)
    refused: list[QuarantineEntry] = field(default_factory=list)
    not_used: list[tuple[str, str, str]] = field(default_factory=list)


def flat_name(stem: str, ext: str) -> str:
    """``train/aachen/a_000019`` → ``train__aachen__a_000019.png``: unique, stable."""
    return stem.replace("/", "__") + ext


def _item(img: dict, mask: dict, stem: str) -> dict:
    return {"source_key": img["key"], "etag": img["etag"], "size": img["size"],
            "mask_key": mask["key"], "mask_etag": mask["etag"], "mask_size": mask["size"],
            "name": flat_name(stem, posixpath.splitext(img["key"])[1].lower()),
            "class_name": ""}


def _is_side_file(key: str) -> bool:
    return posixpath.splitext(key)[1].lower() in SIDE_EXTENSIONS


class _Sorter:
    """Sorts one listing's objects into images, masks, the quarantine and not used."""

    def __init__(self, rule: PairRule, splits, stage: str):
        self.rule, self.stage = rule, stage
        self.by_source = splits is not None and splits.from_source
        self.splits = splits
        self.images: dict[str, dict] = {}
        self.masks: dict[str, dict] = {}
        self.out = Paired()
        self.unknown_folders: dict[str, str] = {}  # split folder naming no split → a key

    def refuse(self, key: str, reason: str, detail: str) -> None:
        self.out.refused.append(QuarantineEntry(key, self.stage, reason, detail))

    def set_aside(self, key: str, reason: str, detail: str) -> None:
        self.out.not_used.append((key, reason, detail))

    def outside_split(self, key: str) -> bool:
        """With source splits: set aside or note an object in an unmapped split folder."""
        rel = self.rule.relative(key)
        if not self.by_source or rel is None or "/" not in rel:
            return False
        folder = rel.split("/", 1)[0]
        if self.splits.of_folder(folder) is not None:
            return False
        if folder.lower() in KNOWN_SPLIT_FOLDERS:
            self.set_aside(key, "split_not_mapped",
                           f"split folder {folder!r} is not in splits.folders "
                           f"{ {s: list(n) for s, n in self.splits.folders.items()} }")
        else:
            self.unknown_folders.setdefault(folder, key)
        return True

    def add(self, row: dict) -> None:
        key = row["key"]
        if self.outside_split(key):
            return
        if _is_side_file(key):
            self.side_file(key)
            return
        rule = self.rule
        istem, mstem = rule.image_stem(key), rule.mask_stem(key)
        if istem is not None and mstem is None:
            bucket, stem, what = self.images, istem, "image"
        elif mstem is not None and istem is None:
            bucket, stem, what = self.masks, mstem, "mask"
        elif istem is not None:  # same folder, both suffixes match: the longer suffix wins
            is_mask = len(rule.mask_suffix) > len(rule.image_suffix)
            bucket, stem, what = ((self.masks, mstem, "mask") if is_mask
                                  else (self.images, istem, "image"))
        elif rule.in_mask_folder(key):
            self.set_aside(key, "not_selected",
                           f"in the mask folder but not ending with mask_suffix "
                           f"{rule.mask_suffix!r} (a sibling of the masks the rule pairs, "
                           "e.g. Cityscapes' *_gtFine_color.png beside *_gtFine_labelIds.png)")
            return
        else:
            self.refuse(key, "outside_pair_folders",
                        f"neither under images {rule.images!r} nor masks {rule.masks!r}")
            return
        if self.by_source and "/" not in stem:
            self.refuse(key, "not_in_split_folder",
                        f"{what} sits directly under the {what}s folder; splits.from: source "
                        f"reads <{what}s>/<split>/…")
            return
        if stem in bucket:  # a.jpg and a.png both images of one stem: keep the first
            self.refuse(key, "duplicate_stem",
                        f"{what} stem {stem!r} already taken by {bucket[stem]['key']}")
            return
        bucket[stem] = row

    def side_file(self, key: str) -> None:
        if posixpath.splitext(key)[1] == "" and "/" in key:  # only a root README is known
            self.refuse(key, "unsupported_extension",
                        "a file without an extension below the prefix: neither an image, a "
                        "mask nor the download's README")
        elif self.rule.in_pair_folder(key):
            self.set_aside(key, "not_selected",
                           "an annotation file beside the images or masks (e.g. Cityscapes' "
                           "*_polygons.json): the rule pairs image masks only")
        else:
            self.set_aside(key, "documentation",
                           "a text/JSON file beside the pair folders (README, licence, class "
                           "list): no part of the packed dataset")

    def split_of(self, stem: str) -> str | None:
        return self.splits.of_folder(stem.split("/", 1)[0]) if self.by_source else None

    def pair(self) -> Paired:
        """Images meet masks by stem; with source splits each pair carries its split."""
        rule, out = self.rule, self.out
        lonely = []
        for stem, img in sorted(self.images.items(), key=lambda kv: kv[1]["key"]):
            mask = self.masks.pop(stem, None)
            if mask is None:
                lonely.append((stem, img))
                continue
            item = _item(img, mask, stem)
            if self.by_source:
                item["split"] = self.split_of(stem)
            out.items.append(item)
        elsewhere = self.masks_by_rest()
        for stem, img in lonely:
            mstem = elsewhere.get(stem.split("/", 1)[1]) if self.by_source else None
            if mstem is not None and mstem in self.masks:
                mask = self.masks.pop(mstem)
                detail = (f"image in split folder {stem.split('/', 1)[0]!r}, its mask "
                          f"{mask['key']} in {mstem.split('/', 1)[0]!r}: a pair belongs to "
                          "one split")
                self.refuse(img["key"], "split_mismatch", detail)
                self.refuse(mask["key"], "split_mismatch", detail)
                continue
            self.refuse(img["key"], "mask_missing",
                        f"no mask for stem {stem!r} under {rule.masks!r} with suffix "
                        f"{rule.mask_suffix!r}")
        for stem, mask in self.masks.items():
            self.refuse(mask["key"], "orphan_mask",
                        f"no image for stem {stem!r} under {rule.images!r} with suffix "
                        f"{rule.image_suffix!r}")
        _dedupe_names(out.items)
        return out

    def masks_by_rest(self) -> dict[str, str]:
        """With source splits, the unpaired masks' stems by their path below the split
        folder (an image's mask filed under another split folder is found there)."""
        if not self.by_source:
            return {}
        return {m.split("/", 1)[1]: m for m in sorted(self.masks, reverse=True)}

    def check_folders(self, source: str) -> None:
        """Refuse split folders that contradict ``splits.from`` (see the module doc)."""
        if self.unknown_folders:
            known = {s: list(n) for s, n in self.splits.folders.items()}
            shown = [f"{f} ({k})" for f, k in sorted(self.unknown_folders.items())[:10]]
            raise SpecError(
                f"splits.from: source reads <images>/<split>/… and <masks>/<split>/…, but the "
                f"folder(s) {shown} of {source or 'the source'} name no split; known: {known}. "
                "Map them in splits.folders, move them, or use splits.from: hash")
        if self.splits is None or self.by_source:
            return
        tops = {s.split("/", 1)[0] if "/" in s else None for s in self.images}
        named = {self.splits.of_folder(t) if t else None for t in tops}
        if tops and None not in named and len(named) > 1:
            rule = self.rule
            raise SpecError(
                f"the images of {source or 'the source'} are filed in split folders "
                f"{sorted(tops)}: splits.from: hash would mix the publisher's "
                f"{' and '.join(sorted(named))}. Set splits.from: source to keep them, or "
                f"pair one split's folders (source.pairs.images: {rule.images}/<split>, "
                f"masks: {rule.masks}/<split>)")


def pair_by_rule(rows: list[dict], rule: PairRule, splits=None, source: str = "",
                 stage: str = "flatten") -> Paired:
    """Listed objects (``key``, ``size``, ``etag``) → pair items (sorted by image key),
    quarantine entries and the objects set aside (see the module doc). ``splits`` is the
    spec's ``splits`` (None: no split folders are read or checked); ``source`` names the
    source in errors."""
    sorter = _Sorter(rule, splits, stage)
    for row in sorted(rows, key=lambda r: r["key"]):
        sorter.add(row)
    sorter.check_folders(source)
    return sorter.pair()


def _dedupe_names(items: list[dict]) -> None:
    seen: set[str] = set()
    for it in items:
        if it["name"] in seen:
            digest = hashlib.sha1(it["source_key"].encode()).hexdigest()[:8]
            stem, ext = posixpath.splitext(it["name"])
            it["name"] = f"{stem}_{digest}{ext}"
        seen.add(it["name"])


def pair_by_list(rows: list[dict], list_text: str, stage: str = "flatten") -> Paired:
    """Pairs named by a list file (``image_key<TAB or ,>mask_key`` per line, '#' comments);
    listed objects the file does not name are set aside as ``not_selected``; a named key
    that is not in the listing makes its pair ``mask_missing`` (or is an error if the image
    is absent)."""
    by_key = {r["key"]: r for r in rows}
    used: set[str] = set()
    out = Paired()
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
            out.refused.append(QuarantineEntry(ikey, stage, "mask_missing",
                                               f"pair list line {n}: mask {mkey!r} is not "
                                               "listed"))
            continue
        out.items.append(_item(by_key[ikey], by_key[mkey], posixpath.splitext(ikey)[0]))
    for key in sorted(set(by_key) - used):
        out.not_used.append((key, "not_selected", "not named in the pair list"))
    _dedupe_names(out.items)
    out.items.sort(key=lambda i: i["source_key"])
    return out
