"""Running GX: one suite per frame in an ephemeral context, Data Docs, and the result dict.

Why no GX ``Checkpoint``: a Checkpoint passes one ``batch_parameters`` to all its validation
definitions, but each suite here runs on its own in-memory dataframe; so each
``ValidationDefinition`` runs with its dataframe under one run id and Data Docs are built
once at the end. The context is ephemeral (no ``gx/`` folder): the suites are planned in
:mod:`recforge.quality.suites`, the evidence lives in the Data Docs site. The helpers below
turn GX's validation results into each check's status, one observed line and a few evidence
lines, kept short so the result dict stays small.
"""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recforge.quality.docs_site import TABLE_LEVEL, SuitePage, finish_site
from recforge.spec.quality import CHECKS, EACH_SPLIT, QualitySpec

if TYPE_CHECKING:
    import pandas as pd

    from recforge.quality.suites import Planned

log = logging.getLogger(__name__)

SITE_NAME = "recforge"
MAX_EVIDENCE = 5
MAX_TEXT = 240  # characters per observed value or evidence line (the result stays small)
SUITE_PREFIX = "checklist"
# the column(s) that name a row in each frame: shown for unexpected rows in Data Docs (an
# object of a detection record is named by its record's split and key and its place in the
# label: numbers, not one string per object)
ROW_ID: dict[str, str | tuple[str, ...]] = {
    "records": "record", "sources": "source_key", "classes": "class", "splits": "split",
    "objects": ("split", "key", "object"), "class_names": "class_name"}


def _row_id_columns(frame: str | None) -> list[str]:
    cols = ROW_ID.get(frame) if frame is not None else None
    return [] if cols is None else [cols] if isinstance(cols, str) else list(cols)


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


class Validations:
    """One ephemeral context and run id whose suites run in steps (:meth:`run`, once per
    group of frames) and whose Data Docs are built once (:meth:`build_docs`): the gate runs
    the dataset's suites while the loader benchmark beside it is still measuring, and the
    loader's suites once its results arrive, all in one site under one run."""

    def __init__(self, docs_dir: Path, run_name: str):
        import datetime

        from great_expectations.core.run_identifier import RunIdentifier

        self.docs_dir = docs_dir
        docs_dir.mkdir(parents=True, exist_ok=True)
        _clear_site(docs_dir)
        self.ctx = _context(docs_dir)
        self.source = self.ctx.data_sources.add_pandas("recforge")
        self.run_id = RunIdentifier(run_name=run_name,
                                    run_time=datetime.datetime.now(datetime.UTC))

    def run(self, frames: dict[str, pd.DataFrame], plans: list[Planned]) -> dict[str, Any]:
        """Run one suite per frame that ``plans`` name (each frame once per session);
        returns frame → validation result."""
        import great_expectations as gx

        results = {}
        for frame in dict.fromkeys(p.frame for p in plans):
            suite = self.ctx.suites.add(gx.ExpectationSuite(name=f"{SUITE_PREFIX}-{frame}"))
            for p in plans:
                if p.frame == frame:
                    suite.add_expectation(p.expectation)
            batch = self.source.add_dataframe_asset(frame) \
                .add_batch_definition_whole_dataframe(frame)
            vd = self.ctx.validation_definitions.add(
                gx.ValidationDefinition(name=f"{SUITE_PREFIX}-{frame}", data=batch,
                                        suite=suite))
            result_format = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
            if frame in ROW_ID:
                result_format["unexpected_index_column_names"] = _row_id_columns(frame)
            data = _checked_columns(frames[frame], [p for p in plans if p.frame == frame])
            results[frame] = vd.run(batch_parameters={"dataframe": data}, run_id=self.run_id,
                                    result_format=result_format)
            del data
        return results

    def build_docs(self) -> None:
        self.ctx.build_data_docs(site_names=[SITE_NAME])


def validate_plans(frames: dict[str, pd.DataFrame], plans: list[Planned], docs_dir: Path,
                   run_name: str) -> dict[str, Any]:
    """Run one suite per frame with GX; build Data Docs; return frame → validation result."""
    session = Validations(docs_dir, run_name)
    results = session.run(frames, plans)
    session.build_docs()
    return results


def _checked_columns(df: pd.DataFrame, plans: list[Planned]) -> pd.DataFrame:
    """Only the columns the frame's expectations read (and its row id): GX copies the frame
    it validates per metric and scans its columns per unexpected row, so at ImageNet size
    every column it does not check costs time and memory."""
    needed = set()
    for p in plans:
        e = p.expectation
        needed |= {getattr(e, a, None) for a in ("column", "column_A", "column_B")}
        needed |= set(getattr(e, "column_list", None) or ())
    frame = plans[0].frame if plans else None
    needed |= set(_row_id_columns(frame))
    cols = [c for c in df.columns if c in needed]
    return df if len(cols) == len(df.columns) else df[cols]


