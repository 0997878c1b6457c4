"""Validation where the data is: the check of a merged dataset that reads no image bytes.

Every shard was checked structurally by the pack task that wrote it (``recforge.format.scan``
over its ``part.rec``, ``.idx`` and ``.lst``), and merge composed the split's ``.rec`` from
those parts without changing a byte. What is left to prove is the composition, from
``checksums.json``, the object listing, the small files and a few ranged GETs:

- every file in ``checksums.json`` exists with its size; a composed ``.rec`` is exactly as
  long as its parts;
- the ``.idx`` has unique keys and strictly increasing offsets from 0, and every part
  boundary (cumulative part sizes) is a record offset;
- the record at each part boundary, and the last record, read back (32 bytes each):
  magic, framing, the header id equal to its key, the last record ending at the end;
- ``.lst`` keys equal the ``.idx`` keys, labels integers in [0, N); ``records.jsonl`` lists
  exactly the ``.idx`` keys and offsets (and ``mask_offset`` against ``<split>_mask.idx``);
  the counts agree with ``summary.json``.

The report has the shape of ``validate.validate_local``'s, so ``format_report`` prints it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from recforge import storage
from recforge.format import detection_label, names, recordio, scan
from recforge.format.validate import SplitReport, labels_ok
from recforge.kinds import kind_of

READ_THREADS = 8


def _boundaries(parts: list[dict]) -> np.ndarray:
    """The byte offsets where each non-empty part begins."""
    sizes = np.array([p["size"] for p in parts], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return starts[sizes > 0]


def _check_stream(prefix: str, split: str, mask: bool, files: dict, sizes: dict,
                  rep: SplitReport) -> tuple[np.ndarray, np.ndarray] | None:
    """Check one composed ``.rec`` + ``.idx``; returns the ``.idx`` (keys, offsets)."""
    rec_name, idx_name = names.rec(split, mask), names.idx(split, mask)
    composed = files.get(rec_name, {})
    if "parts" not in composed or idx_name not in files:
        rep.fail(f"{names.CHECKSUMS} lists no composed {rec_name} and {idx_name}")
        return None
    parts = composed["parts"]
    size = sum(p["size"] for p in parts)
    if size != composed["size"] or sizes.get(rec_name) != size:
        rep.fail(f"{rec_name} is {sizes.get(rec_name)} bytes; its parts sum to {size}")
        return None
    entries = scan.parse_idx(storage.get_bytes(storage.join(prefix, idx_name)))
    if entries is None:
        rep.fail(f"{idx_name} is not canonical key<TAB>offset lines")
        return None
    keys, offsets = entries
    if len(np.unique(keys)) != len(keys):
        rep.fail(f"{idx_name}: duplicate keys")
    if len(offsets) and (offsets[0] != 0 or not (np.diff(offsets) > 0).all()):
        rep.fail(f"{idx_name}: offsets do not start at 0 and increase strictly")
        return None
    bounds = _boundaries(parts)
    if len(bounds) and not len(offsets):
        rep.fail(f"{rec_name} holds {size} bytes but {idx_name} no record")
        return None
    where = np.searchsorted(offsets, bounds)
    inside = where < len(offsets)
    if not inside.all() or not (offsets[where[inside]] == bounds[inside]).all():
        missing = bounds[~inside | (offsets[np.minimum(where, len(offsets) - 1)] != bounds)]
        rep.fail(f"{rec_name}: part boundaries {missing[:5].tolist()} are not .idx offsets")
        return None
    picks = sorted(set(where.tolist()) | ({len(offsets) - 1} if len(offsets) else set()))
    ends = np.append(offsets[1:], size)
    uri = storage.join(prefix, rec_name)

    def read(i: int) -> str | None:
        got = scan.header_at(storage.get_range(uri, int(offsets[i]), 32))
        if got is None:
            return f"{rec_name}: no record header at byte {offsets[i]} (key {keys[i]})"
        cflag, length, rid, _, _ = got
        if cflag not in (0, 1) or rid != keys[i]:
            return (f"{rec_name}: the record at byte {offsets[i]} has cflag {cflag}, "
                    f"header id {rid}; expected key {keys[i]}")
        if cflag == 0 and offsets[i] + recordio.framed_size(length) != ends[i]:
            return f"{rec_name}: the record at byte {offsets[i]} does not end at {ends[i]}"
        return None

    with ThreadPoolExecutor(READ_THREADS) as pool:
        for msg in pool.map(read, picks):
            if msg:
                rep.fail(msg)
    return keys, offsets


def _records_by_split(prefix: str) -> dict[str, dict[str, np.ndarray]]:
    """``records.jsonl``'s key, offset and mask offset per split, sorted by key."""
    cols: dict[str, dict[str, list[int]]] = {}
    for row in storage.iter_jsonl(storage.join(prefix, names.RECORDS)):
        c = cols.setdefault(row.get("split"), {"key": [], "offset": [], "mask_offset": []})
        c["key"].append(row["key"])
        c["offset"].append(row["offset"])
        c["mask_offset"].append(row.get("mask_offset", -1))
    out = {}
    for split, c in cols.items():
        order = np.argsort(np.array(c["key"], np.int64), kind="stable")
        out[split] = {k: np.array(v, np.int64)[order] for k, v in c.items()}
    return out


