"""Classification by list files: images anywhere under the prefix, labelled (and split) by
``source.list_uri`` (one list; its split column, if any, in ``source.columns.split``) or
``source.lists`` (``{split: URI}``, the split from the key; ``folders`` instead of a URI:
that split's images are ``<prefix>/<split>/<class>/…``, as ImageNet ships its train set).

A list is CSV, TSV, blank-separated text (Caffe's ``train.txt``) or im2rec's ``.lst``
(``index<TAB>label<TAB>path``), its columns named by header or 0-based position in
``source.columns``. It is streamed a line at a time (``storage.iter_lines``); what is held
is, per image a row names, one shared ``(label, split, list)`` tuple. The label is the cell
as written (``label_token: first``: its first blank-separated token), an integer too (``7``
is the class named ``7``; im2rec's ``7.000000`` is ``7``); under ``labels.case: lower`` rows
that differ only in case agree.

Every listed object ends in one place: an image some row names is an item (quarantined
when its rows disagree, give no label, or a split no ``splits.folders`` name maps); an image
no row names is not used (``not_listed``); a list file under the prefix is used; any other
file is not used (``not_a_list``: ImageNet's ``LOC_synset_mapping.txt``). A row that names
no image (or, by name or stem, several) is reported as a refused part of its list file: it
is no listed object, so it is not counted.

Lists whose splits ``splits.from`` would contradict or ignore are refused with the fix
(``check_splits``): a split column or ``source.lists`` under ``hash``, one list with no
split column under ``source``.
"""

from __future__ import annotations

import csv
import posixpath
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from recforge import storage
from recforge.errors import SpecError
from recforge.layouts import Flattened, Layout, NotUsed
from recforge.quarantine import QuarantineEntry

FOLDERS = "folders"  # a source.lists value: that split's labels are its class folders
LIST_EXTENSIONS = (".csv", ".tsv", ".txt", ".lst")
FORMAT_OF_EXTENSION = {".csv": "csv", ".tsv": "tsv", ".txt": "space", ".lst": "lst"}
AMBIGUOUS = ""  # a name index value: the name fits several images
FOLDER_SOURCE = "its class folder"  # where a label from source.lists' folders comes from


def extension(key: str) -> str:
    """``posixpath.splitext(key)[1]``, a few times faster (it runs once per object)."""
    dot = key.rfind(".")
    start = key.rfind("/") + 1
    return key[dot:] if dot > start and key[start:dot].strip(".") else ""


@dataclass(frozen=True)
class BadRow:
    """A list row that names no key (its line, 1-based, and what is wrong)."""

    line: int
    detail: str
    reason: str = "bad_list_row"


# ----------------------------------------------------------------------------- parsing

def list_format(uri: str, columns) -> str:
    """The list's format: ``columns.format``, or by the file's extension."""
    if columns.format != "auto":
        return columns.format
    ext = posixpath.splitext(uri.rstrip("/"))[1].lower()
    if ext not in FORMAT_OF_EXTENSION:
        raise SpecError(f"cannot tell the format of the list {uri} from its extension "
                        f"{ext or '(none)'!r}; set source.columns.format (csv, tsv, space, lst)")
    return FORMAT_OF_EXTENSION[ext]


def _text_lines(uri: str) -> Iterator[str]:
    """The list's lines as text, streamed (a UTF-8 BOM and ``\\r`` dropped)."""
    first = True
    for raw in storage.iter_lines(uri):
        if first:
            raw, first = raw.removeprefix(b"\xef\xbb\xbf"), False
        yield raw.decode("utf-8", errors="replace").rstrip("\r")


