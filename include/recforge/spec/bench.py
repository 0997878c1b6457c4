"""The spec's ``bench`` section: how the loader benchmark runs, and its floors per environment.

Models only (parse-time light); the benchmark itself is ``recforge.bench``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from recforge.spec.base import StrictModel


class BenchOptions(StrictModel):
    """How to run the loader: the settings a training job would use, plus the sweep."""

    split: str = Field("train", description="which <split>.rec/.idx to load")
    loader: Literal["image_record_iter", "segmentation", "detection"] = Field(
        "image_record_iter", description="image_record_iter: mx.io.ImageRecordIter "
        "(classification); segmentation: SegmentationRecordDataset + Gluon DataLoader; "
        "detection: mx.io.ImageDetRecordIter (docs/detection.md)")
    batch_size: int = Field(64, ge=1, le=65536)
    data_shape: tuple[int, int, int] = Field((3, 224, 224), description="C, H, W; C in 1, 3, 4")
    rand_crop: bool = True
    rand_mirror: bool = True
    resize: int = Field(-1, ge=-1, description="ImageRecordIter resize (short side); -1 = off")
    max_crop_size: int = Field(-1, ge=-1)
    min_crop_size: int = Field(-1, ge=-1)
    label_width: int = Field(1, ge=1)
    shuffle: bool = True
    seed: int = 0
    preprocess_threads: int = Field(4, ge=1, le=256, description="the setting users train with")
    thread_grid: tuple[int, ...] = Field(
        (1, 2, 4, 8), description="preprocess_threads values to sweep; () = only the one above"
    )
    prefetch_buffer: int = Field(4, ge=1, le=16, description="MXNet caps its queue at 16")
    warmup_batches: int = Field(5, ge=0)
    measure_batches: int = Field(50, ge=1)
    max_seconds_per_run: float = Field(
        120.0, gt=0, description="stop a run's warm window early after this long"
    )
    decode_records: int = Field(500, ge=1, description="records for the bare-decode rate")
    max_bytes: int = Field(
        1 << 30, ge=1 << 16,
        description="bytes of the split read for the benchmark: a contiguous window of its "
        "first records (at least one batch), fetched with ranged GETs; never the whole split "
        "when it is larger")
    max_check_batches: int = Field(
        50, ge=1, description="value-range pass: one epoch, at most this many batches (every "
        "record was already decoded and checked at pack; this pass checks what the loader "
        "makes of them)"
    )
    device: Literal["auto", "cpu", "gpu"] = Field(
        "auto", description="auto: the GPU if the loader sees one, else CPU (stated in the "
        "result); gpu: fail rather than measure on CPU, and refuse MXNet's loader on a GPU its "
        "kernels cannot run on (docs/gpu-worker.md)"
    )
    gpu_id: int = Field(0, ge=0)
    iter_kwargs: dict[str, int | float | bool | str | list[float]] = Field(
        default_factory=dict,
        description="further ImageRecordIter arguments (mean_r, std_r, ...) passed unchanged; "
        "for loader=detection ImageDetRecordIter's (label_pad_width, rand_crop_prob, "
        "min_crop_scales, ...), which win over the values rand_crop / rand_mirror map to",
    )

    @field_validator("data_shape")
    @classmethod
    def _shape_ok(cls, v: tuple[int, int, int]) -> tuple[int, int, int]:
        if v[0] not in (1, 3, 4) or v[1] < 1 or v[2] < 1:
            raise ValueError(
                f"data_shape {v} is not (C, H, W) with C in 1, 3, 4 and H, W >= 1; "
                "ImageRecordIter decodes to 1 (gray), 3 (RGB) or 4 (RGBA) channels"
            )
        return v

    @field_validator("thread_grid")
    @classmethod
    def _grid_ok(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(t < 1 for t in v):
            raise ValueError(f"thread_grid {v} has a value below 1; use positive thread counts")
        return tuple(sorted(set(v)))

    @field_validator("iter_kwargs")
    @classmethod
    def _no_overlap(cls, v: dict) -> dict:
        owned = {"path_imgrec", "path_imgidx", "data_shape", "batch_size", "rand_crop",
                 "device_id",
                 "rand_mirror", "preprocess_threads", "prefetch_buffer", "shuffle", "seed",
                 "resize", "max_crop_size", "min_crop_size", "label_width", "verbose"}
        clash = sorted(owned & set(v))
        if clash:
            raise ValueError(f"iter_kwargs sets {clash}, which are options of their own; "
                             "set them as bench options instead")
        return v

    @model_validator(mode="after")
    def _crop_sizes(self) -> BenchOptions:
        if self.max_crop_size != -1 and self.min_crop_size > self.max_crop_size:
            raise ValueError(f"min_crop_size {self.min_crop_size} > max_crop_size "
                             f"{self.max_crop_size}; MXNet requires min <= max")
        return self

    @model_validator(mode="after")
    def _detection_options(self) -> BenchOptions:
        """ImageDetRecordIter has no crop sizes and reads the label length from the records
        (it ignores arguments it does not know), so setting these would change nothing."""
        if self.loader != "detection":
            return self
        unused = [f"{name}={getattr(self, name)}" for name, default in
                  (("max_crop_size", -1), ("min_crop_size", -1), ("label_width", 1))
                  if getattr(self, name) != default]
        if unused:
            raise ValueError(
                f"{', '.join(unused)}: ImageRecordIter options that ImageDetRecordIter does "
                "not have (loader=detection); leave them unset, and use iter_kwargs "
                "(rand_crop_prob, min_crop_scales, label_pad_width, ...) for its own")
        return self


class BenchFloors(StrictModel):
    """Limits the benchmark must meet; ``None`` means not checked."""

    min_images_per_sec: float | None = Field(None, gt=0)
    max_p50_ms: float | None = Field(None, gt=0)
    max_p95_ms: float | None = Field(None, gt=0)
    max_p99_ms: float | None = Field(None, gt=0)
    max_first_batch_s: float | None = Field(None, gt=0)
    min_read_mb_per_sec: float | None = Field(None, gt=0)
    min_fraction_of_bare_decode: float | None = Field(
        None, gt=0, description="loader img/s ÷ single-core bare-decode img/s"
    )
    max_fraction_smaller_than_data_shape: float | None = Field(
        None, ge=0, le=1, description="images MXNet would silently upscale"
    )
    max_gpu_memory_bytes: int | None = Field(None, gt=0)
    require_gpu: bool = Field(False, description="fail if the benchmark ran on CPU")


class BenchSpec(StrictModel):
    """The ``bench:`` section of a dataset spec: how to run, and floors per environment.

    ``floors`` is keyed by environment name; the key used is the one given explicitly, else
    ``$RECFORGE_BENCH_ENV``, else the device the run used (``gpu`` / ``cpu``), else
    ``default``.
    """

    loader: Literal["auto", "mxnet", "dali", "both", "torch", "all"] = Field(
        "auto", description="whose loader is measured: MXNet's (in the MXNet environment), "
        "NVIDIA DALI's fn.readers.mxnet (classification and detection), both side by side, "
        "all (MXNet's with DALI's and the PyTorch loader beside it, each that is installed, "
        "each gated by its own floors), torch (recforge.readers.torch.dataset in a "
        "DataLoader, nvJPEG decode on a GPU; classification), or auto: on a GPU worker "
        "(device not cpu and a GPU present) MXNet's where mxnet's kernels run on the GPU's "
        "compute capability, else the PyTorch loader, else DALI; elsewhere MXNet's "
        "(recforge.bench.gpu_support)")
    options: BenchOptions = BenchOptions()
    floors: dict[str, BenchFloors] = Field(default_factory=dict,
                                           description="MXNet's loader, per environment")
    dali_floors: dict[str, BenchFloors] = Field(
        default_factory=dict, description="DALI's loader, per environment (same keys rule)")
    torch_floors: dict[str, BenchFloors] = Field(
        default_factory=dict, description="the PyTorch loader, per environment (same keys "
        "rule)")

    @model_validator(mode="after")
    def _dali_reads_classification(self) -> BenchSpec:
        if self.loader in ("dali", "both", "all") and self.options.loader == "segmentation":
            raise ValueError(
                f"bench.loader {self.loader!r} measures DALI, which reads classification and "
                f"detection splits; options.loader is {self.options.loader!r}: use "
                "bench.loader: mxnet")
        if self.loader == "torch" and self.options.loader != "image_record_iter":
            raise ValueError(
                f"bench.loader 'torch' measures the PyTorch loader, which reads classification "
                f"splits; options.loader is {self.options.loader!r}: use bench.loader: mxnet "
                "or auto")
        return self
