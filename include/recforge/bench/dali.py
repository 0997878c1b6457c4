"""DALI's RecordIO loader, timed like MXNet's: ``fn.readers.mxnet`` + ``fn.decoders.image``.

How PyTorch and JAX teams consume RecordIO: NVIDIA DALI reads the same ``.rec``/``.idx``,
decodes on the GPU (nvJPEG, ``device="mixed"``) where there is one and on the CPU otherwise,
then crops, mirrors and normalises to ``data_shape`` (``fn.crop_mirror_normalize``, CHW
float, what ``ImageRecordIter`` hands a trainer). Swept over DALI's ``num_threads`` (the
thread grid, capped at the CPUs), timed per batch after a warm-up, then one untimed pass
checks the batches' values and labels. Runs in the core environment (numpy 2): DALI does not
need MXNet (its row in ``recforge.bench.loaders``). The result has the MXNet benchmark's
layout, so the floors and the report read either. Classification and detection splits: a
segmentation split's masks are a second ``.rec`` that DALI's reader would not keep aligned
with the images.

Detection (a kind whose labels are boxes, ``loader: detection``): what
``ImageDetRecordIter`` hands a trainer, DALI's way — decode, resize to ``data_shape``
(aspect not kept, as its ``resize_mode=force``), mirror the image and its boxes together
(``fn.bb_flip``), normalise to CHW float. The reader's label is the record's whole array
(``[A, B, width, height, objects...]``, a negative's padding row included), a different
length per image, so labels are read per sample, never as one dense array. No random crop:
``fn.random_bbox_crop`` cannot take a negative's padding row.
"""

from __future__ import annotations

import json
import logging
import math
import platform
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from recforge.bench.loaders import at_once, kind_of, one
from recforge.bench.records import LoaderBenchError, bare_decode, count_records, size_check
from recforge.bench.results import (
    bench_document,
    dataset_facts,
    detection_problems,
    detection_summary,
    label_range,
    object_stats,
    picked,
    run_entry,
    span,
    thread_grid,
)
from recforge.errors import needs_extra
from recforge.format import detection_label as dl
from recforge.format import names
from recforge.spec.bench import BenchOptions

log = logging.getLogger(__name__)

NAME = "nvidia.dali fn.readers.mxnet + fn.decoders.image + fn.crop_mirror_normalize"


def _import_dali():
    with needs_extra("bench.loader dali/both (or set bench.loader: mxnet)", "dali"):
        import nvidia.dali as dali
    return dali


def _cpus() -> int:
    from recforge.bench.device import nprocs

    return nprocs()


def resolve_device(requested: str, gpu_id: int) -> dict:
    """GPU decode (``mixed``) when DALI sees a GPU and it is not ruled out, else CPU."""
    from nvidia.dali import backend

    try:
        n = int(backend.GetCUDADeviceCount())
    except Exception as exc:  # no driver: a CPU-only host
        log.debug("DALI: no CUDA device count (%s)", exc)
        n = 0
    info = {"requested": requested, "num_gpus": n, "gpu_id": None, "kind": "cpu"}
    if requested != "cpu" and n > gpu_id:
        info.update(kind="gpu", gpu_id=gpu_id,
                    statement=f"decoded on GPU {gpu_id} (nvJPEG, decoders.image "
                              f"device=mixed; {n} GPU(s) visible)")
        return info
    if requested == "gpu":
        raise LoaderBenchError(
            f"device=gpu requested but DALI sees {n} GPU(s) (GPU {gpu_id} needed): check the "
            "driver (nvidia-smi) and CUDA_VISIBLE_DEVICES, or use --device auto")
    why = "device=cpu was requested" if requested == "cpu" else f"DALI sees {n} GPU(s)"
    info["statement"] = f"decoded on CPU ({why}); GPU memory peak is not measured (null)"
    return info