def _cells(uri: str, fmt: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each non-blank row."""
    lines = _text_lines(uri)
    if fmt == "csv":
        reader = csv.reader(lines)
        for cells in reader:
            if any(c.strip() for c in cells):
                yield reader.line_num, cells
        return
    split = str.split if fmt == "space" else (lambda s: s.split("\t"))
    for n, line in enumerate(lines, 1):
        if line.strip():
            yield n, split(line)


def _position(name_or_index: str | int | None, header: list[str] | None, what: str,
              uri: str) -> int | None:
    if name_or_index is None or isinstance(name_or_index, int):
        return name_or_index
    names = [h.strip() for h in header or ()]
    if name_or_index in names:
        return names.index(name_or_index)
    raise SpecError(f"the list {uri} has no column {name_or_index!r} (source.columns.{what}); "
                    f"its first row is {names[:12]}. Name a column of its header, give a "
                    "0-based position, or set columns.header: false with positions")


def _layout_of(uri: str, columns, first: list[str],
               known: Callable[[str], bool] | None) -> tuple[bool, tuple[int, int, int | None]]:
    """Whether the first row is a header, and the key, label and split positions."""
    wanted = (columns.key, columns.label, columns.split)
    named = any(isinstance(c, str) for c in wanted)
    header = columns.header
    if header is None:  # named columns need a header; by position, a first key that names
        # no image is one
        header = named or (known is not None and columns.key < len(first)
                           and not known(first[columns.key].strip()))
    if named and not header:
        raise SpecError(f"source.columns names columns {[c for c in wanted if isinstance(c, str)]}"
                        f" but the list {uri} has no header (columns.header: false); give "
                        "0-based positions instead")
    top = first if header else None
    return header, tuple(_position(c, top, w, uri)
                         for c, w in zip(wanted, ("key", "label", "split"), strict=True))


def _lst_label(cell: str) -> str | None:
    """im2rec's float label as a class name (``7.000000`` → ``7``), else None."""
    try:
        value = float(cell)
    except ValueError:
        return None
    return str(int(value)) if value.is_integer() else repr(value)


def _lst_rows(uri: str, shared: dict) -> Iterator[tuple | BadRow]:
    for line, cells in _cells(uri, "tsv"):
        if len(cells) < 3 or not cells[0].strip().isdigit() or not cells[-1].strip():
            yield BadRow(line, f"line {line} is not index<TAB>label<TAB>path", "bad_lst_line")
            continue
        if len(cells) > 3:
            yield BadRow(line, f"line {line} has {len(cells) - 2} labels; a classification "
                         "list gives one", "bad_lst_line")
            continue
        label = _lst_label(cells[1].strip())
        if label is None:
            yield BadRow(line, f"line {line}'s label {cells[1]!r} is not a number",
                         "bad_lst_line")
            continue
        yield line, cells[-1].strip(), shared.setdefault(label, label), None


def read_rows(uri: str, columns, known: Callable[[str], bool] | None = None
              ) -> Iterator[tuple[int, str, str, str | None] | BadRow]:
    """The rows of one list, streamed: ``(line, key, label, split)`` (label ``""`` when
    the row has none; split ``None`` when the list has no split column), or a ``BadRow``.
    ``known(key)`` tells a header from a first row when columns are given by position."""
    fmt, shared = list_format(uri, columns), {}
    if fmt == "lst":
        yield from _lst_rows(uri, shared)
        return
    rows = _cells(uri, fmt)
    first = next(rows, None)
    if first is None:
        return
    header, (k, lab, sp) = _layout_of(uri, columns, first[1], known)
    first_token = columns.label_token == "first"
    for line, cells in rows if header else _chain(first, rows):
        n = len(cells)
        key = cells[k].strip() if k < n else ""
        if not key:
            yield BadRow(line, f"row {line} has no key in column {columns.key!r}")
            continue
        label = cells[lab].strip() if lab < n else ""
        if first_token and label:
            label = label.split(None, 1)[0]
        split = None if sp is None else (cells[sp].strip() if sp < n else "")
        yield (line, key, shared.setdefault(label, label),
               None if split is None else shared.setdefault(split, split))


def _chain(first, rest):
    yield first
    yield from rest


# ----------------------------------------------------------------------------- matching

class ObjectIndex:
    """The images under the prefix, found by a list's key: by path (a leading ``./``
    dropped), else with ``key_match: name`` by file name, with ``stem`` by path or file
    name without extension (a name two images share fits neither). The name index is made
    at the first key the paths do not hold, so a list by path costs none."""

    def __init__(self, keys: set[str], key_match: str):
        self.keys = keys
        self.key_match = key_match
        self._names: dict[str, str] | None = None
        self._extensions: list[str] = []

    def _by_name(self) -> dict[str, str]:
        if self._names is None:
            names: dict[str, str] = {}
            stem = self.key_match == "stem"
            for key in self.keys:
                name = key[key.rfind("/") + 1:]
                name = name[:len(name) - len(extension(name))] if stem else name
                names[name] = key if names.setdefault(name, key) == key else AMBIGUOUS
            self._names = names
            if stem:
                self._extensions = sorted({extension(k) for k in self.keys})
        return self._names

    def find(self, key: str) -> str | None:
        """The image key a list key names, ``AMBIGUOUS``, or None."""
        key = key.removeprefix("./")
        if key in self.keys or self.key_match == "path":
            return key if key in self.keys else None
        by_name = self._by_name()
        hits = [key + ext for ext in self._extensions if key + ext in self.keys]
        if hits:
            return hits[0] if len(hits) == 1 else AMBIGUOUS
        return by_name.get(key)

    def knows(self, key: str) -> bool:
        return bool(self.find(key))


@dataclass
class Labels:
    """Each image's label and split from the rows naming it, and the images to refuse.

    An image holds one shared ``(label, split, source)`` (a thousand classes in two splits
    are a few thousand tuples, whatever the rows), so a conflict names the earlier source
    but not its row."""

    sources: list[str] = field(default_factory=list)  # where a row came from, by index
    assigned: dict[str, tuple] = field(default_factory=dict)  # key → (label, split, source)
    trouble: dict[str, tuple[str, str]] = field(default_factory=dict)  # key → (reason, why)
    shared: dict[tuple, tuple] = field(default_factory=dict)
    case: dict[str, str] | None = None  # labels.case: lower — each label as numbered


    def where(self, src: int, line: int) -> str:
        return f"{self.sources[src]} row {line}" if line else self.sources[src]

    def add(self, key: str, label: str, split: str | None, src: int, line: int) -> None:
        if key in self.trouble:
            return
        if not label:
            self.trouble[key] = ("list_no_label", f"{self.where(src, line)} gives no label")
            return
        if self.case is not None:  # Dog and dog agree when they are one class
            label = self.case.get(label) or self.case.setdefault(label, label.lower())
        mine = (label, split, src)
        first = self.assigned.setdefault(key, self.shared.setdefault(mine, mine))
        if first[:2] != (label, split):
            self.trouble[key] = ("list_conflict", (
                f"{self.where(src, line)} gives {label!r}{f' in {split}' if split else ''}, "
                f"{self.earlier(first[2])} gives {first[0]!r}"
                f"{f' in {first[1]}' if first[1] else ''}"))

    def earlier(self, src: int) -> str:
        name = self.sources[src]
        return name if name == FOLDER_SOURCE else f"an earlier row of {name}"

    def refuse(self, key: str, reason: str, why: str) -> None:
        self.trouble.setdefault(key, (reason, why))


# ----------------------------------------------------------------------------- the layout

def list_files(spec) -> list[tuple[str | None, str]]:
    """``(split or None, URI)`` of each list file the spec reads."""
    src = spec.source
    if src.lists is not None:
        return [(s, u) for s, u in src.lists.items() if u != FOLDERS]
    return [(None, src.list_uri)]


def check_splits(spec) -> None:
    """Refuse a spec whose lists contradict ``splits.from`` (docs/datasets.md)."""
    src, cols, from_source = spec.source, spec.source.columns, spec.splits.from_source
    if src.lists is not None and cols.split is not None:
        raise SpecError("source.lists gives each list's split, so source.columns.split "
                        f"({cols.split!r}) contradicts it: remove columns.split, or give one "
                        "list with a split column as source.list_uri")
    if from_source and src.list_uri is not None and cols.split is None:
        raise SpecError(
            f"splits.from: source needs each image's split, and the list {src.list_uri} has "
            "none: name its split column in source.columns.split, give one list per split "
            "in source.lists ({train: URI, val: URI}), or use splits.from: hash")
    if not from_source and src.lists is not None:
        raise SpecError(
            f"source.lists gives the splits {sorted(src.lists)}, which splits.from: hash "
            "would ignore: set splits.from: source to keep them, or give one list as "
            "source.list_uri to split by hash")
    if not from_source and cols.split is not None:
        raise SpecError(
            f"source.columns.split ({cols.split!r}) reads the list's splits, which "
            "splits.from: hash would ignore: set splits.from: source to keep them, or "
            "remove columns.split to split by hash")


def key_under(uri: str, prefix: str) -> str | None:
    """``uri``'s key relative to the source prefix, or None when it lies outside."""
    base = prefix.rstrip("/") + "/"
    return uri[len(base):] if uri.startswith(base) else None


def _read_lists(spec, index: ObjectIndex, labels: Labels, refused: list) -> None:
    """Every row of every list into ``labels``; rows that name no image into ``refused``."""
    splits, cols = spec.splits, spec.source.columns
    for list_split, uri in list_files(spec):
        if not storage.exists(uri):
            field_name = f"source.lists.{list_split}" if list_split else "source.list_uri"
            raise SpecError(f"the list {uri} ({field_name}) does not exist; upload it or "
                            "fix the URI")
        src = len(labels.sources)
        shown = key_under(uri, spec.source.uri) or uri
        labels.sources.append(shown)
        for row in read_rows(uri, cols, index.knows):
            if isinstance(row, BadRow):
                refused.append(QuarantineEntry(shown, "flatten", row.reason, row.detail,
                                               part=f"row {row.line}"))
                continue
            line, key, label, value = row
            found = index.find(key)
            if not found:
                reason = "list_key_ambiguous" if found == AMBIGUOUS else "listed_image_missing"
                why = "fits several images" if found == AMBIGUOUS else \
                    f"is no image under {spec.source.uri}"
                refused.append(QuarantineEntry(shown, "flatten", reason,
                                               f"row {line} names {key!r}, which {why}",
                                               part=f"row {line}"))
                continue
            split = list_split
            if value is not None:
                split = splits.of_folder(value) if value else None
                if split is None:
                    labels.refuse(found, "list_unknown_split", (
                        f"{shown} row {line} gives split {value!r}; splits.folders maps "
                        f"{ {s: list(n) for s, n in splits.folders.items()} }"))
                    continue
            labels.add(found, label, split, src, line)


def _read_folders(spec, images: list[str], labels: Labels, refused: list) -> None:
    """The images of the ``source.lists`` splits given as ``folders``
    (``<prefix>/<split folder>/<class>/…``): their class folders label them."""
    folder_splits = {s for s, u in (spec.source.lists or {}).items() if u == FOLDERS}
    if not folder_splits:
        return
    src = len(labels.sources)
    labels.sources.append(FOLDER_SOURCE)
    for key in images:
        top, _, rel = key.partition("/")
        split = spec.splits.of_folder(top) if rel else None
        if split not in folder_splits:
            continue
        if "/" not in rel:
            refused.append(QuarantineEntry(key, "flatten", "not_in_class_folder",
                                           "object sits directly under the split folder"))
            continue
        labels.add(key, sys.intern(rel.split("/", 1)[0]), split, src, 0)


def flatten(rows: list[dict], spec) -> Flattened:
    check_splits(spec)
    prefix = spec.source.uri
    list_keys = {k for _, u in list_files(spec) if (k := key_under(u, prefix)) is not None}
    image_ext = spec.source.extensions
    images = {r["key"] for r in rows if r["key"] not in list_keys
              and extension(r["key"]).lower() in image_ext}
    refused: list[QuarantineEntry] = []
    labels = Labels(case={} if spec.labels.case == "lower" else None)
    _read_folders(spec, sorted(images), labels, refused)
    _read_lists(spec, ObjectIndex(images, spec.source.columns.key_match), labels, refused)
    return _sort_objects(rows, spec, list_keys, images, labels, refused)


def _sort_objects(rows: list[dict], spec, list_keys: set[str], images: set[str],
                  labels: Labels, refused: list[QuarantineEntry]) -> Flattened:
    """Each listed object into an item, the quarantine, the used lists or not used."""
    out = Flattened([], refused, [], [])
    from_source = spec.splits.from_source
    done = {e.source_key for e in refused if not e.is_part}
    for row in sorted(rows, key=lambda r: r["key"]):
        key = row["key"]
        if key in list_keys:
            out.used.append(key)
        elif key in done:
            continue
        elif key not in images:
            out.not_used.append(NotUsed(key, "not_a_list", "a file beside the images that is "
                                        "none of the spec's list files"))
        elif key in labels.trouble:
            reason, why = labels.trouble[key]
            refused.append(QuarantineEntry(key, "flatten", reason, why))
        elif key in labels.assigned:
            label, split, _ = labels.assigned[key]
            item = {"source_key": key, "etag": row["etag"], "size": row["size"],
                    "class_name": label, "name": key}
            if from_source:
                item["split"] = split
            out.items.append(item)
        else:
            out.not_used.append(NotUsed(key, "not_listed",
                                        "an image no row of the list(s) names"))
    return out


def _extensions(spec) -> tuple[str, ...]:
    """The list files' extensions (a list under the prefix is used, not quarantined)."""
    own = {posixpath.splitext(u)[1].lower() for _, u in list_files(spec)} - {""}
    return LIST_EXTENSIONS + tuple(sorted(own - set(LIST_EXTENSIONS)))


def _expected(spec) -> str:
    shown = ", ".join(u for _, u in list_files(spec))
    folders = [s for s, u in (spec.source.lists or {}).items() if u == FOLDERS]
    return (f"the images the list(s) {shown} name ({spec.source.columns.key_match} match)"
            + (f", and <prefix>/<split>/<class>/<image> for {folders}" if folders else ""))


def _labels(spec) -> str:
    cols = spec.source.columns
    column = ("the label column of the .lst (`index<TAB>label<TAB>path`)" if cols.format == "lst"
              else f"the `{cols.label}` column of the list(s)"
              + (" (its first blank-separated token)" if cols.label_token == "first" else ""))
    folders = [s for s, u in (spec.source.lists or {}).items() if u == FOLDERS]
    return (f"the class is {column}, an integer label the class of that name"
            + (f"; for {folders}, the first folder under the split folder" if folders else ""))


LAYOUT = Layout("list", flatten, _extensions, _expected, _labels)
