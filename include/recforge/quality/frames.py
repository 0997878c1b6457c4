"""The pandas facts: the tables the suites check, with the cross-row facts as columns.

Facts that need more than one row (offset order, cross-split duplicates, per-object
accounting, class counts) are no single GX expectation, so they are computed here in pandas
as columns; the expectations of :mod:`recforge.quality.suites` then check those columns, so
every verdict and its offending rows appear in Data Docs.

Every fact is a vectorised column operation on the compact frame
:func:`recforge.quality.inputs.read_manifest` builds (no per-row Python at ImageNet size), and
the near-duplicate search keeps only the closest partner per record
(:func:`recforge.phash.nearest_across`). A check whose severity is ``off`` costs nothing
here: the near-duplicate search, the expensive one, is not run at all.

A detection dataset gets one more table, ``objects``: one row per object of the records'
label arrays (numeric columns only: the record's split and key, the object's row in the
label, its class id and box, the box's size in stored pixels, area share and aspect).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from recforge.format import recordio
from recforge.kinds import kind
from recforge.quality.inputs import (
    VERIFY_COLUMNS,
    GateInputs,
    compact_identities,
    detection_labels,
    holds_label_arrays,
    is_text,
    phash_columns,
)
from recforge.spec.quality import EACH_SPLIT, QualitySpec

if TYPE_CHECKING:
    import pandas as pd


# object columns that hold strings (or None) by construction: not scanned for lists
SCALAR_COLUMNS = frozenset({"split", "class_name", "decode_status", "source_key", "source_etag",
                            "source_sha256", "record", "expected_class_name", "near_dup_of",
                            "rec_status", "mask_key", "name", "annotation_key"})


def is_detection(inputs: GateInputs, task: str) -> bool:
    """``task: detection``, or a manifest whose labels are label arrays (as a manifest with
    mask columns gets the mask check)."""
    import pandas as pd

    rec = inputs.records
    if kind(task).boxes or inputs.objects is not None:
        return True
    if isinstance(rec, pd.DataFrame):
        return "label_values" in rec.columns or (
            "label" in rec.columns and holds_label_arrays(rec["label"]))
    return any(isinstance(r.get("label"), list | tuple) for r in rec)


def build_frames(inputs: GateInputs, quality: QualitySpec, task: str = "classification"
                 ) -> dict[str, pd.DataFrame]:
    """The tables the suites check, with the cross-row facts computed as columns.

    ``inputs.records`` given as a frame gets the fact columns added in place (no copy). A
    detection dataset also gets the ``objects`` table (:func:`_objects_frame`)."""
    detection = is_detection(inputs, task)
    rec = _records(inputs, detection)
    _offset_facts(rec, inputs)
    objects = None
    if detection:
        objects = _detection_facts(rec, inputs, quality)
    else:
        _label_facts(rec, inputs, quality, task)
    _content_facts(rec, quality)
    _mask_facts(rec, task)
    nested = _nested_columns(rec)
    frames = {"splits": _splits_frame(inputs, rec),
              "sources": _sources_frame(inputs, rec, detection),
              "classes": _classes_frame(inputs, rec, quality, task, objects),
              "class_names": _class_names_frame(inputs)}
    if objects is not None:
        frames["objects"] = objects
    for col in [*nested, "phash_u64", "phash_ok", "label_hash"]:  # in place: a drop()
        if col in rec.columns:                                      # would copy the frame
            del rec[col]
    return {"records": rec, **frames}


def _records(inputs: GateInputs, detection: bool = False) -> pd.DataFrame:
    """The record manifest as a frame with every column the suites read (absent ones
    filled with their missing value), identities compacted as ``inputs`` loads them."""
    import numpy as np
    import pandas as pd

    rec = inputs.records
    if not isinstance(rec, pd.DataFrame):
        rec = pd.DataFrame(rec)
    if "phash" in rec.columns and "phash_ok" not in rec.columns:
        rec["phash_u64"], rec["phash_ok"] = phash_columns(rec.pop("phash"))
    compact_identities(rec)  # rows given as dicts: SHA-256 and ETags as numbers, as loaded
    if detection and "label_values" not in rec.columns:  # rows given as dicts: as loaded
        cols, inputs.objects = detection_labels(
            rec.pop("label") if "label" in rec.columns else [None] * len(rec))
        for col, values in cols.items():
            rec[col] = values
    for col, default in (("key", np.nan), ("split", None), ("offset", np.nan),
                         ("length", np.nan), ("height", np.nan), ("width", np.nan),
                         ("channels", np.nan), ("label", np.nan), ("class_name", None),
                         ("source_key", None),
                         ("decode_status", None)):
        if col not in rec.columns and not (detection and col == "label"):
            rec[col] = default
    for col in VERIFY_COLUMNS:
        if col not in rec.columns:
            rec[col] = None
    rec["record"] = rec["split"].astype(str) + "/" + rec["key"].astype(str)
    return rec


def _offset_facts(rec: pd.DataFrame, inputs: GateInputs) -> None:
    """Item 2's facts: each record's gap to the end of the previous one in its split, and
    its offset in the ``.idx`` (a column each, so GX checks them row by row)."""
    import numpy as np
    import pandas as pd

    # item 2: offsets strictly increasing, each record starting after the previous one ends
    by_split = rec.groupby("split", sort=False, observed=True)
    prev_length = pd.to_numeric(by_split["length"].shift(1), errors="coerce")
    # the previous record's framed size: 8 header bytes + the payload padded to 4
    prev_end = pd.to_numeric(by_split["offset"].shift(1), errors="coerce") + \
        recordio.framed_size(prev_length)
    rec["offset_gap"] = rec["offset"] - prev_end.fillna(0)
    if inputs.idx is not None:
        rec["idx_offset"] = np.nan
        keys = pd.to_numeric(rec["key"], errors="coerce")
        split_col = rec["split"].to_numpy(object)
        for s, entries in inputs.idx.items():
            here = split_col == s
            if not here.any():
                continue
            idx_keys, idx_offsets = _idx_columns(entries)
            lookup = pd.Series(idx_offsets.astype(float), index=idx_keys)
            lookup = lookup[~lookup.index.duplicated()]  # the first entry of a key counts
            rec.loc[here, "idx_offset"] = lookup.reindex(keys[here].to_numpy()).to_numpy()


def _label_facts(rec: pd.DataFrame, inputs: GateInputs, quality: QualitySpec,
                 task: str) -> None:
    """Item 3's facts: integer labels, the class name a label should have, and whether a
    mask holds only known classes (or the ignore label)."""
    import numpy as np
    import pandas as pd

    # item 3
    num_classes = (inputs.classes or {}).get("num_classes")
    names = (inputs.classes or {}).get("classes")
    labels = pd.to_numeric(rec["label"], errors="coerce")
    rec["label_is_integer"] = (labels == labels.round()) & labels.notna()
    if names and kind(task).image_class:  # a mask kind's records carry no image class
        lab = labels.to_numpy(float)
        known = (lab == np.floor(lab)) & (lab >= 0) & (lab < len(names))  # NaN: False
        table = np.array([*names, "<no such id>"], dtype=object)
        rec["expected_class_name"] = table[np.where(known, lab, len(names)).astype(np.int64)]
    if "mask_values" in rec.columns and num_classes:
        allowed = set(range(num_classes)) | (
            {quality.ignore_label} if quality.ignore_label is not None else set())
        rec["mask_values_ok"] = rec["mask_values"].map(
            lambda vs: None if vs is None or (isinstance(vs, float) and math.isnan(vs))
            else set(int(v) for v in vs) <= allowed)


def _detection_facts(rec: pd.DataFrame, inputs: GateInputs, quality: QualitySpec
                     ) -> pd.DataFrame:
    """Items 3, 14 and 15 for detection: the records keep their label's layout columns
    (``inputs.DETECTION_COLUMNS``); the objects table gets the record's split and key and
    each box's size in stored pixels (the label's width and height), its share of the image
    and its aspect ratio. A box that is not inside [0, 1] with xmin < xmax and ymin < ymax
    is item 3's failure: its size facts stay null, so items 14 and 15 do not count it."""
    import numpy as np
    import pandas as pd

    from recforge.quality.inputs import OBJECT_COLUMNS

    objects = inputs.objects
    if objects is None:
        objects = pd.DataFrame({c: np.empty(0, np.int64 if c == "row" else np.float32)
                                for c in OBJECT_COLUMNS})
    row = objects["row"].to_numpy(np.int64)
    # the objects table is the checked frame: its own, so the inputs' stays as loaded
    obj = pd.DataFrame({"split": rec["split"].to_numpy(object)[row],
                        "key": rec["key"].to_numpy()[row],
                        "object": objects["object"].to_numpy(np.int32)})
    for c in OBJECT_COLUMNS[2:]:
        obj[c] = objects[c].to_numpy(np.float32)
    cls = obj["class_id"].to_numpy(np.float32)
    obj["class_id_is_integer"] = cls == np.floor(cls)
    x0, y0, x1, y1 = (obj[c].to_numpy(np.float32) for c in ("xmin", "ymin", "xmax", "ymax"))
    valid = (x0 >= 0) & (y0 >= 0) & (x1 <= 1) & (y1 <= 1) & (x0 < x1) & (y0 < y1)
    width = rec["label_width"].to_numpy(np.float32)[row]
    height = rec["label_height"].to_numpy(np.float32)[row]
    nan = np.float32(np.nan)
    bw = np.where(valid, (x1 - x0) * width, nan)
    bh = np.where(valid, (y1 - y0) * height, nan)
    obj["box_width_px"], obj["box_height_px"] = bw, bh
    obj["box_min_side_px"] = np.minimum(bw, bh)
    obj["area_fraction"] = np.where(valid, (x1 - x0) * (y1 - y0), nan)
    obj["aspect"] = np.where(valid, bw / np.where(valid, bh, 1), nan).astype(np.float32)
    return obj


