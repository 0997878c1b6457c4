"""The expectation plans: checklist items 1-16 as GX expectations, tagged with their check.

Each checklist item is one named check (``recforge.spec.quality.CHECKS``): an expectation or a
small group tagged ``meta.check``, with a severity from :class:`QualitySpec` (``fail`` blocks
publishing, ``warn`` is reported, ``off`` plans nothing). Items 6-10 check the loader
benchmark's results, which :func:`loader_frames` turns into two frames; items 14 and 15 and
the box half of item 3 check a detection dataset's ``objects`` frame. Planning only builds
the expectations (and says why a check is not run); :mod:`recforge.quality.gx` runs them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recforge.spec.quality import CHECK_BY_NAME, DETECTION_CHECKS, QualitySpec

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Planned:
    """One planned expectation: the frame it runs on and the checklist item it counts for."""

    frame: str
    check: str
    what: str  # one line for the evidence, e.g. "label in [0, 14)"
    expectation: Any


def _adder(plans: list[Planned], quality: QualitySpec):
    """``add(frame, check, what, ExpectationClass, **kwargs)``: one tagged expectation."""

    def add(frame: str, check: str, what: str, exp_cls, **kw) -> None:
        sev = quality.severity_of(check)
        if sev == "off":
            return
        c = CHECK_BY_NAME[check]
        plans.append(Planned(frame, check, what, exp_cls(
            **kw, severity="critical" if sev == "fail" else "warning",
            meta={"check": check, "item": c.item, "severity": sev, "what": what},
            notes=f"Checklist item {c.item} ({check}): {c.title}. {what}.")))

    return add


def _pack_value(pack, name: str, default):
    if pack is None:
        return default
    if isinstance(pack, dict):
        return pack.get(name, default)
    return getattr(pack, name, default)


def plan_expectations(frames: dict[str, pd.DataFrame], quality: QualitySpec, pack=None,
                      task: str = "classification", num_classes: int | None = None
                      ) -> tuple[list[Planned], dict[str, str]]:
    """The expectations per check (only those whose inputs exist) and why others are not run."""
    import great_expectations.expectations as gxe

    rec = frames["records"]
    plans: list[Planned] = []
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
    if "objects" in frames:
        _plan_detection_labels(add, rec, num_classes, not_run)
    else:
        add("records", "labels", "label present", gxe.ExpectColumnValuesToNotBeNull,
            column="label")
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
    _plan_class_names(add, frames, not_run)  # 16
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
    # 14, 15 objects per image, box size
    if "objects" in frames:
        _plan_detection_counts(add, quality)
    else:
        for name in DETECTION_CHECKS:
            not_run[name] = "not a detection dataset"
    return plans, not_run


def _plan_class_names(add, frames: dict[str, pd.DataFrame], not_run: dict[str, str]) -> None:
    """Item 16: no two names of classes.json differ only by case."""
    import great_expectations.expectations as gxe

    if frames.get("class_names") is None or frames["class_names"].empty:
        not_run["class_name_case"] = "no classes.json"
        return
    add("class_names", "class_name_case", "no other class name equal but for case",
        gxe.ExpectColumnValuesToBeInSet, column="same_but_case", value_set=[1])


def _share(share: float) -> float:
    """GX's ``mostly`` for "at most ``share`` of the rows may be unexpected"."""
    return round(1.0 - share, 12)


