"""The PyTorch loader, timed like MXNet's: ``recforge.readers.torch.dataset`` + ``DataLoader``.

How a PyTorch job reads a classification split: recforge's own reader as a
``torch.utils.data.Dataset`` under a ``DataLoader`` with the spec's ``batch_size``, its
workers swept over the thread grid (``num_workers``, capped at the CPUs). On a GPU the
workers hand over the encoded JPEGs and the batch is decoded there with nvJPEG
(``torchvision.io.decode_jpeg(device="cuda")``); on CPU the workers decode with OpenCV,
as MXNet's loader does. Then each image is resized (``resize``), cropped to
``data_shape`` (random or centre, padded where smaller), mirrored (``rand_mirror``) and
stacked as a CHW float batch, what ``ImageRecordIter`` hands a trainer. Timed per batch after
a warm-up (the GPU synchronised), then one untimed pass in record order checks values and
labels. Runs in the core environment; torch and torchvision are imported inside the functions
(the ``torch`` extra). The result has the MXNet benchmark's layout, so floors and the report
read it unchanged. Parts:

- ``resolve_device``: nvJPEG on the GPU when torch sees one and it is not ruled out, else CPU;
- ``reader_dataset``: the call into ``recforge.readers.torch`` (``dataset``; on a GPU its
  ``decode_batch_gpu`` decodes each batch);
- ``Batcher``: encoded or decoded samples to one ``(images, labels)`` batch;
- ``timed_run`` / ``value_check``: one timed sweep point / the untimed pass;
- ``measure``: the ``bench.json``-shaped result for a fetched window (the signature of every
  loader, ``recforge.bench.loaders``).
"""

from __future__ import annotations

import json
import logging
import math
import platform
import random
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from recforge.bench.loaders import at_once, one
from recforge.bench.records import LoaderBenchError, bare_decode, count_records, size_check
from recforge.bench.results import (
    bench_document,
    dataset_facts,
    label_range,
    picked,
    run_entry,
    thread_grid,
)
from recforge.format import names

if TYPE_CHECKING:
    from recforge.spec.bench import BenchOptions

log = logging.getLogger(__name__)

NAME = "recforge.readers.torch.dataset + torch.utils.data.DataLoader"
DECODE = {"cpu": "OpenCV decode in the workers", "gpu": "torchvision decode_jpeg on the GPU"}


def _import_torch(gpu: bool = False):
    """torch, and on a GPU torchvision (nvJPEG's ``decode_jpeg``) too."""
    try:
        import torch

        if gpu:
            import torchvision  # noqa: F401
    except ImportError as exc:
        raise LoaderBenchError(
            f"bench.loader torch needs torch (and torchvision for GPU decode) in the core "
            f"environment ({exc}): install the 'torch' extra, or set bench.loader: mxnet or "
            "auto") from None
    return torch


def resolve_device(requested: str, gpu_id: int, torch) -> dict:
    """GPU decode (nvJPEG) when torch sees GPU ``gpu_id`` and it is not ruled out, else CPU."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    info = {"requested": requested, "num_gpus": n, "gpu_id": None, "kind": "cpu"}
    if requested != "cpu" and n > gpu_id:
        name = torch.cuda.get_device_name(gpu_id)
        major, minor = torch.cuda.get_device_capability(gpu_id)
        info.update(kind="gpu", gpu_id=gpu_id, gpu_name=name,
                    compute_capability=f"{major}.{minor}",
                    statement=f"decoded on GPU {gpu_id} ({name}, {major}.{minor}; nvJPEG, "
                              f"torchvision decode_jpeg device=cuda; {n} GPU(s) visible)")
        return info
    if requested == "gpu":
        raise LoaderBenchError(
            f"device=gpu requested but torch sees {n} GPU(s) (GPU {gpu_id} needed): check the "
            "driver (nvidia-smi), CUDA_VISIBLE_DEVICES and that torch is a CUDA build, or use "
            "device: auto")
    why = "device=cpu was requested" if requested == "cpu" else f"torch sees {n} GPU(s)"
    info["statement"] = (f"decoded on CPU in the DataLoader's workers ({why}); GPU memory "
                         "peak is not measured (null)")
    return info


def reader_dataset(root: Path, opts: BenchOptions, encoded: bool):
    """``recforge.readers.torch.dataset`` over ``root``'s split (a classification split):
    ``encoded``: the JPEG bytes (``decode="none"``, for nvJPEG), else decoded RGB in the
    DataLoader's workers (``decode="cpu"``, OpenCV; for a gray ``data_shape`` the bytes, which
    ``Batcher`` decodes gray)."""
    try:
        from recforge.readers import torch as readers_torch
    except ImportError as exc:
        raise LoaderBenchError(
            f"bench.loader torch reads with recforge.readers.torch, which this recforge "
            f"cannot import ({exc}): install a recforge with the readers package") from None
    rgb = opts.data_shape[0] == 3
    return readers_torch.dataset(str(root), opts.split,
                                 decode="cpu" if rgb and not encoded else "none",
                                 task="classification")


def _parts(item) -> tuple[object, object]:
    """A sample's ``(image, label)``: a pair, or a dict with ``image``/``data`` and ``label``."""
    if isinstance(item, dict):
        return item.get("image", item.get("data")), item.get("label")
    return item[0], item[1]