def _row_label(frame: str, df: pd.DataFrame, ref) -> str:
    """Name an unexpected row: GX gives ``{id column: value, checked columns: values}``."""
    if isinstance(ref, dict):
        if frame == "objects":  # train/12 object 0: the record and the object's row in its label
            ids = ("split", "key", "object")
            ident = f"{ref.get('split', '?')}/{ref.get('key', '?')} object {ref.get('object', '?')}"
            values = ", ".join(f"{k}={_short(v)}" for k, v in ref.items() if k not in ids)
            return f"{ident} [{values}]" if values else ident
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
        n = r.get("unexpected_count", len(rows))
        head = f"{what}: {n} of {r.get('element_count')} unexpected, e.g. "
        shown: list[str] = []
        for label in (_row_label(frame, df, i) for i in rows[:MAX_EVIDENCE]):
            if shown and len(head) + len(", ".join([*shown, label])) + 5 > MAX_TEXT:
                break  # whole items only: never cut one in the middle
            shown.append(label)
        more = ", …" if len(shown) < min(len(rows), MAX_EVIDENCE) or n > len(shown) else ""
        return (head + ", ".join(shown) + more)[:MAX_TEXT]
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
    if name == "labels" and "objects" in frames:
        return _observed_boxes(rec, frames["objects"], num_classes)
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
                    f"quarantined {r['quarantined']} + used or not used {r['used']}")
        lost = int((src["accounted"] == 0).sum())
        twice = int((src["accounted"] > 1).sum())
        unlisted = int((~src["listed"]).sum())
        used = int(src["used"].sum()) if "used" in src else 0
        not_used = int(src["not_used"].sum()) if "not_used" in src else 0
        return (f"listed {int(src['listed'].sum())}, packed {int(src['packed'].sum())}, "
                f"quarantined {int(src['quarantined'].sum())}"
                + (f", {used} annotation files used" if used else "")
                + (f", {not_used} not used (set aside, not bad data)" if not_used else "")
                + f"; {lost} unaccounted, {twice} counted twice, {unlisted} not listed")
    if name == "class_balance":
        return _observed_balance(frames["classes"], quality)
    if name == "class_name_case":
        return _observed_case(frames["class_names"])
    if name == "split_keys":
        n = int(rec.loc[rec["source_key_splits"] > 1, "source_key"].nunique())
        return f"{n} source keys in more than one split"
    if name == "split_content":
        n = len(rec.loc[rec["content_splits"] > 1, ["sha_hi", "sha_lo"]].drop_duplicates())
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
    if name == "objects_per_image":
        n = rec["label_objects"].dropna()
        if n.empty:
            return "no records with a readable label"
        empty = int((n == 0).sum())
        return (f"objects per image {n.min():g}..{n.max():g} (mean {n.mean():.2f}); {empty} of "
                f"{len(n)} images without an object ({empty / len(n):.1%}, at most "
                f"{quality.max_empty_share:.1%})")
    if name == "box_size":
        obj = frames["objects"]
        side, aspect = obj["box_min_side_px"].dropna(), obj["aspect"].dropna()
        if side.empty:
            return "no valid boxes"
        a = quality.max_box_aspect
        tiny = int((side < quality.min_box_side_px).sum())
        wide = int(((aspect < 1 / a) | (aspect > a)).sum())
        return (f"{tiny} of {len(side)} boxes under {quality.min_box_side_px:g} px "
                f"({tiny / len(side):.1%}), {wide} with aspect beyond {a:g} "
                f"({wide / len(side):.1%}); at most {quality.max_tiny_box_share:.1%} each; "
                f"smallest side {side.min():.3g} px")
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
        return _observed_throughput(lsum, quality)
    return ""


def _observed_throughput(lsum: pd.DataFrame, quality: QualitySpec) -> str:
    """Item 10's line: the rate against the floor the expectation holds it to."""
    from recforge.quality.suites import loader_floor

    ips, mbs = lsum["images_per_sec"].iloc[0], lsum["read_mb_per_sec"].iloc[0]
    floor = loader_floor(quality.loader.min_images_per_sec, lsum["floor_images_per_sec"].iloc[0])
    return (f"{ips:.1f} images/s" + (f" (floor {floor:g})" if floor else "") + ", "
            + ("read bandwidth not measured" if math.isnan(mbs) else f"{mbs:.1f} MB/s read"))


def _observed_case(class_names: pd.DataFrame) -> str:
    """Item 16's line: the groups of class names that differ only by case."""
    from recforge.quality.frames import case_twins

    groups = case_twins(list(class_names["class_name"]))
    if not groups:
        return f"{len(class_names)} class names, none equal to another but for case"
    return (f"{len(groups)} group(s) of class names that differ only by case: "
            + "; ".join(" / ".join(g) for g in groups))


