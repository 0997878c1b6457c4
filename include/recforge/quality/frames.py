"""The pandas facts: the tables the suites check, with the cross-row facts as columns.

Facts that need more than one row (offset order, cross-split duplicates, per-object
accounting, class counts) are no single GX expectation, so they are computed here in pandas
as columns; the expectations of :mod:`recforge.quality.suites` then check those columns, so
every verdict and its offending rows appear in Data Docs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from recforge.quality.inputs import VERIFY_COLUMNS, GateInputs, _framed_size
from recforge.spec.quality import QualitySpec

if TYPE_CHECKING:
    import pandas as pd


def build_frames(inputs: GateInputs, quality: QualitySpec, task: str = "classification"
                 ) -> dict[str, pd.DataFrame]:
    """The tables the suites check, with the cross-row facts computed as columns."""
    import numpy as np
    import pandas as pd

    rec = pd.DataFrame(inputs.records)
    for col, default in (("key", np.nan), ("split", None), ("offset", np.nan),
                         ("length", np.nan), ("height", np.nan), ("width", np.nan),
                         ("channels", np.nan), ("label", np.nan), ("class_name", None),
                         ("source_key", None), ("source_sha256", None),
                         ("decode_status", None)):
        if col not in rec.columns:
            rec[col] = default
    for col in VERIFY_COLUMNS:
        if col not in rec.columns:
            rec[col] = None
    rec["record"] = rec["split"].astype(str) + "/" + rec["key"].astype(str)

    # item 2: offsets strictly increasing, each record starting after the previous one ends
    rec["_order"] = np.arange(len(rec))
    prev_end = rec.groupby("split", sort=False)["offset"].shift(1) + \
        rec.groupby("split", sort=False)["length"].shift(1).map(
            lambda n: _framed_size(int(n)) if pd.notna(n) else np.nan)
    rec["offset_gap"] = rec["offset"] - prev_end.fillna(0)
    if inputs.idx is not None:
        idx_rows = [{"split": s, "key": k, "idx_offset": o}
                    for s, entries in inputs.idx.items() for k, o in entries]
        idx_df = pd.DataFrame(idx_rows, columns=["split", "key", "idx_offset"])
        idx_df = idx_df.drop_duplicates(["split", "key"])
        rec = rec.merge(idx_df, on=["split", "key"], how="left")
        rec["idx_offset"] = rec["idx_offset"].astype(float)
        rec = rec.sort_values("_order").reset_index(drop=True)

    # item 3
    num_classes = (inputs.classes or {}).get("num_classes")
    names = (inputs.classes or {}).get("classes")
    labels = pd.to_numeric(rec["label"], errors="coerce")
    rec["label_is_integer"] = (labels == labels.round()) & labels.notna()
    if names and task != "segmentation":  # segmentation records carry no image class
        rec["expected_class_name"] = labels.map(
            lambda v: names[int(v)] if pd.notna(v) and v == int(v) and 0 <= v < len(names)
            else "<no such id>")
    if "mask_values" in rec.columns and num_classes:
        allowed = set(range(num_classes)) | (
            {quality.ignore_label} if quality.ignore_label is not None else set())
        rec["mask_values_ok"] = rec["mask_values"].map(
            lambda vs: None if vs is None or (isinstance(vs, float) and math.isnan(vs))
            else set(int(v) for v in vs) <= allowed)

    # item 4
    rec["short_side"] = rec[["height", "width"]].min(axis=1)

    # item 12
    rec["source_key_splits"] = rec.groupby("source_key")["split"].transform("nunique")
    rec["content_splits"] = rec.groupby("source_sha256")["split"].transform("nunique")
    rec.loc[rec["source_sha256"].isna(), "content_splits"] = np.nan
    if "phash" in rec.columns:
        _near_duplicates(rec, quality.near_duplicate_hamming)

    # item 13
    if task == "segmentation" or "mask_record_key" in rec.columns:
        for col in ("mask_record_key", "mask_height", "mask_width"):
            if col not in rec.columns:
                rec[col] = np.nan
        size_ok = ((rec["mask_height"] == rec["height"])
                   & (rec["mask_width"] == rec["width"])).astype(object)
        size_ok[rec["mask_record_key"].isna()] = None  # a missing mask is reported once, as missing
        rec["mask_size_ok"] = size_ok
    # list/dict columns (mask_values, class_pixels) are summarised above; GX fingerprints
    # frames by hashing cells, which lists and dicts do not support
    nested = [c for c in rec.columns if rec[c].map(lambda v: isinstance(v, list | dict)).any()]
    frames = {"records": rec.drop(columns=["_order", *nested])}

    # item 2: counts agree between the manifest, the .idx files and summary.json
    per_split = rec.groupby("split").size()
    split_names = sorted(set(per_split.index) | set((inputs.idx or {}).keys())
                         | set(((inputs.summary or {}).get("splits") or {}).keys()))
    frames["splits"] = pd.DataFrame([{
        "split": s,
        "manifest_records": int(per_split.get(s, 0)),
        "idx_entries": len((inputs.idx or {}).get(s, [])) if inputs.idx is not None else np.nan,
        "summary_records": ((inputs.summary or {}).get("splits") or {}).get(s, np.nan)
        if inputs.summary else np.nan,
    } for s in split_names], columns=["split", "manifest_records", "idx_entries",
                                      "summary_records"]).astype(
        {"manifest_records": float, "idx_entries": float, "summary_records": float})

    frames["sources"] = _sources_frame(inputs, rec)
    frames["classes"] = _classes_frame(inputs, rec, quality, task)
    return frames


def _near_duplicates(rec: pd.DataFrame, threshold: int) -> None:
    """Per record: the closest record of another split within ``threshold`` bits, if any."""
    import numpy as np

    from recforge import phash

    rec["near_dup_bits"] = np.nan
    rec["near_dup_of"] = None
    ok = rec["phash"].map(lambda h: isinstance(h, str) and len(h) == phash.HEX_DIGITS)
    values = np.zeros(len(rec), dtype=np.uint64)
    values[ok.to_numpy()] = phash.to_uint64(rec.loc[ok, "phash"])
    splits = sorted(rec.loc[ok, "split"].dropna().unique())
    positions = {s: np.flatnonzero((rec["split"] == s).to_numpy() & ok.to_numpy())
                 for s in splits}
    best = np.full(len(rec), np.inf)
    partner = np.full(len(rec), -1)
    for i, a in enumerate(splits):
        for b in splits[i + 1:]:
            pa, pb = positions[a], positions[b]
            ii, jj, dist = phash.near_pairs(values[pa], values[pb], threshold)
            for x, y, d in zip(pa[ii], pb[jj], dist, strict=True):
                if d < best[x]:
                    best[x], partner[x] = d, y
                if d < best[y]:
                    best[y], partner[y] = d, x
    hit = np.isfinite(best)
    rec.loc[hit, "near_dup_bits"] = best[hit]
    rec.loc[hit, "near_dup_of"] = [rec["record"].iat[p] + " " + str(rec["source_key"].iat[p])
                                   for p in partner[hit]]


def _sources_frame(inputs: GateInputs, rec: pd.DataFrame) -> pd.DataFrame:
    """Item 5: one row per listed object (plus any packed/quarantined key not listed)."""
    import pandas as pd

    packed = rec["source_key"].value_counts()
    if "mask_key" in rec.columns:  # segmentation: a record also packs its mask's source object
        packed = packed.add(rec["mask_key"].dropna().value_counts(), fill_value=0)
    refused = pd.Series([q.get("source_key") for q in inputs.quarantine],
                        dtype=object).value_counts()
    if inputs.sources is None:
        # no listing: reconcile the totals in summary.json (no per-object evidence)
        listed = (inputs.summary or {}).get("listed")
        if listed is None:
            return pd.DataFrame(columns=["source_key", "listed", "packed", "quarantined",
                                         "accounted", "etag_matches"])
        total = int(packed.sum()) + int(refused.sum())
        return pd.DataFrame([{
            "source_key": "(totals from summary.json)", "listed": True,
            "packed": int(packed.sum()), "quarantined": int(refused.sum()),
            "accounted": 1 + total - int(listed), "etag_matches": None,
            "listed_total": int(listed)}])
    listing = pd.DataFrame(inputs.sources)
    if listing.empty:
        listing = pd.DataFrame(columns=["key", "etag"])
    keys = list(dict.fromkeys(list(listing["key"]) + list(packed.index) + list(refused.index)))
    df = pd.DataFrame({"source_key": keys})
    df["listed"] = df["source_key"].isin(set(listing["key"]))
    df["packed"] = df["source_key"].map(packed).fillna(0).astype(int)
    df["quarantined"] = df["source_key"].map(refused).fillna(0).astype(int)
    df["accounted"] = df["packed"] + df["quarantined"]
    if "etag" in listing.columns and "source_etag" in rec.columns:
        listed_etag = listing.drop_duplicates("key").set_index("key")["etag"]
        packed_etag = rec.drop_duplicates("source_key").set_index("source_key")["source_etag"]
        both = df["source_key"].map(listed_etag).notna() & df["source_key"].map(
            packed_etag).notna()
        df["etag_matches"] = None
        df.loc[both, "etag_matches"] = (df.loc[both, "source_key"].map(listed_etag)
                                        == df.loc[both, "source_key"].map(packed_etag))
    else:
        df["etag_matches"] = None
    return df


def _classes_frame(inputs: GateInputs, rec: pd.DataFrame, quality: QualitySpec,
                   task: str) -> pd.DataFrame:
    """Item 11: per class, its count (segmentation: pixels) and its ratio to the largest."""
    import pandas as pd

    names = (inputs.classes or {}).get("classes") or []
    part = rec
    if quality.class_balance_split and quality.class_balance_split in set(rec["split"]):
        part = rec[rec["split"] == quality.class_balance_split]
    if task == "segmentation" and "class_pixels" in rec.columns:
        counts: dict[int, float] = {}
        for cp in part["class_pixels"].dropna():
            for k, v in cp.items():
                if int(k) != quality.ignore_label:  # ignored pixels are no class
                    counts[int(k)] = counts.get(int(k), 0) + float(v)
        unit = "pixels"
    else:
        labels = pd.to_numeric(part["label"], errors="coerce").dropna()
        counts = {int(k): float(v) for k, v in labels.value_counts().items() if k == int(k)}
        unit = "records"
    # labels outside the class map are item 3's failure, not a class of their own
    ids = list(range(len(names))) if names else sorted(counts)
    df = pd.DataFrame({"class_id": ids})
    df["class_name"] = [names[i] if 0 <= i < len(names) else str(i) for i in ids]
    df["count"] = [counts.get(i, 0.0) for i in ids]
    largest = df["count"].max() if len(df) else 0
    df["ratio_to_largest"] = df["count"] / largest if largest else 0.0
    df["unit"] = unit
    return df
