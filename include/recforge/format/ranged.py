"""A ``.rec`` on S3 as the structural check reads it: its record headers, fetched by range.

``recforge validate`` checks framing, the chain of records, header ids and labels, none of
which reads an image byte. So a ``.rec`` on S3 is not downloaded: :func:`stand_in` writes a
sparse local file of the object's size that holds, at their own offsets, the bytes the
checks read (each record's 8-byte framing and ``IRHeader``, a multi-label header's label
array, a record split at an aligned magic whole, and, where the chain of records does not
run from one ``.idx`` offset to the next, every byte up to the next one) and nothing else:
the image bytes are holes, which read as zeros and take no disk. The checks in
``format.validate`` then run on it unchanged, so a split on S3 gets the same verdict and
the same messages as the downloaded files would; only what decodes an image (the
segmentation masks' PNG checks) needs the bytes (``validate_prefix(full=True)``).

The header reads are coalesced (``storage.read_spans``) only across ``GAP`` bytes: records
of at least that size cost one small ranged GET each (a GB of 100 KB records: ~10,000 GETs
and ~0.3 MB), smaller ones are read as the contiguous runs they are.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from recforge import storage
from recforge.format import recordio

HEAD_BYTES = 8 + recordio.IR_SIZE  # framing and IRHeader: what each record's check reads
GAP = 16 << 10  # headers closer than this are one ranged read (the bytes between read too)
THREADS = 16  # ranged GETs at once: each is a few dozen bytes, so latency is the cost


@dataclass
class Fetched:
    """What building stand-ins read from S3: body bytes and ranged GETs."""

    bytes: int = 0
    requests: int = 0


def idx_offsets(text: bytes) -> list[int]:
    """The offsets of every ``key<TAB>offset`` line an ``.idx`` holds that parses (a broken
    line is the check's to report; the others still say where records are)."""
    out = []
    for line in text.split(b"\n"):
        fields = line.split(b"\t")
        if len(fields) == 2 and fields[1].strip().isdigit():
            out.append(int(fields[1]))
    return out


def stand_in(uri: str, size: int, offsets: list[int] | None, dest: Path,
             fetched: Fetched) -> None:
    """Write ``dest``: the stand-in of the ``.rec`` at ``uri`` (``size`` bytes) whose
    ``.idx`` lists ``offsets``. Two rounds of coalesced ranged reads: the headers at the
    offsets, then what those headers show the checks will read besides (labels, split
    records, the bytes where the chain breaks). ``offsets`` None (no ``.idx``, where the
    check stops before the ``.rec``): holes only, nothing read."""
    with open(dest, "wb") as f:
        f.truncate(size)
    if offsets is None:
        return
    known = sorted({o for o in offsets if 0 <= o < size})
    fd = os.open(dest, os.O_WRONLY)
    try:
        heads = _read(uri, size, [(o, HEAD_BYTES) for o in known], fd, fetched)
        _read(uri, size, _more(heads, known, size), fd, fetched)
    finally:
        os.close(fd)


def _more(heads: dict[int, bytes], known: list[int], size: int) -> list[tuple[int, int]]:
    """The spans besides the headers that a record-by-record read of the file touches."""
    spans: list[tuple[int, int]] = []
    nexts = dict(zip(known, [*known[1:], size], strict=True))
    starts = set(known)

    def up_to_next(at: int) -> None:  # where no record is indexed: every byte to the next
        i = bisect.bisect_right(known, at)
        spans.append((at, (known[i] if i < len(known) else size) - at))

    if size and (not known or known[0] != 0):
        up_to_next(0)
    for o in known:
        head = heads.get(o, b"")
        if len(head) < 8:
            continue
        magic, lrec = struct.unpack_from("<II", head)
        cflag, length = lrec >> 29, lrec & ((1 << 29) - 1)
        if magic != recordio.MAGIC or cflag > 1:
            continue  # the check stops here: nothing past it is read
        if cflag == 1:  # split at an aligned magic: its parts' framing lies anywhere in it
            spans.append((o, nexts[o] - o))
            continue
        if length >= recordio.IR_SIZE and len(head) >= HEAD_BYTES:
            flag = struct.unpack_from("<I", head, 8)[0]
            if flag:  # the labels follow the IRHeader
                spans.append((o + HEAD_BYTES, min(4 * flag, length - recordio.IR_SIZE)))
        end = o + recordio.framed_size(length)
        if end < size and end not in starts:
            up_to_next(end)
    return spans


def _read(uri: str, size: int, spans: list[tuple[int, int]], fd: int,
          fetched: Fetched) -> dict[int, bytes]:
    """The bytes of ``spans`` (clipped to the object), written into ``fd`` at their
    offsets and returned by start; a read that fails raises, as a download would."""
    spans = [(s, min(n, size - s)) for s, n in spans if 0 <= s < size and n > 0]
    wanted = [(uri, s, n) for s, n in spans]
    plan = storage.plan_reads(wanted, GAP)
    fetched.requests += len(plan)
    fetched.bytes += sum(min(n, size - s) for _, s, n, _ in plan)
    got: dict[int, bytes] = {}

    def use(members: list[int], data) -> None:
        if isinstance(data, Exception):
            raise data
        for i, piece in zip(members, data, strict=True):
            os.pwrite(fd, piece, spans[i][0])
            got[spans[i][0]] = piece

    for _ in storage.read_spans(wanted, use, THREADS, GAP):
        pass
    return got
