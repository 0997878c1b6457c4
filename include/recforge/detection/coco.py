"""COCO instances JSON → each image's annotated size and objects, read as a stream.

An instances file (``images``, ``annotations`` and ``categories`` arrays, in any order;
``info``, ``licenses`` and every other key ignored) can be a gigabyte, so it is never
loaded as one object tree: one pass over ijson's event stream keeps only what packing
needs, the annotations in typed columns (ids, box, crowd flag: 57 bytes a box), the kept
images entries as file names and sizes (an id → position dict beside) and the categories in
a small dict. The file is read to its end before anything is returned, so a file that turns
out unparsable (not JSON, truncated, not an instances document) raises
``AnnotationUnparsable`` before any image is given out; then the annotations are grouped by
image (a sort of the columns) and each image's objects are made as it is given out.

A bad entry never fails the file: it becomes a quarantine part (``annotation <id>``, or
``image <id>`` for an ``images`` entry; ``annotation #<i>`` / ``image #<i>``, the 0-based
position in its array, where the entry has no integer id). A part's ``source_key`` is the
image's key (``<image folder>/<file_name>``: ``images/`` by default, ``val2017/`` for
COCO 2017's ``instances_val2017.json``) where its image is known, else the annotation file's
key. COCO has no difficult flag: an ``iscrowd`` region comes out flagged with ``difficult``
1 (an absent or null ``iscrowd`` is 0), and the layout then applies ``detection.crowd``
(dropped by default, ``recforge.detection.sources``); ``segmentation`` (polygons or RLE)
and ``area`` are not read. Ids are integers (as COCO writes them); an id of another type
makes its entry unusable.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from pathlib import Path

import ijson
import numpy as np

from recforge.detection.annotation import MAX_NAME_CHARS, Annotation, AnnotationUnparsable
from recforge.detection.boxes import coco_box
from recforge.quarantine import QuarantineEntry, cut
from recforge.storage.uri import unsafe_key_reason

IMAGE_PREFIX = "images/"  # an images entry's file_name is relative to this folder (default)
ARRAYS = ("images", "annotations", "categories")  # what makes an instances document
READ_BYTES = 1 << 20  # the parser's read size
MAX_NESTING = 64  # arrays and objects inside each other; an instances file has 5
MAX_SIDE = 2**31 - 1  # an images entry's width or height beyond this is no image's size
ROWS_AT_ONCE = 1 << 14  # annotations turned into Python objects at a time, while yielding

_BAD = object()  # a field with a value of the wrong type (``None``: the field is absent)

# ijson prefix → what it is; every other prefix (segmentation, info, licenses...) is skipped
(_TOP, _ARRAY, _ANN, _ANN_ID, _ANN_IMAGE, _ANN_CAT, _ANN_BBOX, _ANN_BBOX_ITEM, _ANN_CROWD,
 _IMG, _IMG_ID, _IMG_NAME, _IMG_W, _IMG_H, _CAT, _CAT_ID, _CAT_NAME) = range(17)
_CODES = {
    "": _TOP, "images": _ARRAY, "annotations": _ARRAY, "categories": _ARRAY,
    "annotations.item": _ANN, "annotations.item.id": _ANN_ID,
    "annotations.item.image_id": _ANN_IMAGE, "annotations.item.category_id": _ANN_CAT,
    "annotations.item.bbox": _ANN_BBOX, "annotations.item.bbox.item": _ANN_BBOX_ITEM,
    "annotations.item.iscrowd": _ANN_CROWD,
    "images.item": _IMG, "images.item.id": _IMG_ID, "images.item.file_name": _IMG_NAME,
    "images.item.width": _IMG_W, "images.item.height": _IMG_H,
    "categories.item": _CAT, "categories.item.id": _CAT_ID, "categories.item.name": _CAT_NAME,
}
# the key of the field a prefix's events belong to (a key holding dots could fake a prefix)
_FIELD = {_ANN_ID: "id", _ANN_IMAGE: "image_id", _ANN_CAT: "category_id", _ANN_BBOX: "bbox",
          _ANN_BBOX_ITEM: "bbox", _ANN_CROWD: "iscrowd", _IMG_ID: "id",
          _IMG_NAME: "file_name", _IMG_W: "width", _IMG_H: "height", _CAT_ID: "id",
          _CAT_NAME: "name"}
_SCALARS = ("number", "string", "boolean", "null")
_KIND = {"start_map": "an object", "start_array": "an array", "number": "a number",
         "string": "a string", "boolean": "a boolean", "null": "null"}


class CocoAnnotations(Iterator[tuple[str, Annotation]]):
    """The parsed file: iterates ``(file_name, Annotation)``, one per kept ``images``
    entry, in the order of the ``images`` array. ``refused`` holds the parts that belong
    to no image given out (source_key the annotation file's, or the key of an image whose
    only entry was refused): the caller quarantines them with the images' own parts.
    ``categories`` is id → name of the usable categories."""

    def __init__(self, images: Iterator[tuple[str, Annotation]], count: int,
                 refused: list[QuarantineEntry], categories: dict[int, str]):
        self._images, self._count = images, count
        self.refused, self.categories = refused, categories

    def __len__(self) -> int:
        """The number of images given out (in all, not what is left)."""
        return self._count

    def __next__(self) -> tuple[str, Annotation]:
        return next(self._images)


def _kind(event: str, value) -> str:
    if event == "number":
        return "an integer" if type(value) is int else "a fraction"
    return _KIND.get(event, event)


def _shown(value) -> str:
    if value is None:
        return "absent"
    return "of a wrong type" if value is _BAD else repr(value)


def _whole(value) -> int | None:
    """A positive whole number (``640`` or ``640.0``), else None."""
    if type(value) is int or (type(value) is float and value.is_integer()):
        return int(value) if value > 0 else None
    return None


def _unparsable(exc: Exception, path: Path, f) -> AnnotationUnparsable:
    message = exc.args[0] if exc.args else str(exc)
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    lines = [line.strip() for line in str(message).splitlines()]
    size = path.stat().st_size
    if "premature EOF" in lines[0]:
        return AnnotationUnparsable(f"the file ends inside the JSON document (truncated at "
                                    f"byte {size:,})")
    end = min(f.tell(), size)
    near = f" near {lines[1][:60]!r}" if len(lines) > 1 and lines[1] else ""
    return AnnotationUnparsable(f"not valid JSON in bytes {max(end - READ_BYTES, 0):,}-"
                                f"{end:,} of {size:,}: {lines[0]}{near}")


_BACKSLASH = np.zeros(256, bool)
_BACKSLASH[92] = True
_SPECIAL = np.zeros(256, bool)  # a quote or a bracket
_SPECIAL[[34, 91, 93, 123, 125]] = True
_STEP = np.zeros(256, np.int64)  # what a bracket does to the depth
_STEP[[91, 123]], _STEP[[93, 125]] = 1, -1


class NestingGuard:
    """The file as the parser reads it, refusing a document nested deeper than
    ``MAX_NESTING`` arrays and objects: a COCO file is 5 deep, and the parser's bookkeeping
    grows with the square of the depth (a 2 MB file of ``[[[[…`` would take gigabytes).
    Each chunk is scanned with numpy (strings and their escapes followed across chunks),
    before the parser sees it."""

    def __init__(self, f, offset: int = 0, limit: int = 0):
        self.f, self.offset, self.limit = f, offset, limit or MAX_NESTING
        self.depth, self.in_string, self.backslashes = 0, False, 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        if data:
            self._scan(np.frombuffer(data, np.uint8))
            self.offset += len(data)
        return data

    def _scan(self, b: np.ndarray) -> None:
        if self.backslashes or _BACKSLASH[b].any():
            return self._scan_escaped(b)
        # no escape in the chunk: only quotes and brackets matter, a small share of it
        at = np.flatnonzero(_SPECIAL[b])
        c = b[at]
        quote = c == 34
        toggles = np.cumsum(quote)
        outside = (toggles - quote + self.in_string) % 2 == 0
        depth = self.depth + np.cumsum(np.where(outside, _STEP[c], 0))
        self._check(depth, at)
        self.depth = int(depth[-1]) if len(depth) else self.depth
        self.in_string = bool((int(toggles[-1]) + self.in_string) % 2) if len(toggles) \
            else self.in_string

    def _check(self, depth: np.ndarray, at: np.ndarray | None = None) -> None:
        if len(depth) and depth.max() > self.limit:
            first = int(np.argmax(depth > self.limit))
            raise AnnotationUnparsable(
                f"nested deeper than {self.limit} arrays and objects at byte "
                f"{self.offset + (int(at[first]) if at is not None else first):,} (a COCO "
                "instances file is 5 deep): not an instances document")

    def _scan_escaped(self, b: np.ndarray) -> None:
        pos = np.arange(len(b))
        slash = b == 92
        # backslashes right before each byte: a quote after an odd run is escaped
        last_other = np.maximum.accumulate(np.where(slash, -1, pos))
        run_before = np.empty(len(b), np.int64)
        run_before[0] = self.backslashes
        prev = last_other[:-1]
        run_before[1:] = np.where(prev < 0, pos[1:] + self.backslashes, pos[1:] - 1 - prev)
        quote = (b == 34) & (run_before % 2 == 0)
        # inside a string from an unescaped quote to the next; escapes only count there
        toggles = np.cumsum(quote)
        inside = (toggles - quote + self.in_string) % 2 == 1
        step = np.where(~inside & ((b == 91) | (b == 123)), 1, 0) \
            - np.where(~inside & ((b == 93) | (b == 125)), 1, 0)
        depth = self.depth + np.cumsum(step)
        self._check(depth)
        self.depth = int(depth[-1]) if len(depth) else self.depth
        self.in_string = bool((int(toggles[-1]) + self.in_string) % 2)
        tail = len(b) - 1 - int(last_other[-1])
        self.backslashes = tail + (self.backslashes if tail == len(b) else 0)


class _Scan:
    """What one pass over the file keeps."""

    def __init__(self, prefix: str = IMAGE_PREFIX, max_name_chars: int = MAX_NAME_CHARS):
        self.prefix = prefix  # the folder the images entries' file_names are relative to
        self.max_name_chars = max_name_chars  # a longer category name names no class
        # the annotations whose own fields are usable, in file order
        self.ann_id, self.image_id, self.cat_id = array("q"), array("q"), array("q")
        self.box, self.crowd = array("d"), array("b")
        # the others: (position, id, image_id, reason, detail, box)
        self.odd: list[tuple] = []
        # the kept images entries (the first of each id and of each file_name), in file order
        self.names: list[str] = []
        self.ids: list[int] = []
        self.widths, self.heights = array("q"), array("q")  # 0 where not a whole number > 0
        self.index: dict[int, int] = {}  # image id → position in names
        self.by_name: dict[str, int] = {}
        self.gone: dict[int, tuple] = {}  # refused image id → (reason, source_key, why)
        # refused images entries: (part, reason, detail, source_key; None: the file's)
        self.image_parts: list[tuple] = []
        self.categories: dict[int, str] = {}  # id → name as first listed ("": none)
        self.nameless: dict[int, str] = {}  # id → why its annotations are refused
        self.unsafe = unsafe_key_reason

    def image(self, pos: int, img_id, name, width, height) -> None:
        """Keep an images entry, or refuse it."""
        where = f"image {img_id}" if type(img_id) is int else f"image #{pos}"
        why = None
        if type(img_id) is not int:
            why = f"no integer id (id {_shown(img_id)})"
        elif not isinstance(name, str) or not name:
            why = f"no file_name (file_name {_shown(name)})"
        elif any(type(v) in (int, float) and abs(v) > MAX_SIDE for v in (width, height)):
            why = (f"width {_shown(width)} / height {_shown(height)}: beyond {MAX_SIDE:,} "
                   "pixels, no image's size")
        else:
            unsafe = self.unsafe(name) or self.unsafe(self.prefix + name)
            if unsafe:
                why = f"file_name {name!r} is not a safe relative path ({unsafe})"
        if why:
            self.image_parts.append((where, "bad_object", f"{where}: {why}", None))
            if type(img_id) is int and img_id not in self.index:
                self.gone.setdefault(img_id, ("bad_object", None, f"its images entry is "
                                              f"refused ({why})"))
            return
        image_key = self.prefix + name
        if img_id in self.index:
            first = self.names[self.index[img_id]]
            self.image_parts.append((where, "duplicate_image_entry", f"{where}: a second "
                                     f"images entry with id {img_id} (the first, for "
                                     f"{first!r}, is kept)", image_key))
            return
        if name in self.by_name:
            first_id = self.ids[self.by_name[name]]
            self.image_parts.append((where, "duplicate_image_entry", f"{where}: the file_name "
                                     f"{name!r} of image {first_id} (the first is kept)",
                                     image_key))
            self.gone.setdefault(img_id, ("duplicate_image_entry", image_key, f"a second "
                                          f"images entry for {name!r} (image {first_id}'s is "
                                          f"kept)"))
            return
        self.index[img_id] = self.by_name[name] = len(self.names)
        self.names.append(name)
        self.ids.append(img_id)
        self.widths.append(_whole(width) or 0)
        self.heights.append(_whole(height) or 0)

    def annotation(self, pos: int, aid, iid, cid, bbox, crowd) -> None:
        """Keep an annotation whose own fields are usable in the columns, else note it in
        ``odd``."""
        if (type(aid) is int and type(iid) is int and type(cid) is int
                and type(bbox) is list and len(bbox) == 4 and crowd in (0, 1)):
            n = len(self.crowd)
            try:
                self.ann_id.append(aid)
                self.image_id.append(iid)
                self.cat_id.append(cid)
                self.box.extend(coco_box(*bbox))
                self.crowd.append(1 if crowd else 0)
            except OverflowError:  # beyond 64 bits (backends other than yajl2)
                for column, step in ((self.ann_id, 1), (self.image_id, 1), (self.cat_id, 1),
                                     (self.box, 4)):
                    del column[step * n:]
                self.odd.append((pos, None, None, "bad_object", "an id or bbox value beyond "
                                 "64 bits", None))
            return
        self.odd.append(_odd_annotation(pos, aid, iid, cid, bbox, crowd))


def _scan(f, image_prefix: str = IMAGE_PREFIX, max_name_chars: int = MAX_NAME_CHARS) -> _Scan:
    """One pass over the file: the top level's keys, each of the three arrays read by its
    reader (``_SECTIONS``); every other key's value is skipped."""
    s = _Scan(image_prefix, max_name_chars)
    codes = _CODES.get
    seen: set[str] = set()
    events = ijson.parse(f, use_float=True, buf_size=READ_BYTES)
    first = next(events, None)
    if first is None:
        raise AnnotationUnparsable("the file holds no JSON value")
    if first[1] != "start_map":
        raise AnnotationUnparsable(f"the top level is {_kind(first[1], first[2])}, not an "
                                   f"object: not a COCO instances file")
    for prefix, event, value in events:
        code = codes(prefix)
        if code == _ARRAY:
            if event == "start_array":
                _SECTIONS[prefix](events, s)  # reads up to the array's end
            elif event == "start_map" or event in _SCALARS:
                raise AnnotationUnparsable(f"the top-level {prefix!r} is "
                                           f"{_kind(event, value)}, not an array")
        elif code == _TOP and event == "map_key" and value in ARRAYS:
            if value in seen:
                raise AnnotationUnparsable(f"the top-level key {value!r} appears twice")
            seen.add(value)
    missing = [a for a in ARRAYS if a not in seen]
    if missing:
        raise AnnotationUnparsable(f"no top-level {' or '.join(map(repr, missing))} array: "
                                   "not a COCO instances file (it needs images, annotations "
                                   "and categories)")
    return s


def _read_annotations(events, s: _Scan) -> None:
    """The ``annotations`` array's events, up to its end: each entry's id, image_id,
    category_id, bbox and iscrowd, handed to ``_Scan.annotation`` when the entry ends."""
    codes = _CODES.get
    key = None  # the key being read in the current entry
    pos = -1  # the position in the array of the entry being read
    aid = iid = cid = bbox = None
    crowd = 0
    for prefix, event, value in events:
        code = codes(prefix)
        if code is None:
            continue
        if code == _ANN_BBOX_ITEM:
            if key == "bbox" and type(bbox) is list:
                if event == "number":
                    bbox.append(value)
                else:
                    bbox = _BAD
        elif code == _ANN:
            if event == "map_key":
                key = value
            elif event == "start_map":
                pos += 1
                aid = iid = cid = bbox = key = None
                crowd = 0
            elif event == "end_map":
                s.annotation(pos, aid, iid, cid, bbox, crowd)
            elif event in _SCALARS or event == "start_array":
                pos += 1
                s.odd.append((pos, None, None, "bad_object",
                              f"annotations[{pos}] is {_kind(event, value)}, not an object",
                              None))
        elif code == _ANN_BBOX:
            if key == "bbox":
                if event == "start_array":
                    bbox = [] if bbox is None else _BAD  # a second "bbox" key: ambiguous
                elif event != "end_array":
                    bbox = _BAD
        elif code == _ARRAY:  # the array's end
            return
        elif key == _FIELD[code]:  # id, image_id, category_id or iscrowd
            if event == "number" or event == "string" or event == "boolean":
                got = value  # checked when the annotation ends
            else:
                got = 0 if code == _ANN_CROWD and event == "null" else _BAD
            if code == _ANN_ID:
                aid = got
            elif code == _ANN_IMAGE:
                iid = got
            elif code == _ANN_CAT:
                cid = got
            else:
                crowd = got


def _read_images(events, s: _Scan) -> None:
    """The ``images`` array's events, up to its end: each entry's id, file_name, width and
    height, handed to ``_Scan.image`` when the entry ends."""
    codes = _CODES.get
    key = None  # the key being read in the current entry
    pos = -1  # the position in the array of the entry being read
    img_id = name = width = height = None
    for prefix, event, value in events:
        code = codes(prefix)
        if code == _IMG:
            if event == "map_key":
                key = value
            elif event == "start_map":
                pos += 1
                img_id = name = width = height = key = None
            elif event == "end_map":
                s.image(pos, img_id, name, width, height)
            elif event in _SCALARS or event == "start_array":
                pos += 1
                s.image_parts.append((f"image #{pos}", "bad_object", f"images[{pos}] is "
                                      f"{_kind(event, value)}, not an object", None))
        elif code == _ARRAY:  # the array's end
            return
        elif code is None or key != _FIELD[code]:
            continue
        elif code == _IMG_NAME:
            name = value if event == "string" else _BAD
        elif code == _IMG_ID:
            img_id = value if event == "number" or event == "string" else _BAD
        elif code == _IMG_W:
            width = value if event == "number" else _BAD
        else:
            height = value if event == "number" else _BAD


def _read_categories(events, s: _Scan) -> None:
    """The ``categories`` array's events, up to its end: each entry's id and name, handed
    to ``_category`` when the entry ends."""
    codes = _CODES.get
    key = None  # the key being read in the current entry
    c_id = c_name = None
    for prefix, event, value in events:
        code = codes(prefix)
        if code == _CAT:
            if event == "map_key":
                key = value
            elif event == "start_map":
                c_id = c_name = key = None
            elif event == "end_map":
                _category(s, c_id, c_name)
        elif code == _ARRAY:  # the array's end
            return
        elif code is None or key != _FIELD[code]:
            continue
        elif code == _CAT_ID:
            c_id = value if event == "number" or event == "string" else _BAD
        else:
            c_name = value if event == "string" else _BAD


# the reader of each top-level array, given the events from its start_array on
_SECTIONS = {"annotations": _read_annotations, "images": _read_images,
             "categories": _read_categories}


def _odd_annotation(pos: int, aid, iid, cid, bbox, crowd) -> tuple:
    """(position, id, image_id, reason, detail, box) of an annotation whose own fields are
    not usable."""
    ok_id = aid if type(aid) is int else None
    ok_image = iid if type(iid) is int else None
    box = tuple(map(float, coco_box(*bbox))) if type(bbox) is list and len(bbox) == 4 \
        else None
    if box is not None and not all(map(math.isfinite, box)):
        box = None  # JSON has no inf for the quarantine report
    if ok_id is None:
        why = f"no integer id (id {_shown(aid)})"
    elif ok_image is None:
        why = f"no integer image_id (image_id {_shown(iid)})"
    elif bbox is None:
        why = "no bbox"
    elif box is None:
        why = "a bbox that is not 4 numbers [x, y, width, height]"
    elif crowd not in (0, 1):
        why = f"iscrowd {_shown(crowd)}, not 0 or 1"
    else:
        return (pos, ok_id, ok_image, "unknown_category",
                f"category_id {_shown(cid)} is not an integer", box)
    return pos, ok_id, ok_image, "bad_object", why, box


def _category(s: _Scan, cid, name) -> None:
    if type(cid) is not int:
        return  # nothing can name it; annotations that try are unknown_category
    label = name.strip() if isinstance(name, str) else ""
    if len(label) > s.max_name_chars:
        s.nameless.setdefault(cid, f"category {cid} has a name of {len(label):,} characters "
                                   f"(at most {s.max_name_chars:,})")
        label = cut(label, s.max_name_chars)
    if cid in s.categories:
        if s.categories[cid] != label:
            s.nameless[cid] = (f"category {cid} is listed twice, as {s.categories[cid]!r} "
                               f"and {label!r}")
        return
    s.categories[cid] = label
    if not label:
        s.nameless[cid] = f"category {cid} has no name"


def parse(path: Path | str, key: str, stage: str = "flatten",
          image_prefix: str = IMAGE_PREFIX, max_name_chars: int = MAX_NAME_CHARS
          ) -> CocoAnnotations:
    """Parse the COCO instances file at ``path`` (``key``: its key in the source, which
    names the refusals that belong to no image) into ``(file_name, Annotation)`` pairs;
    ``image_prefix`` is the folder of the images (``train2017/``), whose key names an image's
    refusals.

    One pair per kept ``images`` entry, in the order of the ``images`` array; its objects
    ordered by annotation id (equal ids in file order), each ``[category name, xmin, ymin,
    xmax, ymax, difficult, "annotation <id>"]`` with the box from ``bbox`` by
    ``boxes.coco_box`` and difficult 1 for ``iscrowd``; its size ``(width, height)`` where
    both are positive whole numbers, else None. An image with no annotation has no objects.

    Refused, as parts (``refused`` of the image's Annotation, or of the returned object for
    those that belong to no image given out): an annotation without an integer id or
    image_id, a bbox of 4 finite numbers or an iscrowd of 0/1 (``bad_object``), whose
    image_id has no images entry (``bad_object``), whose category_id is not in categories
    (``unknown_category``) or is a category without a name or listed twice with two names
    (``bad_object``); an images entry without an integer id or a safe relative file_name
    (``bad_object``), or with the id or file_name of an earlier entry (``duplicate_image_entry``:
    the first is kept, and annotations of a later entry's id are refused the same way).

    Raises ``AnnotationUnparsable`` (saying where) before anything is given out if the file
    is not JSON, is truncated, or is not an instances document (its top level not an
    object, or no images, annotations or categories array).
    """
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(1 << 16)
        start = 3 if head.startswith(b"\xef\xbb\xbf") else 0  # a UTF-8 byte order mark
        if not head[start:].strip() and len(head) < 1 << 16:
            raise AnnotationUnparsable(f"the file holds no JSON value ({len(head)} bytes)")
        f.seek(start)
        guarded = NestingGuard(f, start)
        try:
            scan = _scan(guarded, image_prefix, max_name_chars)
        except (ijson.JSONError, UnicodeDecodeError) as exc:
            raise _unparsable(exc, path, f) from None
    return _assemble(scan, key, stage)


def _assemble(s: _Scan, key: str, stage: str) -> CocoAnnotations:
    """The scan's columns grouped by image: the refused annotations and images entries
    routed to the image they name (or to ``refused``), the kept annotations sorted by image
    and id, and each image's Annotation made as it is given out."""
    categories = {c: label for c, label in s.categories.items() if c not in s.nameless}
    cols = _Columns(s)
    image_of = _image_positions(s.index, cols.img_ids)
    hit = image_of >= 0
    finite = np.isfinite(cols.boxes).all(axis=1)
    refusals = _Refusals(s, key, stage)
    for where, reason, detail, source_key in s.image_parts:
        refusals.route(refusals.part(where, reason, detail, source_key), (-1, 0))  # first
    for i in np.flatnonzero(~(hit & finite)).tolist():
        aid, iid = int(cols.ann_ids[i]), int(cols.img_ids[i])
        corners = tuple(cols.boxes[i].tolist()) if finite[i] else None  # JSON has no inf
        refusals.annotation(f"annotation {aid}", aid, iid, "bad_object",
                            "a bbox whose corners are not finite numbers (x + width or "
                            "y + height overflows)", corners)
    for pos, aid, iid, reason, why, box in s.odd:
        where = f"annotation {aid}" if aid is not None else f"annotation #{pos}"
        refusals.annotation(where, aid, iid, reason, why, box)
    keep = np.flatnonzero(hit & finite)
    keep = keep[np.lexsort((cols.ann_ids[keep], image_of[keep]))]
    starts = np.zeros(len(s.names) + 1, np.int64)
    np.cumsum(np.bincount(image_of[keep], minlength=len(s.names)), out=starts[1:])
    images = _images(s, cols, keep, starts, categories, refusals.extra, stage)
    return CocoAnnotations(images, len(s.names), refusals.loose, categories)


class _Columns:
    """The scan's annotation columns as numpy arrays (views, not copies)."""

    def __init__(self, s: _Scan):
        n = len(s.ann_id)
        self.ann_ids = np.frombuffer(s.ann_id, np.int64)
        self.img_ids = np.frombuffer(s.image_id, np.int64)
        self.cats = np.frombuffer(s.cat_id, np.int64)
        self.boxes = np.frombuffer(s.box, np.float64).reshape(n, 4)
        self.crowds = np.frombuffer(s.crowd, np.int8)


def _image_positions(index: dict[int, int], img_ids: np.ndarray) -> np.ndarray:
    """Each annotation's image position (in ``_Scan.names``), -1 where its image_id names no
    kept image."""
    known = np.fromiter(index.keys(), np.int64, len(index))
    slots = np.fromiter(index.values(), np.int64, len(index))
    by_id = np.argsort(known, kind="stable")
    known, slots = known[by_id], slots[by_id]
    at = np.minimum(np.searchsorted(known, img_ids), max(len(known) - 1, 0))
    hit = known[at] == img_ids if len(known) else np.zeros(len(img_ids), bool)
    return np.where(hit, slots[at] if len(known) else 0, -1)


class _Refusals:
    """The refused parts, each routed to the image it names (``extra``: image position →
    (sort key, part)) or, where no image given out is named, to ``loose``."""

    def __init__(self, s: _Scan, key: str, stage: str):
        self.s, self.key, self.stage = s, key, stage
        self.extra: dict[int, list[tuple]] = {}
        self.loose: list[QuarantineEntry] = []  # parts whose source_key is no kept image

    def part(self, where: str, reason: str, detail: str, source_key: str | None = None,
             box=None) -> QuarantineEntry:
        return QuarantineEntry(source_key or self.key, self.stage, reason, detail, part=where,
                               box=box)

    def route(self, entry: QuarantineEntry, order: tuple) -> None:
        """To the Annotation of the image the part names, if one is given out."""
        prefix = self.s.prefix
        name = entry.source_key[len(prefix):]
        if entry.source_key.startswith(prefix) and name in self.s.by_name:
            self.extra.setdefault(self.s.by_name[name], []).append((order, entry))
        else:
            self.loose.append(entry)

    def annotation(self, where: str, aid, iid, reason: str, why: str, box) -> None:
        """A refused annotation: to its image, or to the image whose images entry was
        refused, or (no such image) to ``loose``."""
        s, order = self.s, _order_key(aid)
        if type(iid) is int and iid in s.index:
            self.route(self.part(where, reason, f"{where}: {why}",
                                 s.prefix + s.names[s.index[iid]], box), order)
        elif type(iid) is int and iid in s.gone:
            reason, source_key, gone_why = s.gone[iid]
            self.route(self.part(where, reason, f"{where}: image_id {iid}: {gone_why}",
                                 source_key, box), order)
        elif type(iid) is int:
            self.loose.append(self.part(where, "bad_object", f"{where}: image_id {iid} has no "
                                        "entry in images", self.key, box))
        else:
            self.loose.append(self.part(where, reason, f"{where}: {why}", self.key, box))


def _images(s: _Scan, cols: _Columns, keep: np.ndarray, starts: np.ndarray,
            categories: dict[int, str], extra: dict[int, list[tuple]], stage: str
            ) -> Iterator[tuple[str, Annotation]]:
    """Each kept image's ``(file_name, Annotation)``, in the order of the images array; the
    rows of ``keep`` (sorted by image) turned into Python objects ``ROWS_AT_ONCE`` at a
    time."""
    rows: list = []
    row_base = 0  # the position in keep of rows[0]
    for pos, name in enumerate(s.names):
        lo, hi = int(starts[pos]), int(starts[pos + 1])
        if hi > row_base + len(rows):  # load the next run of rows as Python objects
            row_base, upto = lo, max(hi, min(lo + ROWS_AT_ONCE, len(keep)))
            sel = keep[lo:upto]
            rows = list(zip(cols.ann_ids[sel].tolist(), cols.cats[sel].tolist(),
                            cols.boxes[sel].tolist(), cols.crowds[sel].tolist(), strict=True))
        objects, refused = _objects(rows[lo - row_base:hi - row_base], s.prefix + name,
                                    categories, s.nameless, stage)
        if pos in extra:
            refused = sorted(refused + extra.pop(pos), key=lambda r: r[0])
        w, h = s.widths[pos], s.heights[pos]
        yield name, Annotation((w, h) if w and h else None, objects, [e for _, e in refused])


def _objects(rows: list, image_key: str, categories: dict[int, str],
             nameless: dict[int, str], stage: str) -> tuple[list, list[tuple]]:
    """One image's objects from its annotation rows, and its refused ones as (sort key,
    part): those whose category names no class."""
    objects, refused = [], []
    for aid, cid, (x0, y0, x1, y1), crowd in rows:
        label = categories.get(cid)
        if label is not None:
            objects.append([label, x0, y0, x1, y1, crowd, f"annotation {aid}"])
            continue
        where = f"annotation {aid}"
        reason, why = ("bad_object", nameless[cid]) if cid in nameless else \
            ("unknown_category", f"category_id {cid} is not in categories")
        refused.append(((0, aid), QuarantineEntry(
            image_key, stage, reason, f"{where}: {why}", part=where, box=(x0, y0, x1, y1))))
    return objects, refused


def _order_key(aid) -> tuple:
    """Annotations in id order; those without an integer id last."""
    return (0, aid) if type(aid) is int else (1, 0)

