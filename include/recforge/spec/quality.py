"""The spec's ``quality`` section: the checklist's items, severities and thresholds.

Models and the item table only (parse-time light); the checklist itself is ``recforge.quality``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator, model_validator

from recforge.spec.base import StrictModel

Severity = Literal["fail", "warn", "off"]


@dataclass(frozen=True)
class Check:
    """One checklist item: its stable name, the item number, what it means, its default."""

    name: str
    item: str
    title: str
    default: Severity


CHECKS: tuple[Check, ...] = (
    Check("decode", "1", "every record decodes (0 corrupt)", "fail"),
    Check("index", "2", "unique keys, increasing offsets, .idx/manifest/summary agree", "fail"),
    Check("labels", "3", "labels are integers in [0, N) (masks: values in 0..N-1 or ignore; "
          "boxes: class ids in [0, N), inside [0, 1], xmin < xmax, ymin < ymax)", "fail"),
    Check("image_size", "4", "image sizes match the pack options", "fail"),
    Check("sources", "5", "every listed source is packed or quarantined, exactly once", "fail"),
    Check("loader_dtype", "6", "loader batches are float32 NDArrays", "fail"),
    Check("loader_range", "7", "batch values within the configured range", "fail"),
    Check("loader_shape", "8", "constant batch shape", "fail"),
    Check("gpu_memory", "9", "GPU memory peak under the limit", "fail"),
    Check("loader_throughput", "10", "loader throughput and read bandwidth above the floors",
          "fail"),
    Check("class_balance", "11", "smallest/largest class within tolerance", "warn"),
    Check("split_keys", "12a", "no source key in two splits", "fail"),
    Check("split_content", "12b", "no identical content (SHA-256) in two splits", "fail"),
    Check("near_duplicates", "12c", "no near-duplicate (dHash) across splits", "fail"),
    Check("masks", "13", "every image has its mask: same key, same size", "fail"),
    Check("objects_per_image", "14", "objects per image within limits, images without an "
          "object (negatives) within their share", "warn"),
    Check("box_size", "15", "tiny boxes and extreme box aspect ratios within their share",
          "warn"),
    Check("class_name_case", "16", "no two class names that differ only by case (Dog, dog)",
          "warn"),
)
CHECK_BY_NAME = {c.name: c for c in CHECKS}
LOADER_CHECKS = ("loader_dtype", "loader_range", "loader_shape", "gpu_memory",
                 "loader_throughput")
# the checks of only some task kinds are named in their Kind.checks (recforge.kinds)
# quality.class_balance_split: every split checked on its own
EACH_SPLIT = "each"


class LoaderQuality(StrictModel):
    """Floors and limits for the loader benchmark's results (checklist items 6-10)."""

    dtype: str = Field("float32", description="dtype every batch must have")
    value_range: tuple[float, float] = Field(
        (0.0, 255.0),
        description="[min, max] batch values: (0, 255) raw, (0, 1) after ToTensor, about "
        "(-2.2, 2.7) after ImageNet Normalize",
    )
    min_images_per_sec: float = Field(0.0, ge=0, description="loader throughput floor")
    min_read_mb_per_sec: float = Field(0.0, ge=0, description="read bandwidth floor")
    gpu_memory_limit_mb: float | None = Field(
        None, gt=0, description="peak GPU memory limit; not run on CPU or when unset"
    )

    @model_validator(mode="after")
    def _range_ordered(self) -> LoaderQuality:
        lo, hi = self.value_range
        if lo >= hi:
            raise ValueError(f"value_range {list(self.value_range)} must be [min, max], min < max")
        return self


class QualitySpec(StrictModel):
    """The spec's ``quality`` field: thresholds and severities of the checklist."""

    severity: dict[str, Severity] = Field(
        default_factory=dict,
        description="per-check override: fail (blocks publish), warn (reported) or off",
    )
    class_balance_min_ratio: float = Field(
        0.1, ge=0.0, le=1.0,
        description="smallest/largest class count (segmentation: pixel count) must be >= this",
    )
    class_balance_split: str | None = Field(
        "train", description=f"split whose balance is checked; {EACH_SPLIT}: each split on "
        "its own (the worst split is reported); null = all splits together"
    )
    near_duplicate_hamming: int = Field(
        4, ge=0, le=16,
        description="records in different splits whose dHash differs in <= this many bits "
        "are near-duplicates",
    )
    decode_sample: int | None = Field(
        1000, ge=0,
        description="records per split re-read from the .rec and decoded (ranged reads); "
        "0 = only the manifest's decode status, null = every record",
    )
    image_shape: tuple[int, int] | None = Field(
        None, description="[height, width] every image must have (fixed-shape datasets)"
    )
    ignore_label: int | None = Field(255, description="segmentation mask value to ignore")
    min_objects_per_image: int = Field(
        0, ge=0, description="detection: fewest objects an image may have (0: negatives allowed; "
        "their share is max_empty_share's)",
    )
    max_objects_per_image: int = Field(
        1000, ge=1, description="detection: most objects an image may have",
    )
    max_empty_share: float = Field(
        0.1, ge=0.0, le=1.0,
        description="detection: largest share of images without an object (negatives)",
    )
    min_box_side_px: float = Field(
        4.0, ge=0.0,
        description="detection: a box whose width or height is under this many pixels of the "
        "stored image is tiny",
    )
    max_tiny_box_share: float = Field(
        0.05, ge=0.0, le=1.0,
        description="detection: largest share of tiny boxes; also the largest share of boxes "
        "whose aspect ratio lies beyond max_box_aspect",
    )
    max_box_aspect: float = Field(
        20.0, ge=1.0,
        description="detection: a box's width / height (in stored pixels) must lie within "
        "[1 / max_box_aspect, max_box_aspect]",
    )
    loader: LoaderQuality = LoaderQuality()

    @model_validator(mode="after")
    def _objects_range(self) -> QualitySpec:
        if self.min_objects_per_image > self.max_objects_per_image:
            raise ValueError(f"min_objects_per_image {self.min_objects_per_image} is above "
                             f"max_objects_per_image {self.max_objects_per_image}")
        return self

    @field_validator("severity")
    @classmethod
    def _known_checks(cls, v: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(v) - set(CHECK_BY_NAME))
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; known: {sorted(CHECK_BY_NAME)}")
        return v

    def severity_of(self, name: str) -> Severity:
        return self.severity.get(name, CHECK_BY_NAME[name].default)
