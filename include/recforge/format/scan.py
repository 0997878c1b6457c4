"""Header-only structural scans with numpy: the fast path of ``recforge validate``.

A packed split is proved well-formed without reading its image bytes. The ``.idx`` and
``.lst`` are parsed as whole buffers (``np.fromstring`` after a byte-class check, so only
canonical text is accepted), and the ``.rec`` is read at the ``.idx`` offsets only: the
magic, the length word and the ``IRHeader`` of each record, gathered as ``uint32`` words.
The records are a contiguous chain exactly when every record ends where the next ``.idx``
offset (or the file) begins, which is what a record-by-record reader starting at byte 0
would find, so nothing between the offsets needs reading.

The ``.rec`` is read with ``pread`` into one fixed buffer, never memory-mapped: the
kernel's fault-around and readahead map most of a mapped file into the process, so a
250 MB shard's scan cost a pack task 250 MB of resident memory. Dense records (small ones)
are read a block at a time and their headers gathered from the block; sparse ones (large
records, where a block would be mostly image bytes) get one small ``pread`` each. Either
way the memory is ``BLOCK_BYTES`` plus a few words per record, whatever the file's size.

Every function here answers ``None`` for anything it does not recognise as canonical (a
blank line, a ``+7`` key, a multi-label header, a broken chain): the caller then runs the
record-by-record check, which says exactly what is wrong. So the fast path can only ever
accept what the slow one accepts; it never writes a failure message itself. Records split
at an aligned magic (``cflag`` 1..3, rare in real JPEG data) are read one by one in Python.
"""

from __future__ import annotations

import math
import os
import struct
import warnings
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np

from recforge.format import recordio

MAX_DIGITS = 19  # a uint64 holds every 19-digit number exactly; keys must stay < 2^63
MAX_KEY = 2**63  # record keys are int64 (recforge's hashed keys are 63-bit)
BLOCK_BYTES = 8 << 20  # the .rec read buffer: a multiple of 4, large enough to stream at speed
SPARSE_SPACING = 16 << 10  # mean record size from which one pread per header beats blocks
# (hot, the two cross near 8 KiB; cold, blocks stream better, so the margin)
HEAD_WORDS = 6  # magic, lrec, then IRHeader flag, label and the two halves of id

