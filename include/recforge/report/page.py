"""The page: every section of the report, rendered to one self-contained HTML file."""

from __future__ import annotations

import logging
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from html import escape
from pathlib import Path

import numpy as np

from recforge import storage
from recforge.format import names
from recforge.quality.verdict import gate_status, gate_verdict
from recforge.report.advice import explain, severity_words
from recforge.report.charts import grouped_bars, histogram, line
from recforge.report.diff import SHOWN, diff_records
from recforge.report.images import (
    box_colors,
    box_thumbnail,
    data_uri,
    decode,
    draw_boxes,
    overlay,
    palette,
    payload_of,
    read_payload,
    span_of,
)
from recforge.report.inputs import Record, ReportInputs, load, read_contents
from recforge.report.objects import LARGE_PX, SMALL_PX, label_objects, sample
from recforge.report.origin import accounting, by_reason, split_origin, splits_from_source
from recforge.spec.dataset import IMAGE_EXTENSIONS
from recforge.spec.quality import CHECKS

log = logging.getLogger(__name__)
SAMPLES_PER_CLASS = 4
MAX_CLASSES_SHOWN = 40
MASK_SAMPLES = 8
NEAR_DUP_PAIRS = 12
PREFETCH_THREADS = 8  # ranged GETs of sampled records in flight at once
# bounded memory (~32 bytes a candidate): beyond it the section says so; the checklist owns
# the complete search
NEAR_DUP_MAX_CANDIDATES = 5_000_000
QUARANTINE_ROWS = 40
QUARANTINE_THUMBS = 20
# detection: per class this many records with their boxes, at this size (the page shows
# them two abreast); refused objects' source images fetched for a thumbnail at most
BOX_SAMPLES_PER_CLASS = 4
BOX_THUMB_PX = 192
NEGATIVE_SAMPLES = 4
PART_THUMBS = 20
# reasons whose source bytes are never decoded for a thumbnail (bombs, nothing to show)
NO_THUMBNAIL = {"too_many_pixels", "zero_bytes", "unsafe_key", "missing", "read_error",
                "unsupported_extension", "too_large", "hidden_file", "zero_size",
                "not_regular_file", "orphan_annotation", "image_missing"}
MAX_THUMBNAIL_SOURCE = 16 << 20
STATUS_CLASS = {"passed": "pass", "warning": "warn", "failed": "fail", "not run": "skip",
                "off": "skip"}
SECTIONS = (("summary", "Summary"), ("checklist", "Checklist"), ("charts", "Charts"),
            ("samples", "Samples"), ("masks", "Masks"), ("near-duplicates", "Near-duplicates"),
            ("quarantine", "Quarantine"), ("diff", "Changes"))
SEGMENTATION_ONLY = {"masks"}


def sections_for(segmentation: bool) -> tuple[tuple[str, str], ...]:
    """The sections a dataset's report has: ``Masks`` only for segmentation."""
    return tuple((sid, label) for sid, label in SECTIONS
                 if segmentation or sid not in SEGMENTATION_ONLY)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d2329;