def _content_facts(rec: pd.DataFrame, quality: QualitySpec) -> None:
    """Items 4 and 12: the short side, and in how many splits one source object or one
    content (SHA-256) appears — a leak across splits shows as a count above 1 — plus near
    duplicates when that check is on."""
    import numpy as np
    import pandas as pd

    # item 4
    rec["short_side"] = rec[["height", "width"]].min(axis=1)

    # item 12
    rec["source_key_splits"] = rec.groupby("source_key")["split"].transform("nunique")
    if "sha_hi" not in rec.columns:
        rec["sha_hi"] = rec["sha_lo"] = pd.array([pd.NA] * len(rec), dtype="UInt64")
    rec["content_splits"] = rec.groupby(["sha_hi", "sha_lo"], observed=True)["split"] \
        .transform("nunique").astype(float)
    rec.loc[rec["sha_hi"].isna(), "content_splits"] = np.nan
    if "phash_ok" in rec.columns and quality.severity_of("near_duplicates") != "off":
        _near_duplicates(rec, quality.near_duplicate_hamming)


def _mask_facts(rec: pd.DataFrame, task: str) -> None:
    """Item 13: each image's mask record is there and has the image's size."""
    import numpy as np

    # item 13
    if kind(task).masks or "mask_record_key" in rec.columns:
        for col in ("mask_record_key", "mask_height", "mask_width"):
            if col not in rec.columns:
                rec[col] = np.nan
        size_ok = ((rec["mask_height"] == rec["height"])
                   & (rec["mask_width"] == rec["width"])).astype(object)
        size_ok[rec["mask_record_key"].isna()] = None  # a missing mask is reported once, as missing
        rec["mask_size_ok"] = size_ok


