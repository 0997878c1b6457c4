"""The quality gate: the pre-release checklist as Great Expectations 1.x suites, run every build.

MXNet's ``.idx`` holds only ``key<TAB>offset`` (see ERRATA.md), so the checklist runs on the
record manifest pack writes (``records.jsonl``), the source listing, the quarantine report,
the ``.idx`` files and — for a sample of records — the ``.rec`` bytes themselves. Facts
that need more than one row (cross-split duplicates, per-object accounting, class counts) are
computed here in pandas as columns; GX expectations then check those columns, so every
verdict and its offending rows appear in Data Docs.

Each checklist item is one named check (:data:`CHECKS`): an expectation or a small group
tagged ``meta.check``, with a severity from :class:`QualitySpec` — ``fail`` blocks publishing,
``warn`` is reported, ``off`` skips it. :func:`run_quality_gate` returns a small,
XCom-sized dict; :func:`enforce` raises :class:`QualityGateFailed` on a failed ``fail`` check.

Why no GX ``Checkpoint``: a Checkpoint passes one ``batch_parameters`` to all its validation
definitions, but each suite here runs on its own in-memory dataframe; so each
``ValidationDefinition`` runs with its dataframe under one run id and Data Docs are built
once at the end. The context is ephemeral (no ``gx/`` folder): the suites live in this
module, the evidence in the Data Docs site.

Heavy imports (great_expectations, pandas, cv2) happen inside functions: ``spec.py`` imports
:class:`QualitySpec` from here at DAG parse time.
"""

from __future__ import annotations

import json
import logging
import math
import mimetypes
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

Severity = Literal["fail", "warn", "off"]
SITE_NAME = "recforge"
MAX_EVIDENCE = 5
MAX_TEXT = 240  # characters per observed value or evidence line (XCom stays small)
SUITE_PREFIX = "checklist"
RESULT_XCOM_KEY = "quality"  # enforce(result, ti) pushes the result here for the notifier
# the column that names a row in each frame: shown for unexpected rows in Data Docs
ROW_ID = {"records": "record", "sources": "source_key", "classes": "class_name",
          "splits": "split"}


@dataclass(frozen=True)
class Check:
    """One checklist item: its stable name, the item number, what it means, its default."""

    name: str
    item: str
    title: str
    default: Severity


CHECKS: tuple[Check, ...] = (
    Check("decode", "1", "every record decodes (0 corrupt)", "fail"),
    Check("index", "2", "unique keys, increasing offsets, .idx/manifest/summary agree", "fail"),
    Check("labels", "3", "labels are integers in [0, N) (masks: values in 0..N-1 or ignore)",
          "fail"),
    Check("image_size", "4", "image sizes match the pack options", "fail"),
    Check("sources", "5", "every listed source is packed or quarantined, exactly once", "fail"),
    Check("loader_dtype", "6", "loader batches are float32 NDArrays", "fail"),
    Check("loader_range", "7", "batch values within the configured range", "fail"),
    Check("loader_shape", "8", "constant batch shape", "fail"),
    Check("gpu_memory", "9", "GPU memory peak under the limit", "fail"),
    Check("loader_throughput", "10", "loader throughput and read bandwidth above the floors",
          "fail"),
    Check("class_balance", "11", "smallest/largest class within tolerance", "warn"),
    Check("split_keys", "12a", "no source key in two splits", "fail"),
    Check("split_content", "12b", "no identical content (SHA-256) in two splits", "fail"),
    Check("near_duplicates", "12c", "no near-duplicate (dHash) across splits", "fail"),
    Check("masks", "13", "every image has its mask: same key, same size", "fail"),
)
CHECK_BY_NAME = {c.name: c for c in CHECKS}
LOADER_CHECKS = ("loader_dtype", "loader_range", "loader_shape", "gpu_memory",
                 "loader_throughput")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoaderQuality(_Strict):
    """Floors and limits for the loader benchmark's results (checklist items 6-10)."""

    dtype: str = Field("float32", description="dtype every batch must have")
    value_range: tuple[float, float] = Field(
        (0.0, 255.0),
        description="[min, max] batch values: (0, 255) raw, (0, 1) after ToTensor, about "
        "(-2.2, 2.7) after ImageNet Normalize",
    )
    min_images_per_sec: float = Field(0.0, ge=0, description="loader throughput floor")
    min_read_mb_per_sec: float = Field(0.0, ge=0, description="read bandwidth floor")
    gpu_memory_limit_mb: float | None = Field(
        None, gt=0, description="peak GPU memory limit; not run on CPU or when unset"
    )

    @model_validator(mode="after")
    def _range_ordered(self) -> LoaderQuality:
        lo, hi = self.value_range
        if lo >= hi:
            raise ValueError(f"value_range {list(self.value_range)} must be [min, max], min < max")
        return self


class QualitySpec(_Strict):
    """The spec's ``quality`` field: thresholds and severities of the checklist."""

    severity: dict[str, Severity] = Field(
        default_factory=dict,
        description="per-check override: fail (blocks publish), warn (reported) or off",
    )
    class_balance_min_ratio: float = Field(
        0.1, ge=0.0, le=1.0,
        description="smallest/largest class count (segmentation: pixel count) must be >= this",
    )
    class_balance_split: str | None = Field(
        "train", description="split whose balance is checked; null = all splits together"
    )
    near_duplicate_hamming: int = Field(
        4, ge=0, le=16,
        description="records in different splits whose dHash differs in <= this many bits "
        "are near-duplicates",
    )
    decode_sample: int | None = Field(
        1000, ge=0,
        description="records per split re-read from the .rec and decoded (ranged reads); "
        "0 = only the manifest's decode status, null = every record",
    )
    image_shape: tuple[int, int] | None = Field(
        None, description="[height, width] every image must have (fixed-shape datasets)"
    )
    ignore_label: int | None = Field(255, description="segmentation mask value to ignore")
    loader: LoaderQuality = LoaderQuality()

    @field_validator("severity")
    @classmethod
    def _known_checks(cls, v: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(v) - set(CHECK_BY_NAME))
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; known: {sorted(CHECK_BY_NAME)}")
        return v

    def severity_of(self, name: str) -> Severity:
        return self.severity.get(name, CHECK_BY_NAME[name].default)


