"""What the checklist reads: a dataset's manifest files as plain tables, and the ``.rec`` bytes.

MXNet's ``.idx`` holds only ``key<TAB>offset`` (see ERRATA.md), so the checklist runs on what
recforge writes itself: the record manifest pack writes (``records.jsonl``), the source
listing, the quarantine report, ``summary.json``, ``classes.json`` and the ``.idx`` files,
read into :class:`GateInputs` by :func:`load_inputs`; and, for a sample of records, the
``.rec`` bytes themselves, re-read at their manifest offsets by :func:`verify_records`.

At ImageNet size and beyond nothing is held as one Python dict per record: the manifest and
the listing are streamed (:func:`recforge.storage.iter_jsonl`) in chunks into compact
columns (:func:`read_manifest`): low-cardinality strings share one object per value, the dHash
becomes a uint64 column, and the ``.idx`` files become two int64 arrays per split. A
detection record's label array (``recforge.format.detection_label``) becomes a few numeric
columns of its record and one row per object in a numeric objects table
(:func:`detection_labels`), never a Python list per record.
"""

from __future__ import annotations

import logging
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from recforge import storage
from recforge.format import names, recordio

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


@dataclass
class GateInputs:
    """Everything the checks read, as plain tables (tests build these in memory)."""

    records: list[dict] | pd.DataFrame  # a frame from read_records, or rows (tests)
    quarantine: list[dict] = field(default_factory=list)
    not_used: list[dict] = field(default_factory=list)  # not_used.jsonl: set aside, not bad
    sources: list[dict] | pd.DataFrame | None = None  # the source manifest: key, size, etag
    classes: dict | None = None  # classes.json
    summary: dict | None = None  # summary.json
    # split → .idx entries: (key, offset) tuples, or (keys, offsets) int64 arrays
    idx: dict[str, list[tuple[int, int]] | tuple] | None = None
    rec_uris: dict[str, str] = field(default_factory=dict)  # split → .rec URI (decode sample)
    # detection: one row per object of the records' label arrays (OBJECT_COLUMNS; ``row`` is
    # the record's position in ``records``), as read_manifest builds it; None: built from
    # the records' ``label`` lists
    objects: pd.DataFrame | None = None


def load_inputs(prefix: str, source_manifest: str | list[dict] | None = None) -> GateInputs:
    """Read a staging ``out/`` prefix or a published version (local folder or S3)."""
    present = {o.key: o for o in storage.list_objects(prefix) if "/" not in o.key}
    if names.RECORDS not in present:
        raise FileNotFoundError(
            f"{storage.join(prefix, names.RECORDS)} does not exist: the quality gate needs the "
            "record manifest that merge writes; point at a run's out/ prefix or a version")

    def opt_json(name):
        return storage.read_json(storage.join(prefix, name)) if name in present else None

    if isinstance(source_manifest, str):
        sources = read_records(source_manifest, SOURCE_COLUMNS)
    elif source_manifest is None and names.SOURCE_MANIFEST in present:
        sources = read_records(storage.join(prefix, names.SOURCE_MANIFEST), SOURCE_COLUMNS)
    else:
        sources = source_manifest
    # <split>.idx/.rec; segmentation's <split>_mask.* are masks, not splits
    splits = {n[:-4] for n in present if n.endswith(".idx")
              and not n[:-4].endswith(names.MASK_SUFFIX)}
    idx = {}
    with tempfile.TemporaryDirectory(prefix="recforge-quality-") as tmp:
        for split in sorted(splits):
            local = Path(tmp) / names.idx(split)
            storage.download(storage.join(prefix, names.idx(split)), local)
            idx[split] = _idx_arrays(local)
    records, objects = read_manifest(storage.join(prefix, names.RECORDS))
    return GateInputs(
        records=records, objects=objects,
        quarantine=(storage.read_jsonl(storage.join(prefix, names.QUARANTINE))
                    if names.QUARANTINE in present else []),
        not_used=(storage.read_jsonl(storage.join(prefix, names.NOT_USED))
                  if names.NOT_USED in present else []),
        sources=sources, classes=opt_json(names.CLASSES), summary=opt_json(names.SUMMARY),
        idx=idx,
        rec_uris={s: storage.join(prefix, names.rec(s)) for s in splits
                  if names.rec(s) in present},
    )


