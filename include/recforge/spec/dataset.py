"""Dataset specs: the YAML under ``include/datasets/`` that defines one dataset and its DAG.

Validated with pydantic, unknown keys rejected (a typo must not silently fall back to a
default). ``load_spec`` turns every validation error into one message that names the file,
the field and the fix.
"""

from __future__ import annotations

import contextlib
import copy
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from recforge.errors import SpecError
from recforge.kinds import KINDS, kind
from recforge.spec.alerts import ENV_REF, AlertSpec
from recforge.spec.base import StrictModel
from recforge.spec.bench import BenchOptions, BenchSpec
from recforge.spec.quality import QualitySpec
from recforge.spec.s3 import S3Spec
from recforge.spec.schedule import (
    CRON_PRESETS,
    SCHEDULE_TAGS,
    EventSchedule,
    Schedule,
    check_cron,
)

# (0 - 0.485) / 0.229 .. (1 - 0.406) / 0.225: ImageNet-normalised values, with a little slack
NORMALISED_VALUE_RANGE = (-2.2, 2.7)

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,62}$")
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
MAX_PIXELS_CEILING = 4_000_000_000  # ~12 GB of RGB: above it the bomb guard means nothing
# with splits.from: source, these leakage checks warn by default (DatasetSpec)
SOURCE_SPLIT_WARNINGS = ("split_content", "near_duplicates")
REDACTED_WEBHOOK = "(redacted: a webhook URL is a secret; write it as ${ENV_VAR} in the spec)"


def check_uri(v: str, field: str = "uri") -> str:
    """``s3://bucket/prefix`` with a valid bucket name, or an absolute local path; neither
    may hold a ``.`` or ``..`` segment (a path that climbs would slip past the overlap and
    bounds checks, and S3 keeps such keys literally)."""
    if v.startswith("s3://"):
        bucket, _, prefix = v[5:].partition("/")
        if not BUCKET_RE.match(bucket):
            raise ValueError(f"{field} {v!r} has no valid bucket name (3-63 lowercase letters, "
                             "digits, '.' or '-'); write s3://bucket/prefix")
    else:
        prefix = v[7:] if v.startswith("file://") else v
        if "://" in prefix or not prefix.startswith("/"):
            raise ValueError(f"{field} {v!r} is neither s3://bucket/prefix nor an absolute "
                             "path")
    if any(part in (".", "..") for part in prefix.split("/")):
        raise ValueError(f"{field} {v!r} holds a '.' or '..' segment; write the prefix it "
                         "means without them")
    return v


def is_local(uri: str) -> bool:
    return not uri.startswith("s3://")


def _bucket(uri: str) -> str | None:
    return None if is_local(uri) else uri[5:].partition("/")[0]


def within(uri: str, prefixes) -> bool:
    """Whether ``uri`` is one of ``prefixes`` or lies under one (whole path segments)."""
    return any(_inside(uri, p) for p in prefixes)


def _inside(inner: str, outer: str) -> bool:
    a, b = inner.rstrip("/") + "/", outer.rstrip("/") + "/"
    return a.startswith(b)

DETECTION_LAYOUTS = ("voc", "coco")
CLASSIFICATION_LAYOUTS = ("class_folders", "list")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
SplitName = Literal["train", "val", "test"]
# splits.from: source — the folder names that mean each split (compared case-insensitively)
SPLIT_FOLDERS: dict[str, tuple[str, ...]] = {
    "train": ("train", "training"), "val": ("val", "validation", "valid"),
    "test": ("test", "testing")}


