"""Classification by folders: ``<prefix>/<class>/[any/depth/]<image>``, or with
``splits.from: source`` ``<prefix>/<split>/<class>/[any/depth/]<image>``.

The class is the first folder under the prefix (under the split folder); deeper folders
belong to it (``dog/puppies/a.jpg`` is a dog). This differs on purpose from
``im2rec --recursive``, which makes every folder that holds files its own class. Flat names
are unique and stable (derived from the key alone), and provenance (source key, ETag) is
kept.

A source whose top folders are all split names (``train/``, ``val/``) under
``splits.from: hash`` is refused: built, it would be a dataset whose classes are ``train``
and ``val``. Under ``splits.from: source`` a top folder that names no split is refused
naming it.
"""

from __future__ import annotations

import hashlib

from recforge.errors import SpecError
from recforge.layouts import Flattened, Layout
from recforge.quarantine import QuarantineEntry


def flat_name(key: str) -> str:
    """``dog/a/b/x.jpg`` → ``dog/a__b__x.jpg``: one folder per class, stable per key."""
    cls, *rest = key.split("/")
    return f"{cls}/{'__'.join(rest)}"


def _top_folders(rows: list[dict]) -> set[str]:
    return {r["key"].split("/", 1)[0] for r in rows if "/" in r["key"]}


def check_split_folders(rows: list[dict], splits, source_uri: str) -> None:
    """Refuse a source whose folders contradict ``splits.from`` (see the module doc)."""
    top = _top_folders(rows)
    if not top:
        return
    named = {f: splits.of_folder(f) for f in sorted(top)}
    if not splits.from_source:
        if all(named.values()):
            raise SpecError(
                f"the top folders of {source_uri} are split names {sorted(top)}: built by "
                "hash their names would become the classes. Set splits.from: source to keep "
                "the source's splits (<prefix>/<split>/<class>/…), or point source.uri at one "
                "split's folder")
        return
    unknown = [f for f, s in named.items() if s is None]
    if unknown:
        raise SpecError(
            f"splits.from: source reads <prefix>/<split>/<class>/…, but the top folder(s) "
            f"{unknown[:10]} of {source_uri} name no split; known: "
            f"{ {s: list(n) for s, n in splits.folders.items()} }. Map them in "
            "splits.folders, move them, or use splits.from: hash")


def flatten_keys(rows: list[dict], splits=None) -> tuple[list[dict], list[QuarantineEntry]]:
    """Items of a class-folder listing; with a source-split ``splits``, the first folder is
    the split and the second the class."""
    by_source = splits is not None and splits.from_source
    items, refused, seen = [], [], {}
    for row in sorted(rows, key=lambda r: r["key"]):
        key = row["key"]
        split = None
        rel = key
        if by_source and "/" in key:
            top, rel = key.split("/", 1)
            split = splits.of_folder(top)
        if "/" not in rel:
            refused.append(QuarantineEntry(
                key, "flatten", "not_in_class_folder",
                "object sits directly under the split folder" if split else
                "object sits directly under the source prefix"))
            continue
        name = flat_name(rel)
        if split:
            name = f"{split}/{name}"
        if name in seen:  # 'a/b__c.jpg' and 'a/b/c.jpg' would collide: disambiguate both ways
            digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:8]
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}_{digest}.{ext}" if dot else f"{name}_{digest}"
        seen[name] = key
        item = {"source_key": key, "etag": row["etag"], "size": row["size"],
                "class_name": rel.split("/", 1)[0], "name": name}
        if split:
            item["split"] = split
        items.append(item)
    return items, refused


def flatten(rows: list[dict], spec) -> Flattened:
    check_split_folders(rows, spec.splits, spec.source.uri)
    items, refused = flatten_keys(rows, spec.splits)
    return Flattened(items, refused)


def _expected(spec) -> str:
    if spec.splits.from_source:
        return "<prefix>/<split>/<class>/<image> (split folders: " + ", ".join(
            f"{s}: {'/'.join(n)}" for s, n in spec.splits.folders.items()) + ")"
    return "<prefix>/<class>/[any/depth/]<image>"


def _labels(spec) -> str:
    under = "each split folder" if spec.splits.from_source else "the prefix"
    return (f"one class per first-level folder under {under}; deeper folders belong to it "
            "(not im2rec --recursive's folder per class)")


LAYOUT = Layout("class_folders", flatten, lambda spec: (), _expected, _labels)
