"""What a run's bytes depend on, as hashes: the output-affecting options, each cache chunk
and shard, and the whole planned content (the **content id**).

``options_hash`` covers every input of a record's bytes other than the record's own row:
the pack options, the segmentation label definition (including a colour-map file's bytes),
the detection section,
:data:`FORMAT_VERSION`, OpenCV's version (its codecs write the bytes) and the source of the
modules that turn an image into a record — a code change invalidates the cache by itself
instead of relying on someone bumping a number.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from recforge.spec import DatasetSpec, specs_dir

FORMAT_VERSION = 1  # bump when the packed bytes change in a way the hashed code does not show
# the fields of a planned row that reach the packed bytes (.rec/.idx/.lst, records.jsonl)
ROW_FIELDS = ("source_key", "etag", "label", "record_key", "split", "name", "class_name",
              "mask_key", "mask_etag", "annotation_key", "annotated_size", "objects", "object_ids")
ENGINE_MODULES = ("recforge.imaging", "recforge.format.recordio", "recforge.format.names",
                  "recforge.phash", "recforge.segmentation.pack", "recforge.segmentation.masks",
                  "recforge.incremental.cache", "recforge.format.detection_label",
                  "recforge.detection.boxes", "recforge.detection.records")
NOT_IN_BYTES = ("shard_size",)  # only moves shard boundaries; merged bytes do not change


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode("utf-8")).hexdigest()


@functools.cache
def _engine_sources() -> dict[str, str]:
    """The SHA-256 of each engine module's source: read once a process (a running process
    packs with the code it loaded, whatever the files become)."""
    import importlib

    out = {}
    for name in ENGINE_MODULES:
        path = Path(importlib.import_module(name).__file__)
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _label_definition(spec: DatasetSpec) -> dict | None:
    seg = spec.segmentation
    if seg is None:
        return None
    doc = seg.model_dump(mode="json")
    if seg.colormap and seg.colormap.endswith((".yaml", ".yml", ".csv")):
        path = Path(seg.colormap)
        path = path if path.is_absolute() else specs_dir() / path
        doc["colormap_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest() \
            if path.exists() else None
    return doc


def options(spec: DatasetSpec) -> dict:
    """Everything but the rows that the packed bytes depend on."""
    import cv2

    pack = {k: v for k, v in spec.pack.model_dump(mode="json").items() if k not in NOT_IN_BYTES}
    return {"format": FORMAT_VERSION, "task": spec.task, "pack": pack,
            "segmentation": _label_definition(spec), "opencv": cv2.__version__,
            **({"detection": spec.detection.model_dump(mode="json")} if spec.detection else {}),
            "engine": dict(_engine_sources())}


def options_hash(spec: DatasetSpec) -> str:
    return digest(options(spec))


def row_identity(row: dict) -> list:
    return [row.get(f) for f in ROW_FIELDS]


def chunk_hash(rows: list[dict], opts_hash: str) -> str:
    return digest(["chunk", opts_hash, [row_identity(r) for r in rows]])


def shard_hash(rows: list[dict], opts_hash: str) -> str:
    return digest(["shard", opts_hash, [row_identity(r) for r in rows]])


def content_id(rows: list[dict], classes: list[str], opts_hash: str) -> str:
    """The hash of the ordered planned records (split, then key order), the class list and
    the options: equal content ids mean byte-identical ``.rec``/``.idx``/``.lst``."""
    ordered = sorted(rows, key=lambda r: (r["split"], r["record_key"]))
    return digest(["content", opts_hash, classes, [row_identity(r) for r in ordered]])