class QualityGateFailed(RuntimeError):
    """A ``fail``-severity check failed; ``result`` is the gate's result dict (for alerts)."""

    def __init__(self, result: dict):
        self.result = result
        failed = ", ".join(
            f"{n} ({result['checks'][n]['observed']})" for n in result["failed"]) or "?"
        docs = result.get("data_docs_uri") or result.get("data_docs") or "(not built)"
        super().__init__(
            f"quality gate failed for {result.get('dataset') or 'dataset'} run "
            f"{result.get('run') or '?'}: {failed}. Evidence: {docs}"
        )


# ----------------------------------------------------------------------------- inputs


@dataclass
class GateInputs:
    """Everything the checks read, as plain tables (tests build these in memory)."""

    records: list[dict]
    quarantine: list[dict] = field(default_factory=list)
    sources: list[dict] | None = None  # the source manifest: key, size, etag
    classes: dict | None = None  # classes.json
    summary: dict | None = None  # summary.json
    idx: dict[str, list[tuple[int, int]]] | None = None  # split → .idx entries
    rec_uris: dict[str, str] = field(default_factory=dict)  # split → .rec URI (decode sample)


def load_inputs(prefix: str, source_manifest: str | list[dict] | None = None) -> GateInputs:
    """Read a staging ``out/`` prefix or a published version (local folder or S3)."""
    from recforge import recordio, storage

    names = {o.key: o for o in storage.list_objects(prefix) if "/" not in o.key}
    if "records.jsonl" not in names:
        raise FileNotFoundError(
            f"{storage.join(prefix, 'records.jsonl')} does not exist: the quality gate needs the "
            "record manifest that merge writes; point at a run's out/ prefix or a version")

    def opt_json(name):
        return storage.read_json(storage.join(prefix, name)) if name in names else None

    if isinstance(source_manifest, str):
        sources = storage.read_jsonl(source_manifest)
    elif source_manifest is None and "source_manifest.jsonl" in names:
        sources = storage.read_jsonl(storage.join(prefix, "source_manifest.jsonl"))
    else:
        sources = source_manifest
    # <split>.idx/.rec; segmentation's <split>_mask.* are masks, not splits
    splits = {n[:-4] for n in names if n.endswith(".idx") and not n[:-4].endswith("_mask")}
    idx = {}
    with tempfile.TemporaryDirectory(prefix="recforge-quality-") as tmp:
        for split in sorted(splits):
            local = Path(tmp) / f"{split}.idx"
            storage.download(storage.join(prefix, f"{split}.idx"), local)
            idx[split] = recordio.read_idx(local)
    return GateInputs(
        records=storage.read_jsonl(storage.join(prefix, "records.jsonl")),
        quarantine=(storage.read_jsonl(storage.join(prefix, "quarantine.jsonl"))
                    if "quarantine.jsonl" in names else []),
        sources=sources, classes=opt_json("classes.json"), summary=opt_json("summary.json"),
        idx=idx,
        rec_uris={s: storage.join(prefix, f"{s}.rec") for s in splits if f"{s}.rec" in names},
    )


VERIFY_COLUMNS = ("rec_status", "rec_id_ok", "rec_label_ok", "rec_shape_ok")


def _framed_size(length: int) -> int:
    """Bytes a payload of ``length`` takes in a .rec without magic splits (header + padding)."""
    return 8 + ((length + 3) & ~3)