def _pipeline(root: Path, opts: BenchOptions, threads: int, device: dict, seed_offset: int = 0,
              shuffle: bool | None = None):
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def

    gpu = device["kind"] == "gpu"
    c, h, w = opts.data_shape
    detection = kind_of(opts.loader).boxes

    @pipeline_def(batch_size=opts.batch_size, num_threads=threads,
                  device_id=device["gpu_id"] if gpu else None, seed=opts.seed + seed_offset,
                  prefetch_queue_depth=opts.prefetch_buffer)
    def pipe():
        jpegs, labels = fn.readers.mxnet(
            path=[str(root / names.rec(opts.split))],
            index_path=[str(root / names.idx(opts.split))],
            random_shuffle=opts.shuffle if shuffle is None else shuffle, name="reader")
        out_type = types.GRAY if c == 1 else types.RGB
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu",
                                   output_type=out_type)
        if detection:
            images = fn.resize(images, resize_x=w, resize_y=h)
            flip = fn.random.coin_flip(probability=0.5 if opts.rand_mirror else 0.0)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                              mirror=flip)
            # recforge's layout: A = 4, B = 6 (recforge.format.detection_label)
            objects = fn.reshape(labels[dl.HEADER_WIDTH:], shape=[-1, dl.OBJECT_WIDTH])
            boxes = fn.bb_flip(objects[:, 1:5], ltrb=True, horizontal=flip)
            return images, labels, boxes
        if opts.resize != -1:
            images = fn.resize(images, resize_shorter=opts.resize)
        kwargs = {}
        if opts.rand_crop:
            kwargs.update(crop_pos_x=fn.random.uniform(range=(0.0, 1.0)),
                          crop_pos_y=fn.random.uniform(range=(0.0, 1.0)))
        if opts.rand_mirror:
            kwargs["mirror"] = fn.random.coin_flip()
        images = fn.crop_mirror_normalize(images, crop=(h, w), dtype=types.FLOAT,
                                          output_layout="CHW", out_of_bounds_policy="pad",
                                          **kwargs)
        return images, labels, labels

    p = pipe()
    p.build()
    return p


def _as_numpy(tensor_list):
    if hasattr(tensor_list, "as_cpu"):
        tensor_list = tensor_list.as_cpu()
    return tensor_list.as_array()


def _label_stats(labels, opts: BenchOptions) -> dict:
    """One batch's label facts, laid out like ``recforge.bench.loader.label_stats``: min and
    max of the labels, or for boxes the objects' class ids, boxes and negatives, read
    sample by sample (each record's array has its own length)."""
    import numpy as np

    if not kind_of(opts.loader).boxes:
        lab = _as_numpy(labels)
        return {"label_min": float(lab.min()), "label_max": float(lab.max())}
    if hasattr(labels, "as_cpu"):
        labels = labels.as_cpu()
    rows, counts = [], []
    for t in labels:
        arr = np.asarray(t, np.float32).ravel()
        try:
            objs = dl.decode(arr)[1]
        except ValueError:
            objs = np.zeros((0, dl.OBJECT_WIDTH), np.float32)
        rows.append(objs)
        counts.append(len(objs))
    return object_stats(np.concatenate(rows), np.array(counts))


def _timed_run(root: Path, opts: BenchOptions, threads: int, device: dict,
               rec_bytes: int, n_records: int) -> dict:
    t0 = time.perf_counter()
    pipe = _pipeline(root, opts, threads, device)
    pipe.run()  # the first batch
    first = time.perf_counter() - t0
    expect = [opts.batch_size, *opts.data_shape]
    latencies, problems, shapes, seen = [], [], set(), []
    window_start = time.perf_counter()
    measured = 0
    for i in range(opts.warmup_batches + opts.measure_batches):
        if i == opts.warmup_batches:
            window_start = time.perf_counter()
        t = time.perf_counter()
        images, labels, _ = pipe.run()
        stats = _label_stats(labels, opts)
        lat = time.perf_counter() - t
        shape = [len(images), *images[0].shape()] if len(images) else [0]
        shapes.add(tuple(shape))
        seen.append(stats)
        if shape != expect:
            problems.append(f"batch {i}: shape {shape} != expected {expect}")
        if i >= opts.warmup_batches:
            latencies.append(lat)
            measured += 1
            if time.perf_counter() - window_start > opts.max_seconds_per_run:
                break
    window = time.perf_counter() - window_start
    del pipe
    images_seen = measured * opts.batch_size
    ips = images_seen / window if window > 0 else 0.0
    out = run_entry(threads=threads, first=first, ips=ips, rec_bytes=rec_bytes,
                    n_records=n_records, latencies=latencies, measured=measured,
                    window=window, opts=opts, shapes=shapes,
                    batches_seen=opts.warmup_batches + measured,
                    label_min=span(seen, "label_min", min),
                    label_max=span(seen, "label_max", max), problems=problems)
    if kind_of(opts.loader).boxes:
        out["batches_seen"]["detection"] = detection_summary(seen)
    return out