class ListColumns(StrictModel):
    """Where a list file's columns are: a column's header name, or its 0-based position."""

    key: str | int = Field(
        "key", description="the image's key under the source prefix (or its stem, see "
        "key_match)")
    label: str | int = Field(
        "label", description="the class name; an integer label is the class of that name "
        "('7': classes are numbered by name, see docs/datasets.md)")
    split: str | int | None = Field(
        None, description="the split (a name splits.folders maps); null: the list has none")
    header: bool | None = Field(
        None, description="the first row names the columns; null: decided from the file")
    format: Literal["auto", "csv", "tsv", "space", "lst"] = Field(
        "auto", description="auto: by the file's extension (.csv: csv, .tsv: tsv, .txt: "
        "space, .lst: lst); space splits on runs of blanks (Caffe's train.txt); lst is "
        "im2rec's index<TAB>label<TAB>path, whose columns are fixed (key and label ignored)")
    key_match: Literal["path", "name", "stem"] = Field(
        "path", description="path: the key is the object's path under the prefix; name: "
        "or its file name, found anywhere under the prefix (a Kaggle train.csv's "
        "0004be2cfeaba1c0361d39e2b000257b.jpg for train/…); stem: or either without its "
        "extension (ImageNet's ILSVRC2012_val_00000001). A name two images share matches "
        "neither")
    label_token: Literal["whole", "first"] = Field(
        "whole", description="whole: the label is the cell; first: its first blank-separated "
        "token (Kaggle ImageNet's PredictionString 'n01751748 1 2 3 4 n01751748 …')")


