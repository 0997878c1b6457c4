"""Header-only structural scans with numpy: the fast path of ``recforge validate``.

A packed split is proved well-formed without reading its image bytes. The ``.idx`` and
``.lst`` are parsed as whole buffers (``np.fromstring`` after a byte-class check, so only
canonical text is accepted), and the ``.rec`` is memory-mapped and read at the ``.idx``
offsets only: the magic, the length word and the ``IRHeader`` of each record, gathered as
``uint32`` words. The records are a contiguous chain exactly when every record ends where
the next ``.idx`` offset (or the file) begins, which is what a record-by-record reader
starting at byte 0 would find, so nothing between the offsets needs reading.

Every function here answers ``None`` for anything it does not recognise as canonical (a
blank line, a ``+7`` key, a multi-label header, a broken chain): the caller then runs the
record-by-record check, which says exactly what is wrong. So the fast path can only ever
accept what the slow one accepts; it never writes a failure message itself. Records split
at an aligned magic (``cflag`` 1..3, rare in real JPEG data) are read one by one in Python.
"""

from __future__ import annotations

import mmap
import os
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recforge.format import recordio

MAX_DIGITS = 18  # an int64 holds every 18-digit number
MAX_LST_KEY_DIGITS = 15  # .lst rows parse as float64: exact below 2^53

_NUMERIC = np.zeros(256, bool)  # what the number fields of a canonical .idx/.lst hold
_NUMERIC[ord("0"):ord("9") + 1] = True
_NUMERIC[[9, 10, ord(".")]] = True
_IDX_BYTES = _NUMERIC.copy()
_IDX_BYTES[ord(".")] = False
# bytes str.splitlines() also breaks on (alone, or inside U+0085, U+2028, U+2029)
_ODD_BYTES = np.zeros(256, bool)
_ODD_BYTES[[0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0xA8, 0xA9]] = True
_ODD_BREAKS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\xc2\x85",
               b"\xe2\x80\xa8", b"\xe2\x80\xa9")