def _observed_balance(cls: pd.DataFrame, quality: QualitySpec) -> str:
    """Item 11's line: smallest/largest class, of the worst split when each split is
    checked on its own (``class_balance_split: each``)."""
    if cls.empty:
        return "no classes"

    def line(part: pd.DataFrame, where: str) -> str:
        lo, hi = part.loc[part["count"].idxmin()], part.loc[part["count"].idxmax()]
        return (f"smallest/largest {where} = {part['ratio_to_largest'].min():.3f} "
                f"({lo['class_name']} {lo['count']:g} / {hi['class_name']} {hi['count']:g} "
                f"{lo['unit']})")

    if quality.class_balance_split != EACH_SPLIT:
        split = cls["split"].iloc[0]
        return line(cls, f"in {split}" if isinstance(split, str) else "in all splits")
    worst = cls.loc[cls["ratio_to_largest"].idxmin(), "split"]
    ratios = cls.groupby("split", sort=False)["ratio_to_largest"].min()
    return (line(cls[cls["split"] == worst], f"in {worst} (the worst split)") + "; per split "
            + ", ".join(f"{s} {r:.3f}" for s, r in ratios.items()))


def _observed_boxes(rec: pd.DataFrame, obj: pd.DataFrame, num_classes: int | None) -> str:
    """Item 3's line for detection: records whose label array is malformed, objects whose
    class or box is not valid."""
    import numpy as np

    layout = (rec["label_values"].notna() & rec["label_objects"].isna()) \
        | ~rec["label_padding_ok"].astype(bool)
    size = (rec["label_width"] != rec["width"]) | (rec["label_height"] != rec["height"])
    bad_layout = int(layout.sum())
    bad_size = int((size & rec["label_objects"].notna()).sum())
    cls = obj["class_id"].to_numpy(np.float32)
    bad_cls = ~(cls == np.floor(cls)) | (cls < 0)
    if num_classes:
        bad_cls |= cls >= num_classes
    bad_box = int(obj["box_min_side_px"].isna().sum())
    return (f"{bad_layout} of {len(rec)} label arrays malformed, {bad_size} with another image "
            f"size; {int(bad_cls.sum())} of {len(obj)} objects with a class id outside "
            f"[0, {num_classes}), {bad_box} with a box not inside [0, 1] with xmin < xmax "
            "and ymin < ymax")


def _special_evidence(name: str, frames: dict[str, pd.DataFrame]) -> list[str]:
    """Pairs are better evidence than rows for the split checks."""
    rec = frames.get("records")
    if rec is None:
        return []
    out: list[str] = []
    if name == "split_content":
        dup = rec[rec["content_splits"] > 1].groupby(["sha_hi", "sha_lo"])
        for (hi, _), g in list(dup)[:MAX_EVIDENCE]:
            out.append(f"sha256 {int(hi):016x}"[:19] + "…: " + ", ".join(
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
    elif name == "class_name_case":
        from recforge.quality.frames import case_twins

        for group in case_twins(list(frames["class_names"]["class_name"]))[:MAX_EVIDENCE]:
            out.append(" / ".join(group) + ": one class each, differing only by case; "
                       "labels.case: lower makes them one class")
    elif name == "split_keys":
        for key, g in list(rec[rec["source_key_splits"] > 1].groupby("source_key"))[:MAX_EVIDENCE]:
            out.append(f"{key}: in " + ", ".join(g["record"]))
    return [s[:MAX_TEXT] for s in out]


def summarise_checks(frames, plans, results, not_run, quality, num_classes, skip=()) -> dict:
    """Check name → status, observed value and evidence, from the GX validation results."""
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


def _suite_pages(results: dict[str, Any]) -> list[SuitePage]:
    """Each suite's expectation results as the site needs them: (section, check, success) in
    GX's order (GX groups a validation page by ``kwargs.column``, else table-level)."""
    pages = []
    for frame, res in results.items():
        rows = []
        for r in res.results:
            cfg = r.expectation_config
            section = cfg.kwargs.get("column", TABLE_LEVEL) if cfg is not None else TABLE_LEVEL
            check = (cfg.meta or {}).get("check") if cfg is not None else None
            rows.append((str(section), check, bool(r.success)))
        pages.append(SuitePage(f"{SUITE_PREFIX}-{frame}", rows))
    return pages


def finish_result(checks: dict, docs_dir: Path, dataset: str | None, run_name: str,
                  results: dict[str, Any] | None = None, report_href: str | None = None
                  ) -> dict:
    """The result dict; with ``results`` (frame → GX validation result) also finish the Data
    Docs site: offline, a static index, warn-only suites shown as warnings, and every page
    linking to the dataset report at ``report_href`` (relative to the site's root), if given
    (:func:`recforge.quality.docs_site.finish_site`)."""
    # point each check at its validation page (relative to the site root)
    for entry in checks.values():
        page = entry.get("docs_page")
        if page:
            found = sorted((docs_dir / page).rglob("*.html"))
            entry["docs_page"] = found[0].relative_to(docs_dir).as_posix() if found else None
    failed = [n for n, e in checks.items() if e["status"] == "failed"]
    out = {
        "ok": not failed, "dataset": dataset, "run": run_name,
        "failed": failed, "warned": [n for n, e in checks.items() if e["status"] == "warning"],
        "checks": checks, "data_docs": str(docs_dir / "index.html"),
    }
    if results is not None:
        try:
            finish_site(docs_dir, checks, _suite_pages(results), dataset=dataset,
                        run_name=run_name, result=out, report_href=report_href)
        except Exception:  # the verdict stands; the site stays as GX built it
            log.exception("quality: could not finish the Data Docs site in %s", docs_dir)
    return out