_DIGITS = np.zeros(256, bool)  # what a number field and its separator may hold
_DIGITS[ord("0"):ord("9") + 1] = True
_DIGITS[[9, 10]] = True
_DECIMAL = _DIGITS.copy()
_DECIMAL[ord(".")] = True
# the UTF-8 of U+0085, U+2028, U+2029, which str.splitlines() breaks on
_ODD_BREAKS = (b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")


def _table(buf: np.ndarray, tabs_per_line: int):
    """``(line starts, tab positions (n, tabs_per_line), newline positions)`` of a text with
    exactly ``tabs_per_line`` tabs on every line, a final newline and no other control
    character (``\\r`` and the like would be line breaks to ``str.splitlines``); else None."""
    if not len(buf) or buf[-1] != 10:
        return None
    nl = np.flatnonzero(buf == 10)
    tabs = np.flatnonzero(buf == 9)
    n = len(nl)
    if len(tabs) != n * tabs_per_line or np.count_nonzero(buf < 32) != n + len(tabs):
        return None
    tabs = tabs.reshape(n, tabs_per_line)
    starts = np.empty(n, np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    # as many tabs as the lines need, in order: each line has its share iff each lies in it
    if not ((tabs[:, 0] >= starts).all() and (tabs[:, -1] < nl).all()):
        return None
    return starts, tabs, nl


def _parse(text: bytes, dtype, n: int) -> np.ndarray | None:
    """``n`` rows of two whitespace-separated numbers, or None if the text holds others."""
    values = _column(text, dtype, 2 * n)
    return None if values is None else values.reshape(n, 2)


def _column(text: bytes, dtype, n: int) -> np.ndarray | None:
    """``n`` whitespace-separated numbers, or None if the text holds others."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            values = np.fromstring(text, dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning):
            return None
    return values if len(values) == n else None


def parse_idx(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """``(keys, offsets)`` of a canonical ``.idx`` (``key<TAB>offset`` lines), else None."""
    buf = np.frombuffer(data, np.uint8)
    table = _table(buf, 1)
    if table is None or not _DIGITS[buf].all():
        return None
    starts, tabs, nl = table
    t = tabs[:, 0]
    if (t - starts).min() < 1 or (t - starts).max() > MAX_DIGITS \
            or (nl - t).min() < 2 or (nl - t).max() > MAX_DIGITS + 1:
        return None
    rows = _parse(data, np.uint64, len(nl))
    if rows is None or (rows >= MAX_KEY).any():
        return None
    return rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64)


def parse_lst(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """``(keys, labels)`` of a canonical single-label ``.lst`` (``key<TAB>label<TAB>path``,
    UTF-8), else None."""
    buf = np.frombuffer(data, np.uint8)
    if (buf >= 0x80).any():  # not ASCII: must be UTF-8
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if any(b in data for b in _ODD_BREAKS):  # a path with U+2028 and the like
            return _parse_lst_lines(data)
    table = _table(buf, 2)
    if table is None:
        return None
    starts, tabs, _ = table
    t1, t2 = tabs[:, 0], tabs[:, 1]
    if (t1 - starts).min() < 1 or (t1 - starts).max() > MAX_DIGITS \
            or (t2 - t1).min() < 2 or (t2 - t1).max() > 32:
        return None
    edges = np.zeros(len(buf) + 1, np.int8)  # 1: key<TAB>, 2: label<TAB>, 0: the path
    edges[starts] = 1
    edges[t1 + 1] = 1
    edges[t2 + 1] = -2
    region = np.cumsum(edges[:-1], dtype=np.int8)
    if ((region == 1) & (buf == ord("."))).any():  # int() refuses a key with a point
        return None
    key_chars, label_chars = buf[region == 1], buf[region == 2]
    if not _DIGITS[key_chars].all() or not _DECIMAL[label_chars].all():
        return None
    keys = _column(key_chars.tobytes(), np.uint64, len(t1))
    labels = _column(label_chars.tobytes(), np.float64, len(t1))
    if keys is None or labels is None or (keys >= MAX_KEY).any():
        return None
    return keys.astype(np.int64), labels


def _parse_lst_lines(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`parse_lst` line by line, split on ``\\n`` alone as MXNet reads a ``.lst``: for
    the rare file whose paths hold a character ``str.splitlines`` breaks at."""
    if not data.endswith(b"\n"):
        return None
    keys, labels = [], []
    for line in data[:-1].split(b"\n"):
        fields = line.split(b"\t")
        if len(fields) != 3 or not fields[0].isdigit() or not fields[2] \
                or len(fields[0]) > MAX_DIGITS or min(line.replace(b"\t", b" ")) < 32:
            return None
        try:
            label = float(fields[1])
        except ValueError:
            return None
        if not math.isfinite(label):
            return None
        keys.append(int(fields[0]))
        labels.append(label)
    if not keys or max(keys) >= MAX_KEY:
        return None
    return np.array(keys, np.int64), np.array(labels, np.float64)


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
            or not (np.diff(offsets) > 0).all() or offsets[-1] > size - 8):
        return None
    nexts = np.append(offsets[1:], size)
    with open(path, "rb") as f:
        read = _read_sparse if size / n >= SPARSE_SPACING else _read_dense
        magic, lrec, flag, label, id_lo, id_hi = read(f.fileno(), offsets, size)
        cflag, length = lrec >> 29, (lrec & ((1 << 29) - 1)).astype(np.int64)
        if not (magic == recordio.MAGIC).all():
            return None
        ids = id_lo.astype(np.uint64) | (id_hi.astype(np.uint64) << np.uint64(32))
        labels = label.view("<f4").copy()
        single = cflag == 0
        ends = offsets + recordio.framed_size(length)
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


def _read_dense(fd: int, offsets: np.ndarray, size: int) -> np.ndarray:
    """The ``(HEAD_WORDS, n)`` header words at ``offsets``, read a block at a time. Each
    block's buffer runs a header past its end, so a header straddling two blocks is read
    whole with the first; bytes past the end of the file read as zero."""
    block = BLOCK_BYTES - BLOCK_BYTES % 4
    head = np.empty((HEAD_WORDS, len(offsets)), "<u4")
    buf = np.empty(block // 4 + HEAD_WORDS, "<u4")
    raw = memoryview(buf).cast("B")
    lo = 0
    for start in range(0, size, block):
        hi = int(np.searchsorted(offsets, start + block))
        if hi == lo:
            continue
        got = os.preadv(fd, [raw], start)
        raw[got:] = bytes(len(raw) - got)
        words = (offsets[lo:hi] - start) // 4
        for j in range(HEAD_WORDS):
            head[j, lo:hi] = buf[words + j]
        lo = hi
    return head


def _read_sparse(fd: int, offsets: np.ndarray, size: int) -> np.ndarray:
    """The ``(HEAD_WORDS, n)`` header words at ``offsets``, one ``pread`` each: for records
    far apart, where reading the blocks would read mostly image bytes. Page-sized reads at a
    stride defeat the kernel's readahead, so a window not yet in the page cache is asked for
    whole first (from a cold cache that is 2 to 4 times faster than the bare preads)."""
    width = 4 * HEAD_WORDS
    offs = offsets.tolist()
    bounds = np.searchsorted(offsets, range(0, size + BLOCK_BYTES, BLOCK_BYTES)).tolist()
    parts = []
    for k, (lo, hi) in enumerate(pairwise(bounds)):
        if lo < hi and not _cached(fd, offs[lo], width):
            os.posix_fadvise(fd, k * BLOCK_BYTES, 2 * BLOCK_BYTES, os.POSIX_FADV_WILLNEED)
        parts += [os.pread(fd, width, o) for o in offs[lo:hi]]
    data = b"".join(parts)
    if len(data) != width * len(offsets):  # the last headers run past the end of the file
        data = b"".join([p.ljust(width, b"\0") for p in parts])
    return np.frombuffer(data, "<u4").reshape(len(offsets), HEAD_WORDS).T


def _cached(fd: int, offset: int, width: int) -> bool:
    """Whether the bytes at ``offset`` are in the page cache (True where the platform
    cannot tell or take the hint, so the caller only reads)."""
    if not hasattr(os, "RWF_NOWAIT") or not hasattr(os, "posix_fadvise"):
        return True
    try:
        os.preadv(fd, [bytearray(width)], offset, os.RWF_NOWAIT)
    except OSError:  # not cached (EAGAIN), or a file system without non-blocking reads
        return False
    return True


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