def _nested_columns(rec: pd.DataFrame) -> list[str]:
    """The list/dict columns, dropped before GX sees the frame: they are summarised as
    facts above (mask_values, class_pixels), and GX fingerprints frames by hashing cells,
    which lists and dicts do not support."""
    return [c for c in rec.columns if rec[c].dtype == object and c not in SCALAR_COLUMNS
            and rec[c].map(lambda v: isinstance(v, list | dict)).any()]


def _splits_frame(inputs: GateInputs, rec: pd.DataFrame) -> pd.DataFrame:
    """Item 2's per-split counts, one row a split: the manifest's, the ``.idx``'s and
    ``summary.json``'s, which must agree."""
    import numpy as np
    import pandas as pd

    # item 2: counts agree between the manifest, the .idx files and summary.json
    per_split = rec.groupby("split", observed=True).size()
    split_names = sorted(set(per_split.index) | set((inputs.idx or {}).keys())
                         | set(((inputs.summary or {}).get("splits") or {}).keys()))
    return pd.DataFrame([{
        "split": s,
        "manifest_records": int(per_split.get(s, 0)),
        "idx_entries": len(_idx_columns((inputs.idx or {}).get(s, []))[0])
        if inputs.idx is not None else np.nan,
        "summary_records": ((inputs.summary or {}).get("splits") or {}).get(s, np.nan)
        if inputs.summary else np.nan,
    } for s in split_names], columns=["split", "manifest_records", "idx_entries",
                                      "summary_records"]).astype(
        {"manifest_records": float, "idx_entries": float, "summary_records": float})