def _table(buf: np.ndarray, tabs_per_line: int):
    """``(line starts, tab positions (n, tabs_per_line), newline positions)`` of a text with
    exactly ``tabs_per_line`` tabs on every line and a final newline; else None."""
    if not len(buf) or buf[-1] != 10:
        return None
    nl = np.flatnonzero(buf == 10)
    tabs = np.flatnonzero(buf == 9)
    n = len(nl)
    if len(tabs) != n * tabs_per_line:
        return None
    if not np.array_equal(np.searchsorted(nl, tabs), np.repeat(np.arange(n), tabs_per_line)):
        return None
    starts = np.empty(n, np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    return starts, tabs.reshape(n, tabs_per_line), nl


def _widths_ok(begin: np.ndarray, end: np.ndarray, most: int) -> bool:
    widths = end - begin
    return bool(widths.min() >= 1 and widths.max() <= most)


def _parse(text: bytes, dtype, n: int) -> np.ndarray | None:
    """``n`` rows of two whitespace-separated numbers, or None if the text has others."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            values = np.fromstring(text, dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning):
            return None
    return values.reshape(n, 2) if len(values) == 2 * n else None


def parse_idx(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """``(keys, offsets)`` of a canonical ``.idx`` (``key<TAB>offset`` lines), else None."""
    buf = np.frombuffer(data, np.uint8)
    table = _table(buf, 1)
    if table is None or not _IDX_BYTES[buf].all():
        return None
    starts, tabs, nl = table
    if not (_widths_ok(starts, tabs[:, 0], MAX_DIGITS)
            and _widths_ok(tabs[:, 0] + 1, nl, MAX_DIGITS)):
        return None
    rows = _parse(data, np.int64, len(nl))
    return None if rows is None else (rows[:, 0].copy(), rows[:, 1].copy())


def parse_lst(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """``(keys, labels)`` of a canonical single-label ``.lst`` (``key<TAB>label<TAB>path``,
    UTF-8), else None."""
    buf = np.frombuffer(data, np.uint8)
    if _ODD_BYTES[buf].any() and any(b in data for b in _ODD_BREAKS):
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    table = _table(buf, 2)
    if table is None:
        return None
    starts, tabs, nl = table
    t1, t2 = tabs[:, 0], tabs[:, 1]
    if not (_widths_ok(starts, t1, MAX_LST_KEY_DIGITS) and _widths_ok(t1 + 1, t2, 32)):
        return None
    edges = np.zeros(len(buf) + 1, np.int8)  # keep key<TAB>label<TAB>, drop the path
    edges[starts] = 1
    edges[t2 + 1] = -1
    chars = buf[np.cumsum(edges[:-1], dtype=np.int8).astype(bool)]
    if not _NUMERIC[chars].all():
        return None
    dots = np.flatnonzero(buf == ord("."))
    line = np.searchsorted(nl, dots)
    numeric = dots < t2[line]
    if not (dots[numeric] > t1[line[numeric]]).all():  # a '.' in a key: int() refuses it
        return None
    rows = _parse(chars.tobytes(), np.float64, len(nl))
    return None if rows is None else (rows[:, 0].astype(np.int64), rows[:, 1].copy())


@dataclass(frozen=True)
class Headers:
    """What a header-only scan read at each ``.idx`` offset (single scalar labels)."""

    ids: np.ndarray  # uint64, the IRHeader id
    labels: np.ndarray  # float32
    payload_bytes: int  # sum of the record payload lengths


def scan_rec(path: str | os.PathLike, offsets: np.ndarray) -> Headers | None:
    """Read the framing and ``IRHeader`` at each offset of a ``.rec``; None unless the
    records form one contiguous chain from byte 0 to the end of the file, each a non-empty
    scalar-label image record."""
    size = os.path.getsize(path)
    n = len(offsets)
    if (not n or size % 4 or offsets[0] != 0 or (offsets % 4).any()
            or not (np.diff(offsets) > 0).all() or offsets[-1] + 8 > size):
        return None
    nexts = np.append(offsets[1:], size)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        words = np.frombuffer(mm, "<u4")
        w = offsets // 4
        last = len(words) - 1
        head = [words[np.minimum(w + j, last)] for j in range(6)]  # copies, not views
        del words
        magic, lrec, flag, label, id_lo, id_hi = head
        cflag, length = lrec >> 29, (lrec & ((1 << 29) - 1)).astype(np.int64)
        if not (magic == recordio.MAGIC).all():
            return None
        ids = id_lo.astype(np.uint64) | (id_hi.astype(np.uint64) << np.uint64(32))
        labels = label.view("<f4").copy()
        single = cflag == 0
        ends = offsets + 8 + ((length + 3) & ~3)
        if not (ends[single] == nexts[single]).all() or (flag[single] != 0).any() \
                or (length[single] <= recordio.IR_SIZE).any():
            return None
        payload = int(length[single].sum())
        for i in np.flatnonzero(~single):  # split at an aligned magic: read it whole
            try:
                got = recordio.read_record_at(f, int(offsets[i]))
                header, image = recordio.unpack_image_record(got[0]) if got else (None, b"")
            except recordio.RecordIOError:
                return None
            if got is None or got[1] != nexts[i] or header.flag != 0 or not image:
                return None
            ids[i], labels[i] = header.id, header.label
            payload += len(got[0])
    return Headers(ids, labels, payload)


def header_at(data: bytes) -> tuple[int, int, int, float, int] | None:
    """``(cflag, length, header id, label, flag)`` of the record starting ``data`` (at least
    32 bytes of it); None if it does not start with the magic."""
    if len(data) < 8 + recordio.IR_SIZE:
        return None
    magic, lrec = struct.unpack_from("<II", data)
    if magic != recordio.MAGIC:
        return None
    flag, label, rid, _ = struct.unpack_from(recordio.IR_FORMAT, data, 8)
    return lrec >> 29, lrec & ((1 << 29) - 1), rid, label, flag


def read_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
