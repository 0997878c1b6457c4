"""The record reader: a sampled record's image and mask from its split's ``.rec``, by ranged
reads (coalesced a few per split when prefetched), never a whole ``.rec``."""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np

from recforge import storage
from recforge.report.images import decode, payload_of, read_payload, span_of
from recforge.report.inputs import ReportInputs

log = logging.getLogger(__name__)
PREFETCH_THREADS = 8  # ranged GETs of sampled records in flight at once


class Records:
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