def _value_check(root: Path, opts: BenchOptions, threads: int, device: dict,
                 n_records: int) -> dict:
    import numpy as np

    n_batches = min(math.ceil(n_records / opts.batch_size), opts.max_check_batches)
    pipe = _pipeline(root, opts, threads, device, shuffle=False)
    lo, hi, finite, problems = math.inf, -math.inf, True, []
    shapes, dtypes, seen = set(), set(), []
    for i in range(n_batches):
        images, labels, _ = pipe.run()
        a = _as_numpy(images)
        seen.append(_label_stats(labels, opts))
        ok = bool(np.isfinite(a).all())
        finite &= ok
        if not ok:
            problems.append(f"value check batch {i}: data has NaN or Inf")
        lo, hi = min(lo, float(a.min())), max(hi, float(a.max()))
        shapes.add(tuple(a.shape))
        dtypes.add(a.dtype.name)
    del pipe
    if hi <= lo:
        problems.append(f"every value of every checked batch is {lo}: the images decode to a "
                        "constant (corrupt data)")
    out = {"batches": n_batches,
           "records_covered": min(n_records, n_batches * opts.batch_size),
           "of_records": n_records, "value_min": lo, "value_max": hi, "all_finite": finite,
           "label_min": span(seen, "label_min", min), "label_max": span(seen, "label_max", max),
           "problems": problems,
           "shapes": [list(x) for x in sorted(shapes)], "dtypes": sorted(dtypes),
           "note": "untimed pass in record order with the recommended num_threads"}
    if kind_of(opts.loader).boxes:
        out["detection"] = detection_summary(seen)
        problems += detection_problems(out["detection"], "value check")
    return out


def measure(prefix: str, root: Path, opts: BenchOptions, fetched: dict, sizes: dict | None,
            started: datetime, quiet: Callable[[], object] = at_once) -> dict:
    """The DALI loader's ``bench.json``-shaped result for the window in ``root`` (the
    signature of every loader, ``recforge.bench.loaders``; ``quiet`` is waited for first)."""
    quiet()
    dali = _import_dali()
    one("dali").refuse(opts.loader)
    import cv2
    import numpy as np

    device = resolve_device(opts.device, opts.gpu_id)
    rec = root / names.rec(opts.split)
    n_records = count_records(root / names.idx(opts.split))
    if n_records < opts.batch_size:
        raise LoaderBenchError(f"{rec} has {n_records} records, fewer than batch_size="
                               f"{opts.batch_size}; lower the batch size for this split")
    rec_bytes = rec.stat().st_size
    doc = json.loads((root / names.CLASSES).read_text()) if (root / names.CLASSES).exists() \
        else {}
    num_classes = doc.get("num_classes")
    decode = bare_decode(rec, opts.decode_records)
    sizes = sizes or size_check(decode["sizes"], opts.data_shape,
                                f"decoded sample of the first {decode['records']} records")
    decode.pop("sizes")
    procs = _cpus()
    grid = thread_grid(opts, procs)
    log.info("bench (DALI %s) %s/%s: %d records; %s", dali.__version__, prefix, opts.split,
             n_records, device["statement"])
    runs = []
    for t in grid:
        r = _timed_run(root, opts, t, device, rec_bytes, n_records)
        runs.append(r)
        log.info("bench (DALI): %d thread(s): %.0f img/s, p99 %.1f ms", t, r["images_per_sec"],
                 r["latency_ms"]["p99"])
    pick, best, summary = picked(runs, decode, device["kind"], procs, opts,
                                 sizes["fraction_smaller"])
    values = _value_check(root, opts, best["effective_threads"], device, n_records)
    problems = [f"{r['effective_threads']} thread(s): {p}" for r in runs for p in r["problems"]]
    problems += values["problems"]
    detection = kind_of(opts.loader).boxes
    lab_lo, lab_hi, label_problem = label_range(
        runs, values, num_classes, 1 if detection else opts.label_width,
        "the objects' class ids" if detection else "labels")
    problems += [label_problem] if label_problem else []
    return bench_document(
        prefix=prefix, opts=opts, started=started, loader=NAME,
        host={"hostname": platform.node(), "python": platform.python_version(),
              "dali": dali.__version__, "numpy": np.__version__, "opencv": cv2.__version__,
              "nprocs": procs},
        device=device,
        dataset=dataset_facts(n_records, rec_bytes, num_classes, fetched.get("sample")),
        bare_decode=decode, image_sizes=sizes,
        threads={"nprocs": procs, "cap": procs, "grid": grid, "measured_effective": grid,
                 "cap_formula": "DALI num_threads, capped at the CPUs"},
        runs=runs, value_check=values, label_range=[lab_lo, lab_hi],
        recommendation={**pick, "num_threads": pick["preprocess_threads"],
                        "prefetch_queue_depth": opts.prefetch_buffer,
                        "batch_size": opts.batch_size, "device": device["kind"]},
        summary=summary, problems=problems,
        warnings=["preprocess_threads / thread_grid are read as DALI num_threads", *(
            ["loader=detection: DALI resizes to data_shape and mirrors images with their "
             "boxes; rand_crop and resize are not applied (no fn.random_bbox_crop)"]
            if detection else [])])