class Batcher:
    """Samples to one batch: decode (nvJPEG on ``device``'s GPU, else on CPU), resize, crop
    to ``data_shape``, mirror, stack. Callable as a ``collate_fn`` (CPU decode in the
    workers) or on the main process's list of samples (GPU decode)."""

    def __init__(self, opts: BenchOptions, device: str = "cpu", seed: int = 0):
        self.shape = tuple(opts.data_shape)
        self.resize, self.rand_crop = opts.resize, opts.rand_crop
        self.rand_mirror, self.device = opts.rand_mirror, device
        self.rng = random.Random(seed)

    def __call__(self, items: list):
        import numpy as np
        import torch

        payloads, labels = zip(*(_parts(x) for x in items), strict=True)
        if all(_is_encoded(p) for p in payloads):
            images = self._decode(payloads)
        else:  # the reader decoded them: HWC or CHW uint8
            images = [torch.as_tensor(np.asarray(p)) for p in payloads]
            images = [im.permute(2, 0, 1) if im.ndim == 3 and im.shape[-1] in (1, 3, 4)
                      and im.shape[0] not in (1, 3, 4) else im for im in images]
            images = [im.to(self.device) for im in images]
        batch = torch.stack([self._fit(im) for im in images]).float()
        label = torch.as_tensor(np.asarray([np.asarray(x, np.float32).ravel()
                                            for x in labels]))
        return batch, label

    def _decode(self, payloads) -> list:
        """CHW uint8 images: one nvJPEG call for the batch on a GPU, OpenCV (as MXNet's
        loader decodes) on CPU."""
        import numpy as np
        import torch

        gray = self.shape[0] == 1
        if self.device != "cpu":  # one batched nvJPEG call (recforge.readers.torch)
            from recforge.readers.torch import decode_batch_gpu

            rgb = decode_batch_gpu(list(payloads), device=self.device)
            if not gray:
                return rgb
            weights = torch.tensor([0.299, 0.587, 0.114], device=self.device)[:, None, None]
            return [(im * weights).sum(0, keepdim=True).round().to(torch.uint8) for im in rgb]
        import cv2

        out = []
        for p in payloads:
            buf = np.frombuffer(bytes(p), np.uint8) if isinstance(
                p, bytes | bytearray | memoryview) else np.asarray(p, np.uint8)
            img = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE if gray else cv2.IMREAD_COLOR)
            if img is None:
                raise LoaderBenchError(f"a record of {len(buf)} bytes does not decode as an "
                                       "image (cv2.imdecode); run recforge validate on it")
            img = img[:, :, None] if gray else img[:, :, ::-1]  # BGR to RGB
            out.append(torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1))
        return out

    def _fit(self, im):
        import torch.nn.functional as F

        c, h, w = self.shape
        if self.resize != -1:  # the short side to ``resize``
            ih, iw = im.shape[-2:]
            scale = self.resize / min(ih, iw)
            im = F.interpolate(im[None].float(), size=(round(ih * scale), round(iw * scale)),
                               mode="bilinear", antialias=True, align_corners=False)[0]
        ih, iw = im.shape[-2:]
        if ih < h or iw < w:  # padded, as DALI's out_of_bounds_policy="pad"
            im = F.pad(im, (0, max(w - iw, 0), 0, max(h - ih, 0)))
            ih, iw = im.shape[-2:]
        y = self.rng.randint(0, ih - h) if self.rand_crop else (ih - h) // 2
        x = self.rng.randint(0, iw - w) if self.rand_crop else (iw - w) // 2
        im = im[..., y:y + h, x:x + w]
        if self.rand_mirror and self.rng.random() < 0.5:
            im = im.flip(-1)
        return im


def _is_encoded(p) -> bool:
    if isinstance(p, bytes | bytearray | memoryview):
        return True
    shape = getattr(p, "shape", None)
    return shape is not None and len(shape) == 1