background:#f6f7f9}header{background:#1d3557;color:#fff;padding:14px 24px}header h1{margin:0;
font-size:20px}header p{margin:4px 0 0;opacity:.85}nav{background:#fff;border-bottom:1px solid
#dde;padding:8px 24px;position:sticky;top:0}nav a{margin-right:14px;color:#1d3557;
text-decoration:none}section{background:#fff;margin:16px 24px;padding:14px 20px;border-radius:6px;
box-shadow:0 1px 2px #0001}h2{font-size:17px;margin:0 0 10px}table{border-collapse:collapse;
width:100%}td,th{border-bottom:1px solid #e5e7eb;padding:4px 8px;text-align:left;
vertical-align:top}th{background:#f3f4f6}.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#166534;font-weight:600}.warn{color:#b45309;font-weight:600}.fail{color:#b91c1c;
font-weight:700}.skip{color:#6b7280}.muted{color:#6b7280}.kv td:first-child{width:210px;
color:#4b5563}.sheet{display:grid;grid-template-columns:repeat(auto-fill,minmax(148px,1fr));
gap:10px}.sheet.classes{grid-template-columns:repeat(auto-fill,minmax(420px,1fr))}
.cls{border:1px solid #e5e7eb;border-radius:4px;padding:6px;min-width:0}.cls h3{font-size:13px;
margin:0 0 4px}.figs{display:grid;grid-template-columns:repeat(4,minmax(0,1fr));gap:6px}
figure{margin:0;min-width:0;text-align:center;font-size:11px;color:#4b5563}
figure .img{height:112px;display:flex;align-items:center;justify-content:center}
figure img{display:block;max-width:100%;max-height:112px}figure.big .img{height:224px}
figure.big img{max-height:224px}figcaption{margin-top:2px;line-height:1.3;
overflow-wrap:anywhere;display:-webkit-box;-webkit-line-clamp:3;-webkit-box-orient:vertical;
overflow:hidden}figure .at{position:relative;display:inline-block;max-width:100%}
.badge{position:absolute;top:0;left:0;font-size:10px;background:#1d3557cc;color:#fff;
padding:0 4px;border-radius:0 0 4px 0}
.pair{display:inline-grid;grid-template-columns:150px 150px;gap:6px;border:1px solid #e5e7eb;
padding:6px;margin:4px;border-radius:4px;vertical-align:top}.pair p{grid-column:1/3;margin:0;
font-size:12px;overflow-wrap:anywhere}
pre{background:#f3f4f6;padding:8px 10px;border-radius:4px;overflow-x:auto;font-size:12px;
margin:4px 0}.kv{table-layout:fixed}.kv td{overflow-wrap:anywhere}.nw{white-space:nowrap}
.banner{background:#fef2f2;border:1px solid #fecaca;color:#7f1d1d;
margin:16px 24px 0;padding:10px 16px;border-radius:6px}.advice{display:block;color:#374151;
margin-top:2px}svg .ax{stroke:#9ca3af;stroke-width:1}h3.sub{font-size:14px;margin:14px 0 6px}
.legend span{display:inline-block;margin:2px 8px 2px 0}.legend i{display:inline-block;width:12px;
height:12px;margin-right:4px;vertical-align:middle;border:1px solid #0003}
.swatch{display:inline-block;width:10px;height:10px;margin-right:5px;border:1px solid #0003}
.charts{display:flex;flex-wrap:wrap;gap:16px}svg .t{font-weight:600;font-size:13px}
.boxes .figs{grid-template-columns:repeat(2,minmax(0,1fr))}figure.box .img{height:192px}
figure.box img{max-height:192px}
svg .l{font-size:11px;fill:#374151}svg .v{font-size:10px;fill:#6b7280}code{font-size:12px}
"""


class _Records:
    """Ranged reads of sampled records, bounded by the next record's offset (found in a
    sorted offset array per split, so the index costs 8 bytes a record)."""

    def __init__(self, inputs: ReportInputs):
        self.inputs = inputs
        columns: dict[tuple[str, str], list[int]] = defaultdict(list)
        for r in inputs.records:
            for col in ("offset", "mask_offset"):
                if col in r:
                    columns[(r.get("split"), col)].append(r[col])
        self.sorted = {k: np.sort(np.asarray(v, dtype=np.int64)) for k, v in columns.items()}
        self.fetched: dict[tuple[str, int], bytes] = {}  # (split, offset) → framed bytes

    def _next(self, r: dict, col: str) -> int | None:
        offsets = self.sorted.get((r.get("split"), col))
        if offsets is None:
            return None
        i = int(np.searchsorted(offsets, r[col], side="right"))
        return int(offsets[i]) if i < len(offsets) else None

    def prefetch(self, records: list) -> None:
        """The records' framed bytes in a few coalesced reads per split (``storage.read_spans``),
        ``PREFETCH_THREADS`` at a time; :meth:`image` then slices them instead of one GET
        each. Each read's records are cut out in its thread, so only their bytes are kept."""
        by_split: dict[str, list] = defaultdict(list)
        for r in records:
            if "offset" in r and (r.get("split"), r["offset"]) not in self.fetched:
                by_split[r.get("split")].append(r)
        spans = [(split, self.inputs.rec_uri(split), r["offset"],
                  span_of(r["offset"], r["length"], self._next(r, "offset")))
                 for split, rows in by_split.items() for r in rows]

        def cut(members: list[int], got) -> list[tuple[tuple[str, int], bytes]]:
            if isinstance(got, Exception):  # image() reads it again, and says why
                log.debug("report: prefetch of %d records of %s failed: %s", len(members),
                          spans[members[0]][1], got)
                return []
            return [((spans[i][0], spans[i][2]), data)
                    for i, data in zip(members, got, strict=True)]

        for got in storage.read_spans([s[1:] for s in spans], cut, PREFETCH_THREADS):
            self.fetched.update(got)

    def image(self, r: dict) -> np.ndarray | None:
        try:
            framed = self.fetched.get((r.get("split"), r["offset"]))
            data = payload_of(framed) if framed is not None else None
            if data is None:
                data = read_payload(self.inputs.rec_uri(r["split"]), r["offset"],
                                    r["length"], self._next(r, "offset"))
            return decode(data)
        except Exception as exc:  # a thumbnail is worth less than the report
            log.warning("report: record %s/%s unreadable: %s", r.get("split"), r["key"], exc)
            return None

    def mask(self, r: dict) -> np.ndarray | None:
        if "mask_offset" not in r:
            return None
        try:
            data = read_payload(self.inputs.rec_uri(r["split"], mask=True),
                                       r["mask_offset"], r["mask_length"],
                                       self._next(r, "mask_offset"))
            return decode(data, 0)
        except Exception as exc:
            log.warning("report: mask %s/%s unreadable: %s", r.get("split"), r["key"], exc)
            return None


def _figure(uri: str | None, r, *, big: bool = False, split: bool = False,
            note: str = "", cls: str = "") -> str:
    """A thumbnail captioned with its source file (``class/…/name.jpg``); the record's
    split and key show on hover (with ``note``). ``split``: also name the split in the
    caption. ``cls``: the figure's class (``box``: a detection sample)."""
    name = r.get("source_key") or f"record {r.get('key')}"
    tip = f"{name}\nrecord {r.get('split')}/{r.get('key')}" + (f"\n{note}" if note else "")
    img = f'<img src="{uri}" alt="{escape(name)}">' if uri else '<span class="muted">—</span>'
    badge = f'<span class="badge">{escape(str(r.get("split")))}</span>' if split else ""
    shown = escape(name).replace("/", "/<wbr>")  # wrap at the folders first
    klass = " ".join(c for c in ("big" if big else "", cls) if c)
    attr = f' class="{klass}"' if klass else ""
    return (f'<figure{attr} title="{escape(tip)}"><div class="img">'
            f'<span class="at">{img}{badge}</span></div><figcaption>{shown}</figcaption>'
            "</figure>")


def _table(head: list[str], rows: list[list[str]], num: set[int] = frozenset()) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


# ---- sections -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Where:
    """Where the dataset the report describes lives: ``uri`` is the published version (the
    one the run publishes to, for a report built before publish) unless ``published`` is
    false; then it is the staging prefix, and ``blocked`` names the failed checks (if any)
    that kept it there."""

    uri: str
    published: bool
    blocked: tuple[str, ...] = ()

    @property
    def latest(self) -> str | None:
        """``latest.json`` of the dataset (it sits next to its versions)."""
        if not self.published:
            return None
        root = self.uri.rstrip("/").rsplit("/", 1)[0]
        return storage.join(root, names.LATEST)


def where_of(inp: ReportInputs, about: dict | None, from_version: bool) -> Where:
    about = about or {}
    if about.get("blocked"):
        return Where(inp.prefix, False, tuple(about["blocked"]))
    if from_version:
        return Where(inp.prefix, True)
    if about.get("uri"):
        return Where(about["uri"], True)
    return Where(inp.prefix, False)


def _load_snippet(inp: ReportInputs, where: Where) -> str:
    """How to read the version with MXNet: the split's .rec/.idx and the benchmark's
    recommended settings."""
    split = "train" if "train" in inp.splits or not inp.splits else inp.splits[0]
    rec, idx = names.rec(split), names.idx(split)
    opts = (inp.bench or {}).get("options") or {}
    rec_ = (inp.bench or {}).get("recommendation") or {}
    shape = tuple(opts.get("data_shape") or (3, 224, 224))
    batch = rec_.get("batch_size") or opts.get("batch_size") or 32
    if storage.is_s3(where.uri):
        fetch = (f"# MXNet reads local files: copy the split first\n"
                 f"aws s3 cp {storage.join(where.uri, rec)} .\n"
                 f"aws s3 cp {storage.join(where.uri, idx)} .\n\n")
        path_rec, path_idx = rec, idx
    else:
        fetch, path_rec, path_idx = "", storage.join(where.uri, rec), storage.join(where.uri, idx)
    if inp.detection:
        objs = inp.objects
        # a negative's label holds one padding row, so a label has at least one object row
        most = max(int(objs.per_record.max()) if len(objs.per_record) else 1, 1)
        pad = 4 + 6 * most  # format.detection_label: header 4, 6 values an object
        shape = tuple(opts.get("data_shape") or (3, 300, 300))
        code = (f"{fetch}import mxnet as mx\n"
                "# label: [4, 6, W, H, (class, xmin, ymin, xmax, ymax, difficult) ...]\n"
                f"# label_pad_width {pad} = 4 + 6 x {most}, the most objects in one image\n"
                f"{split} = mx.io.ImageDetRecordIter(\n"
                f'    path_imgrec="{path_rec}", path_imgidx="{path_idx}",\n'
                f"    data_shape={shape}, batch_size={batch}, shuffle=True,\n"
                f"    label_pad_width={pad})")
    elif inp.segmentation:
        code = (f"{fetch}# and {names.rec(split, mask=True)} / {names.idx(split, mask=True)} "
                "next to them\n"
                "from recforge.segmentation.dataset import SegmentationRecordDataset\n"
                f'ds = SegmentationRecordDataset("{path_rec}")  # (image, mask) pairs')
    else:
        threads = rec_.get("preprocess_threads")
        code = (f"{fetch}import mxnet as mx\n"
                f"{split} = mx.io.ImageRecordIter(\n"
                f'    path_imgrec="{path_rec}", path_imgidx="{path_idx}",\n'
                f"    data_shape={shape}, batch_size={batch}, shuffle=True"
                + (f", preprocess_threads={threads}" if threads else "") + ")")
    return f"<pre><code>{escape(code)}</code></pre>"


def _summary(inp: ReportInputs, where: Where) -> str:
    m = inp.manifest or {}
    spec = m.get("spec") or {}
    s = inp.summary
    sizes = [(r["width"], r["height"]) for r in inp.records if "width" in r]
    per_split = Counter(r.get("split") for r in inp.records)
    version = m.get("version")
    if where.blocked:
        version_row = f"{version or '—'}: NOT published (the quality gate failed)"
        location = (f"unpublished: {where.uri} — the quality gate failed "
                    f"({', '.join(where.blocked)}), so no version was published; this report "
                    "and the dataset stay in that folder, invisible to readers (no manifest), "
                    "until a later publish removes it")
    elif where.published:
        version_row, location = version or "—", where.uri
    else:
        version_row = version or "not published"
        location = f"{where.uri} (not a published version)"
    rows = [
        ("dataset", m.get("dataset") or (inp.quality or {}).get("dataset") or "—"),
        ("version", version_row),
        ("content id", m.get("content_id") or "—"),  # the run's (stages.split), not ours
        ("run", m.get("run_id") or (inp.quality or {}).get("run") or "—"),
        ("built", m.get("published_at") or (inp.bench or {}).get("created_at") or "—"),
        ("task", m.get("task") or ("detection" if inp.detection else "segmentation"
                                   if inp.segmentation else "classification")),
        ("source", (spec.get("source") or {}).get("uri", "—")),
        ("location", location),
        ("records", ", ".join(f"{k} {v:,}" for k, v in _in_split_order(per_split.items()))
         or "0"),
        ("splits", split_origin(spec) or "—"),
        ("classes", f"{len(inp.class_names):,}"),
        ("listed = packed + quarantined + not used", accounting(s) or "—"),
    ]
    if s.get("not_used"):
        rows.append(("not used (set aside, not bad data)",
                     f"{s['not_used']:,}: objects of the download that are no part of this "
                     f"dataset, listed in {names.NOT_USED} and under Quarantine"))
    if inp.detection:
        rows += _object_rows(inp)
    if sizes:
        ws, hs = sorted(w for w, _ in sizes), sorted(h for _, h in sizes)
        rows.append(("image size (W×H) min / median / max",
                     f"{ws[0]}×{hs[0]} / {ws[len(ws) // 2]}×{hs[len(hs) // 2]} / "
                     f"{ws[-1]}×{hs[-1]}"))
    pack = spec.get("pack")
    if pack:
        rows.append(("pack options", ", ".join(f"{k}={v}" for k, v in pack.items())))
    if where.published:
        rows += [("report", storage.join(where.uri, names.REPORT)),
                 ("Data Docs", storage.join(where.uri, names.QUALITY_DIR, "index.html")),
                 ("latest", f"{where.latest} (names the newest published version)")]
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    if where.published:
        body += (f"<tr><td>load it</td><td>{_load_snippet(inp, where)}"
                 + ('<span class="muted">s3:// links do not open in a browser: '
                    f"<code>recforge report {escape(where.uri)} --open</code> opens this "
                    "report.</span>" if storage.is_s3(where.uri) else "")
                 + "</td></tr>")
    return f'<table class="kv">{body}</table>'


def _by_reason(counts: dict) -> str:
    return by_reason(counts)


def _in_split_order(items):
    """(split, value) pairs in names.SPLITS order, any other split after them."""
    return sorted(items, key=lambda kv: (names.SPLITS.index(kv[0]) if kv[0] in names.SPLITS
                                         else len(names.SPLITS), str(kv[0])))


def _object_rows(inp: ReportInputs) -> list[tuple[str, str]]:
    """Summary rows of a detection dataset: its objects, negatives and refused objects."""
    objs, s = inp.objects, inp.summary
    negatives = len(objs.negatives())
    rows = [("objects", f"{objs.count:,} in {objs.images:,} images"
             + (f", {objs.difficult:,} of them difficult" if objs.difficult else "")),
            ("negatives (no object)", f"{negatives:,}")]
    if objs.unreadable:
        rows.append(("labels not in the detection layout", f"{objs.unreadable:,} records"))
    parts = [e for e in inp.quarantine if e.get("part")]
    refused = s.get("objects_quarantined", len(parts))
    by_reason = s.get("objects_quarantined_by_reason") or Counter(e.get("reason")
                                                                  for e in parts)
    rows.append(("objects quarantined", f"{refused:,}" + (f" ({_by_reason(by_reason)})"
                                                          if refused and by_reason else "")))
    return rows


def _checklist(inp: ReportInputs, docs_href: str | None) -> str:
    q = inp.quality
    if not q:
        return '<p class="muted">The checklist has not run for this prefix.</p>'
    verdict = gate_verdict(q, subject="")
    cls = STATUS_CLASS[gate_status(q)]
    rows = []
    from_source = splits_from_source((inp.manifest or {}).get("spec"))
    order = {c.name: i for i, c in enumerate(CHECKS)}
    for name, c in sorted(q.get("checks", {}).items(), key=lambda kv: order.get(kv[0], 99)):
        status = c.get("status", "")
        shown = {"passed": "pass", "warning": "warn", "failed": "fail"}.get(status, status)
        ev = "".join(f"<br><span class='muted'>{escape(e)}</span>"
                     for e in c.get("evidence", [])[:3]) if status in ("failed", "warning") \
            else ""
        if status in ("failed", "warning"):
            words = explain(name, status, c.get("severity", ""),
                            splits_from_source=from_source)
            ev += f'<span class="advice">{escape(words)}</span>'
        rows.append([escape(str(c.get("item", ""))), f"<b>{escape(name)}</b><br>"
                     f"<span class='muted'>{escape(c.get('title', ''))}</span>",
                     f'<span class="nw">{escape(severity_words(c.get("severity", "")))}</span>',
                     f'<span class="{STATUS_CLASS.get(status, "skip")} nw">{escape(shown)}</span>',
                     escape(str(c.get("observed", ""))) + ev])
    return (f'<p>Checklist <span class="{cls}">{escape(verdict)}</span>. Detailed evidence: '
            f'<a href="{escape(docs_href or names.QUALITY_DIR + "/index.html")}">Data Docs</a>.'
            "</p>"
            + _table(["item", "check", "if it fails", "status", "observed"], rows))


def _charts(inp: ReportInputs) -> str:
    out = []
    names_ = inp.class_names
    splits = sorted({r.get("split") for r in inp.records}, key=lambda s: names.SPLITS.index(s)
                    if s in names.SPLITS else 9)
    if inp.segmentation:
        pixels: Counter = Counter()
        for r in inp.records:
            for v, n in (r.get("class_pixels") or {}).items():
                pixels[int(v)] += n
        ignore = inp.classes.get("ignore_index")
        values = sorted(pixels)
        label = [names_[v] if v < len(names_) else ("ignore" if v == ignore else str(v))
                 for v in values]
        out.append(grouped_bars("pixels per class (all splits)", label,
                                       {"pixels": [pixels[v] for v in values]}))
    elif inp.detection:
        out.append(_object_charts(inp, splits))
    else:
        per = {s: Counter(r.get("class_name") for r in inp.records if r.get("split") == s)
               for s in splits}
        cats = names_ or sorted({r.get("class_name") for r in inp.records})
        shown = cats[:MAX_CLASSES_SHOWN * 5]
        out.append(grouped_bars(
            "records per class and split" + (f" (first {len(shown)} of {len(cats)} classes)"
                                             if len(shown) < len(cats) else ""),
            shown, {s: [per[s].get(c, 0) for c in shown] for s in splits}))
        out.append(class_counts_table("records", cats,
                                      {s: [per[s].get(c, 0) for c in cats] for s in splits}))
    short = [min(r["width"], r["height"]) for r in inp.records if "width" in r]
    aspect = [r["width"] / r["height"] for r in inp.records if r.get("height")]
    row = [histogram("image short side", short, unit=" px", x_label="short side (px)"),
           histogram("aspect ratio (W/H)", aspect, x_label="width / height")]
    out.append('<div class="charts">' + "".join(row) + "</div>")
    out.append(_loader(inp))
    return "".join(out)


def class_counts_table(unit: str, cats: list[str], per: dict[str, list[int]]) -> str:
    """Class counts per split as a table (the first ``MAX_CLASSES_SHOWN * 5`` classes), with
    each split's smallest / largest class ratio under it — the balance the checklist's
    ``class_balance`` checks per split with ``quality.class_balance_split: each``."""
    if not cats or not per:
        return ""
    splits = list(per)
    shown = cats[:MAX_CLASSES_SHOWN * 5]
    rows = [[escape(str(c)), *(f"{per[s][i]:,}" for s in splits)] for i, c in enumerate(shown)]

    def ratio(counts: list[int]) -> str:
        return f"{min(counts) / max(counts):.3f}" if counts and max(counts) else "—"

    rows.append(["<b>smallest / largest</b>", *(ratio(per[s]) for s in splits)])
    more = (f'<p class="muted">{len(cats) - len(shown):,} more classes not shown; the ratio '
            "counts every class.</p>" if len(shown) < len(cats) else "")
    return (f'<h3 class="sub">{escape(unit)} per class and split</h3>'
            + _table(["class", *splits], rows, set(range(1, len(splits) + 1))) + more)


def _object_charts(inp: ReportInputs, splits: list[str]) -> str:
    """Detection: objects per class and split (class balance by objects), objects per
    image, and box sizes in stored pixels and relative to the image."""
    objs = inp.objects
    names_ = inp.class_names
    ids = objs.class_ids
    n = max(len(names_), int(ids.max()) + 1 if len(ids) else 0)
    cats = [names_[i] if i < len(names_) else str(i) for i in range(n)]
    split_of = np.asarray([names.SPLITS.index(r.get("split")) if r.get("split") in names.SPLITS
                           else len(names.SPLITS) for r in inp.records], np.int64)
    object_split = split_of[objs.record] if objs.count else np.zeros(0, np.int64)
    per = {}
    for sp in splits:
        code = names.SPLITS.index(sp) if sp in names.SPLITS else len(names.SPLITS)
        per[sp] = np.bincount(ids[object_split == code], minlength=n)[:n].tolist()
    shown = cats[:MAX_CLASSES_SHOWN * 5]
    bars = grouped_bars(
        "objects per class and split" + (f" (first {len(shown)} of {len(cats)} classes)"
                                         if len(shown) < len(cats) else ""),
        shown, {sp: per[sp][:len(shown)] for sp in splits}) if n else \
        '<p class="muted">No object in any record.</p>'
    if n:
        bars += class_counts_table("objects", cats, per)
    side = objs.side_px()
    most = int(objs.per_record.max()) if len(objs.per_record) else 0
    readable = objs.size[:, 0] > 0
    row = [histogram("objects per image", objs.per_record[readable], bins=min(20, most + 1),
                     x_label="objects in the image (0: a negative)"),
           histogram("box size (stored pixels)", side, unit=" px", y_label="objects",
                     x_label="√(box area) in pixels of the stored image"),
           histogram("box size (relative)", objs.relative_side(), y_label="objects",
                     x_label="√(box area / image area)")]
    sizes = ""
    if objs.count:
        small, large = int((side < SMALL_PX).sum()), int((side > LARGE_PX).sum())
        sizes = (f'<p>Boxes by COCO\'s size classes (area in stored pixels): small '
                 f'(&lt; {SMALL_PX}²) <b>{small:,}</b>, medium <b>{objs.count - small - large:,}'
                 f'</b>, large (&gt; {LARGE_PX}²) <b>{large:,}</b>; median √area '
                 f'{float(np.median(side)):,.0f} px.</p>')
    return bars + sizes + '<div class="charts">' + "".join(row) + "</div>"


def _loader_runs(bench: dict, threads_label: str) -> tuple[str, list[tuple[int, dict]]]:
    """``(x axis label, [(threads or workers, run)])`` of one loader's sweep, by x."""
    runs = [r for r in bench.get("runs") or [] if r.get("images_per_sec") is not None]
    if any(r.get("num_workers") is not None for r in runs) or \
            "DataLoader" in str(bench.get("loader", "")):
        label = "DataLoader workers"
        xs = [r.get("num_workers", r.get("effective_threads")) for r in runs]
    else:
        label = threads_label
        xs = [r.get("effective_threads") or r.get("preprocess_threads") or 1 for r in runs]
    return label, sorted(zip((int(x or 0) for x in xs), runs, strict=True),
                         key=lambda p: p[0])


def _loader_block(title: str, bench: dict, threads_label: str, floor: float | None) -> str:
    """One loader's sweep: a table of every measured setting against the floor and the
    bare-decode rate, and (with two settings or more) img/s against threads as a line."""
    x_label, runs = _loader_runs(bench, threads_label)
    if not runs:
        return f'<p class="muted">{escape(title)}: no measured runs.</p>'
    summary = bench.get("summary") or {}
    bare = summary.get("bare_decode_images_per_sec") or \
        (bench.get("bare_decode") or {}).get("images_per_sec")
    picked = (bench.get("recommendation") or {}).get("preprocess_threads")
    rows = []
    for x, r in runs:
        ips = r["images_per_sec"]
        lat = r.get("latency_ms") or {}
        verdict = "" if not floor else (
            f'<span class="pass">above</span> ({ips / floor:.1f}× the floor)' if ips >= floor
            else '<span class="fail">below the floor</span>')
        rows.append([f"{x}" + (" (recommended)" if x == picked else ""), f"{ips:,.0f}",
                     f"{r['read_mb_per_sec']:,.1f}" if r.get("read_mb_per_sec") is not None
                     else "—",
                     f"{lat['p50']:,.0f} / {lat['p99']:,.0f}" if "p50" in lat and "p99" in lat
                     else "—",
                     f"{bare * max(x, 1):,.0f}" if bare else "—",
                     f"{ips / (bare * max(x, 1)):.0%}" if bare else "—", verdict])
    device = (bench.get("device") or {}).get("statement") or summary.get("device") or ""
    facts = []
    if floor:
        facts.append(f"floor: <b>{floor:,.0f} img/s</b> (the checklist's loader_throughput "
                     "fails below it)")
    if bare:
        facts.append(f"bare decode: <b>{bare:,.0f} img/s</b> per thread (records read and "
                     "decoded with no augmentation or batching: the most a thread can give)")
    head = [x_label, "img/s", "MB/s read", "latency p50 / p99 (ms)",
            "bare-decode bound (img/s)", "of the bound", "vs the floor"]
    if not floor:
        head, rows = head[:-1], [row[:-1] for row in rows]
    out = [f'<h3 class="sub">{escape(title)}</h3>',
           f'<p>{escape(str(bench.get("loader") or ""))}'
           + (f' <span class="muted">— {escape(device)}</span>' if device else "") + "</p>",
           "<p>" + "; ".join(facts) + ".</p>" if facts else "",
           _table(head, rows, {1, 2, 3, 4, 5})]
    if len({x for x, _ in runs}) > 1:
        refs = [("floor", floor)] if floor else []
        if bare:
            refs.append(("bare decode, 1 thread", bare))
        out.append(line(f"{title}: img/s by {x_label}",
                        [(x, r["images_per_sec"]) for x, r in runs], x_label, "images / s",
                        refs=refs))
    return "".join(out)


def _loader(inp: ReportInputs) -> str:
    bench = inp.bench or {}
    if not bench.get("runs"):
        return ('<div id="loader"><h3 class="sub">loader throughput</h3><p class="muted">No '
                "loader benchmark results (bench.json).</p></div>")
    spec_floor = ((((inp.manifest or {}).get("spec") or {}).get("quality") or {})
                  .get("loader") or {}).get("min_images_per_sec")

    def floor_of(b: dict) -> float | None:  # the benchmark's floor, or the checklist's
        own = ((b.get("floors") or {}).get("values") or {}).get("min_images_per_sec")
        return max(own or 0, spec_floor or 0) or None

    parts = [_loader_block("loader throughput", bench, "preprocess threads (effective)",
                           floor_of(bench))]
    for name, title, threads in (("dali", "DALI loader throughput", "DALI num_threads"),
                                 ("torch", "PyTorch loader throughput", "DataLoader workers")):
        other = bench.get(name) or {}
        if other.get("runs"):  # bench.loader: both / all — beside MXNet's
            parts.append(_loader_block(title, other, threads,
                                       floor_of(other) or floor_of(bench)))
    return f'<div id="loader">{"".join(parts)}</div>'


def _colors(inp: ReportInputs) -> np.ndarray:
    return box_colors(max(len(inp.class_names), 1), inp.classes.get("colors"))


def _objects_note(objects: np.ndarray, class_names: list[str]) -> str:
    """What a sample holds, for its hover text: ``3 objects: dog 2, person 1 (1 difficult)``."""
    if not len(objects):
        return "no object (a negative)"
    ids = Counter(int(c) for c in objects[:, 0])
    named = ", ".join(f"{class_names[c] if c < len(class_names) else c} {k}"
                      for c, k in sorted(ids.items()))
    hard = int((objects[:, 5] > 0).sum())
    return (f"{len(objects)} object{'s' if len(objects) != 1 else ''}: {named}"
            + (f" ({hard} difficult)" if hard else ""))


def _box_samples(inp: ReportInputs, reader: _Records, seed: int) -> str:
    """Detection: per class a few records holding one of its objects, every box of the record
    drawn in its class's colour (difficult ones dashed), then a few negatives."""
    objs = inp.objects
    names_ = inp.class_names
    colors = _colors(inp)
    rng = random.Random(seed)
    ids = objs.class_ids
    present = {int(c) for c in np.unique(ids)}
    order = [c for c in range(len(names_)) if c in present] + \
        sorted(c for c in present if c >= len(names_))
    shown = order[:MAX_CLASSES_SHOWN]
    holding = {c: objs.records_of_class(c) for c in shown}
    per_class = np.bincount(ids, minlength=max(present, default=0) + 1) if len(ids) else []
    picks = {c: sample(holding[c], BOX_SAMPLES_PER_CLASS, rng) for c in shown}
    negatives = sample(objs.negatives(), NEGATIVE_SAMPLES, rng)
    reader.prefetch([inp.records[i] for rows in picks.values() for i in rows]
                    + [inp.records[i] for i in negatives])

    def fig(i: int) -> str:
        r = inp.records[i]
        img = reader.image(r)
        boxes = objs.of_record(i)
        uri = data_uri(draw_boxes(img, boxes, colors, names_, BOX_THUMB_PX), BOX_THUMB_PX) \
            if img is not None else None
        return _figure(uri, r, split=r.get("split") != "train", cls="box",
                       note=_objects_note(boxes, names_))

    def name(c: int) -> str:
        return names_[c] if c < len(names_) else f"class id {c}"

    blocks = []
    for c in shown:
        blocks.append(f'<div class="cls"><h3><i class="swatch" style="background:rgb'
                      f'{tuple(int(x) for x in colors[c % len(colors)])}"></i>'
                      f'{escape(name(c))} <span class="muted">({int(per_class[c]):,} objects in '
                      f'{len(holding[c]):,} images)</span></h3><div class="figs">'
                      f'{"".join(fig(i) for i in picks[c])}</div></div>')
    if negatives:
        blocks.append(f'<div class="cls"><h3>no object <span class="muted">'
                      f'({len(objs.negatives()):,} negatives)</span></h3><div class="figs">'
                      f'{"".join(fig(i) for i in negatives)}</div></div>')
    absent = [n for i, n in enumerate(names_) if i not in present]
    notes = []
    if len(order) > len(shown):
        notes.append(f"{len(order) - len(shown)} more classes not shown.")
    if absent:
        notes.append("No object of " + ", ".join(absent[:SHOWN])
                     + (f" and {len(absent) - SHOWN} more" if len(absent) > SHOWN else "")
                     + " in any record.")
    legend = "".join(
        f'<span><i style="background:rgb{tuple(int(x) for x in colors[c % len(colors)])}"></i>'
        f"{escape(name(c))}</span>" for c in order)
    more = "".join(f'<p class="muted">{escape(t)}</p>' for t in notes)
    return ('<p class="muted">Random records holding an object of each class, with every box '
            "of the record drawn in its class's colour and named at its corner; difficult "
            "boxes are dashed. Captions are the source images; a badge marks records not in "
            "train, and hovering shows the split, record key and objects.</p>"
            f'<div class="legend">{legend}</div>'
            f'<div class="sheet classes boxes">{"".join(blocks)}</div>{more}')


def _samples(inp: ReportInputs, reader: _Records, seed: int) -> str:
    rng = random.Random(seed)
    if inp.detection:
        return _box_samples(inp, reader, seed)
    if inp.segmentation:
        pick = rng.sample(inp.records, min(MASK_SAMPLES, len(inp.records)))
        figs = []
        for r in pick:
            img = reader.image(r)
            figs.append(_figure(data_uri(img) if img is not None else None, r, split=True))
        return f'<div class="sheet">{"".join(figs)}</div>'
    by_class: dict[str, list[dict]] = defaultdict(list)
    for r in inp.records:
        by_class[r.get("class_name") or str(r.get("label"))].append(r)
    order = [c for c in inp.class_names if c in by_class] or sorted(by_class)
    shown = order[:MAX_CLASSES_SHOWN]
    picks = {c: rng.sample(by_class[c], min(SAMPLES_PER_CLASS, len(by_class[c])))
             for c in shown}  # the same draws as one class at a time
    reader.prefetch([r for rows in picks.values() for r in rows])
    blocks = []
    for c in shown:
        rows = by_class[c]
        figs = []
        for r in picks[c]:
            img = reader.image(r)
            figs.append(_figure(data_uri(img) if img is not None else None, r,
                                split=r.get("split") != "train"))
        blocks.append(f'<div class="cls"><h3>{escape(c)} <span class="muted">'
                      f'({len(rows):,} records)</span></h3><div class="figs">{"".join(figs)}'
                      "</div></div>")
    more = (f'<p class="muted">{len(order) - len(shown)} more classes not shown.</p>'
            if len(order) > len(shown) else "")
    return ('<p class="muted">Random records of each class, captioned with their source file; '
            "a badge marks those not in train, and hovering shows the split and record key.</p>"
            f'<div class="sheet classes">{"".join(blocks)}</div>{more}')


def _masks(inp: ReportInputs, reader: _Records, seed: int) -> str:
    if not inp.segmentation:  # the section is not shown (sections_for)
        return ""
    names_ = inp.class_names
    colors = palette(len(names_), inp.classes.get("colors"))
    ignore = inp.classes.get("ignore_index")
    rng = random.Random(seed + 1)
    figs = []
    seen: set[int] = set()
    for r in rng.sample(inp.records, min(MASK_SAMPLES, len(inp.records))):
        img, mask = reader.image(r), reader.mask(r)
        if img is None or mask is None:
            figs.append(_figure(None, r, big=True, split=True))
            continue
        seen |= {int(v) for v in np.unique(mask)}
        figs.append(_figure(data_uri(overlay(img, mask, colors, ignore), 224), r, big=True,
                            split=True))
    legend = "".join(
        f'<span><i style="background:rgb{tuple(int(x) for x in colors[v])}"></i>'
        f'{escape(names_[v] if v < len(names_) else str(v))}</span>'
        for v in sorted(seen) if v != ignore)
    return (f'<div class="legend">{legend}</div><div class="sheet" style="grid-template-'
            f'columns:repeat(auto-fill,minmax(236px,1fr))">{"".join(figs)}</div>'
            f'<p class="muted">Ignored pixels ({ignore}) are left unpainted.</p>')


def _near_duplicates(inp: ReportInputs, reader: _Records) -> str:
    from recforge import phash

    spec_q = ((inp.manifest or {}).get("spec") or {}).get("quality") or {}
    threshold = int(spec_q.get("near_duplicate_hamming", 4))
    by_split: dict[str, list[dict]] = defaultdict(list)
    for r in inp.records:
        h = r.get("phash")
        if isinstance(h, str) and len(h) == phash.HEX_DIGITS:
            by_split[r["split"]].append(r)
    pairs = []
    splits = sorted(by_split)
    try:
        for i, a in enumerate(splits):
            for b in splits[i + 1:]:
                ra, rb = by_split[a], by_split[b]
                ii, jj, dist = phash.near_pairs(phash.to_uint64([r["phash"] for r in ra]),
                                                phash.to_uint64([r["phash"] for r in rb]),
                                                threshold, NEAR_DUP_MAX_CANDIDATES)
                pairs += [(int(d), ra[x], rb[y]) for x, y, d in zip(ii, jj, dist, strict=True)]
    except ValueError as exc:  # too many candidates for a report: say so
        return f'<p class="muted">Near-duplicate search skipped: {escape(str(exc))}</p>'
    if not pairs:
        return (f'<p class="pass">No record has a near-duplicate in another split '
                f'(dHash within {threshold} bits).</p>')
    pairs.sort(key=lambda p: (p[0], p[1]["split"], p[1]["key"]))
    check = ((inp.quality or {}).get("checks") or {}).get("near_duplicates") or {}
    gate = {"fail": " The checklist blocks publish on them.",
            "warn": " The checklist warns about them: they do not block publish."}.get(
                check.get("severity"), "")
    if splits_from_source((inp.manifest or {}).get("spec")):
        gate += (" The splits are the source's own (splits.from: source): the pairs are "
                 "kept as the publisher ships them.")
    out = [f"<p>{len(pairs)} pair(s) of records in different splits whose perceptual hash "
           f"(dHash) differs in at most {threshold} bits: most likely one photo cropped, "
           "resized or re-encoded, so the model is validated on images it has nearly seen in "
           f"training.{gate} The closest {min(len(pairs), NEAR_DUP_PAIRS)}:</p>"]
    reader.prefetch([r for _, a, b in pairs[:NEAR_DUP_PAIRS] for r in (a, b)])
    for d, a, b in pairs[:NEAR_DUP_PAIRS]:
        figs = "".join(
            _figure(data_uri(img) if (img := reader.image(r)) is not None else None, r,
                    split=True) for r in (a, b))
        a_, b_ = (f'<code>{escape(r.get("source_key") or str(r["key"]))}</code> '
                  f'({escape(r["split"])})' for r in (a, b))
        out.append(f'<div class="pair">{figs}<p><b>{d}</b> bits apart: {a_} and {b_}</p></div>')
    return "".join(out)


def _source_of(inp: ReportInputs) -> tuple[str | None, tuple[str, ...], int | None]:
    """The source prefix quarantined objects are fetched from for thumbnails, the
    extensions of the images in it, and the decode flags that put the pixels in the frame
    detection boxes are drawn in (EXIF orientation applied for ``box_frame: displayed``)."""
    spec = (inp.manifest or {}).get("spec") or {}
    source = spec.get("source") or {}
    exts = tuple(x.lower() for x in (source.get("extensions") or IMAGE_EXTENSIONS))
    flags = None
    if ((spec.get("detection") or {}).get("box_frame")) == "displayed":
        import cv2

        flags = cv2.IMREAD_COLOR
    return source.get("uri"), exts, flags


def _quarantine(inp: ReportInputs) -> str:
    return _quarantined(inp) + _not_used(inp)


def _not_used(inp: ReportInputs) -> str:
    """The objects set aside as no part of the dataset (``not_used.jsonl``): not bad data,
    so not quarantined, but accounted: listed = packed + quarantined + not used."""
    rows = inp.not_used
    total = inp.summary.get("not_used", len(rows))
    if not total:
        return ""
    reasons = inp.summary.get("not_used_by_reason") or Counter(r.get("reason") for r in rows)
    table = _table(["object", "reason", "detail"], [
        [f"<code>{escape(str(r.get('key', '')))}</code>", f"<b>{escape(r.get('reason', ''))}</b>",
         escape(str(r.get("detail", ""))[:200])] for r in rows[:QUARANTINE_ROWS]])
    shown = min(len(rows), QUARANTINE_ROWS)
    more = (f'<p class="muted">{total - shown:,} more in {names.NOT_USED}.</p>'
            if total > shown else "")
    return (f'<h3 class="sub">Not used ({total:,})</h3><p>Objects of the download that are no '
            f"part of this dataset — not bad data, so not quarantined: "
            f"{escape(_by_reason(reasons))}. Each is listed in <code>{names.NOT_USED}</code>."
            "</p>" + table + more)


def _quarantined(inp: ReportInputs) -> str:
    q = inp.quarantine
    if not q:
        return '<p class="pass">Nothing was quarantined.</p>'
    whole = [e for e in q if not e.get("part")]
    parts = [e for e in q if e.get("part")]
    source, exts, flags = _source_of(inp)

    def thumbnail_worthy(e: dict) -> bool:  # an image (not an annotation file), not a bomb
        return bool(source) and e.get("reason") not in NO_THUMBNAIL and \
            str(e.get("source_key", "")).lower().endswith(exts)

    out = []
    if whole:
        out.append(_quarantined_images(whole, source, thumbnail_worthy))
    else:
        out.append('<p class="pass">No image was quarantined.</p>')
    if parts:
        out.append(_refused_objects(inp, parts, source, flags, thumbnail_worthy))
    return "".join(out)


def _quarantined_images(q: list[dict], source: str | None, thumbnail_worthy) -> str:
    by_reason = Counter(e.get("reason") for e in q)
    rows, thumbs = [], 0
    for e in q[:QUARANTINE_ROWS]:
        thumb = "—"
        if thumbs < QUARANTINE_THUMBS and thumbnail_worthy(e):
            thumbs += 1
            try:
                data = storage.get_bytes(storage.join(source, e["source_key"]))
                img = decode(data) if len(data) <= MAX_THUMBNAIL_SOURCE else None
                if img is not None:
                    thumb = f'<img src="{data_uri(img, 64)}" alt="thumbnail">'
            except Exception as exc:
                log.debug("report: no thumbnail for %s: %s", e.get("source_key"), exc)
        rows.append([thumb, f"<code>{escape(e.get('source_key', ''))}</code>",
                     escape(e.get("stage", "")), f"<b>{escape(e.get('reason', ''))}</b>",
                     escape(e.get("detail", "")[:200]), escape(e.get("fix", ""))])
    more = (f'<p class="muted">{len(q) - QUARANTINE_ROWS} more in quarantine.jsonl.</p>'
            if len(q) > QUARANTINE_ROWS else "")
    return ("<p>" + ", ".join(f"{escape(str(k))}: {v}" for k, v in by_reason.most_common())
            + "</p>" + _table(["", "object", "stage", "reason", "detail", "fix"], rows) + more)


def _refused_objects(inp: ReportInputs, parts: list[dict], source: str | None,
                     flags: int | None, thumbnail_worthy) -> str:
    """Detection: the objects of annotations refused while their image was packed (or
    quarantined above), each with its box drawn on the source image where it decodes."""
    by_reason = Counter(e.get("reason") for e in parts)
    total = inp.summary.get("objects_quarantined", len(parts))
    fetched: dict[str, tuple[np.ndarray, float] | None] = {}  # source key → (small, scale)

    def source_image(key: str) -> tuple[np.ndarray, float] | None:
        if key in fetched:
            return fetched[key]
        if len(fetched) >= PART_THUMBS:
            return None
        got = None
        try:
            uri = storage.join(source, key)
            if storage.size_of(uri) <= MAX_THUMBNAIL_SOURCE:
                img = decode(storage.get_bytes(uri), flags)
                if img is not None:
                    small = box_thumbnail(img, None)  # at most THUMB_PX: all that is kept
                    got = small, small.shape[1] / img.shape[1]
        except Exception as exc:
            log.debug("report: no thumbnail for %s: %s", key, exc)
        fetched[key] = got
        return got

    rows = []
    for e in parts[:QUARANTINE_ROWS]:
        box = e.get("box")
        box_ok = isinstance(box, (list, tuple)) and len(box) == 4 and \
            all(isinstance(v, (int, float)) and np.isfinite(v) for v in box)
        thumb = "—"
        if thumbnail_worthy(e):
            got = source_image(e["source_key"])
            if got is not None:
                small, scale = got
                shown = box_thumbnail(small, [v * scale for v in box] if box_ok else None)
                thumb = f'<img src="{data_uri(shown)}" alt="refused object">'
        where = (", ".join(f"{v:g}" for v in box) if box_ok
                 else '<span class="muted">—</span>')
        rows.append([thumb, f"<code>{escape(e.get('source_key', ''))}</code>",
                     escape(str(e.get("part"))), where, escape(e.get("stage", "")),
                     f"<b>{escape(e.get('reason', ''))}</b>",
                     escape(e.get("detail", "")[:200]), escape(e.get("fix", ""))])
    more = (f'<p class="muted">{len(parts) - QUARANTINE_ROWS} more in quarantine.jsonl.</p>'
            if len(parts) > QUARANTINE_ROWS else "")
    return (f'<h3 class="sub" id="refused-objects">Refused objects</h3><p><b>{total:,}</b> '
            "object(s) of annotations were refused: each image is packed without them "
            "(or quarantined above). The box is drawn on the source image as annotated "
            "(pixels <code>xmin, ymin, xmax, ymax</code>; a grey margin where it reaches "
            "outside). " + ", ".join(f"{escape(str(k))}: {v}" for k, v in
                                      by_reason.most_common()) + "</p>"
            + _table(["", "image", "object", "box (px)", "stage", "reason", "detail", "fix"],
                     rows) + more)


def _diff(inp: ReportInputs, previous: str | None) -> str:
    if not previous:
        return '<p class="muted">No previous version to compare with (first version).</p>'
    was_objects: Counter | None = Counter() if inp.detection else None
    try:
        d = diff_records(read_contents(previous, was_objects), inp.records, previous)
    except Exception as exc:
        return f'<p class="muted">Previous version {escape(previous)} unreadable: ' \
               f'{escape(str(exc))}</p>'
    parts = [f"<p>Against <code>{escape(previous)}</code>: <b>{len(d.added):,}</b> added, "
             f"<b>{len(d.removed):,}</b> removed, <b>{len(d.changed):,}</b> changed (same key, "
             "new content).</p>"]
    for title, keys in (("added", d.added), ("removed", d.removed), ("changed", d.changed)):
        if keys:
            parts.append(f"<p>{title}: " + ", ".join(f"<code>{escape(k)}</code>"
                                                    for k in keys[:SHOWN])
                         + (f" … and {len(keys) - SHOWN:,} more" if len(keys) > SHOWN else "")
                         + "</p>")
    what = "Class counts"
    if was_objects is not None:  # detection: objects per class, not records
        names_ = inp.class_names
        now = Counter(int(c) for c in inp.objects.class_ids)
        d.class_counts = {names_[c] if c < len(names_) else str(c):
                          (was_objects.get(c, 0), now.get(c, 0))
                          for c in sorted(was_objects.keys() | now.keys())}
        what = "Objects per class"
    changed = [[escape(c), f"{a:,}", f"{b:,}", f"{b - a:+,}"]
               for c, (a, b) in d.class_counts.items() if a != b]
    head = ["class", "before", "now", "change"] if was_objects is None else \
        ["class", "objects before", "objects now", "change"]
    parts.append(_table(head, changed, {1, 2, 3}) if changed
                 else f'<p class="muted">{what} unchanged.</p>')
    return "".join(parts)


# ---- the page -----------------------------------------------------------------------------

def build_report(prefix: str, out_path: str | Path, *, previous: str | None = None,
                 about: dict | None = None, docs_href: str | None = None,
                 seed: int = 0) -> Path:
    """Write ``report.html`` for the dataset at ``prefix`` (local or S3) to ``out_path``.

    ``previous``: the prefix of the version to diff against (default: the one the version's
    manifest names, if any). ``about``: manifest fields (dataset, version, run_id, spec,
    content_id, previous_uri) for a prefix that has no manifest yet — the pipeline builds the
    report before publishing — plus ``uri``, the version it will be published as (what the
    report names as its location), and ``blocked``, the failed checks when the quality gate
    failed (then the report names the staging prefix, and says it was not published).
    ``docs_href``: the link to the Data Docs (default: ``quality/`` next to the report)."""
    started = time.monotonic()
    inp = load(prefix)
    from_version = inp.manifest is not None
    if inp.manifest is None and about:
        inp.manifest = {k: v for k, v in about.items() if k not in ("uri", "blocked")}
    where = where_of(inp, about, from_version)
    previous = previous or (inp.manifest or {}).get("previous_uri")
    reader = _Records(inp)
    title = (inp.manifest or {}).get("dataset") or (inp.quality or {}).get("dataset") \
        or "dataset"
    version = (inp.manifest or {}).get("version") or "staging"
    if where.blocked:
        version += " (not published)"
    bodies = {
        "summary": _summary(inp, where), "checklist": _checklist(inp, docs_href),
        "charts": _charts(inp),
        "samples": _samples(inp, reader, seed), "masks": _masks(inp, reader, seed),
        "near-duplicates": _near_duplicates(inp, reader), "quarantine": _quarantine(inp),
        "diff": _diff(inp, previous),
    }
    shown = sections_for(inp.segmentation)
    nav = "".join(f'<a href="#{sid}">{label}</a>' for sid, label in shown)
    sections = "".join(f'<section id="{sid}"><h2>{label}</h2>{bodies[sid]}</section>'
                       for sid, label in shown)
    banner = (f'<p class="banner"><b>Not published.</b> The quality gate failed '
              f"({escape(', '.join(where.blocked))}): this report and the dataset stay in "
              f"staging at <code>{escape(where.uri)}</code>; see the checklist below.</p>"
              if where.blocked else "")
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width,initial-scale=1"><title>{escape(title)} {version} '
            f'— recforge report</title><style>{CSS}</style></head><body><header><h1>'
            f'{escape(title)} <small>{escape(version)}</small></h1><p>recforge dataset report '
            f'· {len(inp.records):,} records</p></header><nav>{nav}</nav>{banner}{sections}'
            "</body></html>")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    # the path is a temporary file when the pipeline builds it: where it is published is
    # the caller's to say
    log.info("report: built (%.0f KB, %.1f s)", out.stat().st_size / 1024,
             time.monotonic() - started)
    log.debug("report: written to %s", out)
    return out


def render_record(prefix: str, key: int, out_png: str | Path,
                  split: str | None = None) -> tuple[Path, Record]:
    """One record as a PNG (segmentation: with its mask blended over it; detection: with its
    boxes drawn, difficult ones dashed); returns the PNG and the record's row of
    ``records.jsonl`` (its ``split``, ``class_name``, ``source_key``)."""
    import cv2

    inp = load(prefix)
    rows = [r for r in inp.records if r["key"] == key and (split is None or r["split"] == split)]
    if not rows:
        raise KeyError(f"no record with key {key}" + (f" in split {split}" if split else "")
                       + f" in {prefix}/records.jsonl (its `key` column; the report shows a "
                       "thumbnail's key on hover)")
    if len(rows) > 1:
        raise KeyError(f"key {key} exists in splits {[r['split'] for r in rows]}; give --split")
    r = rows[0]
    reader = _Records(inp)
    img = reader.image(r)
    if img is None:
        raise ValueError(f"record {r['split']}/{key} does not decode")
    mask = reader.mask(r)
    if mask is not None:
        colors = palette(len(inp.class_names), inp.classes.get("colors"))
        img = overlay(img, mask, colors, inp.classes.get("ignore_index"))
    elif inp.detection:  # its boxes, at the stored size
        img = draw_boxes(img, label_objects(r.get("label")), _colors(inp), inp.class_names,
                         px=None)
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(out), img):
        raise OSError(f"could not write {out}")
    return out, r