def _plan_detection_labels(add, rec: pd.DataFrame, num_classes: int | None,
                           not_run: dict[str, str]) -> None:
    """Item 3 for detection: each record's label array has recforge's layout
    (``recforge.format.detection_label``), and each object a known class and a box inside
    [0, 1] with xmin < xmax and ymin < ymax."""
    import great_expectations.expectations as gxe

    from recforge.format import detection_label as dl

    hw, ow = dl.HEADER_WIDTH, dl.OBJECT_WIDTH
    add("records", "labels", "label present", gxe.ExpectColumnValuesToNotBeNull,
        column="label_values")
    add("records", "labels", f"label header A = {hw}", gxe.ExpectColumnValuesToBeInSet,
        column="label_a", value_set=[hw])
    add("records", "labels", f"label header B = {ow}", gxe.ExpectColumnValuesToBeInSet,
        column="label_b", value_set=[ow])
    add("records", "labels", f"label is the header and whole objects ({hw} + {ow}k values, "
        "k >= 1)", gxe.ExpectColumnValuesToBeInSet, column="label_whole", value_set=[True])
    add("records", "labels", "label values finite", gxe.ExpectColumnValuesToBeInSet,
        column="label_finite", value_set=[True])
    add("records", "labels", "label width equals the record's width",
        gxe.ExpectColumnPairValuesToBeEqual, column_A="label_width", column_B="width",
        ignore_row_if="either_value_is_missing")
    add("records", "labels", "label height equals the record's height",
        gxe.ExpectColumnPairValuesToBeEqual, column_A="label_height", column_B="height",
        ignore_row_if="either_value_is_missing")
    add("records", "labels", "a padding row of -1s only in an image without objects",
        gxe.ExpectColumnValuesToBeInSet, column="label_padding_ok", value_set=[True])
    if "num_objects" in rec.columns:
        add("records", "labels", "num_objects equals the objects in the label",
            gxe.ExpectColumnPairValuesToBeEqual, column_A="num_objects",
            column_B="label_objects", ignore_row_if="either_value_is_missing")
    add("objects", "labels", "class id is an integer", gxe.ExpectColumnValuesToBeInSet,
        column="class_id_is_integer", value_set=[True])
    if num_classes:
        add("objects", "labels", f"class id in [0, {num_classes})",
            gxe.ExpectColumnValuesToBeBetween, column="class_id", min_value=0,
            max_value=num_classes - 1)
    else:
        add("objects", "labels", "class id >= 0", gxe.ExpectColumnValuesToBeBetween,
            column="class_id", min_value=0)
        not_run["labels"] = "no classes.json: class ids >= 0 only, range not checked"
    for col in ("xmin", "ymin", "xmax", "ymax"):
        add("objects", "labels", f"{col} in [0, 1]", gxe.ExpectColumnValuesToBeBetween,
            column=col, min_value=0, max_value=1)
    add("objects", "labels", "xmax > xmin", gxe.ExpectColumnPairValuesAToBeGreaterThanB,
        column_A="xmax", column_B="xmin", or_equal=False)
    add("objects", "labels", "ymax > ymin", gxe.ExpectColumnPairValuesAToBeGreaterThanB,
        column_A="ymax", column_B="ymin", or_equal=False)
    add("objects", "labels", "difficult is 0 or 1", gxe.ExpectColumnValuesToBeInSet,
        column="difficult", value_set=[0, 1])


