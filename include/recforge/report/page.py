"""The page: every section of the report, rendered to one self-contained HTML file."""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections import Counter, defaultdict
from html import escape
from pathlib import Path

import numpy as np

from recforge import storage
from recforge.format import names
from recforge.report.charts import grouped_bars, histogram, line
from recforge.report.diff import SHOWN, diff_records
from recforge.report.images import (
    data_uri,
    decode,
    overlay,
    palette,
    payload_of,
    read_payload,
    span_of,
)
from recforge.report.inputs import ReportInputs, load, read_contents
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
# reasons whose source bytes are never decoded for a thumbnail (bombs, nothing to show)
NO_THUMBNAIL = {"too_many_pixels", "zero_bytes", "unsafe_key", "missing", "read_error",
                "unsupported_extension", "too_large", "hidden_file", "zero_size",
                "not_regular_file"}
MAX_THUMBNAIL_SOURCE = 16 << 20
STATUS_CLASS = {"passed": "pass", "warning": "warn", "failed": "fail", "not run": "skip",
                "off": "skip"}
SECTIONS = (("summary", "Summary"), ("checklist", "Checklist"), ("charts", "Charts"),
            ("samples", "Samples"), ("masks", "Masks"), ("near-duplicates", "Near-duplicates"),
            ("quarantine", "Quarantine"), ("diff", "Changes"))

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
color:#4b5563}.sheet{display:flex;flex-wrap:wrap;gap:8px}.cls{border:1px solid #e5e7eb;
border-radius:4px;padding:6px;width:480px}.cls h3{font-size:13px;margin:0 0 4px}
figure{margin:0;display:inline-block;text-align:center;font-size:11px;color:#4b5563}
figure img{display:block;max-width:112px;max-height:112px;margin:auto}.pair{display:inline-flex;
gap:6px;border:1px solid #e5e7eb;padding:6px;margin:4px;border-radius:4px;align-items:center}
.legend span{display:inline-block;margin:2px 8px 2px 0}.legend i{display:inline-block;width:12px;
height:12px;margin-right:4px;vertical-align:middle;border:1px solid #0003}
.charts{display:flex;flex-wrap:wrap;gap:16px}svg .t{font-weight:600;font-size:13px}
svg .l{font-size:11px;fill:#374151}svg .v{font-size:10px;fill:#6b7280}code{font-size:12px}
"""


def _content_id(records: list[dict]) -> str:
    """A hash of the ordered record manifest: equal for two builds of the same content."""
    h = hashlib.sha256()
    for r in sorted(records, key=lambda r: (r.get("split", ""), r["key"])):
        h.update(f"{r.get('split')}\t{r['key']}\t{r.get('label')}\t"
                 f"{r.get('content')}\n".encode())
    return h.hexdigest()[:16]


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


def _figure(uri: str | None, caption: str) -> str:
    img = f'<img src="{uri}" alt="{escape(caption)}">' if uri else '<span class="muted">—</span>'
    return f"<figure>{img}<figcaption>{escape(caption)}</figcaption></figure>"


def _table(head: list[str], rows: list[list[str]], num: set[int] = frozenset()) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


# ---- sections -----------------------------------------------------------------------------

def _summary(inp: ReportInputs) -> str:
    m = inp.manifest or {}
    spec = m.get("spec") or {}
    s = inp.summary
    sizes = [(r["width"], r["height"]) for r in inp.records if "width" in r]
    per_split = Counter(r.get("split") for r in inp.records)
    rows = [
        ("dataset", m.get("dataset") or (inp.quality or {}).get("dataset") or "—"),
        ("version", m.get("version") or "not published (staging)"),
        ("content id", _content_id(inp.records)),
        ("run", m.get("run_id") or (inp.quality or {}).get("run") or "—"),
        ("built", m.get("published_at") or (inp.bench or {}).get("created_at") or "—"),
        ("task", m.get("task") or ("segmentation" if inp.segmentation else "classification")),
        ("source", (spec.get("source") or {}).get("uri", "—")),
        ("location", inp.prefix),
        ("records", ", ".join(f"{k} {v:,}" for k, v in sorted(per_split.items())) or "0"),
        ("classes", f"{len(inp.class_names):,}"),
        ("listed / packed / quarantined",
         f"{s.get('listed', '—'):,} / {s.get('packed', '—'):,} / {s.get('quarantined', '—'):,}"
         if s else "—"),
    ]
    if sizes:
        ws, hs = sorted(w for w, _ in sizes), sorted(h for _, h in sizes)
        rows.append(("image size (W×H) min / median / max",
                     f"{ws[0]}×{hs[0]} / {ws[len(ws) // 2]}×{hs[len(hs) // 2]} / "
                     f"{ws[-1]}×{hs[-1]}"))
    pack = spec.get("pack")
    if pack:
        rows.append(("pack options", ", ".join(f"{k}={v}" for k, v in pack.items())))
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _checklist(inp: ReportInputs, docs_href: str | None) -> str:
    q = inp.quality
    if not q:
        return '<p class="muted">The checklist has not run for this prefix.</p>'
    verdict = ("FAILED: " + ", ".join(q.get("failed", [])) if not q.get("ok", True)
               else "passed" + (" with warnings: " + ", ".join(q["warned"])
                                if q.get("warned") else ""))
    cls = "fail" if not q.get("ok", True) else ("warn" if q.get("warned") else "pass")
    rows = []
    order = {c.name: i for i, c in enumerate(CHECKS)}
    for name, c in sorted(q.get("checks", {}).items(), key=lambda kv: order.get(kv[0], 99)):
        status = c.get("status", "")
        shown = {"passed": "pass", "warning": "warn", "failed": "fail"}.get(status, status)
        ev = "".join(f"<br><span class='muted'>{escape(e)}</span>"
                     for e in c.get("evidence", [])[:3]) if status in ("failed", "warning") \
            else ""
        rows.append([escape(str(c.get("item", ""))), f"<b>{escape(name)}</b><br>"
                     f"<span class='muted'>{escape(c.get('title', ''))}</span>",
                     escape(c.get("severity", "")),
                     f'<span class="{STATUS_CLASS.get(status, "skip")}">{escape(shown)}</span>',
                     escape(str(c.get("observed", ""))) + ev])
    return (f'<p>Checklist <span class="{cls}">{escape(verdict)}</span>. Detailed evidence: '
            f'<a href="{escape(docs_href or names.QUALITY_DIR + "/index.html")}">Data Docs</a>.'
            "</p>"
            + _table(["item", "check", "severity", "status", "observed"], rows))


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
    else:
        per = {s: Counter(r.get("class_name") for r in inp.records if r.get("split") == s)
               for s in splits}
        cats = names_ or sorted({r.get("class_name") for r in inp.records})
        shown = cats[:MAX_CLASSES_SHOWN * 5]
        out.append(grouped_bars(
            "records per class and split" + (f" (first {len(shown)} of {len(cats)} classes)"
                                             if len(shown) < len(cats) else ""),
            shown, {s: [per[s].get(c, 0) for c in shown] for s in splits}))
    short = [min(r["width"], r["height"]) for r in inp.records if "width" in r]
    aspect = [r["width"] / r["height"] for r in inp.records if r.get("height")]
    row = [histogram("image short side", short, unit=" px"),
           histogram("aspect ratio (W/H)", aspect)]
    runs = (inp.bench or {}).get("runs") or []
    workers = [r for r in runs if r.get("num_workers") is not None]
    if workers:
        row.append(line("loader throughput", sorted(
            (r["num_workers"], r["images_per_sec"]) for r in workers), "DataLoader workers",
            "img/s"))
    elif runs:
        row.append(line("loader throughput", sorted(
            (r.get("effective_threads") or r.get("preprocess_threads") or 1, r["images_per_sec"])
            for r in runs if r.get("images_per_sec") is not None),
            "preprocess threads (effective)", "img/s"))
    else:
        row.append('<p class="muted">No loader benchmark results (bench.json).</p>')
    dali_runs = ((inp.bench or {}).get("dali") or {}).get("runs") or []
    if dali_runs:  # bench.loader: both — DALI's loader beside MXNet's
        row.append(line("DALI loader throughput", sorted(
            (r["effective_threads"], r["images_per_sec"]) for r in dali_runs),
            "DALI num_threads", "img/s"))
    out.append('<div class="charts">' + "".join(row) + "</div>")
    return "".join(out)


def _samples(inp: ReportInputs, reader: _Records, seed: int) -> str:
    rng = random.Random(seed)
    if inp.segmentation:
        pick = rng.sample(inp.records, min(MASK_SAMPLES, len(inp.records)))
        figs = []
        for r in pick:
            img = reader.image(r)
            figs.append(_figure(data_uri(img) if img is not None else None,
                                f"{r['split']}/{r['key']} {r.get('source_key', '')[:40]}"))
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
            figs.append(_figure(data_uri(img) if img is not None else None,
                                f"{r['split']}/{r['key']}"))
        blocks.append(f'<div class="cls"><h3>{escape(c)} <span class="muted">'
                      f'({len(rows):,} records)</span></h3>{"".join(figs)}</div>')
    more = (f'<p class="muted">{len(order) - len(shown)} more classes not shown.</p>'
            if len(order) > len(shown) else "")
    return f'<div class="sheet">{"".join(blocks)}</div>{more}'


def _masks(inp: ReportInputs, reader: _Records, seed: int) -> str:
    if not inp.segmentation:
        return '<p class="muted">Classification dataset: no masks.</p>'
    names_ = inp.class_names
    colors = palette(len(names_), inp.classes.get("colors"))
    ignore = inp.classes.get("ignore_index")
    rng = random.Random(seed + 1)
    figs = []
    seen: set[int] = set()
    for r in rng.sample(inp.records, min(MASK_SAMPLES, len(inp.records))):
        img, mask = reader.image(r), reader.mask(r)
        if img is None or mask is None:
            figs.append(_figure(None, f"{r['split']}/{r['key']}"))
            continue
        seen |= {int(v) for v in np.unique(mask)}
        figs.append(_figure(data_uri(overlay(img, mask, colors, ignore), 224),
                            f"{r['split']}/{r['key']}"))
    legend = "".join(
        f'<span><i style="background:rgb{tuple(int(x) for x in colors[v])}"></i>'
        f'{escape(names_[v] if v < len(names_) else str(v))}</span>'
        for v in sorted(seen) if v != ignore)
    return (f'<div class="legend">{legend}</div><div class="sheet">{"".join(figs)}</div>'
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
    out = [f"<p>{len(pairs)} pair(s) of records in different splits within {threshold} bits "
           f"(dHash); the closest {min(len(pairs), NEAR_DUP_PAIRS)}:</p>"]
    reader.prefetch([r for _, a, b in pairs[:NEAR_DUP_PAIRS] for r in (a, b)])
    for d, a, b in pairs[:NEAR_DUP_PAIRS]:
        figs = "".join(
            _figure(data_uri(img) if (img := reader.image(r)) is not None else None,
                    f"{r['split']}/{r['key']} {r.get('source_key', '')[:36]}") for r in (a, b))
        out.append(f'<div class="pair">{figs}<span><b>{d}</b> bits</span></div>')
    return "".join(out)


def _quarantine(inp: ReportInputs) -> str:
    q = inp.quarantine
    if not q:
        return '<p class="pass">Nothing was quarantined.</p>'
    by_reason = Counter(e.get("reason") for e in q)
    source = (((inp.manifest or {}).get("spec") or {}).get("source") or {}).get("uri")
    rows, thumbs = [], 0
    for e in q[:QUARANTINE_ROWS]:
        thumb = "—"
        if source and thumbs < QUARANTINE_THUMBS and e.get("reason") not in NO_THUMBNAIL:
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


def _diff(inp: ReportInputs, previous: str | None) -> str:
    if not previous:
        return '<p class="muted">No previous version to compare with (first version).</p>'
    try:
        d = diff_records(read_contents(previous), inp.records, previous)
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
    changed = [[escape(c), f"{a:,}", f"{b:,}", f"{b - a:+,}"]
               for c, (a, b) in d.class_counts.items() if a != b]
    parts.append(_table(["class", "before", "now", "change"], changed, {1, 2, 3}) if changed
                 else '<p class="muted">Class counts unchanged.</p>')
    return "".join(parts)


# ---- the page -----------------------------------------------------------------------------

def build_report(prefix: str, out_path: str | Path, *, previous: str | None = None,
                 about: dict | None = None, docs_href: str | None = None,
                 seed: int = 0) -> Path:
    """Write ``report.html`` for the dataset at ``prefix`` (local or S3) to ``out_path``.

    ``previous``: the prefix of the version to diff against (default: the one the version's
    manifest names, if any). ``about``: manifest fields (dataset, version, run_id, spec,
    previous_uri) for a prefix that has no manifest yet — the pipeline builds the report
    before publishing. ``docs_href``: the link to the Data Docs (default: ``quality/`` next
    to the report)."""
    started = time.monotonic()
    inp = load(prefix)
    if inp.manifest is None and about:
        inp.manifest = about
    previous = previous or (inp.manifest or {}).get("previous_uri")
    reader = _Records(inp)
    title = (inp.manifest or {}).get("dataset") or (inp.quality or {}).get("dataset") \
        or "dataset"
    version = (inp.manifest or {}).get("version") or "staging"
    bodies = {
        "summary": _summary(inp), "checklist": _checklist(inp, docs_href),
        "charts": _charts(inp),
        "samples": _samples(inp, reader, seed), "masks": _masks(inp, reader, seed),
        "near-duplicates": _near_duplicates(inp, reader), "quarantine": _quarantine(inp),
        "diff": _diff(inp, previous),
    }
    nav = "".join(f'<a href="#{sid}">{label}</a>' for sid, label in SECTIONS)
    sections = "".join(f'<section id="{sid}"><h2>{label}</h2>{bodies[sid]}</section>'
                       for sid, label in SECTIONS)
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width,initial-scale=1"><title>{escape(title)} {version} '
            f'— recforge report</title><style>{CSS}</style></head><body><header><h1>'
            f'{escape(title)} <small>{escape(version)}</small></h1><p>recforge dataset report '
            f'· {len(inp.records):,} records</p></header><nav>{nav}</nav>{sections}'
            "</body></html>")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    log.info("report: %s (%.0f KB, %.1f s)", out, out.stat().st_size / 1024,
             time.monotonic() - started)
    return out


def render_record(prefix: str, key: int, out_png: str | Path, split: str | None = None) -> Path:
    """One record as a PNG (segmentation: with its mask blended over it)."""
    import cv2

    inp = load(prefix)
    rows = [r for r in inp.records if r["key"] == key and (split is None or r["split"] == split)]
    if not rows:
        raise KeyError(f"no record with key {key}" + (f" in split {split}" if split else "")
                       + f" under {prefix}")
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
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(out), img):
        raise OSError(f"could not write {out}")
    return out