def detection_lst(data: bytes, num_classes: int | None) -> tuple[np.ndarray, str | None]:
    """The keys of a detection ``.lst`` and the first problem of its label arrays (each
    line ``key<TAB>label…<TAB>path``, read as im2rec reads it), or None."""
    keys = []
    for n, line in enumerate(data.decode("utf-8").split("\n"), 1):
        if not line:  # the end of the last line (a key may hold any other line break)
            continue
        fields = line.split("\t")
        try:
            keys.append(int(fields[0]))
            labels = [float(x) for x in fields[1:-1]]
        except ValueError:
            return np.array(keys, np.int64), f"line {n}: index or label is not a number"
        why = detection_label.problem(labels, num_classes)
        if why:
            return np.array(keys, np.int64), f"line {n} (key {fields[0]}): {why}"
    return np.array(keys, np.int64), None


def validate_composition(prefix: str, checksums: str, num_classes: int | None = None) -> dict:
    """Check a merged dataset under ``prefix`` (S3 or local) by its composition, as merge's
    ``checksums`` record (a ``checksums.json`` URI) lists it."""
    sizes = {o.key: o.size for o in storage.list_objects(prefix) if "/" not in o.key}
    failures: list[str] = []
    files = storage.read_json(checksums)["files"]
    for name, entry in sorted(files.items()):
        if sizes.get(name) != entry["size"]:
            failures.append(f"{name}: {names.CHECKSUMS} says {entry['size']} bytes, "
                            f"the object is {sizes.get(name, 'missing')}")
    classes = storage.read_json(storage.join(prefix, names.CLASSES)) \
        if names.CLASSES in sizes else {}
    if num_classes is None:
        num_classes = classes.get("num_classes")
    detection = kind_of(classes).boxes
    summary = (storage.read_json(storage.join(prefix, names.SUMMARY))
               if names.SUMMARY in sizes else {})
    records = _records_by_split(prefix)
    splits = sorted(n[:-4] for n in files if n.endswith(".rec")
                    and not n[:-4].endswith(names.MASK_SUFFIX))
    reports = {}
    for split in splits:
        rep = reports[split] = SplitReport(split)
        got = _check_stream(prefix, split, False, files, sizes, rep)
        if got is None:
            continue
        keys, offsets = got
        rep.records = rep.idx_lines = len(keys)
        lst_data = storage.get_bytes(storage.join(prefix, names.lst(split)))
        if detection:
            lst_keys, why = detection_lst(lst_data, num_classes)
            rep.lst_lines = len(lst_keys)
            if why:
                rep.fail(f"{names.lst(split)}: {why}")
            elif not np.array_equal(lst_keys, keys):
                rep.fail(f"{names.lst(split)} and {names.idx(split)} list different keys")
        else:
            lst = scan.parse_lst(lst_data)
        if detection:
            pass
        elif lst is None:
            rep.fail(f"{names.lst(split)} is not canonical key<TAB>label<TAB>path lines")
        else:
            rep.lst_lines = len(lst[0])
            if not np.array_equal(lst[0], keys):
                rep.fail(f"{names.lst(split)} and {names.idx(split)} list different keys")
            if not labels_ok(lst[1], num_classes):
                rep.fail(f"{names.lst(split)}: labels outside the integers [0, {num_classes})")
        mine = records.get(split)
        order = np.argsort(keys, kind="stable")
        if mine is None or not (np.array_equal(mine["key"], keys[order])
                                and np.array_equal(mine["offset"], offsets[order])):
            rep.fail(f"{names.RECORDS} does not list exactly the keys and offsets of "
                     f"{names.idx(split)}")
        if names.rec(split, mask=True) in files:
            masks = _check_stream(prefix, split, True, files, sizes, rep)
            if masks is not None and not (
                    np.array_equal(masks[0], keys) and mine is not None
                    and np.array_equal(mine["mask_offset"], masks[1][order])):
                rep.fail(f"{names.idx(split, True)} is not aligned with {names.idx(split)} "
                         f"and {names.RECORDS}")
        if summary and summary.get("splits", {}).get(split) != rep.records:
            rep.fail(f"{names.SUMMARY} counts {summary.get('splits', {}).get(split)} records, "
                     f"{names.idx(split)} {rep.records}")
    if not reports:
        failures.append(f"{names.CHECKSUMS} lists no split")
    failures += [f"{s}: {f}" for s, r in reports.items() for f in r.failures]
    return {
        "ok": not failures,
        "num_classes": num_classes,
        "splits": {s: {"records": r.records, "idx_lines": r.idx_lines, "lst_lines": r.lst_lines,
                       "failures": r.failures} for s, r in reports.items()},
        "failures": failures,
    }
