"""The Quarantine section: the images quarantined (with a thumbnail of the source where it
decodes and is no bomb), the objects of annotations refused while their image was packed
(each box drawn on its source image), and the objects set aside as no part of the dataset."""

from __future__ import annotations

import logging
from collections import Counter
from html import escape

import numpy as np

from recforge import storage
from recforge.format import names
from recforge.report.images import box_thumbnail, data_uri, decode
from recforge.report.inputs import ReportInputs
from recforge.report.origin import by_reason
from recforge.report.sections.context import Context
from recforge.report.sections.markup import table
from recforge.spec.dataset import IMAGE_EXTENSIONS

log = logging.getLogger(__name__)
QUARANTINE_ROWS = 40
QUARANTINE_THUMBS = 20
PART_THUMBS = 20  # refused objects' source images fetched for a thumbnail at most
# reasons whose source bytes are never decoded for a thumbnail (bombs, nothing to show)
NO_THUMBNAIL = {"too_many_pixels", "zero_bytes", "unsafe_key", "missing", "read_error",
                "unsupported_extension", "too_large", "hidden_file", "zero_size",
                "not_regular_file", "orphan_annotation", "image_missing"}
MAX_THUMBNAIL_SOURCE = 16 << 20


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


def render(ctx: Context) -> str:
    return _quarantined(ctx.inp) + _not_used(ctx.inp)


def _not_used(inp: ReportInputs) -> str:
    """The objects set aside as no part of the dataset (``not_used.jsonl``): not bad data,
    so not quarantined, but accounted: listed = packed + quarantined + not used."""
    rows = inp.not_used
    total = inp.summary.get("not_used", len(rows))
    if not total:
        return ""
    reasons = inp.summary.get("not_used_by_reason") or Counter(r.get("reason") for r in rows)
    listed = table(["object", "reason", "detail"], [
        [f"<code>{escape(str(r.get('key', '')))}</code>", f"<b>{escape(r.get('reason', ''))}</b>",
         escape(str(r.get("detail", ""))[:200])] for r in rows[:QUARANTINE_ROWS]])
    shown = min(len(rows), QUARANTINE_ROWS)
    more = (f'<p class="muted">{total - shown:,} more in {names.NOT_USED}.</p>'
            if total > shown else "")
    return (f'<h3 class="sub">Not used ({total:,})</h3><p>Objects of the download that are no '
            f"part of this dataset — not bad data, so not quarantined: "
            f"{escape(by_reason(reasons))}. Each is listed in <code>{names.NOT_USED}</code>."
            "</p>" + listed + more)


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
    reasons = Counter(e.get("reason") for e in q)
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
    return ("<p>" + ", ".join(f"{escape(str(k))}: {v}" for k, v in reasons.most_common())
            + "</p>" + table(["", "object", "stage", "reason", "detail", "fix"], rows) + more)


def _refused_objects(inp: ReportInputs, parts: list[dict], source: str | None,
                     flags: int | None, thumbnail_worthy) -> str:
    """Detection: the objects of annotations refused while their image was packed (or
    quarantined above), each with its box drawn on the source image where it decodes."""
    reasons = Counter(e.get("reason") for e in parts)
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
                                      reasons.most_common()) + "</p>"
            + table(["", "image", "object", "box (px)", "stage", "reason", "detail", "fix"],
                     rows) + more)