def _keep(items: list) -> list:
    """The GPU path's ``collate_fn``: the workers hand the samples over as they are."""
    return items


def _loader(torch, dataset, opts: BenchOptions, workers: int, device: dict, shuffle: bool,
            seed_offset: int = 0):
    gpu = device["kind"] == "gpu"
    generator = torch.Generator().manual_seed(opts.seed + seed_offset)
    collate = _keep if gpu else Batcher(opts, "cpu", opts.seed + seed_offset)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=opts.batch_size, shuffle=shuffle, num_workers=workers,
        collate_fn=collate, drop_last=True, generator=generator,
        prefetch_factor=max(1, math.ceil(opts.prefetch_buffer / workers)),
        persistent_workers=False, pin_memory=False)
    after = Batcher(opts, f"cuda:{device['gpu_id']}", opts.seed + seed_offset) if gpu else None
    return loader, after


def _batches(torch, dataset, opts: BenchOptions, workers: int, device: dict, shuffle: bool,
             epochs: int | None = None):
    """The loader's batches as ``(images, labels)``, epoch after epoch (``epochs``: how many;
    None: without end), decoded on the GPU where there is one, each complete (the GPU
    synchronised) when yielded."""
    epoch = 0
    while epochs is None or epoch < epochs:
        loader, after = _loader(torch, dataset, opts, workers, device, shuffle, epoch)
        for got in loader:
            batch = after(got) if after is not None else got
            if device["kind"] == "gpu":
                torch.cuda.synchronize(device["gpu_id"])
            yield batch
        epoch += 1


def timed_run(torch, dataset, opts: BenchOptions, workers: int, device: dict,
              rec_bytes: int, n_records: int) -> dict:
    """One sweep point: ``workers`` DataLoader workers, timed like ``recforge.bench.loader``:
    the first batch, ``warmup_batches``, then the measured window."""
    gpu = device["kind"] == "gpu"
    baseline = None
    if gpu:
        torch.cuda.reset_peak_memory_stats(device["gpu_id"])
        baseline = int(torch.cuda.memory_allocated(device["gpu_id"]))
    t0 = time.perf_counter()
    batches = _batches(torch, dataset, opts, workers, device, opts.shuffle)
    expect = [opts.batch_size, *opts.data_shape]
    latencies, problems, shapes, seen = [], [], set(), []
    measured, first, window_start = 0, None, time.perf_counter()
    for i in range(opts.warmup_batches + opts.measure_batches + 1):
        if i == opts.warmup_batches + 1:
            window_start = time.perf_counter()
        t = time.perf_counter()
        images, labels = next(batches)
        lat = time.perf_counter() - t
        first = time.perf_counter() - t0 if first is None else first
        shape = list(images.shape)
        shapes.add(tuple(shape))
        seen.append({"label_min": float(labels.min()), "label_max": float(labels.max())})
        if shape != expect:
            problems.append(f"batch {i}: shape {shape} != expected {expect}")
        if i > opts.warmup_batches:
            latencies.append(lat)
            measured += 1
            if time.perf_counter() - window_start > opts.max_seconds_per_run:
                break
    window = time.perf_counter() - window_start
    batches.close()
    ips = measured * opts.batch_size / window if window > 0 else 0.0
    peak = int(torch.cuda.max_memory_allocated(device["gpu_id"])) if gpu else None
    return _run_result(workers, first, ips, rec_bytes, n_records, latencies, measured,
                       window, opts, shapes, seen, problems, peak, baseline)


def _run_result(workers, first, ips, rec_bytes, n_records, latencies, measured, window, opts,
                shapes, seen, problems, peak, baseline) -> dict:
    return run_entry(threads=workers, first=first, ips=ips, rec_bytes=rec_bytes,
                     n_records=n_records, latencies=latencies, measured=measured,
                     window=window, opts=opts, shapes=shapes, batches_seen=len(seen),
                     label_min=min((r["label_min"] for r in seen), default=None),
                     label_max=max((r["label_max"] for r in seen), default=None),
                     peak=peak, baseline=baseline, problems=problems)


