"""MXNet RecordIO in plain Python: byte-compatible with dmlc-core, no ``import mxnet``.

The framing follows ``dmlc-core/src/recordio.cc`` exactly, including the part that most
re-implementations miss: a payload that contains the magic number at a 4-byte-aligned
position is split there into continuation parts (cflag 1/2/3) and the magic is dropped
from the data, so a reader can always re-synchronise on the magic. Readers reinsert it.

Record layout (little endian)::

    uint32 magic = 0xced7230a
    uint32 lrec  = cflag << 29 | length
    bytes  data[length]  + zero padding to a multiple of 4

Image records carry MXNet's ``IRHeader`` (``struct 'IfQQ'``: flag, label, id, id2) in
front of the image bytes; ``flag = N > 0`` means N float32 labels follow the header.
The ``.idx`` file is ``key<TAB>byte_offset`` per line, exactly what
``mx.recordio.MXIndexedRecordIO.write_idx`` writes.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_LEN_MASK = (1 << 29) - 1
MAX_RECORD_BYTES = 1 << 29  # dmlc refuses records of 2^29 bytes or more
MAX_OFFSET = (1 << 63) - 1  # MXNet keeps .idx offsets as int64

IR_FORMAT = "IfQQ"
IR_SIZE = struct.calcsize(IR_FORMAT)  # 24


class RecordIOError(ValueError):
    """A ``.rec`` or ``.idx`` file is not well-formed; the message says where."""


@dataclass(frozen=True)
class IRHeader:
    """MXNet's image-record header. ``label`` is a float or a tuple of floats."""

    flag: int
    label: float | tuple[float, ...]
    id: int
    id2: int = 0


def pack_header(label: float | Sequence[float], record_id: int, id2: int = 0) -> bytes:
    """Encode an ``IRHeader`` the way ``mx.recordio.pack`` does.

    A scalar label gives ``flag=0``; a sequence gives ``flag=len`` and the floats follow
    the header (``label`` field 0), which is what ``ImageRecordIter(label_width=N)`` reads.
    """
    if isinstance(label, (int, float)):
        return struct.pack(IR_FORMAT, 0, float(label), record_id, id2)
    labels = [float(x) for x in label]
    return struct.pack(IR_FORMAT, len(labels), 0.0, record_id, id2) + struct.pack(
        f"<{len(labels)}f", *labels
    )


def pack_image_record(
    label: float | Sequence[float], record_id: int, image: bytes, id2: int = 0
) -> bytes:
    """Header + encoded image bytes: the payload of one image record."""
    return pack_header(label, record_id, id2) + image


def unpack_image_record(payload: bytes) -> tuple[IRHeader, bytes]:
    """Split a record payload into its header and image bytes (``mx.recordio.unpack``)."""
    if len(payload) < IR_SIZE:
        raise RecordIOError(f"record of {len(payload)} bytes is shorter than an IRHeader")
    flag, label, rid, id2 = struct.unpack(IR_FORMAT, payload[:IR_SIZE])
    body = payload[IR_SIZE:]
    if flag > 0:
        if len(body) < 4 * flag:
            raise RecordIOError(f"header says {flag} labels but only {len(body)} bytes follow")
        labels = struct.unpack(f"<{flag}f", body[: 4 * flag])
        return IRHeader(flag, tuple(labels), rid, id2), body[4 * flag :]
    return IRHeader(flag, label, rid, id2), body


def framed_size(length, splits=0):
    """Bytes a payload of ``length`` takes in a ``.rec``: the 8-byte header, the payload
    padded to a multiple of 4, and 4 more bytes per magic split (each drops the 4 magic bytes
    from the data and adds an 8-byte part header; the parts before the last are aligned).

    ``len(frame(p)) == framed_size(len(p), splits)`` for a payload split ``splits`` times.
    Works on ints and elementwise on numpy arrays / pandas Series (floor division, so a
    float or NaN length gives what ``8 + floor((length + 3) / 4) * 4`` gives)."""
    return 8 + (length + 3) // 4 * 4 + 4 * splits


