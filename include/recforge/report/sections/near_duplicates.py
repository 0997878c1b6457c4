"""The Near-duplicates section: record pairs in different splits whose perceptual hashes
(dHash) are a few bits apart, the closest side by side."""

from __future__ import annotations

from collections import defaultdict
from html import escape

from recforge.report.images import data_uri
from recforge.report.origin import splits_from_source
from recforge.report.sections.context import Context
from recforge.report.sections.markup import figure

NEAR_DUP_PAIRS = 12
# bounded memory (~32 bytes a candidate): beyond it the section says so; the checklist owns
# the complete search
NEAR_DUP_MAX_CANDIDATES = 5_000_000


def _pairs(by_split: dict[str, list], threshold: int) -> tuple[int, list[tuple[int, dict, dict]]]:
    """How many near pairs there are across two splits, and the closest ``NEAR_DUP_PAIRS``
    as (bits apart, record, record): fewest bits first, then by the first record's split and
    key, then in search order. Only those few become Python objects; the rest stay arrays, so
    a night with millions of pairs costs no list of them. ValueError when the candidates
    exceed ``NEAR_DUP_MAX_CANDIDATES``."""
    import numpy as np

    from recforge import phash

    total, closest = 0, []
    splits = sorted(by_split)
    for i, a in enumerate(splits):
        for b in splits[i + 1:]:
            ra, rb = by_split[a], by_split[b]
            ii, jj, dist = phash.near_pairs(phash.to_uint64([r["phash"] for r in ra]),
                                            phash.to_uint64([r["phash"] for r in rb]),
                                            threshold, NEAR_DUP_MAX_CANDIDATES)
            if not len(ii):
                continue
            total += len(ii)
            keys = np.array([r["key"] for r in ra])[ii]
            # a stable sort: equal bits and key keep the search's order, as the list did
            first = (np.lexsort((keys, dist)) if keys.dtype != object
                     else sorted(range(len(ii)), key=lambda k: (dist[k], keys[k])))
            closest += [(int(dist[k]), ra[ii[k]], rb[jj[k]]) for k in first[:NEAR_DUP_PAIRS]]
    closest.sort(key=lambda p: (p[0], p[1]["split"], p[1]["key"]))
    return total, closest[:NEAR_DUP_PAIRS]


def render(ctx: Context) -> str:
    from recforge import phash

    inp, reader = ctx.inp, ctx.reader
    spec_q = ((inp.manifest or {}).get("spec") or {}).get("quality") or {}
    threshold = int(spec_q.get("near_duplicate_hamming", 4))
    by_split: dict[str, list[dict]] = defaultdict(list)
    for r in inp.records:
        h = r.get("phash")
        if isinstance(h, str) and len(h) == phash.HEX_DIGITS:
            by_split[r["split"]].append(r)
    try:
        total, pairs = _pairs(by_split, threshold)
    except ValueError as exc:  # too many candidates for a report: say so
        return f'<p class="muted">Near-duplicate search skipped: {escape(str(exc))}</p>'
    if not total:
        return (f'<p class="pass">No record has a near-duplicate in another split '
                f'(dHash within {threshold} bits).</p>')
    check = ((inp.quality or {}).get("checks") or {}).get("near_duplicates") or {}
    gate = {"fail": " The checklist blocks publish on them.",
            "warn": " The checklist warns about them: they do not block publish."}.get(
                check.get("severity"), "")
    if splits_from_source((inp.manifest or {}).get("spec")):
        gate += (" The splits are the source's own (splits.from: source): the pairs are "
                 "kept as the publisher ships them.")
    out = [f"<p>{total} pair(s) of records in different splits whose perceptual hash "
           f"(dHash) differs in at most {threshold} bits: most likely one photo cropped, "
           "resized or re-encoded, so the model is validated on images it has nearly seen in "
           f"training.{gate} The closest {len(pairs)}:</p>"]
    reader.prefetch([r for _, a, b in pairs for r in (a, b)])
    for d, a, b in pairs:
        figs = "".join(
            figure(data_uri(img) if (img := reader.image(r)) is not None else None, r,
                   split=True) for r in (a, b))
        a_, b_ = (f'<code>{escape(r.get("source_key") or str(r["key"]))}</code> '
                  f'({escape(r["split"])})' for r in (a, b))
        out.append(f'<div class="pair">{figs}<p><b>{d}</b> bits apart: {a_} and {b_}</p></div>')
    return "".join(out)