def _plan_detection_counts(add, quality: QualitySpec) -> None:
    """Items 14 and 15: objects per image, negatives, tiny and extreme boxes."""
    import great_expectations.expectations as gxe

    lo, hi = quality.min_objects_per_image, quality.max_objects_per_image
    add("records", "objects_per_image", f"objects per image in [{lo}, {hi}]",
        gxe.ExpectColumnValuesToBeBetween, column="label_objects", min_value=lo, max_value=hi)
    empty = quality.max_empty_share
    add("records", "objects_per_image", f"images without an object <= {empty:g} of all",
        gxe.ExpectColumnValuesToBeBetween, column="label_objects", min_value=1,
        mostly=_share(empty))
    px, tiny, aspect = quality.min_box_side_px, quality.max_tiny_box_share, quality.max_box_aspect
    add("objects", "box_size", f"boxes under {px:g} px wide or high <= {tiny:g} of all",
        gxe.ExpectColumnValuesToBeBetween, column="box_min_side_px", min_value=px,
        mostly=_share(tiny))
    add("objects", "box_size", f"box aspect (w/h) beyond [1/{aspect:g}, {aspect:g}] <= "
        f"{tiny:g} of all", gxe.ExpectColumnValuesToBeBetween, column="aspect",
        min_value=1 / aspect, max_value=aspect, mostly=_share(tiny))


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
    """``recforge.bench.benchmark``'s ``bench.json`` → the loader results items 6-10 check.

    Batches come from the benchmark's untimed value-check pass (every batch of one epoch);
    throughput from its best measured setting; the floors from those the benchmark was
    gated by (``bench.floors``: its environment's), which the checklist holds it to beside
    the spec's ``quality.loader`` floors."""
    s = bench.get("summary", {})
    per_batch = (bench.get("value_check") or {}).get("per_batch") or []
    peak = s.get("gpu_memory_peak_bytes")
    floors = (bench.get("floors") or {}).get("values") or {}
    return {
        "batches": [{"type": "NDArray", "dtype": b["dtype"], "shape": b["shape"],
                     "min": b["min"], "max": b["max"]} for b in per_batch],
        "images_per_sec": s.get("images_per_sec"),
        "read_mb_per_sec": s.get("read_mb_per_sec"),
        "gpu_mem_peak_mb": None if peak is None else peak / 1e6,
        "device": s.get("device", (bench.get("device") or {}).get("kind", "cpu")),
        "min_images_per_sec": floors.get("min_images_per_sec"),
        "min_read_mb_per_sec": floors.get("min_read_mb_per_sec"),
    }


def loader_frames(results: dict) -> dict[str, pd.DataFrame]:
    """The loader benchmark's results → a per-batch table and a one-row summary table.

    ``results`` keys: ``batches`` (list of :func:`describe_batch` dicts), ``images_per_sec``,
    ``read_mb_per_sec``, ``gpu_mem_peak_mb`` (null on CPU), ``device`` ("cpu"/"gpu"), and
    optionally the benchmark's own floors ``min_images_per_sec`` / ``min_read_mb_per_sec``.
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
        "floor_images_per_sec": _num(results.get("min_images_per_sec")),
        "floor_read_mb_per_sec": _num(results.get("min_read_mb_per_sec")),
    }])
    return {"loader_batches": batches, "loader": summary}


def loader_floor(spec_floor: float, bench_floor: float) -> float:
    """The floor the checklist holds the loader to: the higher of the spec's
    ``quality.loader`` floor and the one the benchmark was gated by (NaN: none) — the floor
    the report draws, so the Data Docs and the report name one number."""
    return max(spec_floor, 0.0 if math.isnan(bench_floor) else bench_floor)


def _num(v) -> float:
    return float(v) if v is not None else float("nan")


def plan_loader_expectations(frames: dict[str, pd.DataFrame], quality: QualitySpec
                             ) -> tuple[list[Planned], dict[str, str]]:
    import great_expectations.expectations as gxe

    lq = quality.loader
    plans: list[Planned] = []
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
    ips_floor = loader_floor(lq.min_images_per_sec, summary["floor_images_per_sec"])
    add("loader", "loader_throughput", f"images/s >= {ips_floor:g}",
        gxe.ExpectColumnValuesToBeBetween, column="images_per_sec", min_value=ips_floor)
    add("loader", "loader_throughput", "images/s measured", gxe.ExpectColumnValuesToNotBeNull,
        column="images_per_sec")
    mbs_floor = loader_floor(lq.min_read_mb_per_sec, summary["floor_read_mb_per_sec"])
    if not math.isnan(summary["read_mb_per_sec"]) or mbs_floor > 0:
        add("loader", "loader_throughput", f"read MB/s >= {mbs_floor:g}",
            gxe.ExpectColumnValuesToBeBetween, column="read_mb_per_sec", min_value=mbs_floor)
        add("loader", "loader_throughput", "read MB/s measured",
            gxe.ExpectColumnValuesToNotBeNull, column="read_mb_per_sec")
    return plans, not_run