def frame(payload: bytes) -> bytes:
    """Frame one payload as dmlc's ``RecordIOWriter::WriteRecord`` does."""
    size = len(payload)
    if size >= MAX_RECORD_BYTES:
        raise RecordIOError(
            f"record of {size} bytes is too large: RecordIO records must be < 2^29 bytes"
        )
    lower_align = (size >> 2) << 2
    pos = payload.find(_MAGIC_BYTES, 0, lower_align)
    if pos == -1:  # the usual record: one part, its bytes copied once
        return b"".join((_MAGIC_BYTES, struct.pack("<I", size), payload,
                         _PADDING[(-size) % 4]))
    out = bytearray()
    dptr = 0
    # Split at every 4-byte-aligned occurrence of the magic (rare, but real in JPEG data).
    while pos != -1:
        if pos % 4 == 0:
            out += _MAGIC_BYTES
            out += struct.pack("<I", ((1 if dptr == 0 else 2) << 29) | (pos - dptr))
            out += payload[dptr:pos]
            dptr = pos + 4
            pos = payload.find(_MAGIC_BYTES, dptr, lower_align)
        else:
            pos = payload.find(_MAGIC_BYTES, pos + 1, lower_align)
    out += _MAGIC_BYTES
    out += struct.pack("<I", ((3 if dptr != 0 else 0) << 29) | (size - dptr))
    out += payload[dptr:]
    out += _PADDING[(-size) % 4]
    return bytes(out)


_PADDING = [b"\0" * n for n in range(4)]


class RecordWriter:
    """Write a ``.rec`` (and optionally its ``.idx``) as MXNet's ``MXIndexedRecordIO`` does.

    A context manager; ``write(key, payload)`` frames and appends one record and returns its
    byte offset; ``write_framed`` appends a record framed elsewhere (im2rec's workers frame
    in parallel); ``sync`` makes both files durable before a rename publishes them.

    ``hashed``: the writer also keeps the SHA-256 of the ``.rec`` (``digest()``) and of
    each group of consecutive records written with the same ``group`` (``group_digests()``),
    as the bytes go out: nothing is read back to hash it.
    """

    def __init__(self, rec_path: str | os.PathLike, idx_path: str | os.PathLike | None = None,
                 hashed: bool = False):
        self._rec = open(rec_path, "wb")
        self._idx = (open(idx_path, "w", encoding="ascii", newline="\n")
                     if idx_path is not None else None)
        self._pos = 0
        self.count = 0
        self._whole = hashlib.sha256() if hashed else None
        self._groups: dict = {}

    def tell(self) -> int:
        return self._pos

    def write(self, key: int | None, payload: bytes, group=None) -> int:
        return self.write_framed(key, frame(payload), group)

    def write_framed(self, key: int | None, framed: bytes, group=None) -> int:
        offset = self._pos
        self._rec.write(framed)
        self._pos += len(framed)
        if self._whole is not None:
            self._whole.update(framed)
            if group is not None:
                digest = self._groups.get(group)
                if digest is None:
                    digest = self._groups[group] = hashlib.sha256()
                digest.update(framed)
        if self._idx is not None:
            if key is None:
                raise ValueError("an indexed writer needs a key for every record")
            self._idx.write(f"{key}\t{offset}\n")
        self.count += 1
        return offset

    def digest(self) -> dict:
        """The ``.rec``'s size and SHA-256 so far (a ``hashed`` writer)."""
        if self._whole is None:
            raise ValueError("this RecordWriter was not opened with hashed=True")
        return {"size": self._pos, "sha256": self._whole.hexdigest()}

    def group_digests(self) -> dict:
        """Each group's SHA-256 (hex) by group; a group with no record written has none."""
        return {g: h.hexdigest() for g, h in self._groups.items()}

    def sync(self) -> None:
        for f in (self._rec, self._idx):
            if f is not None:
                f.flush()
                os.fsync(f.fileno())

    def close(self) -> None:
        self._rec.close()
        if self._idx is not None:
            self._idx.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def concat_indexed(parts: Sequence[tuple[str | os.PathLike, str | os.PathLike]],
                   rec_path: str | os.PathLike, idx_path: str | os.PathLike) -> list[int]:
    """Concatenate ``(part.rec, part.idx)`` pairs into one ``.rec``/``.idx``, in the order
    given: the bytes are copied as they are and each part's offsets are shifted by the bytes
    written before it. Returns each part's base offset (to shift other per-record offsets).
    Keys are not renumbered: parts must already hold their final keys."""
    import shutil

    bases = []
    with open(rec_path, "wb") as rec, open(idx_path, "w", encoding="ascii", newline="\n") as idx:
        for part_rec, part_idx in parts:
            base = rec.tell()
            bases.append(base)
            with open(part_rec, "rb") as part:
                shutil.copyfileobj(part, rec, 1 << 20)
            with open(part_idx, encoding="ascii") as lines:
                for line in lines:
                    if line.strip():
                        key, off = line.rstrip("\n").split("\t")
                        idx.write(f"{key}\t{int(off) + base}\n")
    return bases