RECORD_CHUNK = 20_000  # rows parsed as dicts at a time; only their columns are kept
SHARED_STRINGS = ("split", "class_name", "decode_status")  # few values: one object each
DROPPED = ("name",)  # pack writes it for the .lst; no check reads it
SOURCE_COLUMNS = ("key", "etag")


def _idx_arrays(path: Path):
    """A ``.idx`` as (keys, offsets) int64 arrays; a malformed file raises
    ``recordio.read_idx``'s error, which names the line."""
    import numpy as np
    import pandas as pd

    try:
        df = pd.read_csv(path, sep="\t", header=None, names=["key", "offset"],
                         dtype=np.int64, skip_blank_lines=True)
    except (ValueError, pd.errors.ParserError):
        recordio.read_idx(path)  # raises with the line
        raise
    except pd.errors.EmptyDataError:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return df["key"].to_numpy(), df["offset"].to_numpy()


def read_records(uri: str, columns: tuple[str, ...] | None = None) -> pd.DataFrame:
    """:func:`read_manifest`'s records frame (a detection manifest's objects left out)."""
    return read_manifest(uri, columns)[0]


def read_manifest(uri: str, columns: tuple[str, ...] | None = None
                  ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """A JSON-lines manifest as one compact frame, streamed: ``RECORD_CHUNK`` rows are dicts
    at a time. ``columns`` keeps only those; the dHash (``phash``) becomes ``phash_u64``
    (uint64) and ``phash_ok``; ``SHARED_STRINGS`` hold one string object per distinct value.
    Chunks are joined column by column, so the peak is the frame plus one column.

    Label arrays (detection) become ``DETECTION_COLUMNS`` of the records and the objects
    table returned second (:func:`detection_labels`); None when no label is an array."""
    import numpy as np
    import pandas as pd

    shared: dict = {}
    parts: list[tuple[int, dict]] = []
    object_parts: list[pd.DataFrame] = []
    batch: list[dict] = []
    start = 0

    def flush():
        nonlocal start
        df, objects = _compact(pd.DataFrame(batch), columns, shared, start)
        if objects is not None:
            object_parts.append(objects)
        # copies: a column's array can be a view of its chunk's 2D block, which would keep
        # the dropped and converted columns' strings alive (1 KB a record at 1.28 M)
        parts.append((len(df), {c: df[c].array.copy() for c in df.columns}))
        start += len(df)
        batch.clear()

    for row in storage.iter_jsonl(uri):
        batch.append(row)
        if len(batch) >= RECORD_CHUNK:
            flush()
    if batch or not parts:
        flush()
    names_ = list(dict.fromkeys(c for _, cols in parts for c in cols))
    frame = pd.DataFrame(index=pd.RangeIndex(sum(n for n, _ in parts)))
    for col in names_:
        numeric = all(cols[col].dtype.kind in "iufb" for _, cols in parts if col in cols)
        filler = np.nan if numeric else None  # a chunk without the column: missing values
        pieces = [pd.Series(cols.pop(col), copy=False) if col in cols else
                  pd.Series(np.full(n, filler, object if filler is None else float))
                  for n, cols in parts]
        frame[col] = pd.concat(pieces, ignore_index=True).array if len(pieces) > 1 \
            else pieces[0].array
        del pieces
    if "phash_ok" in frame:
        frame["phash_ok"] = frame["phash_ok"].fillna(False).astype(bool)
        frame["phash_u64"] = frame["phash_u64"].fillna(0).astype("uint64")
    objects = None
    if object_parts:
        objects = pd.concat(object_parts, ignore_index=True) if len(object_parts) > 1 \
            else object_parts[0]
        for col, default in DETECTION_DEFAULTS.items():  # chunks of scalar labels only
            if col in frame:
                frame[col] = frame[col].fillna(default).astype(type(default))
    return frame, objects


def _compact(df: pd.DataFrame, columns, shared: dict, start: int = 0
             ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    import numpy as np

    if columns is not None:
        df = df.reindex(columns=[c for c in columns if c in df.columns] or list(columns))
    df = df.drop(columns=[c for c in DROPPED if c in df.columns])
    for col in SHARED_STRINGS:
        if col in df.columns and is_text(df[col]):
            codes, uniques = df[col].factorize()
            values = np.array([shared.setdefault((col, u), u) for u in uniques] + [None],
                              dtype=object)
            df[col] = values[codes]
    if "phash" in df.columns:
        df["phash_u64"], df["phash_ok"] = phash_columns(df.pop("phash"))
    compact_identities(df)
    objects = None
    if "label" in df.columns and holds_label_arrays(df["label"]):
        cols, objects = detection_labels(df.pop("label"), start)
        for col, values in cols.items():
            df[col] = values
    return df, objects


# detection: a record's label array as columns of its record (label_hash: a 64-bit hash of
# the label's float32 values, which the .rec header holds; label_whole: 4 + 6k values,
# k >= 1; label_objects: its objects, padding not counted; NaN where the layout is wrong)
DETECTION_COLUMNS = ("label_values", "label_a", "label_b", "label_width", "label_height",
                     "label_whole", "label_finite", "label_padding_ok", "label_objects",
                     "label_hash")
# the missing value of the boolean columns: a chunk whose labels hold no array at all
DETECTION_DEFAULTS = {"label_whole": False, "label_finite": True, "label_padding_ok": True}
# one row per object: the record's row, the object's row in the label (0-based, padding
# included), and its six values as float32, as the .rec header stores them
OBJECT_COLUMNS = ("row", "object", "class_id", "xmin", "ymin", "xmax", "ymax", "difficult")


def holds_label_arrays(column: pd.Series) -> bool:
    """Whether a label column holds arrays (detection), not one number per record."""
    import numpy as np

    return column.dtype == object and bool(
        column.map(lambda v: isinstance(v, list | tuple | np.ndarray)).any())


def label_hash(values) -> int:
    """A label's 64-bit hash over its float32 values (the manifest's and the header's agree
    exactly when the header holds the manifest's label)."""
    import hashlib

    import numpy as np

    data = np.asarray(values, "<f4").tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def detection_labels(labels, start: int = 0) -> tuple[dict, pd.DataFrame]:
    """Detection label arrays → (``DETECTION_COLUMNS`` as arrays, the objects table).

    ``labels`` holds one label per record (a list of floats; a number or a missing value is
    no array and fails the layout); ``start`` is the first record's row. Mirrors
    ``recforge.format.detection_label.problem``: a label whose layout is wrong (header,
    length, non-finite values, image size) yields no objects, and a row of six -1s is
    padding, not an object. Vectorised over one flat float array per chunk."""
    import numpy as np
    import pandas as pd

    from recforge.format import detection_label as dl

    seq = [_label_list(v) for v in (labels.tolist() if hasattr(labels, "tolist") else labels)]
    n = len(seq)
    present = np.fromiter((v is not None for v in seq), bool, n)
    sizes = np.fromiter((len(v) if v is not None else 0 for v in seq), np.int64, n)
    total = int(sizes.sum())
    flat = _flat_labels(seq, total)
    starts = np.zeros(n, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    owner = np.repeat(np.arange(n), sizes)
    pos = np.arange(total) - starts[owner]

    def at(i: int):
        out = np.full(n, np.nan)
        ok = sizes > i
        out[ok] = flat[starts[ok] + i]
        return out

    a, b, w, h = (at(i) for i in range(dl.HEADER_WIDTH))
    hw, ow = dl.HEADER_WIDTH, dl.OBJECT_WIDTH
    whole = (sizes >= hw + ow) & ((sizes - hw) % ow == 0)
    finite = np.bincount(owner[~np.isfinite(flat)], minlength=n) == 0
    with np.errstate(invalid="ignore"):
        layout = (whole & (a == hw) & (b == ow) & finite & (w >= 1) & (h >= 1)
                  & (w == np.floor(w)) & (h == np.floor(h)))
    in_object = layout[owner] & (pos >= hw)
    rows = flat[in_object].reshape(-1, ow)
    row_of = owner[in_object][::ow]
    index = (pos[in_object][::ow] - hw) // ow
    pad = (rows == -1).all(axis=1)
    per_record = np.bincount(row_of, minlength=n)
    pads = np.bincount(row_of[pad], minlength=n)
    cols = {
        "label_values": np.where(present, sizes, np.nan).astype(np.float32),
        "label_a": a.astype(np.float32), "label_b": b.astype(np.float32),
        "label_width": w.astype(np.float32), "label_height": h.astype(np.float32),
        "label_whole": whole | ~present,  # a missing label: reported as missing
        "label_finite": finite,
        "label_padding_ok": ~((pads > 0) & (per_record > 1)),
        "label_objects": np.where(layout, per_record - pads, np.nan).astype(np.float32),
        "label_hash": pd.arrays.IntegerArray(_label_hashes(flat, starts, sizes), ~present),
    }
    keep = ~pad
    objects = pd.DataFrame({"row": (row_of[keep] + start).astype(np.int64),
                            "object": index[keep].astype(np.int32)})
    for j, name in enumerate(dl.FIELDS):
        objects[name] = rows[keep, j].astype(np.float32)
    return cols, objects


def _label_list(v) -> list | tuple | None:
    """A record's label as a sequence of values; None: no label at all."""
    import numpy as np

    if isinstance(v, list | tuple):
        return v
    if isinstance(v, np.ndarray):
        return v.ravel().tolist()
    if isinstance(v, int | float | np.number) and not isinstance(v, bool) \
            and not (isinstance(v, float) and np.isnan(v)):
        return [v]  # a class label: a layout failure, reported as one
    return None


def _flat_labels(seq: list, total: int):
    """The labels' values one after the other, as the ``.rec`` header holds them (float32,
    widened); a value that is no number is NaN."""
    import itertools

    import numpy as np

    try:
        flat = np.fromiter(itertools.chain.from_iterable(v for v in seq if v is not None),
                           np.float64, total)
    except (TypeError, ValueError):  # a value that is no number: NaN, a layout failure
        flat = np.array([_number(x) for v in seq if v is not None for x in v], np.float64)
    return flat.astype(np.float32).astype(np.float64)  # what the .rec header holds


def _label_hashes(flat, starts, sizes):
    """Each label's ``label_hash`` (uint64), from its run of ``flat``."""
    import hashlib

    import numpy as np

    data = memoryview(flat.astype("<f4").tobytes())
    ends = (starts + sizes) * 4
    digests = b"".join(hashlib.blake2b(data[s:e], digest_size=8).digest()
                       for s, e in zip((starts * 4).tolist(), ends.tolist(), strict=True))
    return np.frombuffer(digests, "<u8").astype(np.uint64)


def _number(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def is_text(column: pd.Series) -> bool:
    """A column of Python strings: ``object`` under pandas 2, ``str`` under pandas 3 (whose
    default python storage keeps the very objects it is given, so sharing them still holds)."""
    import pandas as pd

    return column.dtype == object or pd.api.types.is_string_dtype(column.dtype)


def compact_identities(df: pd.DataFrame) -> None:
    """In place: the SHA-256 hex column becomes ``sha_hi``/``sha_lo`` (its first 128 bits as
    two nullable uint64) and ETag columns become a 64-bit hash (nullable uint64); they are
    only compared for equality, and as Python strings they were half the frame's memory."""
    import numpy as np
    import pandas as pd

    if "source_sha256" in df.columns:
        hexes = df.pop("source_sha256").to_numpy(object)
        hi = np.zeros(len(hexes), np.uint64)
        lo = np.zeros(len(hexes), np.uint64)
        ok = np.zeros(len(hexes), bool)
        for i, h in enumerate(hexes):
            if isinstance(h, str) and len(h) >= 32:
                try:
                    hi[i], lo[i], ok[i] = int(h[:16], 16), int(h[16:32], 16), True
                except ValueError:
                    pass
        df["sha_hi"] = pd.arrays.IntegerArray(hi, ~ok)
        df["sha_lo"] = pd.arrays.IntegerArray(lo, ~ok)
    for col in ("source_etag", "etag"):
        if col in df.columns and is_text(df[col]):
            values = df[col].to_numpy(object)
            missing = pd.isna(values)
            hashed = pd.util.hash_array(np.where(missing, "", values).astype(str).astype(object))
            df[col] = pd.arrays.IntegerArray(hashed.astype(np.uint64), missing)


def phash_columns(hexes: pd.Series):
    """Hex dHashes → (uint64 values, valid): a value that is no 16-digit hex string is 0
    and not valid."""
    import numpy as np

    from recforge import phash

    ok = hexes.map(lambda h: isinstance(h, str) and len(h) == phash.HEX_DIGITS).to_numpy(bool)
    values = np.zeros(len(hexes), dtype=np.uint64)
    try:
        values[ok] = phash.to_uint64(hexes[ok])
    except ValueError:  # not hex: check each
        for i in np.flatnonzero(ok):
            try:
                values[i] = int(hexes.iat[i], 16)
            except ValueError:
                ok[i] = False
    return values, ok


VERIFY_COLUMNS = ("rec_status", "rec_id_ok", "rec_label_ok", "rec_shape_ok")


def verify_records(records: pd.DataFrame, rec_uris: dict[str, str], sample: int | None,
                   threads: int = 8) -> pd.DataFrame:
    """Re-read a deterministic sample of records from the ``.rec`` at their manifest offsets.

    Adds ``rec_status`` (ok / bad_record / undecodable), ``rec_id_ok`` and ``rec_label_ok``
    (the header's id and label equal the manifest's) and ``rec_shape_ok`` (decoded shape
    equals the manifest's). Rows not sampled stay null: GX counts them as missing, not as
    failures.
    """

    import numpy as np
    import pandas as pd

    if sample == 0 or records.empty:
        for col in VERIFY_COLUMNS:
            records[col] = None
        return records
    verifier = _Verifier(records, _sample_reads(records, rec_uris, sample))
    jobs = verifier.jobs
    # the sampled records of a .rec in a few coalesced reads, not one GET each: the same
    # bytes, sliced per record
    columns = {col: np.full(len(records), None, dtype=object) for col in VERIFY_COLUMNS}
    n_reads = 0
    for checked in storage.read_spans([(uri, start, span) for _, uri, start, span in jobs],
                                      verifier.fetched, threads):
        n_reads += 1
        for at, values in checked:
            for col, value in zip(VERIFY_COLUMNS, values, strict=True):
                columns[col][at] = value
    for col, values in columns.items():  # object columns, as before: None where not sampled
        records[col] = pd.Series(values, index=records.index, dtype=object)
    log.info("quality: re-read and decoded %d records from the .rec files in %d reads",
             len(jobs), n_reads)
    return records


def _sample_reads(records: pd.DataFrame, rec_uris: dict[str, str], sample: int | None
                  ) -> list[tuple[int, str, int, int]]:
    """The reads of the sampled records, ``(position, uri, start, span)``: per split with a
    ``.rec``, ``sample`` records spread evenly over it in offset order (all of them where it
    has no more, or ``sample`` is None)."""
    import numpy as np

    # by position and by column: one column read per field for the sampled rows, not a
    # pandas row lookup per record (the checklist's main thread shares the interpreter with
    # GX's import)
    offsets = records["offset"].to_numpy()
    lengths = records["length"].to_numpy()
    jobs = []  # (position, uri, start, span)
    for split, positions in records.groupby("split", sort=False, observed=True).indices.items():
        uri = rec_uris.get(split)
        if uri is None:
            continue
        positions = positions[np.argsort(offsets[positions], kind="stable")]
        picked = range(len(positions))
        if sample is not None and len(positions) > sample:
            picked = np.unique(np.linspace(0, len(positions) - 1, sample).round().astype(int))
        for i in picked:
            at = int(positions[i])
            start, length = int(offsets[at]), int(lengths[at])
            end = int(offsets[positions[i + 1]]) if i + 1 < len(positions) else None
            # the next record's offset bounds this one; the last gets slack for magic splits
            span = (end - start) if end is not None and end > start else (
                recordio.framed_size(length, splits=length // 4 + 1))
            jobs.append((at, uri, start, max(span, 8)))
    return jobs


class _Verifier:
    """The sampled records' reads (``jobs``) and what the manifest says of each
    (``expected``: column → one value per job); checks what is read against it."""

    def __init__(self, records: pd.DataFrame, jobs: list[tuple[int, str, int, int]]):
        self.jobs = jobs
        self.detection = "label_hash" in records.columns  # the header holds the label array
        sampled = [at for at, _, _, _ in jobs]
        self.expected = dict(zip(
            ("split", "key", "height", "width", "channels", "label"),
            ([None] * len(jobs) if name not in records.columns
             else records[name].iloc[sampled].tolist()
             for name in ("split", "key", "height", "width", "channels",
                          "label_hash" if self.detection else "label")), strict=True))

    def fetched(self, members: list[int], got) -> list:
        """One coalesced ranged read of a .rec (``storage.read_spans``): its records checked."""
        if isinstance(got, Exception):  # could not read: not a fact about the records
            if not _past_the_end(got):  # raised as it is: a transient one stays transient
                first = self.jobs[members[0]]
                log.error("quality: could not read %s from byte %d to check %d record(s) "
                          "(failing the task, to be retried): %r", first[1], first[2],
                          len(members), got)
                raise got
            got = [b""] * len(members)  # the manifest points past the end: read, and wrong
        return [(self.jobs[j][0], self.check(j, data))
                for j, data in zip(members, got, strict=True)]

    def check(self, j: int, data: bytes):
        """Job ``j``'s bytes → (rec_status, rec_id_ok, rec_label_ok, rec_shape_ok)."""
        import io

        import cv2
        import numpy as np

        start, expected = self.jobs[j][2], self.expected
        try:
            got = recordio.read_record_at(io.BytesIO(data), 0)
            if got is None:
                raise recordio.RecordIOError(f"no record at byte {start}")
            header, img_bytes = recordio.unpack_image_record(got[0])
        except recordio.RecordIOError as exc:  # read, and wrong: the record is bad
            log.warning("record %s/%s at byte %d: %s", expected["split"][j],
                        expected["key"][j], start, exc)
            return "bad_record", False, None, None
        id_ok = header.id == int(expected["key"][j])
        label_ok = self.label_ok(header, expected["label"][j])
        try:
            img = cv2.imdecode(np.frombuffer(img_bytes, np.uint8), cv2.IMREAD_UNCHANGED)
        except cv2.error:
            img = None
        if img is None:
            return "undecodable", id_ok, label_ok, None
        c = 1 if img.ndim == 2 else img.shape[2]
        shape_ok = (img.shape[0], img.shape[1], c) == (
            int(expected["height"][j]), int(expected["width"][j]), int(expected["channels"][j]))
        return "ok", id_ok, label_ok, shape_ok

    def label_ok(self, header: recordio.IRHeader, want) -> bool:
        """The header's label is the manifest's (detection: by ``label_hash``)."""
        import pandas as pd

        if self.detection:
            got = header.label if isinstance(header.label, tuple) else [header.label]
            return not pd.isna(want) and label_hash(got) == int(want)
        label = header.label[0] if isinstance(header.label, tuple) else header.label
        return _label_equal(label, want)


def _past_the_end(exc: Exception) -> bool:
    """S3's answer to a range that starts after the object's last byte (416)."""
    response = getattr(exc, "response", None)
    return isinstance(response, dict) and (
        str(response.get("Error", {}).get("Code")) == "InvalidRange"
        or response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 416)


def _label_equal(a, b) -> bool:
    try:
        return math.isclose(float(a), float(b))
    except (TypeError, ValueError):
        return False