def verify_records(records: pd.DataFrame, rec_uris: dict[str, str], sample: int | None,
                   threads: int = 8) -> pd.DataFrame:
    """Re-read a deterministic sample of records from the ``.rec`` at their manifest offsets.

    Adds ``rec_status`` (ok / bad_record / undecodable), ``rec_id_ok`` and ``rec_label_ok``
    (the header's id and label equal the manifest's) and ``rec_shape_ok`` (decoded shape
    equals the manifest's). Rows not sampled stay null: GX counts them as missing, not as
    failures.
    """
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from recforge import recordio, storage

    for col in VERIFY_COLUMNS:
        records[col] = None
    if sample == 0 or records.empty:
        return records
    jobs = []
    for split, rows in records.groupby("split", sort=False):
        uri = rec_uris.get(split)
        if uri is None:
            continue
        rows = rows.sort_values("offset")
        ends = list(rows["offset"].iloc[1:]) + [None]
        picked = range(len(rows))
        if sample is not None and len(rows) > sample:
            picked = np.unique(np.linspace(0, len(rows) - 1, sample).round().astype(int))
        for i in picked:
            row = rows.iloc[i]
            start, length = int(row["offset"]), int(row["length"])
            end = ends[i]
            # the next record's offset bounds this one; the last gets slack for magic splits
            span = (int(end) - start) if end is not None and end > start else (
                _framed_size(length) + 4 * (length // 4 + 1))
            jobs.append((row.name, uri, start, max(span, 8)))

    def check(job):
        index, uri, start, span = job
        import io

        import cv2

        row = records.loc[index]
        try:
            got = recordio.read_record_at(io.BytesIO(storage.get_range(uri, start, span)), 0)
            if got is None:
                raise recordio.RecordIOError(f"no record at byte {start}")
            header, img_bytes = recordio.unpack_image_record(got[0])
        except Exception as exc:  # bad framing, a range past the end, a read error: all "bad"
            log.warning("record %s/%s at byte %d: %s", row["split"], row["key"], start, exc)
            return index, ("bad_record", False, None, None)
        label = header.label[0] if isinstance(header.label, tuple) else header.label
        id_ok = header.id == int(row["key"])
        label_ok = _label_equal(label, row.get("label"))
        try:
            img = cv2.imdecode(np.frombuffer(img_bytes, np.uint8), cv2.IMREAD_UNCHANGED)
        except cv2.error:
            img = None
        if img is None:
            return index, ("undecodable", id_ok, label_ok, None)
        c = 1 if img.ndim == 2 else img.shape[2]
        shape_ok = (img.shape[0], img.shape[1], c) == (
            int(row["height"]), int(row["width"]), int(row["channels"]))
        return index, ("ok", id_ok, label_ok, shape_ok)

    with ThreadPoolExecutor(threads) as pool:
        for index, values in pool.map(check, jobs):
            for col, value in zip(VERIFY_COLUMNS, values, strict=True):
                records.at[index, col] = value
    log.info("quality: re-read and decoded %d records from the .rec files", len(jobs))
    return records


def _label_equal(a, b) -> bool:
    try:
        return math.isclose(float(a), float(b))
    except (TypeError, ValueError):
        return False


# ----------------------------------------------------------------------------- frames


def _pack_value(pack, name: str, default):
    if pack is None:
        return default
    if isinstance(pack, dict):
        return pack.get(name, default)
    return getattr(pack, name, default)


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


# ----------------------------------------------------------------------------- suites


@dataclass
class _Planned:
    frame: str
    check: str
    what: str  # one line for the evidence, e.g. "label in [0, 14)"
    expectation: Any


def _adder(plans: list[_Planned], quality: QualitySpec):
    """``add(frame, check, what, ExpectationClass, **kwargs)``: one tagged expectation."""

    def add(frame: str, check: str, what: str, exp_cls, **kw) -> None:
        sev = quality.severity_of(check)
        if sev == "off":
            return
        c = CHECK_BY_NAME[check]
        plans.append(_Planned(frame, check, what, exp_cls(
            **kw, severity="critical" if sev == "fail" else "warning",
            meta={"check": check, "item": c.item, "severity": sev, "what": what},
            notes=f"Checklist item {c.item} ({check}): {c.title}. {what}.")))

    return add


def plan_expectations(frames: dict[str, pd.DataFrame], quality: QualitySpec, pack=None,
                      task: str = "classification", num_classes: int | None = None
                      ) -> tuple[list[_Planned], dict[str, str]]:
    """The expectations per check (only those whose inputs exist) and why others are not run."""
    import great_expectations.expectations as gxe

    rec = frames["records"]
    plans: list[_Planned] = []
    not_run: dict[str, str] = {}

    add = _adder(plans, quality)

    # 1 decode
    add("records", "decode", "manifest decode_status is ok", gxe.ExpectColumnValuesToBeInSet,
        column="decode_status", value_set=["ok"])
    add("records", "decode", "manifest decode_status present", gxe.ExpectColumnValuesToNotBeNull,
        column="decode_status")
    if rec["rec_status"].notna().any():
        add("records", "decode", "record re-read from the .rec decodes",
            gxe.ExpectColumnValuesToBeInSet, column="rec_status", value_set=["ok"])
    # 2 index
    add("records", "index", "(split, key) unique", gxe.ExpectCompoundColumnsToBeUnique,
        column_list=["split", "key"])
    add("records", "index", "offsets increase, each record after the previous one's end",
        gxe.ExpectColumnValuesToBeBetween, column="offset_gap", min_value=0)
    add("records", "index", "offset present", gxe.ExpectColumnValuesToNotBeNull, column="offset")
    if "idx_offset" in rec.columns:
        add("records", "index", ".idx offset equals the manifest offset",
            gxe.ExpectColumnPairValuesToBeEqual, column_A="offset", column_B="idx_offset",
            ignore_row_if="neither")
        add("splits", "index", ".idx entries equal manifest records",
            gxe.ExpectColumnPairValuesToBeEqual, column_A="manifest_records",
            column_B="idx_entries", ignore_row_if="neither")
    if rec["rec_id_ok"].notna().any():
        add("records", "index", "record at the offset has the manifest's key as header id",
            gxe.ExpectColumnValuesToBeInSet, column="rec_id_ok", value_set=[True])
    if frames["splits"]["summary_records"].notna().any():
        add("splits", "index", "summary.json counts equal manifest records",
            gxe.ExpectColumnPairValuesToBeEqual, column_A="manifest_records",
            column_B="summary_records", ignore_row_if="neither")
    # 3 labels
    add("records", "labels", "label present", gxe.ExpectColumnValuesToNotBeNull, column="label")
    add("records", "labels", "label is an integer", gxe.ExpectColumnValuesToBeInSet,
        column="label_is_integer", value_set=[True])
    if num_classes:
        add("records", "labels", f"label in [0, {num_classes})",
            gxe.ExpectColumnValuesToBeBetween, column="label", min_value=0,
            max_value=num_classes - 1)
    else:
        not_run["labels"] = "no classes.json: integer check only, range not checked"
    if "expected_class_name" in rec.columns:
        add("records", "labels", "class_name is classes.json's name for the label",
            gxe.ExpectColumnPairValuesToBeEqual, column_A="class_name",
            column_B="expected_class_name")
    if rec["rec_label_ok"].notna().any():
        add("records", "labels", "record header label equals the manifest label",
            gxe.ExpectColumnValuesToBeInSet, column="rec_label_ok", value_set=[True])
    if "mask_values_ok" in rec.columns:
        add("records", "labels", "mask values within 0..N-1 or the ignore label",
            gxe.ExpectColumnValuesToBeInSet, column="mask_values_ok", value_set=[True])
    # 4 image size
    resize = int(_pack_value(pack, "resize", 0) or 0)
    upscale = bool(_pack_value(pack, "upscale", False))
    color = _pack_value(pack, "color", None)
    add("records", "image_size", "height and width present", gxe.ExpectColumnValuesToNotBeNull,
        column="short_side")
    if quality.image_shape:
        h, w = quality.image_shape
        add("records", "image_size", f"height == {h}", gxe.ExpectColumnValuesToBeInSet,
            column="height", value_set=[h])
        add("records", "image_size", f"width == {w}", gxe.ExpectColumnValuesToBeInSet,
            column="width", value_set=[w])
    elif resize > 0 and upscale:
        add("records", "image_size", f"short side == resize {resize}",
            gxe.ExpectColumnValuesToBeInSet, column="short_side", value_set=[resize])
    elif resize > 0:
        add("records", "image_size", f"short side <= resize {resize} (no upscale)",
            gxe.ExpectColumnValuesToBeBetween, column="short_side", min_value=1,
            max_value=resize)
    else:
        add("records", "image_size", "short side >= 1", gxe.ExpectColumnValuesToBeBetween,
            column="short_side", min_value=1)
    if color is not None:
        channels = {1: [3], 0: [1]}.get(int(color), [1, 3, 4])
        add("records", "image_size", f"channels in {channels} (pack.color {color})",
            gxe.ExpectColumnValuesToBeInSet, column="channels", value_set=channels)
    if rec["rec_shape_ok"].notna().any():
        add("records", "image_size", "decoded shape equals the manifest's",
            gxe.ExpectColumnValuesToBeInSet, column="rec_shape_ok", value_set=[True])
    # 5 sources
    if frames["sources"].empty:
        not_run["sources"] = "no source manifest and no summary.json"
    elif "listed_total" in frames["sources"]:
        not_run["sources"] = ("totals from summary.json only; pass the source manifest for "
                              "per-object accounting")
    if not frames["sources"].empty:
        add("sources", "sources", "packed + quarantined == 1 per listed object",
            gxe.ExpectColumnValuesToBeInSet, column="accounted", value_set=[1])
        add("sources", "sources", "every packed or quarantined key was listed",
            gxe.ExpectColumnValuesToBeInSet, column="listed", value_set=[True])
        add("sources", "sources", "packed ETag equals the listed ETag",
            gxe.ExpectColumnValuesToBeInSet, column="etag_matches", value_set=[True])
    # 11 class balance
    add("classes", "class_balance",
        f"count / largest >= {quality.class_balance_min_ratio}",
        gxe.ExpectColumnValuesToBeBetween, column="ratio_to_largest",
        min_value=quality.class_balance_min_ratio)
    # 12 split independence
    add("records", "split_keys", "source key in one split only", gxe.ExpectColumnValuesToBeInSet,
        column="source_key_splits", value_set=[1])
    add("records", "split_content", "SHA-256 of the source in one split only",
        gxe.ExpectColumnValuesToBeInSet, column="content_splits", value_set=[1])
    if "near_dup_bits" in rec.columns:
        t = quality.near_duplicate_hamming
        add("records", "near_duplicates", f"no record of another split within {t} bits",
            gxe.ExpectColumnValuesToBeNull, column="near_dup_bits")
    else:
        not_run["near_duplicates"] = "records.jsonl has no phash column"
    # 13 masks
    if "mask_size_ok" in rec.columns:
        add("records", "masks", "mask present", gxe.ExpectColumnValuesToNotBeNull,
            column="mask_record_key")
        add("records", "masks", "mask key equals image key", gxe.ExpectColumnPairValuesToBeEqual,
            column_A="key", column_B="mask_record_key", ignore_row_if="either_value_is_missing")
        add("records", "masks", "mask size equals image size", gxe.ExpectColumnValuesToBeInSet,
            column="mask_size_ok", value_set=[True])
    else:
        not_run["masks"] = "not a segmentation dataset"
    return plans, not_run


# ----------------------------------------------------------------------------- loader (6-10)


def describe_batch(data) -> dict:
    """What items 6-8 need from one loader batch (an MXNet NDArray or a numpy array).

    Call it in the loader benchmark per batch and put the dicts in ``results["batches"]``.
    """
    import numpy as np

    arr = data.asnumpy() if hasattr(data, "asnumpy") else np.asarray(data)
    return {"type": type(data).__name__, "dtype": str(arr.dtype), "shape": list(arr.shape),
            "min": float(arr.min()) if arr.size else None,
            "max": float(arr.max()) if arr.size else None}


def from_bench_json(bench: dict) -> dict:
    """``recforge.loaderbench``'s ``bench.json`` → the loader results this module checks.

    Batches come from the benchmark's untimed value-check pass (every batch of one epoch);
    throughput from its best measured setting."""
    s = bench.get("summary", {})
    per_batch = (bench.get("value_check") or {}).get("per_batch") or []
    peak = s.get("gpu_memory_peak_bytes")
    return {
        "batches": [{"type": "NDArray", "dtype": b["dtype"], "shape": b["shape"],
                     "min": b["min"], "max": b["max"]} for b in per_batch],
        "images_per_sec": s.get("images_per_sec"),
        "read_mb_per_sec": s.get("read_mb_per_sec"),
        "gpu_mem_peak_mb": None if peak is None else peak / 1e6,
        "device": s.get("device", (bench.get("device") or {}).get("kind", "cpu")),
    }


def loader_frames(results: dict) -> dict[str, pd.DataFrame]:
    """The loader benchmark's results → a per-batch table and a one-row summary table.

    ``results`` keys: ``batches`` (list of :func:`describe_batch` dicts), ``images_per_sec``,
    ``read_mb_per_sec``, ``gpu_mem_peak_mb`` (null on CPU), ``device`` ("cpu"/"gpu").
    """
    import pandas as pd

    if "value_check" in results or "schema" in results:  # a bench.json as written
        results = from_bench_json(results)
    batches = pd.DataFrame(results.get("batches") or [],
                           columns=["type", "dtype", "shape", "min", "max"])
    batches["shape"] = batches["shape"].map(lambda s: list(s) if s is not None else None)
    batches["sample_shape"] = batches["shape"].map(
        lambda s: "x".join(map(str, s[1:])) if s else None)
    sizes = batches["shape"].map(lambda s: s[0] if s else None)
    full = sizes.iloc[0] if len(sizes) else None
    # every batch has the first batch's size; the last may be smaller (last_batch="keep")
    batches["batch_size_ok"] = [bool(n == full or (i == len(sizes) - 1 and n is not None
                                                   and full is not None and n <= full))
                                for i, n in enumerate(sizes)]
    summary = pd.DataFrame([{
        "images_per_sec": _num(results.get("images_per_sec", results.get("throughput"))),
        "read_mb_per_sec": _num(results.get("read_mb_per_sec")),
        "gpu_mem_peak_mb": _num(results.get("gpu_mem_peak_mb")),
        "device": results.get("device", "cpu"),
    }])
    return {"loader_batches": batches, "loader": summary}


def _num(v) -> float:
    return float(v) if v is not None else float("nan")


def plan_loader_expectations(frames: dict[str, pd.DataFrame], quality: QualitySpec
                             ) -> tuple[list[_Planned], dict[str, str]]:
    import great_expectations.expectations as gxe

    lq = quality.loader
    plans: list[_Planned] = []
    not_run: dict[str, str] = {}

    add = _adder(plans, quality)

    if frames["loader_batches"].empty:
        for name in ("loader_dtype", "loader_range", "loader_shape"):
            not_run[name] = "the loader benchmark produced no batches"
    else:
        add("loader_batches", "loader_dtype", "batch is an NDArray",
            gxe.ExpectColumnValuesToBeInSet, column="type", value_set=["NDArray"])
        add("loader_batches", "loader_dtype", f"batch dtype is {lq.dtype}",
            gxe.ExpectColumnValuesToBeInSet, column="dtype", value_set=[lq.dtype])
        lo, hi = lq.value_range
        add("loader_batches", "loader_range", f"batch min >= {lo}",
            gxe.ExpectColumnValuesToBeBetween, column="min", min_value=lo)
        add("loader_batches", "loader_range", f"batch max <= {hi}",
            gxe.ExpectColumnValuesToBeBetween, column="max", max_value=hi)
        add("loader_batches", "loader_shape", "one per-sample shape",
            gxe.ExpectColumnUniqueValueCountToBeBetween, column="sample_shape", min_value=1,
            max_value=1)
        add("loader_batches", "loader_shape", "constant batch size (last may be smaller)",
            gxe.ExpectColumnValuesToBeInSet, column="batch_size_ok", value_set=[True])
    summary = frames["loader"].iloc[0]
    if summary["device"] != "gpu" or math.isnan(summary["gpu_mem_peak_mb"]):
        not_run["gpu_memory"] = "CPU run: no GPU memory measured"
    elif lq.gpu_memory_limit_mb is None:
        not_run["gpu_memory"] = "no quality.loader.gpu_memory_limit_mb set"
    else:
        add("loader", "gpu_memory", f"peak GPU memory <= {lq.gpu_memory_limit_mb} MB",
            gxe.ExpectColumnValuesToBeBetween, column="gpu_mem_peak_mb",
            max_value=lq.gpu_memory_limit_mb)
    add("loader", "loader_throughput", f"images/s >= {lq.min_images_per_sec}",
        gxe.ExpectColumnValuesToBeBetween, column="images_per_sec",
        min_value=lq.min_images_per_sec)
    add("loader", "loader_throughput", "images/s measured", gxe.ExpectColumnValuesToNotBeNull,
        column="images_per_sec")
    if not math.isnan(summary["read_mb_per_sec"]) or lq.min_read_mb_per_sec > 0:
        add("loader", "loader_throughput", f"read MB/s >= {lq.min_read_mb_per_sec}",
            gxe.ExpectColumnValuesToBeBetween, column="read_mb_per_sec",
            min_value=lq.min_read_mb_per_sec)
        add("loader", "loader_throughput", "read MB/s measured",
            gxe.ExpectColumnValuesToNotBeNull, column="read_mb_per_sec")
    return plans, not_run


# ----------------------------------------------------------------------------- running GX


def _context(docs_dir: Path):
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
        data_docs_sites={SITE_NAME: {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(docs_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }},
    )
    return gx.get_context(project_config=config, mode="ephemeral")


def _clear_site(docs_dir: Path) -> None:
    """Remove a previous run's pages so the site shows only this run's results."""
    for sub in ("validations", "expectations"):
        shutil.rmtree(docs_dir / sub, ignore_errors=True)
    (docs_dir / "index.html").unlink(missing_ok=True)


def _validate(frames: dict[str, pd.DataFrame], plans: list[_Planned], docs_dir: Path,
              run_name: str) -> dict[str, Any]:
    """Run one suite per frame with GX; build Data Docs; return frame → validation result."""
    import datetime

    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    docs_dir.mkdir(parents=True, exist_ok=True)
    _clear_site(docs_dir)
    ctx = _context(docs_dir)
    source = ctx.data_sources.add_pandas("recforge")
    run_id = RunIdentifier(run_name=run_name, run_time=datetime.datetime.now(datetime.UTC))
    results = {}
    for frame in dict.fromkeys(p.frame for p in plans):
        suite = ctx.suites.add(gx.ExpectationSuite(name=f"{SUITE_PREFIX}-{frame}"))
        for p in plans:
            if p.frame == frame:
                suite.add_expectation(p.expectation)
        batch = source.add_dataframe_asset(frame).add_batch_definition_whole_dataframe(frame)
        vd = ctx.validation_definitions.add(
            gx.ValidationDefinition(name=f"{SUITE_PREFIX}-{frame}", data=batch, suite=suite))
        result_format = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
        if frame in ROW_ID:
            result_format["unexpected_index_column_names"] = [ROW_ID[frame]]
        results[frame] = vd.run(batch_parameters={"dataframe": frames[frame]}, run_id=run_id,
                                result_format=result_format)
    ctx.build_data_docs(site_names=[SITE_NAME])
    return results


def _row_label(frame: str, df: pd.DataFrame, ref) -> str:
    """Name an unexpected row: GX gives ``{id column: value, checked columns: values}``."""
    if isinstance(ref, dict):
        id_col = ROW_ID.get(frame)
        ident = ref.get(id_col, "?")
        values = ", ".join(f"{k}={_short(v)}" for k, v in ref.items() if k != id_col)
        if frame == "records" and id_col in df:
            match = df.loc[df[id_col] == ident, "source_key"]
            if len(match):
                ident = f"{ident} {match.iloc[0]}"
        return f"{ident} [{values}]" if values else str(ident)
    if frame == "loader_batches":
        return f"batch {ref}"
    return str(ref)


def _short(v) -> str:
    text = f"{v:g}" if isinstance(v, float) else str(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _evidence_line(frame: str, df: pd.DataFrame, what: str, result) -> str:
    r = result.result or {}
    if result.exception_info and result.exception_info.get("raised_exception"):
        return f"{what}: error {result.exception_info.get('exception_message')}"[:MAX_TEXT]
    rows = r.get("partial_unexpected_index_list") or []
    if rows:
        shown = ", ".join(_row_label(frame, df, i) for i in rows[:MAX_EVIDENCE])
        n = r.get("unexpected_count", len(rows))
        return f"{what}: {n} of {r.get('element_count')} unexpected, e.g. {shown}"[:MAX_TEXT]
    if "observed_value" in r:
        return f"{what}: observed {r['observed_value']}"[:MAX_TEXT]
    vals = r.get("partial_unexpected_list") or []
    return f"{what}: unexpected {vals[:MAX_EVIDENCE]}"[:MAX_TEXT]


def _observed(name: str, frames: dict[str, pd.DataFrame], quality: QualitySpec,
              num_classes: int | None) -> str:
    """One short, human line per check, true whether it passed or failed."""
    rec = frames.get("records")
    if name == "decode":
        bad = int((rec["decode_status"] != "ok").sum())
        checked = int(rec["rec_status"].notna().sum())
        bad_rec = int((rec["rec_status"].notna() & (rec["rec_status"] != "ok")).sum())
        return (f"{bad} of {len(rec)} not ok in the manifest; {bad_rec} of {checked} re-read "
                "from the .rec failed")
    if name == "index":
        dup = int(rec.duplicated(["split", "key"]).sum())
        order = int((rec["offset_gap"] < 0).sum())
        mism = int((rec["offset"] != rec["idx_offset"]).sum()) if "idx_offset" in rec else "n/a"
        s = frames["splits"]
        counts = "; ".join(f"{r.split} {r.manifest_records:g}/{r.idx_entries:g}/"
                           f"{r.summary_records:g}" for r in s.itertuples())
        return (f"{dup} duplicate keys, {order} offsets out of order, {mism} .idx mismatches; "
                f"manifest/idx/summary: {counts}")
    if name == "labels":
        import pandas as pd

        lab = pd.to_numeric(rec["label"], errors="coerce")
        bad = int((~rec["label_is_integer"]).sum())
        if num_classes:
            bad += int(((lab < 0) | (lab >= num_classes)).sum())
        wrong = int((rec["class_name"] != rec["expected_class_name"]).sum()) \
            if "expected_class_name" in rec else 0
        return (f"{bad} labels outside the integers [0, {num_classes}); {wrong} class names "
                "disagree with classes.json")
    if name == "image_size":
        if rec.empty:
            return "no records"
        ch = sorted(int(c) for c in rec["channels"].dropna().unique())
        return (f"short side {rec['short_side'].min():g}..{rec['short_side'].max():g}, "
                f"height {rec['height'].min():g}..{rec['height'].max():g}, width "
                f"{rec['width'].min():g}..{rec['width'].max():g}, channels {ch}")
    if name == "sources":
        src = frames["sources"]
        if src.empty:
            return "no source manifest and no summary.json"
        if "listed_total" in src:
            r = src.iloc[0]
            return (f"listed {r['listed_total']} (summary.json) vs packed {r['packed']} + "
                    f"quarantined {r['quarantined']}")
        lost = int((src["accounted"] == 0).sum())
        twice = int((src["accounted"] > 1).sum())
        unlisted = int((~src["listed"]).sum())
        return (f"listed {int(src['listed'].sum())}, packed {int(src['packed'].sum())}, "
                f"quarantined {int(src['quarantined'].sum())}; {lost} unaccounted, {twice} "
                f"counted twice, {unlisted} not listed")
    if name == "class_balance":
        cls = frames["classes"]
        if cls.empty:
            return "no classes"
        lo, hi = cls.loc[cls["count"].idxmin()], cls.loc[cls["count"].idxmax()]
        return (f"smallest/largest = {cls['ratio_to_largest'].min():.3f} ({lo['class_name']} "
                f"{lo['count']:g} / {hi['class_name']} {hi['count']:g} {lo['unit']})")
    if name == "split_keys":
        n = int(rec.loc[rec["source_key_splits"] > 1, "source_key"].nunique())
        return f"{n} source keys in more than one split"
    if name == "split_content":
        n = int(rec.loc[rec["content_splits"] > 1, "source_sha256"].nunique())
        return f"{n} identical images (SHA-256) in more than one split"
    if name == "near_duplicates":
        hits = rec["near_dup_bits"].dropna()
        closest = f", closest {hits.min():g} bits" if len(hits) else ""
        return (f"{len(hits)} records with a near-duplicate in another split "
                f"(<= {quality.near_duplicate_hamming} bits){closest}")
    if name == "masks":
        missing = int(rec["mask_record_key"].isna().sum())
        size = int((rec["mask_size_ok"] == False).sum())  # noqa: E712  (None = no mask)
        key = int((rec["mask_record_key"].notna() & (rec["mask_record_key"] != rec["key"])).sum())
        return f"{missing} missing masks, {size} size mismatches, {key} key mismatches"
    lb, lsum = frames.get("loader_batches"), frames.get("loader")
    if name == "loader_dtype":
        return (f"{len(lb)} batches; types {sorted(lb['type'].dropna().unique())}, dtypes "
                f"{sorted(lb['dtype'].dropna().unique())}")
    if name == "loader_range":
        return f"values {lb['min'].min():g}..{lb['max'].max():g}"
    if name == "loader_shape":
        return (f"sample shapes {sorted(lb['sample_shape'].dropna().unique())}, batch sizes "
                f"{sorted({s[0] for s in lb['shape'].dropna()})}")
    if name == "gpu_memory":
        return f"peak {lsum['gpu_mem_peak_mb'].iloc[0]:g} MB"
    if name == "loader_throughput":
        ips, mbs = lsum["images_per_sec"].iloc[0], lsum["read_mb_per_sec"].iloc[0]
        return (f"{ips:.1f} images/s, " + ("read bandwidth not measured" if math.isnan(mbs)
                                           else f"{mbs:.1f} MB/s read"))
    return ""


def _special_evidence(name: str, frames: dict[str, pd.DataFrame]) -> list[str]:
    """Pairs are better evidence than rows for the split checks."""
    rec = frames.get("records")
    if rec is None:
        return []
    out: list[str] = []
    if name == "split_content":
        dup = rec[rec["content_splits"] > 1].groupby("source_sha256")
        for sha, g in list(dup)[:MAX_EVIDENCE]:
            out.append(f"sha256 {sha[:12]}…: " + ", ".join(
                f"{r.record} ({r.source_key})" for r in g.itertuples()))
    elif name == "near_duplicates" and "near_dup_bits" in rec:
        hits = rec[rec["near_dup_bits"].notna()].sort_values("near_dup_bits")
        seen = set()
        for r in hits.itertuples():
            pair = tuple(sorted([r.record, r.near_dup_of.split(" ")[0]]))
            if pair in seen:
                continue
            seen.add(pair)
            out.append(f"{r.record} ({r.source_key}) ~ {r.near_dup_of}: "
                       f"{r.near_dup_bits:g} bits")
            if len(out) == MAX_EVIDENCE:
                break
    elif name == "split_keys":
        for key, g in list(rec[rec["source_key_splits"] > 1].groupby("source_key"))[:MAX_EVIDENCE]:
            out.append(f"{key}: in " + ", ".join(g["record"]))
    return [s[:MAX_TEXT] for s in out]


def _summarise(frames, plans, results, not_run, quality, num_classes, skip=()) -> dict:
    checks: dict[str, dict] = {}
    by_check: dict[str, list] = {}
    for p in plans:
        res = results[p.frame]
        for r in res.results:
            if r.expectation_config.meta.get("what") == p.what and \
                    r.expectation_config.meta.get("check") == p.check:
                by_check.setdefault(p.check, []).append((p, r))
                break
    for c in CHECKS:
        if c.name in skip:
            continue
        sev = quality.severity_of(c.name)
        entry = {"item": c.item, "title": c.title, "severity": sev}
        pairs = by_check.get(c.name, [])
        if sev == "off":
            entry.update(status="off", success=None, observed="disabled in quality.severity",
                         evidence=[])
        elif not pairs:
            entry.update(status="not run", success=None,
                         observed=not_run.get(c.name, "no input for this check"), evidence=[])
        else:
            ok = all(r.success for _, r in pairs)
            failed = [(p, r) for p, r in pairs if not r.success]
            evidence = _special_evidence(c.name, frames) if failed else []
            evidence += [_evidence_line(p.frame, frames[p.frame], p.what, r) for p, r in failed]
            entry.update(
                status="passed" if ok else ("failed" if sev == "fail" else "warning"),
                success=ok, observed=_observed(c.name, frames, quality, num_classes)[:MAX_TEXT],
                evidence=evidence[:MAX_EVIDENCE], expectations=len(pairs),
                docs_page=f"validations/{SUITE_PREFIX}-{pairs[0][0].frame}")
            if c.name in not_run:
                entry["note"] = not_run[c.name]
        checks[c.name] = entry
    return checks


def _finish(checks: dict, docs_dir: Path, dataset: str | None, run_name: str) -> dict:
    # point each check at its validation page (relative to the site root)
    for entry in checks.values():
        page = entry.get("docs_page")
        if page:
            found = sorted((docs_dir / page).rglob("*.html"))
            entry["docs_page"] = found[0].relative_to(docs_dir).as_posix() if found else None
    failed = [n for n, e in checks.items() if e["status"] == "failed"]
    return {
        "ok": not failed, "dataset": dataset, "run": run_name,
        "failed": failed, "warned": [n for n, e in checks.items() if e["status"] == "warning"],
        "checks": checks, "data_docs": str(docs_dir / "index.html"),
    }


def run_checks(inputs: GateInputs, quality: QualitySpec | dict | None = None, *,
               docs_dir: str | Path, pack=None, task: str = "classification",
               loader_results: dict | None = None, dataset: str | None = None,
               run_name: str = "adhoc") -> dict:
    """Run every applicable suite on in-memory inputs; build Data Docs into ``docs_dir``."""
    quality = _as_quality(quality)
    frames = build_frames(inputs, quality, task)
    num_classes = (inputs.classes or {}).get("num_classes")
    plans, not_run = plan_expectations(frames, quality, pack, task, num_classes)
    if loader_results is not None:
        frames.update(loader_frames(loader_results))
        lp, lnr = plan_loader_expectations(frames, quality)
        plans += lp
        not_run.update(lnr)
    else:
        for name in LOADER_CHECKS:
            not_run[name] = "no loader benchmark results (bench.json) given"
    docs_dir = Path(docs_dir)
    results = _validate(frames, plans, docs_dir, run_name)
    checks = _summarise(frames, plans, results, not_run, quality, num_classes)
    out = _finish(checks, docs_dir, dataset, run_name)
    log.info("quality gate %s: %s; failed %s, warned %s", run_name,
             "passed" if out["ok"] else "FAILED", out["failed"], out["warned"])
    return out


def run_loader_checks(results: dict, quality: QualitySpec | dict | None = None, *,
                      docs_dir: str | Path, dataset: str | None = None,
                      run_name: str = "adhoc") -> dict:
    """Items 6-10 alone, on the loader benchmark's results dict (see :func:`loader_frames`)."""
    quality = _as_quality(quality)
    frames = loader_frames(results)
    plans, not_run = plan_loader_expectations(frames, quality)
    docs_dir = Path(docs_dir)
    gx_results = _validate(frames, plans, docs_dir, run_name)
    skip = [c.name for c in CHECKS if c.name not in LOADER_CHECKS]
    checks = _summarise(frames, plans, gx_results, not_run, quality, None, skip=skip)
    return _finish(checks, docs_dir, dataset, run_name)


def _as_quality(quality) -> QualitySpec:
    if quality is None:
        return QualitySpec()
    if isinstance(quality, QualitySpec):
        return quality
    if isinstance(quality, dict):
        return QualitySpec.model_validate(quality)
    return QualitySpec.model_validate(quality.model_dump())


def run_quality_gate(prefix: str, quality: QualitySpec | dict | None = None, *,
                     docs_dir: str | Path, source_manifest: str | list[dict] | None = None,
                     pack=None, task: str = "classification",
                     loader_results: dict | None = None, dataset: str | None = None,
                     run_name: str = "adhoc") -> dict:
    """The gate on a dataset prefix (a run's ``out/`` or a published version, local or S3).

    Reads the manifest, quarantine, summary, classes and ``.idx`` files, re-reads a sample of
    records from the ``.rec`` files (``quality.decode_sample``), runs the suites and writes
    Data Docs into ``docs_dir``. Returns the small result dict; never raises on a failed
    check — call :func:`enforce` for that.
    """
    import pandas as pd

    quality = _as_quality(quality)
    inputs = load_inputs(prefix, source_manifest)
    rec = pd.DataFrame(inputs.records)
    if quality.decode_sample != 0 and not rec.empty and inputs.rec_uris:
        rec = verify_records(rec, inputs.rec_uris, quality.decode_sample)
        inputs.records = rec.to_dict("records")
    result = run_checks(inputs, quality, docs_dir=docs_dir, pack=pack, task=task,
                        loader_results=loader_results, dataset=dataset, run_name=run_name)
    result["prefix"] = prefix
    return result


def enforce(result: dict, ti=None) -> dict:
    """Raise :class:`QualityGateFailed` if a ``fail`` check failed; else return the result.

    With an Airflow task instance ``ti``, first push the result as XCom ``quality``, so the
    failure callback finds it even where the callback context carries no exception.
    """
    if ti is not None:
        ti.xcom_push(key=RESULT_XCOM_KEY, value=result)
    if not result["ok"]:
        raise QualityGateFailed(result)
    return result


# ----------------------------------------------------------------------------- Data Docs


def upload_data_docs(docs_dir: str | Path, dest_uri: str, threads: int = 8) -> str:
    """Copy a built Data Docs site to ``dest_uri`` (S3 or local); returns its index.html URI.

    HTML and CSS get their content types, so an S3 website or a presigned link renders them.
    """
    from concurrent.futures import ThreadPoolExecutor

    from recforge import storage

    root = Path(docs_dir)
    if not (root / "index.html").exists():
        raise FileNotFoundError(f"{root}/index.html does not exist: build the Data Docs first "
                                "(run_quality_gate writes them into docs_dir)")
    files = sorted(p for p in root.rglob("*") if p.is_file())

    def put(path: Path) -> None:
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        storage.put_bytes(storage.join(dest_uri, path.relative_to(root).as_posix()),
                          path.read_bytes(), ctype)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, files))
    index = storage.join(dest_uri, "index.html")
    log.info("quality: Data Docs (%d files) uploaded to %s", len(files), index)
    return index


def run_and_upload(prefix: str, quality: QualitySpec | dict | None = None, *, docs_uri: str,
                   **kwargs) -> dict:
    """The one call for a pipeline task: gate ``prefix``, upload Data Docs to ``docs_uri``.

    Also writes the result as ``<docs_uri>/quality.json``. With ``docs_uri`` under the run's
    ``out/`` (e.g. ``out/quality``), publish copies the site next to the dataset version.
    Returns the result with ``data_docs_uri`` set; raises nothing on failed checks (see
    :func:`enforce`).
    """
    from recforge import storage

    with tempfile.TemporaryDirectory(prefix="recforge-docs-") as tmp:
        result = run_quality_gate(prefix, quality, docs_dir=tmp, **kwargs)
        result["data_docs_uri"] = upload_data_docs(tmp, docs_uri)
    result["data_docs"] = result["data_docs_uri"]
    storage.write_json(storage.join(docs_uri, "quality.json"), result)
    return result


# ----------------------------------------------------------------------------- CLI


STATUS_MARK = {"passed": "ok", "failed": "FAIL", "warning": "warn", "not run": "-", "off": "off"}


def format_table(result: dict) -> str:
    """The checklist as a plain-text table, one row per check, evidence under failures."""
    lines = [f"{'item':<5} {'check':<18} {'severity':<8} {'status':<8} observed"]
    for name, e in result["checks"].items():
        lines.append(f"{e['item']:<5} {name:<18} {e['severity']:<8} "
                     f"{STATUS_MARK.get(e['status'], e['status']):<8} {e['observed']}")
        if e["status"] in ("failed", "warning"):
            lines.extend(f"{'':<42}- {ev}" for ev in e.get("evidence", []))
    lines.append(f"Data Docs: {result.get('data_docs_uri') or result.get('data_docs')}")
    lines.append("quality gate passed" + (f" with warnings: {', '.join(result['warned'])}"
                                          if result["warned"] else "")
                 if result["ok"] else f"quality gate FAILED: {', '.join(result['failed'])}")
    return "\n".join(lines)


def _spec_parts(args) -> tuple[QualitySpec, Any, str, str | None]:
    """quality, pack, task and dataset name from --spec, else from a version's manifest.json."""
    from recforge import storage

    if args.spec:
        from recforge.spec import load_spec

        spec = load_spec(args.spec)
        return (_as_quality(getattr(spec, "quality", None)), spec.pack, spec.task, spec.name)
    manifest_uri = storage.join(args.prefix, "manifest.json")
    if storage.exists(manifest_uri):
        spec = storage.read_json(manifest_uri).get("spec") or {}
        return (_as_quality(spec.get("quality")), spec.get("pack"),
                spec.get("task", "classification"), spec.get("name"))
    log.warning("no --spec and no manifest.json under %s: pack options unknown, so image "
                "sizes are checked for channels and >= 1 only", args.prefix)
    return QualitySpec(), None, "classification", None


def _check(args) -> int:
    quality, pack, task, name = _spec_parts(args)
    task = args.task or task
    loader_results = None
    if args.loader_results:
        from recforge import storage

        loader_results = storage.read_json(args.loader_results)
    docs = Path(args.docs) if args.docs else Path(tempfile.mkdtemp(prefix="recforge-docs-"))
    result = run_quality_gate(args.prefix, quality, docs_dir=docs,
                              source_manifest=args.source_manifest, pack=pack, task=task,
                              loader_results=loader_results, dataset=name,
                              run_name=args.run_name)
    if args.upload_docs:
        result["data_docs_uri"] = upload_data_docs(docs, args.upload_docs)
    print(json.dumps(result, indent=2, default=str) if args.json else format_table(result))
    return 0 if result["ok"] else 1


def register(sub) -> None:
    p = sub.add_parser("check", help="run the quality checklist (Great Expectations) on a "
                       "packed dataset and build Data Docs")
    p.add_argument("prefix", help="a run's out/ prefix or a published version "
                   "(s3://... or a local folder with records.jsonl)")
    p.add_argument("--spec", help="dataset spec YAML for thresholds and pack options "
                   "(default: manifest.json of a published version)")
    p.add_argument("--source-manifest", help="the run's ingest/source_manifest.jsonl, for the "
                   "per-object accounting (default: source_manifest.jsonl under PREFIX, else "
                   "the totals in summary.json)")
    p.add_argument("--loader-results", help="the loader benchmark's bench.json (items 6-10)")
    p.add_argument("--task", choices=["classification", "segmentation"])
    p.add_argument("--docs", help="folder for the Data Docs site (default: a temp folder)")
    p.add_argument("--upload-docs", help="also copy the Data Docs site to this URI")
    p.add_argument("--run-name", default="cli", help="name of this validation run in Data Docs")
    p.add_argument("--json", action="store_true", help="print the result dict as JSON")
    p.set_defaults(func=_check)


def iter_failed(result: dict) -> Iterable[tuple[str, dict]]:
    """(name, check) for failed and warned checks, failures first (for alerts)."""
    for status in ("failed", "warning"):
        for name, e in result.get("checks", {}).items():
            if e.get("status") == status:
                yield name, e