def read_record_at(f: BinaryIO, offset: int | None = None) -> tuple[bytes, int] | None:
    """Read one (possibly multi-part) record; returns ``(payload, next_offset)`` or None at EOF.

    Raises ``RecordIOError`` naming the offset on bad magic, bad flags, truncation, or an
    offset that is negative or does not fit a signed 64-bit integer.
    """
    if offset is not None:
        if offset < 0:
            raise RecordIOError(f"offset {offset} is negative (not a record boundary)")
        if offset > MAX_OFFSET:
            raise RecordIOError(f"offset {offset} does not fit a signed 64-bit integer "
                                "(not a record boundary)")
        f.seek(offset)
    start = f.tell()
    parts: list[bytes] = []
    expect_continuation = False
    while True:
        here = f.tell()
        head = f.read(8)
        if not head and not expect_continuation:
            return None
        if len(head) < 8:
            raise RecordIOError(f"truncated record header at byte {here} (record at {start})")
        magic, lrec = struct.unpack("<II", head)
        if magic != MAGIC:
            raise RecordIOError(
                f"bad magic 0x{magic:08x} at byte {here}; expected 0x{MAGIC:08x} "
                "(the offset is not a record boundary or the file is corrupt)"
            )
        cflag, length = lrec >> 29, lrec & _LEN_MASK
        if expect_continuation and cflag not in (2, 3):
            raise RecordIOError(f"record at {start}: expected a continuation part at {here}")
        if not expect_continuation and cflag not in (0, 1):
            raise RecordIOError(f"record at {start}: stray continuation part (cflag={cflag})")
        padded = framed_size(length) - 8
        data = f.read(padded)
        if len(data) < padded:
            raise RecordIOError(
                f"record at {start} is truncated: needs {padded} bytes at {here + 8}, "
                f"file has {len(data)}"
            )
        parts.append(data[:length])
        if cflag in (0, 3):
            break
        expect_continuation = True
    return _MAGIC_BYTES.join(parts), f.tell()


def iter_records(path: str | os.PathLike) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, payload)`` for every record of a ``.rec`` file, in order."""
    with open(path, "rb") as f:
        offset = 0
        while True:
            got = read_record_at(f, offset)
            if got is None:
                return
            payload, nxt = got
            yield offset, payload
            offset = nxt


def read_idx(path: str | os.PathLike) -> list[tuple[int, int]]:
    """Parse a ``.idx`` into ``[(key, offset), ...]`` in file order, naming bad lines.

    Raises ``RecordIOError`` (``path:line: ...``) for a line that is not two integers
    separated by a tab, or whose offset does not fit MXNet's signed 64-bit ``.idx`` offset.
    """
    entries = []
    with open(path, encoding="ascii", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 2:
                raise RecordIOError(
                    f"{path}:{lineno}: expected 'key<TAB>offset', got {len(fields)} field(s)"
                )
            try:
                key, offset = int(fields[0]), int(fields[1])
            except ValueError as exc:
                raise RecordIOError(f"{path}:{lineno}: not integers: {line.strip()!r}") from exc
            if not -MAX_OFFSET - 1 <= offset <= MAX_OFFSET:
                raise RecordIOError(
                    f"{path}:{lineno}: offset {offset} does not fit a signed 64-bit integer, "
                    "so it cannot be a byte offset into the .rec (MXNet reads .idx offsets as "
                    "int64): the .idx is corrupt; re-pack the split to write it again")
            entries.append((key, offset))
    return entries


class IndexedRecordReader:
    """Random access by key over a ``.rec`` + ``.idx`` pair (like ``MXIndexedRecordIO('r')``).

    Raises ``RecordIOError`` naming the file and line when the ``.idx`` is malformed (see
    ``read_idx``), including an offset that does not fit a signed 64-bit integer.
    """

    def __init__(self, idx_path: str | os.PathLike, rec_path: str | os.PathLike):
        self.entries = read_idx(idx_path)
        self.offsets = dict(self.entries)
        self.keys = [k for k, _ in self.entries]
        self._f = open(rec_path, "rb")

    def read_idx(self, key: int) -> bytes:
        """The payload of the record ``key``. Raises ``KeyError`` for a key the ``.idx`` does
        not list and ``RecordIOError`` when its offset is not a well-formed record (bad magic,
        truncated, negative, past the end or beyond a signed 64-bit integer)."""
        got = read_record_at(self._f, self.offsets[key])
        if got is None:
            raise RecordIOError(f"key {key}: offset {self.offsets[key]} is past the end")
        return got[0]

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> IndexedRecordReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.entries)
