"""Structural validation of a packed dataset (``recforge validate PREFIX``).

MXNet itself verifies nothing (im2rec has no ``--verify``), and a ``.rec`` whose ``.idx``
points between records crashes training hours in. Checked per split: unique ``.idx`` keys,
strictly increasing offsets, a valid record at every offset and an offset for every
record, consistent framing, no trailing bytes, equal counts across ``.rec``/``.idx``/``.lst``,
header ids equal to ``.idx`` keys, ``.lst`` labels equal to header labels, and integer labels
in [0, N) where N comes from ``classes.json``, and at least one record (an empty split is
not a dataset). ``.lst`` items that ``recforge im2rec`` recorded in
``<split>.quarantine.tsv`` beside its output are expected to be missing from the ``.rec``:
they are counted and reported, not failed (an item missing that the report does not name
still fails). Segmentation splits (``<split>_mask.idx``
present, or ``ignore_index`` in ``classes.json``) also get ``format.paired.validate_mask_split``:
aligned keys, single-channel PNG masks of the image's size, values in [0, N) or ignore.
Detection splits (``"task": "detection"`` in ``classes.json``) check each header's label
array by ``format.detection_label.problem`` instead: its layout, class ids in [0, N), boxes
inside [0, 1] with xmin < xmax and ymin < ymax.

Each split is first tried by the header-only scan (``format.scan``: numpy over the whole
``.idx``/``.lst`` and the ``.rec``'s headers read at the ``.idx`` offsets only), which
proves a canonical split valid at a million records a second; anything it does not
recognise goes record by record (``validate_split_records``), which names every failure.

None of that reads an image byte, so a prefix on S3 is checked without downloading its
``.rec`` files: each is read by its record headers alone (``format.ranged``), and the same
checks run on what was read. Only the segmentation masks' PNG format, size and values
need every byte: ``full=True`` (``recforge validate --full``) downloads the files and
decodes them; without it their keys, framing and header ids are checked.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recforge import storage
from recforge.format import detection_label, names, ranged, recordio, scan
from recforge.format.paired import validate_mask_split
from recforge.kinds import CLASSIFICATION, KINDS, Kind

log = logging.getLogger(__name__)
MAX_REPORTED = 20


@dataclass
class SplitReport:
    split: str
    records: int = 0
    idx_lines: int = 0
    lst_lines: int = 0
    quarantined: int = 0  # .lst lines that <split>.quarantine.tsv says were not packed
    failures: list[str] = field(default_factory=list)

    def fail(self, msg: str) -> None:
        if len(self.failures) < MAX_REPORTED:
            self.failures.append(msg)
        elif len(self.failures) == MAX_REPORTED:
            self.failures.append("... more failures not shown")

    @property
    def ok(self) -> bool:
        return not self.failures


def _labels_of(header: recordio.IRHeader) -> tuple[float, ...]:
    return header.label if isinstance(header.label, tuple) else (header.label,)


def validate_split(root: Path, split: str, num_classes: int | None,
                   detection: bool = False) -> SplitReport:
    """Every check of the module docstring on one split: the header-only scan
    (``format.scan``) when the files are canonical, else record by record, which names
    every failure."""
    fast = None if detection else validate_split_fast(root, split, num_classes)
    rep = fast if fast is not None else validate_split_records(root, split, num_classes,
                                                               detection)
    rec, idx, lst = (root / names.rec(split), root / names.idx(split), root / names.lst(split))
    if rep.records == 0 and rep.idx_lines == 0 and rec.exists() and idx.exists() \
            and rec.stat().st_size == 0:
        if rep.lst_lines and rep.lst_lines == rep.quarantined:
            rep.fail(f"every item of {lst.name} is quarantined (see "
                     f"{names.quarantine_tsv(split)}), so {rec.name} and {idx.name} hold no "
                     "records: an empty split is not a dataset; fix or replace the images "
                     "the report names and pack the split again")
        else:
            empty = [p.name for p in (rec, idx, lst) if p.exists() and not p.stat().st_size]
            what = (f"{', '.join(empty[:-1])} and {empty[-1]} are empty" if len(empty) > 1
                    else f"{rec.name} is empty")
            rep.fail(f"{what}: the split has no records, and an empty split is not a "
                     "dataset; pack it from a .lst that lists images, or delete its files if "
                     "the split is not wanted")
    return rep


class QuarantineReportError(ValueError):
    """A ``<split>.quarantine.tsv`` is not the table ``recforge im2rec`` writes."""


def read_quarantine_tsv(path: Path) -> dict[int, int | None]:
    """``{.lst line number: .lst index}`` of every item in a ``recforge im2rec`` quarantine
    report (the index is None where the line had none that could be read). Raises
    ``QuarantineReportError`` naming the line when the file is not that table."""
    # im2rec replaces tabs and line breaks inside fields, so rows are split on "\n" only
    rows = path.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
    columns = names.QUARANTINE_TSV_COLUMNS
    if tuple(rows[0].split("\t")) != columns:
        raise QuarantineReportError(f"{path.name}:1: the header is not "
                                    f"{'<TAB>'.join(columns)!r}; it is not recforge "
                                    "im2rec's quarantine report")
    out: dict[int, int | None] = {}
    for n, row in enumerate(rows[1:], 2):
        if not row:
            continue
        fields = row.split("\t")
        try:
            if len(fields) != len(columns):
                raise ValueError(f"{len(fields)} tab-separated field(s), not {len(columns)}")
            line, key = int(fields[0]), int(fields[1]) if fields[1] else None
            if line < 1 or line in out:
                raise ValueError(f".lst line {line} is not a line number or is listed twice")
        except ValueError as exc:
            raise QuarantineReportError(f"{path.name}:{n}: {exc}") from None
        out[line] = key
    return out


def _quarantine_of(root: Path, split: str, rep: SplitReport) -> dict[int, int | None]:
    """The split's im2rec quarantine report, ``{}`` when there is none (or it is broken,
    which is then a failure of the split)."""
    path = root / names.quarantine_tsv(split)
    if not path.exists():
        return {}
    try:
        return read_quarantine_tsv(path)
    except (QuarantineReportError, UnicodeDecodeError) as exc:
        rep.fail(f"{exc}; fix or delete it, or pack the split again to write it anew")
        return {}


def labels_ok(labels: np.ndarray, num_classes: int | None) -> bool:
    """Every label a finite integer, in [0, num_classes) when that is known."""
    good = np.isfinite(labels)
    good[good] = labels[good] == np.floor(labels[good])
    if num_classes is not None:
        good &= (labels >= 0) & (labels < num_classes)
    return bool(good.all())


def validate_split_fast(root: Path, split: str, num_classes: int | None) -> SplitReport | None:
    """The split's report if the header-only scan proves it valid; None when anything
    needs a closer look (the record-by-record path then says what)."""
    rec, idx, lst = (root / names.rec(split), root / names.idx(split), root / names.lst(split))
    idx_data, lst_data = scan.read_file(idx), scan.read_file(lst)
    if idx_data is None or lst_data is None or not rec.exists():
        return None
    entries, rows = scan.parse_idx(idx_data), scan.parse_lst(lst_data)
    if entries is None or rows is None:
        return None
    probe = SplitReport(split)
    quarantined = _quarantine_of(root, split, probe)
    if not probe.ok:
        return None
    lst_lines = len(rows[0])
    if quarantined:  # a canonical .lst has no blank lines: row i is line i + 1
        lines = np.array(sorted(quarantined), np.int64)
        if lines[-1] > lst_lines:
            return None
        qkeys = [quarantined[n] for n in lines.tolist()]
        known = np.array([k is not None for k in qkeys])
        if not np.array_equal(rows[0][lines[known] - 1],
                              np.array([k for k in qkeys if k is not None], np.int64)):
            return None
        keep = np.ones(lst_lines, bool)
        keep[lines - 1] = False
        rows = (rows[0][keep], rows[1][keep])
    keys, offsets = entries
    increasing = bool((np.diff(keys) > 0).all())  # merged splits: no sort needed
    if not increasing and len(np.unique(keys)) != len(keys) or not np.array_equal(rows[0], keys):
        return None
    headers = scan.scan_rec(rec, offsets)
    if headers is None or not np.array_equal(headers.ids, keys.astype(np.uint64)):
        return None
    labels = headers.labels.astype(np.float64)
    if not labels_ok(labels, num_classes) or not np.array_equal(labels, rows[1]):
        return None
    n = len(keys)
    return SplitReport(split, records=n, idx_lines=n, lst_lines=lst_lines,
                       quarantined=len(quarantined))


def validate_split_records(root: Path, split: str, num_classes: int | None,
                           detection: bool = False) -> SplitReport:
    """The record-by-record check: reads every record whole and names every failure."""
    rep = SplitReport(split)
    rec, idx, lst = (root / names.rec(split), root / names.idx(split), root / names.lst(split))
    for p in (rec, idx):
        if not p.exists():
            rep.fail(f"{p.name} is missing")
    if not rep.ok:
        return rep
    entries = _idx_entries(idx, rep)
    if entries is None:
        return rep
    keys = [k for k, _ in entries]
    by_offset = {o: k for k, o in entries}
    quarantined = _quarantine_of(root, split, rep)
    lst_rows = _lst_rows(lst, split, quarantined, rep)
    seen_offsets = _check_records(rec, by_offset, lst_rows, num_classes, detection, rep)
    for off in sorted(set(by_offset) - seen_offsets)[:5]:
        rep.fail(f"{idx.name}: key {by_offset[off]} points at byte {off}, not a record start")
    if lst_rows and set(lst_rows) != set(keys):
        rep.fail(f"{lst.name} and {idx.name} list different keys")
    expected = rep.lst_lines - rep.quarantined if lst.exists() else rep.records
    if not (rep.records == rep.idx_lines == expected):
        rep.fail(f"counts differ: {rep.records} records, {rep.idx_lines} .idx lines, "
                 f"{rep.lst_lines} .lst lines" + (f" ({rep.quarantined} quarantined)"
                                                  if rep.quarantined else ""))
    return rep


def _idx_entries(idx: Path, rep: SplitReport) -> list[tuple[int, int]] | None:
    """The ``.idx``'s (key, offset) entries, counted in ``rep``; duplicate keys and offsets
    not strictly increasing are failures. None: the file is not an ``.idx``."""
    try:
        entries = recordio.read_idx(idx)
    except recordio.RecordIOError as exc:
        rep.fail(str(exc))
        return None
    rep.idx_lines = len(entries)
    keys = [k for k, _ in entries]
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})[:5] if len(keys) < 100_000 else []
        rep.fail(f"{idx.name}: duplicate keys {dup}")
    for (_k0, o0), (k1, o1) in zip(entries, entries[1:], strict=False):
        if o1 <= o0:
            rep.fail(f"{idx.name}: offsets not strictly increasing at key {k1} ({o0} → {o1})")
    return entries


def _lst_rows(lst: Path, split: str, quarantined: dict[int, int | None],
              rep: SplitReport) -> dict[int, tuple[float, ...]]:
    """The ``.lst``'s labels by index, as im2rec packs them (each a float32), its lines
    counted in ``rep``; a line the quarantine report names is counted, not read, and must
    hold the index the report names."""
    lst_rows: dict[int, tuple[float, ...]] = {}
    if not lst.exists():
        rep.fail(f"{lst.name} is missing")
        return lst_rows
    try:
        lst_text = lst.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        rep.fail(f"{lst.name} is not UTF-8 ({exc.reason} at byte {exc.start})")
        return lst_rows
    lines = lst_text.split("\n")  # a path may hold U+2028 and the like: "\n" alone
    if lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        if n in quarantined:  # not packed, as its quarantine report says
            rep.lst_lines += 1
            rep.quarantined += 1
            index = line.split("\t")[0].strip()
            if quarantined[n] is not None and not (
                    index.isdigit() and int(index) == quarantined[n]):
                rep.fail(f"{names.quarantine_tsv(split)} names index {quarantined[n]} "
                         f"for {lst.name}:{n}, which is {line!r}: the report is not "
                         f"this .lst's; pack the split again")
            continue
        fields = line.split("\t")
        if len(fields) < 3:
            rep.fail(f"{lst.name}:{n}: needs index, label(s) and path")
            continue
        try:
            # as im2rec reads a .lst: each label a float, packed as float32
            lst_rows[int(fields[0])] = tuple(float(np.float32(float(x)))
                                             for x in fields[1:-1])
        except ValueError:
            rep.fail(f"{lst.name}:{n}: index or label is not a number")
        rep.lst_lines += 1
    beyond = sorted(n for n in quarantined if n > len(lines))
    if beyond:
        rep.fail(f"{names.quarantine_tsv(split)} names {lst.name} line {beyond[0]}, but "
                 f"{lst.name} has {len(lines)} lines: the report is not this .lst's; pack "
                 "the split again")
    return lst_rows


def _check_records(rec: Path, by_offset: dict[int, int],
                   lst_rows: dict[int, tuple[float, ...]], num_classes: int | None,
                   detection: bool, rep: SplitReport) -> set[int]:
    """Read every record of the ``.rec``, counted in ``rep``: each must start at an ``.idx``
    offset and hold a valid header (``_check_record``) and an image; the file must end
    after its last record. Returns the offsets of the records read."""
    seen_offsets = set()
    try:
        for offset, payload in recordio.iter_records(rec):
            rep.records += 1
            seen_offsets.add(offset)
            key = by_offset.get(offset)
            if key is None:
                rep.fail(f"{rec.name}: record at byte {offset} has no .idx entry")
                continue
            try:
                header, image = recordio.unpack_image_record(payload)
            except recordio.RecordIOError as exc:
                rep.fail(f"{rec.name}: key {key}: {exc}")
                continue
            _check_record(f"{rec.name}: key {key}", key, header, lst_rows.get(key),
                          num_classes, detection, rep)
            if not image:
                rep.fail(f"{rec.name}: key {key}: empty image payload")
    except recordio.RecordIOError as exc:
        rep.fail(f"{rec.name}: {exc} (trailing or corrupt bytes)")
    return seen_offsets


def _check_record(where: str, key: int, header: recordio.IRHeader,
                  lst_labels: tuple[float, ...] | None, num_classes: int | None,
                  detection: bool, rep: SplitReport) -> None:
    """One record's header (``where`` names it in a failure): its id is its ``.idx`` key,
    its labels are integers in [0, num_classes) (a detection label array: by
    ``detection_label.problem``) and equal to its ``.lst`` line's (``lst_labels``; None:
    no line)."""
    if header.id != key:
        rep.fail(f"{where}: header id is {header.id}")
    labels = _labels_of(header)
    why = detection_label.problem(labels, num_classes) if detection else None
    if why:
        rep.fail(f"{where}: detection label: {why}")
    for lab in () if detection else labels:
        if not math.isfinite(lab) or lab != int(lab) or (
                num_classes is not None and not 0 <= lab < num_classes):
            rep.fail(f"{where}: label {lab} outside the integers [0, {num_classes})")
    if lst_labels is not None and lst_labels != labels:
        rep.fail(f"{where}: header labels {labels} != .lst {lst_labels}")


def validate_local(root: Path, num_classes: int | None = None, shown: str | None = None,
                   full: bool = True) -> dict:
    """Validate every split found under a local folder; ``shown`` names it in the failures
    (the S3 prefix whose files were downloaded there). ``full=False``: the ``.rec`` files
    are ``format.ranged`` stand-ins, whose image bytes are holes: masks are not decoded."""
    root = Path(root)
    if not root.is_dir():
        return {"ok": False, "num_classes": num_classes, "splits": {},
                "failures": [f"{shown or root} does not exist" if not root.exists()
                             else f"{shown or root} is a file, not a folder"]}
    classes = root / names.CLASSES
    try:
        doc = json.loads(classes.read_text(encoding="utf-8")) if classes.exists() else {}
        if not isinstance(doc, dict):
            raise ValueError("the top level is not an object")
        for name, low in (("num_classes", 1), ("ignore_index", 0)):
            value = doc.get(name)
            if value is not None and (type(value) is not int or value < low):
                raise ValueError(f"{name} is {value!r}, not a whole number >= {low}")
    except (ValueError, UnicodeDecodeError) as exc:
        return {"ok": False, "num_classes": num_classes, "splits": {},
                "failures": [f"{names.CLASSES} is not a valid classes document: {exc}"]}
    if num_classes is None:
        num_classes = doc.get("num_classes")
    splits = sorted({p.stem for pattern in ("*.rec", "*.idx") for p in root.glob(pattern)
                     if not p.stem.endswith(names.MASK_SUFFIX)})
    if not splits:
        return {"ok": False, "num_classes": num_classes,
                "splits": {}, "failures": [f"no *.rec or *.idx files under {shown or root}"]}
    reports = {s: validate_split(root, s, num_classes, _kind_named(doc).boxes) for s in splits}
    masked = [s for s in splits if (root / names.idx(s, mask=True)).exists()
              or doc.get("ignore_index") is not None]
    for s in masked:  # segmentation: <split>_mask.rec must match <split>.rec
        for msg in validate_mask_split(root, s, num_classes, doc.get("ignore_index", 255),
                                       decode=full):
            reports[s].fail(msg)
    return {
        "ok": all(r.ok for r in reports.values()),
        "num_classes": num_classes,
        "splits": {s: {"records": r.records, "idx_lines": r.idx_lines, "lst_lines": r.lst_lines,
                       "quarantined": r.quarantined, "failures": r.failures}
                   for s, r in reports.items()},
        "failures": [f"{s}: {f}" for s, r in reports.items() for f in r.failures],
        "notes": [f"{s}: {r.quarantined} .lst item(s) quarantined by recforge im2rec, not in "
                  f"{names.rec(s)} as expected; see {names.quarantine_tsv(s)}"
                  for s, r in reports.items() if r.quarantined]
        + [f"{s}: masks checked by key, framing and header id; their PNG format, size and "
           "values need every byte: --full decodes them" for s in masked if not full],
    }


def _kind_named(doc: dict) -> Kind:
    """The kind ``classes.json`` names (``task``); a document without the field, or naming
    no kind the table holds (one written elsewhere), is checked as classification."""
    task = doc.get("task")
    return KINDS.get(task, CLASSIFICATION) if isinstance(task, str) else CLASSIFICATION


def validate_prefix(prefix_uri: str, num_classes: int | None = None,
                    full: bool = False) -> dict:
    """Validate a local folder or an S3 prefix. From S3 the ``.idx``, ``.lst``, quarantine
    reports and ``classes.json`` are downloaded to a temporary folder and each ``.rec`` is
    read by its record headers (``format.ranged``), or, with ``full``, downloaded whole
    and its masks decoded. The report's ``read``: the bytes read from S3 (``bytes``) of the
    bytes of the files checked (``of``), and whether it was ``full``."""
    if not storage.is_s3(prefix_uri):
        return validate_local(storage.local_path(prefix_uri), num_classes)
    wanted = (".rec", ".idx", ".lst", ".quarantine.tsv")
    listed = [o for o in storage.list_objects(prefix_uri) if "/" not in o.key
              and (o.key.endswith(wanted) or o.key == names.CLASSES)]
    fetched = ranged.Fetched()
    with tempfile.TemporaryDirectory(prefix="recforge-validate-") as tmp:
        whole = [o for o in listed if full or not o.key.endswith(".rec")]
        for obj in whole:
            storage.download(storage.join(prefix_uri, obj.key), Path(tmp) / obj.key)
            fetched.bytes += obj.size
        for obj in (o for o in listed if o not in whole):  # the .idx are here: by headers
            idx = Path(tmp) / (obj.key[:-len(".rec")] + ".idx")
            offsets = ranged.idx_offsets(idx.read_bytes()) if idx.is_file() else None
            ranged.stand_in(storage.join(prefix_uri, obj.key), obj.size, offsets,
                            Path(tmp) / obj.key, fetched)
        report = validate_local(Path(tmp), num_classes, shown=prefix_uri, full=full)
    report["read"] = {"bytes": fetched.bytes, "of": sum(o.size for o in listed), "full": full}
    return report


def format_report(report: dict) -> str:
    lines = [f"{'split':<8} {'records':>8} {'idx':>8} {'lst':>8}  status"]
    for s, r in report["splits"].items():
        status = "ok" if not r["failures"] else f"FAILED ({len(r['failures'])})"
        lines.append(f"{s:<8} {r['records']:>8} {r['idx_lines']:>8} {r['lst_lines']:>8}  {status}")
    for f in report["failures"]:
        lines.append(f"  - {f}")
    for note in report.get("notes", []):
        lines.append(f"  note: {note}")
    read = report.get("read")
    if read:
        share = f" ({read['bytes'] / read['of']:.2%})" if read["of"] else ""
        lines.append(f"read {read['bytes']:,} of {read['of']:,} bytes from S3{share}: "
                     + ("every byte (the full check)" if read["full"]
                        else "the .rec files by their record headers (--full: every byte)"))
    lines.append("valid" if report["ok"] else "INVALID")
    return "\n".join(lines)