def _idx_columns(entries):
    """A split's ``.idx`` entries as (keys, offsets) int64 arrays."""
    import numpy as np

    if isinstance(entries, tuple):
        return entries
    pairs = np.asarray(entries, dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def _near_duplicates(rec: pd.DataFrame, threshold: int) -> None:
    """Per record: the closest record of another split within ``threshold`` bits, if any."""
    import numpy as np
    import pandas as pd

    from recforge import phash

    rec["near_dup_bits"] = np.nan
    rec["near_dup_of"] = None
    ok = rec["phash_ok"].to_numpy(bool)
    values = rec["phash_u64"].to_numpy(np.uint64)
    split_col = rec["split"].to_numpy(object)
    splits = sorted(s for s in pd.unique(split_col[ok]) if isinstance(s, str))
    positions = {s: np.flatnonzero((split_col == s) & ok) for s in splits}
    best = np.full(len(rec), np.iinfo(np.int64).max)
    partner = np.full(len(rec), -1)

    def keep(rows, dist, others):
        better = (dist >= 0) & (dist < best[rows])  # the first split pair wins ties
        best[rows[better]], partner[rows[better]] = dist[better], others[better]

    for i, a in enumerate(splits):
        for b in splits[i + 1:]:
            pa, pb = positions[a], positions[b]
            da, qa, db, qb = phash.nearest_across(values[pa], values[pb], threshold)
            keep(pa, da, pb[qa])
            keep(pb, db, pa[qb])
    hit = partner >= 0
    if not hit.any():
        return
    rec.loc[hit, "near_dup_bits"] = best[hit].astype(float)
    p = partner[hit]
    rec.loc[hit, "near_dup_of"] = (rec["record"].to_numpy(object)[p] + " "
                                   + rec["source_key"].astype(str).to_numpy(object)[p])


# detection (COCO): an annotation file under annotations/, read whole by flatten and used by
# many records; a listed one that is not quarantined was used (merge accounts it so)
ANNOTATION_FOLDER = "annotations/"
ANNOTATION_SUFFIX = ".json"


def is_annotation_file(key: str) -> bool:
    """A COCO annotation file: ``annotations/<name>.json`` (relative to the source prefix)."""
    return isinstance(key, str) and key.startswith(ANNOTATION_FOLDER) \
        and key.lower().endswith(ANNOTATION_SUFFIX)


def _sources_frame(inputs: GateInputs, rec: pd.DataFrame, detection: bool = False
                   ) -> pd.DataFrame:
    """Item 5: one row per listed object (plus any packed/quarantined key not listed).

    A record accounts for its image (``source_key``), its mask (``mask_key``) and its VOC
    annotation (``annotation_key``); a quarantine entry with a ``part`` refuses one object
    of an annotation, not a listed object, and is not counted; for a detection dataset a
    listed COCO annotation file that is not quarantined counts as ``used``, as does every file
    summary.json names ``used`` (files flatten read whole: COCO instances, list files); an
    object in ``not_used.jsonl`` (set aside as no part of the dataset) counts as
    ``not_used``."""
    import pandas as pd

    packed = rec["source_key"].value_counts()
    for col in ("mask_key", "annotation_key"):  # a record also packs its mask, its annotation
        if col in rec.columns:
            packed = packed.add(rec[col].dropna().value_counts(), fill_value=0)
    refused = pd.Series([q.get("source_key") for q in inputs.quarantine
                         if q.get("part") is None], dtype=object).value_counts()
    if inputs.sources is None:
        # no listing: reconcile the totals in summary.json (no per-object evidence)
        summary = inputs.summary or {}
        listed = summary.get("listed")
        if listed is None:
            return pd.DataFrame(columns=["source_key", "listed", "packed", "quarantined",
                                         "used", "accounted", "etag_matches"])
        used = int(summary.get("not_used", 0))
        if summary.get("packed") is not None:
            # the files merge accounted as used (annotations, lists): no record names them
            used += max(0, int(summary["packed"]) - int(packed.sum()))
        total = int(packed.sum()) + int(refused.sum()) + used
        return pd.DataFrame([{
            "source_key": "(totals from summary.json)", "listed": True,
            "packed": int(packed.sum()), "quarantined": int(refused.sum()), "used": used,
            "accounted": 1 + total - int(listed), "etag_matches": None,
            "listed_total": int(listed)}])
    listing = inputs.sources
    if not isinstance(listing, pd.DataFrame):
        listing = pd.DataFrame(listing)
    if listing.empty or "key" not in listing.columns:
        listing = pd.DataFrame(columns=["key", "etag"])
    keys = pd.Index(listing["key"], dtype=object).append(
        pd.Index(packed.index, dtype=object)).append(pd.Index(refused.index, dtype=object))
    df = pd.DataFrame({"source_key": keys.unique()})
    df["listed"] = df["source_key"].isin(listing["key"])
    df["packed"] = df["source_key"].map(packed).fillna(0).astype(int)
    df["quarantined"] = df["source_key"].map(refused).fillna(0).astype(int)
    summary_used = (inputs.summary or {}).get("used")
    not_used = {r.get("key") for r in inputs.not_used}
    is_used = df["source_key"].isin(set(summary_used or ()))
    if detection and summary_used is None:  # a version from before summary.json said
        is_used |= df["source_key"].map(is_annotation_file).astype(bool)
    df["used"] = (df["listed"] & (df["quarantined"] == 0) & is_used).astype(int)
    df["not_used"] = (df["listed"] & df["source_key"].isin(not_used)).astype(int)
    df["accounted"] = df["packed"] + df["quarantined"] + df["used"] + df["not_used"]
    if "etag" in listing.columns and "source_etag" in rec.columns:
        if is_text(listing["etag"]):  # rows given as dicts
            listing = listing[["key", "etag"]].copy()
            compact_identities(listing)
        listed_etag = listing.drop_duplicates("key").set_index("key")["etag"]
        packed_etag = rec[["source_key", "source_etag"]].drop_duplicates(
            "source_key").set_index("source_key")["source_etag"]
        both = df["source_key"].map(listed_etag).notna() & df["source_key"].map(
            packed_etag).notna()
        df["etag_matches"] = None
        df.loc[both, "etag_matches"] = (df.loc[both, "source_key"].map(listed_etag)
                                        == df.loc[both, "source_key"].map(packed_etag))
    else:
        df["etag_matches"] = None
    return df


def _classes_frame(inputs: GateInputs, rec: pd.DataFrame, quality: QualitySpec,
                   task: str, objects: pd.DataFrame | None = None) -> pd.DataFrame:
    """Item 11: per class, its count (segmentation: pixels; detection: objects) and its
    ratio to the largest — in ``class_balance_split``, all splits together (null, or a split
    the dataset does not have), or per split (``each``: one row per split and class, the
    ratio to the largest class of that split)."""
    import pandas as pd

    names = (inputs.classes or {}).get("classes") or []
    split = quality.class_balance_split
    present = [s for s in pd.unique(rec["split"]) if isinstance(s, str)]
    if split == EACH_SPLIT:
        parts = [(s, _class_counts(rec, quality, task, objects, s))
                 for s in sorted(present, key=_split_order)]
    else:
        if split and split not in present:
            split = None  # no such split: all splits together
        parts = [(split, _class_counts(rec, quality, task, objects, split))]
    frames = []
    for part_split, (counts, unit) in parts:
        # labels outside the class map are item 3's failure, not a class of their own
        ids = list(range(len(names))) if names else sorted(counts)
        df = pd.DataFrame({"class_id": ids})
        df["class_name"] = [names[i] if 0 <= i < len(names) else str(i) for i in ids]
        df["split"] = part_split
        df["class"] = df["class_name"] if split != EACH_SPLIT else \
            [f"{part_split}/{n}" for n in df["class_name"]]
        df["count"] = [counts.get(i, 0.0) for i in ids]
        largest = df["count"].max() if len(df) else 0
        df["ratio_to_largest"] = df["count"] / largest if largest else 0.0
        df["unit"] = unit
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["class_id", "class_name", "split", "class", "count",
                                     "ratio_to_largest", "unit"])
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _split_order(split: str) -> tuple[int, str]:
    order = ("train", "val", "test")
    return (order.index(split) if split in order else len(order), split)