class VocSpec(StrictModel):
    """Pascal VOC as shipped: one year folder, or VOCdevkit with several years."""

    years: tuple[int, ...] | None = Field(
        None, description="null: the prefix is one year folder (…/VOC2012); else the prefix "
        "is VOCdevkit and these years' VOC<year>/ folders are read (GluonCV's 07+12: "
        "[2007, 2012])")
    image_sets: dict[SplitName, tuple[str, ...]] = Field(
        default_factory=lambda: {"train": ("train",), "val": ("val",)},
        description="splits.from: source — split → the ImageSets/Main/<set>.txt lists whose "
        "images it holds, e.g. {train: [trainval], val: [test]}; images in no chosen set are "
        "not used. A set missing in one year contributes nothing there; in every year, the "
        "run is refused")

    @field_validator("years")
    @classmethod
    def _years_ok(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is not None and (not v or len(set(v)) != len(v)
                              or not all(1000 <= y <= 9999 for y in v)):
            raise ValueError(f"source.voc.years {list(v)} must be distinct 4-digit years, e.g. "
                             "[2007, 2012] (VOC<year>/ folders), or null for one year folder")
        return v

    @field_validator("image_sets")
    @classmethod
    def _sets_ok(cls, v: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        if not v or not all(v.values()):
            raise ValueError("source.voc.image_sets gives each split at least one "
                             "ImageSets/Main set, e.g. {train: [trainval], val: [test]}")
        bad = [n for names in v.values() for n in names if not re.fullmatch(r"[\w\-]+", n)]
        if bad:
            raise ValueError(f"source.voc.image_sets: {bad} are not set names (the <set> of "
                             "ImageSets/Main/<set>.txt, e.g. trainval)")
        return v


class SourceSpec(StrictModel):
    uri: str = Field(description="s3://bucket/prefix (or a local path) holding the raw images")
    layout: Literal["class_folders", "list", "voc", "coco"] = Field(
        "class_folders",
        description="class_folders: <prefix>/<class>/[any/depth/]<image>; the class is the "
        "first folder under the prefix (with splits.from: source, <prefix>/<split>/<class>/…). "
        "list: images anywhere under the prefix, labelled (and split) by list files. "
        "Detection: voc (<prefix>/JPEGImages/<id>.<ext> with <prefix>/Annotations/<id>.xml, "
        "or VOCdevkit with source.voc.years) or coco (<prefix>/annotations/instances_*.json, "
        "images at <prefix>/<split><year>/<file_name> or <prefix>/images/<file_name>); see "
        "docs/datasets.md",
    )
    extensions: tuple[str, ...] = IMAGE_EXTENSIONS
    pairs: PairsSpec | None = Field(None, description="segmentation: how images pair with masks")
    list_uri: str | None = Field(
        None, description="layout list: one list file (CSV, TSV or .lst) of key, label and "
        "optionally split")
    lists: dict[SplitName, str] | None = Field(
        None, description="layout list: one list file per split, e.g. {train: URI, val: URI}; "
        "'folders' instead of a URI: that split's images are <prefix>/<split>/<class>/… "
        "(ImageNet's train)")
    columns: ListColumns = Field(ListColumns(), description="layout list: the list's columns")
    voc: VocSpec | None = Field(None, description="layout voc: years and image sets")
    allowed: tuple[str, ...] = Field(
        (), description="prefixes a triggered run may read instead of uri (the trigger "
        "form's source_uri must lie inside one); empty: uri only. A local path is allowed to "
        "a DAG run only when listed here")

    @field_validator("uri")
    @classmethod
    def _uri_ok(cls, v: str) -> str:
        return check_uri(v, "source.uri")

    @field_validator("allowed")
    @classmethod
    def _allowed_ok(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_uri(u, "source.allowed") for u in v)

    @field_validator("list_uri")
    @classmethod
    def _list_uri_ok(cls, v: str | None) -> str | None:
        return None if v is None else check_uri(v, "source.list_uri")

    @field_validator("lists")
    @classmethod
    def _lists_ok(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is not None:
            if not v:
                raise ValueError("source.lists names no split; give e.g. {train: URI, val: URI}")
            for split, uri in v.items():
                if uri != "folders":  # that split's labels are its class folders
                    check_uri(uri, f"source.lists.{split}")
            if set(v.values()) == {"folders"}:
                raise ValueError("source.lists gives no list file (every split is 'folders'): "
                                 "use layout: class_folders with splits.from: source")
        return v

    @model_validator(mode="after")
    def _layout_fields(self) -> SourceSpec:
        if self.layout == "list":
            if (self.list_uri is None) == (self.lists is None):
                raise ValueError("layout list needs exactly one of source.list_uri (one list "
                                 "file) or source.lists ({split: URI}); see docs/datasets.md")
        elif self.list_uri is not None or self.lists is not None:
            raise ValueError("source.list_uri / source.lists are for layout: list")
        if self.voc is not None and self.layout != "voc":
            raise ValueError("source.voc is for layout: voc")
        return self

    @field_validator("extensions")
    @classmethod
    def _dotted_lower(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        out = tuple(e.lower() if e.startswith(".") else f".{e.lower()}" for e in v)
        if not out:
            raise ValueError("list at least one image extension, e.g. ['.jpg', '.png']")
        return out


class PairsSpec(StrictModel):
    """Segmentation sources: image/mask pairs, by parallel folders or by a list file."""

    layout: Literal["paired_folders", "pair_list"] = Field(
        "paired_folders",
        description="paired_folders: <prefix>/<images>/<rel><image_suffix>.<ext> pairs with "
        "<prefix>/<masks>/<rel><mask_suffix>.png (with splits.from: source <rel> starts with "
        "the split folder: leftImg8bit/train/… with gtFine/train/…); pair_list: a TSV of "
        "image<TAB>mask keys (no splits)",
    )
    images: str = "images"
    masks: str = "masks"
    image_suffix: str = ""
    mask_suffix: str = ""
    list_uri: str | None = Field(None, description="pair_list: URI of the TSV list")

    @model_validator(mode="after")
    def _list_needs_uri(self) -> PairsSpec:
        if self.layout == "pair_list" and not self.list_uri:
            raise ValueError("layout pair_list needs list_uri (a TSV of image<TAB>mask keys)")
        return self


class SegmentationSpec(StrictModel):
    """The label definition of a segmentation dataset (see docs/segmentation.md)."""

    colormap: str | None = Field(
        None, description="cityscapes, voc, or a .yaml/.csv colour map (relative to the spec)")
    id_map: dict[int, int] | None = Field(None, description="id → trainId for id masks")
    target: Literal["id", "trainId"] = "trainId"
    ignore_index: int = Field(255, ge=0, le=255)
    on_unknown: Literal["error", "ignore"] = Field(
        "error", description="unknown colour/id: fail naming the file, or map to ignore")
    collision_rule: Literal["lowest_id", "error"] | None = None
    resolve: dict[str, str] = Field(
        default_factory=dict, description="shared colour 'R,G,B' → the class name that wins")
    mask_compression: int = Field(1, ge=0, le=9, description="PNG level for packed masks")

    @model_validator(mode="after")
    def _has_definition(self) -> SegmentationSpec:
        if self.colormap is None and self.id_map is None:
            raise ValueError("give a colormap (cityscapes, voc or a file) and/or an id_map")
        return self


class DetectionSpec(StrictModel):
    """How a detection dataset's annotations are read (see docs/detection.md)."""

    crowd: Literal["drop", "difficult", "keep"] = Field(
        "drop", description="COCO iscrowd regions: drop (not packed, counted in the summary's "
        "crowd_dropped: a crowd box is no object to match anchors to, and GluonCV's SSD/YOLOv3 "
        "transforms ignore difficult), difficult (packed with difficult 1), "
        "or keep (packed as ordinary objects)")

    classes: tuple[str, ...] | None = Field(
        None, description="the class names allowed; an object of any other name is "
        "quarantined (unknown_class). Default: every name the annotations use")
    empty_images: Literal["quarantine", "keep"] = Field(
        "quarantine", description="an image with no (usable) object: quarantine it "
        "(no_objects), or keep it as a negative with one padding row of -1s")
    box_frame: Literal["stored", "displayed"] = Field(
        "stored", description="the pixel frame the boxes are in: stored (the JPEG's pixels "
        "as stored, EXIF orientation not applied: what VOC tools and COCO write) or displayed "
        "(after the EXIF orientation). recforge orients the pixels and moves the boxes with "
        "them")
    voc_pixel_origin: Literal[0, 1] = Field(
        1, description="VOC bndbox coordinates are 1-based pixel indices (Pascal VOC's own "
        "convention); 0 for tools that write 0-based ones")
    max_name_chars: int = Field(
        256, ge=1, le=4096, description="a class name longer than this refuses its object "
        "(bad_object): classes.json and the report stay small")
    max_refused_parts: int = Field(
        1000, ge=1, le=1_000_000, description="refused objects of one annotation reported one "
        "by one in quarantine.jsonl; past it one entry counts the rest by reason")
    min_box_pixels: float = Field(
        1.0, ge=0, description="a box narrower or lower than this, in source pixels, is "
        "degenerate and quarantined (degenerate_box)")


class LabelSpec(StrictModel):
    allow_renumbering: bool = Field(
        False,
        description="if a class of the previous published version vanished, renumber "
        "instead of failing (changes ids: retrain from scratch)",
    )
    case: Literal["preserve", "lower"] = Field(
        "preserve", description="class names as written (Dog and dog are two classes, and "
        "the checklist warns), or lowercased before numbering (one class)")

    def name(self, raw: str) -> str:
        """A class name as this dataset numbers it."""
        return raw.lower() if self.case == "lower" else raw


class SplitSpec(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              serialize_by_alias=True)

    from_: Literal["hash", "source"] = Field(
        "hash", alias="from",
        description="hash: each image's split by a hash of its source key (val_ratio, "
        "test_ratio, seed); source: the split the source defines (split folders, list files, "
        "COCO's instances_<split> files, VOC's ImageSets) — a source without one is refused")
    folders: dict[SplitName, tuple[str, ...]] = Field(
        default_factory=lambda: dict(SPLIT_FOLDERS),
        description="splits.from: source — split → the folder names that mean it (case-"
        "insensitive); a split folder that maps to no split is refused naming it")
    val_ratio: float = Field(0.1, ge=0.0, lt=1.0)
    test_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    seed: int = 0

    @model_validator(mode="after")
    def _sum_below_one(self) -> SplitSpec:
        if self.val_ratio + self.test_ratio >= 1.0:
            raise ValueError(
                f"val_ratio + test_ratio = {self.val_ratio + self.test_ratio} leaves no "
                "training data; keep their sum below 1"
            )
        if self.from_ == "source" and (self.val_ratio, self.test_ratio) != (0.1, 0.0):
            raise ValueError("val_ratio / test_ratio split by hash; with splits.from: source "
                             "the source's own splits are kept — remove them")
        seen: dict[str, str] = {}
        for split, names in self.folders.items():
            for folder in names:
                other = seen.setdefault(folder.lower(), split)
                if other != split:
                    raise ValueError(f"splits.folders maps {folder!r} to both {other} and "
                                     f"{split}; give each folder name one split")
        return self

    @property
    def from_source(self) -> bool:
        return self.from_ == "source"

    def of_folder(self, folder: str) -> str | None:
        """The split a source folder name means (``splits.folders``), else None."""
        low = folder.lower()
        return next((s for s, names in self.folders.items()
                     if low in (n.lower() for n in names)), None)


class PackSpec(StrictModel):
    resize: int = Field(256, ge=0, le=16384, description="short side in pixels; 0 keeps size")
    upscale: bool = Field(
        False, description="also enlarge images whose short side is below `resize`"
    )
    quality: int = Field(95, ge=1, le=100, description="JPEG quality (PNG: compression 0-9)")
    encoding: Literal[".jpg", ".png"] = ".jpg"
    color: Literal[1, 0, -1] = Field(1, description="1 colour, 0 grayscale, -1 unchanged")
    interpolation: Literal["auto", "area", "linear", "cubic", "lanczos"] = Field(
        "auto", description="auto: reduced JPEG decode + cubic, area for large full-decode "
        "shrinks, linear below 2x (see docs/im2rec.md)")
    shard_size: int | Literal["auto"] = Field(
        500, description="images per shard, one shard a pack task (1 to 1,000,000), or auto: "
        "sized from the data and the pack slots, balanced groups of shards a task, one round "
        "of tasks per slot for most nights (docs/spec.md)")
    max_pixels: int = Field(
        178_956_970, ge=1, le=MAX_PIXELS_CEILING,
        description="decompression-bomb guard: larger images are quarantined (at most 4e9)"
    )

    @field_validator("shard_size")
    @classmethod
    def _shard_size_ok(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 1 <= v <= 1_000_000:
            raise ValueError("shard_size is 1 to 1,000,000 images, or auto")
        return v


class PublishSpec(StrictModel):
    uri: str = Field(description="s3://bucket/prefix; versions land in <uri>/<name>/<version>/")
    conditional_writes: Literal["required", "unchecked"] = Field(
        "required", description="required: before its first publish into a bucket, a run "
        "proves the store refuses a second If-None-Match: * write and a wrong If-Match, and "
        "fails naming the store if not; unchecked: skip that proof (for a store known to "
        "honour them, or one where exclusive publishing is given up: docs/reliability.md)")
    allowed: tuple[str, ...] = Field(
        (), description="prefixes a triggered run may publish to instead of uri (the trigger "
        "form's publish_uri must lie inside one); empty: uri only. A local path is allowed to "
        "a DAG run only when listed here")
    s3: S3Spec = Field(
        S3Spec(), description="what every write into the publish target carries (and into "
        "the staging prefix, unless staging_s3 says otherwise): sse, kms_key_id, "
        "expected_bucket_owner, storage_class, acl; for a bucket whose policy refuses writes "
        "without them (docs/spec.md)")

    @field_validator("uri")
    @classmethod
    def _uri_ok(cls, v: str) -> str:
        return check_uri(v, "publish.uri")

    @field_validator("allowed")
    @classmethod
    def _allowed_ok(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_uri(u, "publish.allowed") for u in v)


class DatasetSpec(StrictModel):
    name: str
    task: Literal["classification", "segmentation", "detection"] = "classification"
    description: str = ""
    schedule: Schedule | None = Field(
        "0 2 * * *", description="when it rebuilds: a 5-field cron (UTC) or preset; null for "
        "manual runs only; or on events, any of which starts a run: {asset: recforge/<name> "
        "or a list, s3_events: {queue: <SQS queue URL>}, cron: <also on this clock>} "
        "(docs/spec.md)")
    owner: str = "data-eng"
    source: SourceSpec
    labels: LabelSpec = LabelSpec()
    splits: SplitSpec = SplitSpec()
    pack: PackSpec = PackSpec()
    segmentation: SegmentationSpec | None = None
    detection: DetectionSpec | None = None
    publish: PublishSpec
    quality: QualitySpec = Field(
        QualitySpec(), description="the data-quality checklist: thresholds and severities"
    )
    alerts: AlertSpec = Field(AlertSpec(), description="who hears about failures, and how")
    bench: BenchSpec = Field(
        BenchSpec(), description="loader benchmark before publish: options and floors"
    )
    staging_uri: str | None = Field(
        None, description="where intermediate data lives; default <publish.uri>/_staging"
    )
    staging_s3: S3Spec | None = Field(
        None, description="what every write into the staging prefix carries (fields as "
        "publish.s3), for a staging_uri in another bucket with a policy of its own; "
        "default: publish.s3")
    tags: tuple[str, ...] = ()
    aws_conn_id: str | None = Field(
        None, description="Airflow connection for S3 (credentials; endpoint_url in its extra); "
        "default: [recforge] aws_conn_id of the deployment, else aws_default. Without such a "
        "connection, and in the CLI, boto3's own configuration (AWS_* variables, profiles)")

    @field_validator("schedule")
    @classmethod
    def _schedule_ok(cls, v: str | EventSchedule | None) -> str | EventSchedule | None:
        return check_cron(v, "schedule", CRON_PRESETS) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _events_ok(self) -> DatasetSpec:
        """An event schedule on the dataset's own Asset would rebuild it after every publish;
        S3 event notifications exist for an S3 source only."""
        if not isinstance(self.schedule, EventSchedule):
            return self
        if f"recforge/{self.name}" in (self.schedule.asset or ()):
            raise ValueError(f"schedule.asset recforge/{self.name} is this dataset's own Asset: "
                             "each publish would start the next run; name an upstream's")
        if self.schedule.s3_events and is_local(self.source.uri):
            raise ValueError(f"schedule.s3_events needs an s3:// source; {self.source.uri} is "
                             "a local path (schedule it on a cron instead)")
        return self

    @field_validator("staging_uri")
    @classmethod
    def _staging_ok(cls, v: str | None) -> str | None:
        return None if v is None else check_uri(v, "staging_uri")

    @model_validator(mode="after")
    def _one_owner_per_bucket(self) -> DatasetSpec:
        publish, staging = self.publish.s3, self.staging_options
        if (_bucket(self.publish.uri) == _bucket(self.staging)
                and publish.expected_bucket_owner and staging.expected_bucket_owner
                and publish.expected_bucket_owner != staging.expected_bucket_owner):
            raise ValueError("publish.s3 and staging_s3 give the bucket they share two "
                             f"expected owners ({publish.expected_bucket_owner} and "
                             f"{staging.expected_bucket_owner}): a bucket has one")
        return self

    @model_validator(mode="after")
    def _no_overlap(self) -> DatasetSpec:
        src = self.source.uri
        for field, uri in (("publish.uri", self.publish.uri), ("staging", self.staging)):
            if _inside(uri, src) or _inside(src, uri):
                raise ValueError(
                    f"{field} {uri} and source.uri {src} overlap: the next run would list its "
                    "own output as source images; keep them in separate prefixes")
        return self

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(
                f"{v!r} is not a valid dataset name: use lowercase letters, digits, '_' or "
                "'-', starting with a letter or digit (it becomes part of the dag_id and S3 keys)"
            )
        return v

    @model_validator(mode="before")
    @classmethod
    def _source_split_defaults(cls, data):
        """With ``splits.from: source`` the splits are the publisher's, and public datasets
        ship known duplicates across them (ImageNet, COCO, VOC): the content and
        near-duplicate leakage checks warn (reported, not blocking) unless the spec sets
        their severity; a key in two splits still fails."""
        splits = data.get("splits") if isinstance(data, dict) else None
        if not isinstance(splits, dict) or splits.get("from") != "source":
            return data
        data = copy.deepcopy(data)
        quality = data.setdefault("quality", {})
        if isinstance(quality, dict):
            severity = quality.setdefault("severity", {})
            if isinstance(severity, dict):
                for check in SOURCE_SPLIT_WARNINGS:
                    severity.setdefault(check, "warn")
        return data

    @model_validator(mode="before")
    @classmethod
    def _task_defaults(cls, data):
        """Defaults that depend on the task's kind (``recforge.kinds``): a kind whose loader is
        not the benchmark's default benchmarks with its own (``bench.options.loader``); a
        kind with boxes gets the detection section's defaults; a kind with masks benchmarked
        by the segmentation loader, whose ToTensor normalises with the ImageNet mean/std,
        gets the checklist's loader value range that follows. Values the spec sets
        explicitly are kept."""
        task = data.get("task") if isinstance(data, dict) else None
        k = KINDS.get(task) if isinstance(task, str) else None
        if k is None or k.loader == BenchOptions.model_fields["loader"].default:
            return data
        data = copy.deepcopy(data)
        if k.boxes and data.get("detection") is None:
            data["detection"] = {}  # the section's defaults: docs/detection.md
        bench = data.setdefault("bench", {})
        if isinstance(bench, dict):
            options = bench.setdefault("options", {})
            if isinstance(options, dict):  # ImageRecordIter refuses label arrays
                options.setdefault("loader", k.loader)
                if k.masks:
                    quality = data.setdefault("quality", {})
                    if options["loader"] == "segmentation" and isinstance(quality, dict):
                        loader = quality.setdefault("loader", {})
                        if isinstance(loader, dict):
                            loader.setdefault("value_range", list(NORMALISED_VALUE_RANGE))
        return data

    @model_validator(mode="after")
    def _task_sections(self) -> DatasetSpec:
        k = kind(self.task)
        if k.masks:
            if self.source.pairs is None:
                raise ValueError("task segmentation needs source.pairs (how images pair with "
                                 "masks); see docs/segmentation.md")
            if self.segmentation is None:
                raise ValueError("task segmentation needs a segmentation section with a "
                                 "colormap and/or id_map")
        elif self.segmentation is not None or self.source.pairs is not None:
            raise ValueError("segmentation / source.pairs are only for task: segmentation")
        if self.source.layout == "list" and not k.image_class:
            raise ValueError("source.layout list is for task: classification (segmentation: "
                             "source.pairs.layout pair_list)")
        detection_layout = self.source.layout in DETECTION_LAYOUTS
        if k.boxes:
            if not detection_layout:
                raise ValueError("task detection needs source.layout voc or coco; see "
                                 "docs/detection.md")
        else:
            if detection_layout:
                raise ValueError(f"source.layout {self.source.layout} is for task: detection "
                                 "(add task: detection, or use layout class_folders)")
            if self.detection is not None:
                raise ValueError("the detection section is only for task: detection")
        return self

    @property
    def dag_id(self) -> str:
        return f"recforge__{self.name}"

    @property
    def staging(self) -> str:
        return self.staging_uri or f"{self.publish.uri.rstrip('/')}/_staging"

    @property
    def staging_options(self) -> S3Spec:
        """What writes into the staging prefix carry: ``staging_s3``, else ``publish.s3``."""
        return self.staging_s3 if self.staging_s3 is not None else self.publish.s3

    def public_dump(self) -> dict:
        """The spec as JSON data for what recforge writes down (the published manifest, the
        report): a literal ``alerts.webhook_url`` is a secret, so it is replaced by
        ``REDACTED_WEBHOOK`` (a ``${ENV_VAR}`` reference names no secret and is kept)."""
        data = self.model_dump(mode="json")
        url = data.get("alerts", {}).get("webhook_url")
        if url is not None and not ENV_REF.match(url):
            data["alerts"]["webhook_url"] = REDACTED_WEBHOOK
        return data

    def with_overrides(self, overrides: dict) -> DatasetSpec:
        """A copy with dotted-path overrides applied (``{"pack.resize": 128}``), re-validated."""
        data = self.model_dump()
        for dotted, value in overrides.items():
            if value is None:
                continue
            node = data
            *parents, leaf = dotted.split(".")
            for p in parents:
                node = node[p]
            node[leaf] = value
        return parse_spec(data, origin=f"{self.name} (with overrides)")


def known_fields(loc: tuple) -> list[str]:
    """The field names of the spec section at ``loc`` (a validation error's path), as a
    spec writes them (aliases: ``splits.from``); empty where the path names no section."""
    from pydantic import BaseModel

    model: type[BaseModel] = DatasetSpec
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        kinds = [a for a in _flat_args(field.annotation)
                 if isinstance(a, type) and issubclass(a, BaseModel)]
        if not kinds:
            return []
        model = kinds[0]
    return sorted(f.alias or name for name, f in model.model_fields.items())


def _flat_args(annotation) -> list:
    """The types inside an annotation's unions and ``Annotated`` wrappers (``schedule``)."""
    import typing

    args = typing.get_args(annotation)
    return [t for a in args for t in _flat_args(a)] if args else [annotation]


def _format_errors(exc: ValidationError, origin: str) -> str:
    lines = [f"invalid dataset spec {origin}:"]
    for err in exc.errors():
        # the schedule's shape tags are pydantic's bookkeeping, not fields a spec writes
        path = tuple(p for p in err["loc"] if p not in SCHEDULE_TAGS)
        loc = ".".join(str(p) for p in path) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            known = known_fields(path[:-1])
            msg = "unknown field; check its spelling against docs/spec.md" + (
                f" (known here: {', '.join(known)})" if known else "")
        elif err["type"] == "missing":
            msg = "required field is missing"
        lines.append(f"  - {loc}: {msg}")
    return "\n".join(lines)


def parse_spec(data: dict, origin: str = "<dict>") -> DatasetSpec:
    if not isinstance(data, dict):
        raise SpecError(f"invalid dataset spec {origin}: the top level must be a mapping")
    try:
        return DatasetSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_errors(exc, origin)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML where a repeated key is an error (the safe loader keeps the last silently)."""


def _unique_mapping(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    for i, key in enumerate(keys):
        if key in keys[:i]:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (the first one would be ignored)",
                node.value[i][0].start_mark)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _unique_mapping)


def load_spec(path: str | Path) -> DatasetSpec:
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506
    except FileNotFoundError:
        raise SpecError(f"dataset spec {path} does not exist; give the path of a spec YAML "
                        f"(the specs are in {specs_dir()})") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"invalid dataset spec {path}: not valid YAML: {exc}") from None
    return parse_spec(data, origin=str(path))


# the folder a running Airflow task was built from (``using_specs_dir``), else None
_current_specs_dir: Path | None = None


def specs_dir() -> Path:
    """The specs folder, which relative colour-map paths are resolved against: the
    one an Airflow task runs with (``using_specs_dir``), else ``RECFORGE_SPECS_DIR``, else
    ``include/datasets`` next to the package."""
    import os

    if _current_specs_dir is not None:
        return _current_specs_dir
    env = os.environ.get("RECFORGE_SPECS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "datasets"


@contextlib.contextmanager
def using_specs_dir(directory: str | Path):
    """``specs_dir()`` is ``directory`` inside the block: a DAG built from a folder given in
    code runs its stages against that folder (one stage per task process)."""
    global _current_specs_dir
    before, _current_specs_dir = _current_specs_dir, Path(directory)
    try:
        yield _current_specs_dir
    finally:
        _current_specs_dir = before


def load_all_specs(directory: str | Path | None = None) -> list[DatasetSpec]:
    """Every spec of the folder; the first invalid one raises (``load_specs`` keeps going)."""
    specs, errors = load_specs(directory)
    if errors:
        raise SpecError(next(iter(errors.values())))
    return specs


def load_specs(directory: str | Path | None = None
               ) -> tuple[list[DatasetSpec], dict[str, SpecError]]:
    """The valid specs of the folder, and the error of each invalid file (by file name): one
    bad file must not take the other datasets down."""
    directory = Path(directory) if directory else specs_dir()
    specs, errors = [], {}
    for path in sorted(directory.glob("*.yaml")):
        try:
            specs.append(load_spec(path))
        except SpecError as exc:
            errors[path.name] = exc
    return specs, errors