def value_check(torch, dataset, opts: BenchOptions, workers: int, device: dict,
                n_records: int) -> dict:
    """The untimed pass in record order: shapes, dtypes, value range, finiteness, labels."""
    n_batches = min(n_records // opts.batch_size, opts.max_check_batches)
    lo, hi, finite, problems = math.inf, -math.inf, True, []
    shapes, dtypes, seen = set(), set(), []
    batches = _batches(torch, dataset, opts, workers, device, shuffle=False, epochs=1)
    for i, (images, labels) in enumerate(batches):
        if i >= n_batches:
            break
        ok = bool(torch.isfinite(images).all())
        finite &= ok
        if not ok:
            problems.append(f"value check batch {i}: data has NaN or Inf")
        lo, hi = min(lo, float(images.min())), max(hi, float(images.max()))
        shapes.add(tuple(images.shape))
        dtypes.add(str(images.dtype).removeprefix("torch."))
        seen.append({"label_min": float(labels.min()), "label_max": float(labels.max())})
    if hi <= lo:
        problems.append(f"every value of every checked batch is {lo}: the images decode to a "
                        "constant (corrupt data)")
    return {"batches": n_batches, "records_covered": n_batches * opts.batch_size,
            "of_records": n_records, "value_min": lo, "value_max": hi, "all_finite": finite,
            "label_min": min((s["label_min"] for s in seen), default=None),
            "label_max": max((s["label_max"] for s in seen), default=None),
            "problems": problems, "shapes": [list(x) for x in sorted(shapes)],
            "dtypes": sorted(dtypes),
            "note": "untimed pass in record order with the recommended num_workers"}


def measure(prefix: str, root: Path, opts: BenchOptions, fetched: dict, sizes: dict | None,
            started: datetime, quiet: Callable[[], object] = at_once) -> dict:
    """The PyTorch loader's ``bench.json``-shaped result for the window in ``root`` (the
    signature of every loader, ``recforge.bench.loaders``; ``quiet`` is waited for first)."""
    quiet()
    torch = _import_torch()
    one("torch").refuse(opts.loader)
    from recforge.bench.device import nprocs

    device = resolve_device(opts.device, opts.gpu_id, torch)
    _import_torch(gpu=device["kind"] == "gpu")
    rec = root / names.rec(opts.split)
    n_records = count_records(root / names.idx(opts.split))
    if n_records < opts.batch_size:
        raise LoaderBenchError(f"{rec} has {n_records} records, fewer than batch_size="
                               f"{opts.batch_size}; lower the batch size for this split")
    rec_bytes = rec.stat().st_size
    classes = root / names.CLASSES
    num_classes = (json.loads(classes.read_text()) if classes.exists() else {}).get(
        "num_classes")
    decode = bare_decode(rec, opts.decode_records)
    sizes = sizes or size_check(decode["sizes"], opts.data_shape,
                                f"decoded sample of the first {decode['records']} records")
    decode.pop("sizes")
    dataset = reader_dataset(root, opts, encoded=device["kind"] == "gpu")
    procs = nprocs()
    grid = thread_grid(opts, procs)
    log.info("bench (torch %s) %s/%s: %d records; %s", torch.__version__, prefix, opts.split,
             n_records, device["statement"])
    runs = [timed_run(torch, dataset, opts, w, device, rec_bytes, n_records) for w in grid]
    pick, best, summary = picked(runs, decode, device["kind"], procs, opts,
                                 sizes["fraction_smaller"])
    values = value_check(torch, dataset, opts, best["effective_threads"], device, n_records)
    problems = [f"{r['effective_threads']} worker(s): {p}" for r in runs for p in r["problems"]]
    problems += values["problems"]
    lab_lo, lab_hi, label_problem = label_range(runs, values, num_classes, opts.label_width)
    problems += [label_problem] if label_problem else []
    return bench_document(
        prefix=prefix, opts=opts, started=started, loader=f"{NAME} + {DECODE[device['kind']]}",
        host=_host(torch, procs), device=device,
        dataset=dataset_facts(n_records, rec_bytes, num_classes, fetched.get("sample")),
        bare_decode=decode, image_sizes=sizes,
        threads={"nprocs": procs, "cap": procs, "grid": grid, "measured_effective": grid,
                 "cap_formula": "DataLoader num_workers, capped at the CPUs"},
        runs=runs, value_check=values, label_range=[lab_lo, lab_hi],
        recommendation={**pick, "num_workers": pick["preprocess_threads"],
                        "batch_size": opts.batch_size, "device": device["kind"]},
        summary=summary, problems=problems,
        warnings=["preprocess_threads / thread_grid are read as DataLoader num_workers"])


def _host(torch, procs: int) -> dict:
    import importlib.metadata

    import cv2
    import numpy as np

    try:
        vision = importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        vision = None
    return {"hostname": platform.node(), "python": platform.python_version(),
            "torch": torch.__version__, "torchvision": vision,
            "cuda": torch.version.cuda, "numpy": np.__version__, "opencv": cv2.__version__,
            "nprocs": procs}