def _class_counts(rec: pd.DataFrame, quality: QualitySpec, task: str,
                  objects: pd.DataFrame | None, split: str | None
                  ) -> tuple[dict[int, float], str]:
    """class id → its count in ``split`` (None: all splits), and the unit counted."""
    import numpy as np
    import pandas as pd

    counts: dict[int, float] = {}
    if objects is not None:
        cls = objects["class_id"].to_numpy(np.float32)
        if split:
            cls = cls[objects["split"].to_numpy(object) == split]
        cls = cls[(cls == np.floor(cls)) & (cls >= 0)].astype(np.int64)
        return {k: float(v) for k, v in enumerate(np.bincount(cls)) if v}, "objects"
    part = rec[rec["split"] == split] if split else rec
    if kind(task).masks and "class_pixels" in rec.columns:
        for cp in part["class_pixels"].dropna():
            for k, v in cp.items():
                if int(k) != quality.ignore_label:  # ignored pixels are no class
                    counts[int(k)] = counts.get(int(k), 0) + float(v)
        return counts, "pixels"
    labels = pd.to_numeric(part["label"], errors="coerce").dropna()
    return {int(k): float(v) for k, v in labels.value_counts().items() if k == int(k)}, \
        "records"


def _class_names_frame(inputs: GateInputs) -> pd.DataFrame:
    """Item 16: one row per name of ``classes.json`` and how many of its names share its
    lowercase spelling (``Dog`` and ``dog``: 2 each), so names that differ only by case
    show as a count above 1."""
    import pandas as pd

    names = [str(n) for n in (inputs.classes or {}).get("classes") or []]
    df = pd.DataFrame({"class_name": pd.Series(names, dtype=object)})
    lower = df["class_name"].str.lower()
    df["same_but_case"] = lower.map(lower.value_counts()).astype(float) if names else \
        pd.Series(dtype=float)
    return df


def case_twins(names: list[str]) -> list[list[str]]:
    """The groups of class names that differ only by case, each in classes.json's order."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(str(n).lower(), []).append(str(n))
    return [g for g in groups.values() if len(g) > 1]
