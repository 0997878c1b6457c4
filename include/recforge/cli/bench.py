"""``recforge bench``: benchmark the loader on a packed split from the shell.

Kept apart from ``recforge.bench`` so that building the ``recforge`` parser stays cheap: the
benchmark (and through it MXNet, OpenCV, numpy) is imported only when the command runs.
"""

from __future__ import annotations

import json


def _csv_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None


def _cmd(args) -> int:
    from pydantic import ValidationError

    from recforge.bench import check_floors, format_table, run_benchmark
    from recforge.bench.floors import save_results
    from recforge.spec.bench import BenchFloors, BenchOptions

    try:
        shape = _csv_ints(args.data_shape)
        if len(shape) != 3:
            raise ValueError(f"--data-shape needs C,H,W, got {args.data_shape!r}")
        opts = BenchOptions(
            split=args.split, batch_size=args.batch_size, data_shape=shape,
            rand_crop=args.rand_crop, rand_mirror=args.rand_mirror,
            preprocess_threads=args.threads, thread_grid=_csv_ints(args.grid),
            prefetch_buffer=args.prefetch_buffer, warmup_batches=args.warmup,
            measure_batches=args.batches, decode_records=args.decode_records,
            device=args.device, gpu_id=args.gpu_id, resize=args.resize,
            max_crop_size=args.max_crop_size, min_crop_size=args.min_crop_size,
            loader=args.loader, max_bytes=args.max_bytes,
        )
        floors = BenchFloors(min_images_per_sec=args.min_images_per_sec,
                             max_p99_ms=args.max_p99_ms, require_gpu=args.require_gpu)
    except ValidationError as exc:
        raise ValueError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                   for e in exc.errors())) from None
    results = run_benchmark(args.prefix, opts, loader=args.engine)
    results["violations"] = check_floors(results, floors)
    for name, label in (("dali", "DALI"), ("torch", "PyTorch")):
        if name in results:
            results[name]["violations"] = check_floors(results[name], floors)
            results["violations"] += [f"{label}: {v}" for v in results[name]["violations"]]
    results["passed"] = not results["violations"]
    if args.out:
        save_results(results, args.out)
    print(json.dumps(results, indent=2) if args.json else format_table(results))
    if args.out:
        print(f"saved {args.out}")
    return 0 if results["passed"] else 1


def register(sub) -> None:
    p = sub.add_parser(
        "bench", help="benchmark the MXNet (and/or DALI) loader on a packed split",
        description="MXNet's loader runs in the MXNet environment: the interpreter named by "
        "RECFORGE_MXNET_PYTHON (or Airflow's [recforge] mxnet_python), else this one if it "
        "imports mxnet, else .venv-mxnet/bin/python in the checkout recforge is installed "
        "from (make venv builds it). DALI's loader (--engine dali|both) runs here (the 'dali' "
        "extra).")
    p.add_argument("prefix", help="s3://bucket/prefix or a local folder with <split>.rec/.idx")
    p.add_argument("--split", default="train", help="which <split>.rec/.idx (default train)")
    p.add_argument("--loader", choices=["image_record_iter", "segmentation"],
                   default="image_record_iter", help="mx.io.ImageRecordIter (classification) or "
                   "the segmentation DataLoader (default image_record_iter)")
    p.add_argument("--engine", choices=["mxnet", "dali", "both", "all", "torch", "auto"],
                   default="mxnet",
                   help="whose loader: MXNet's, NVIDIA DALI's fn.readers.mxnet, both side "
                   "by side, all (DALI's and PyTorch's beside MXNet's), the PyTorch loader, "
                   "or auto (what runs on this GPU; the spec's bench.loader; default mxnet)")
    p.add_argument("--batch-size", type=int, default=64, help="images per batch (default 64)")
    p.add_argument("--data-shape", default="3,224,224", help="C,H,W (default 3,224,224)")
    p.add_argument("--no-rand-crop", dest="rand_crop", action="store_false",
                   help="centre crop instead of random crops")
    p.add_argument("--no-rand-mirror", dest="rand_mirror", action="store_false",
                   help="no random horizontal flips")
    p.add_argument("--resize", type=int, default=-1, help="ImageRecordIter resize (short side)")
    p.add_argument("--max-crop-size", type=int, default=-1,
                   help="ImageRecordIter max_crop_size (-1: off)")
    p.add_argument("--min-crop-size", type=int, default=-1,
                   help="ImageRecordIter min_crop_size (-1: off)")
    p.add_argument("--threads", type=int, default=4,
                   help="preprocess_threads you train with (default 4)")
    p.add_argument("--grid", default="1,2,4,8", help="preprocess_threads to sweep ('' = none)")
    p.add_argument("--prefetch-buffer", type=int, default=4,
                   help="batches MXNet prepares ahead (default 4, at most 16)")
    p.add_argument("--warmup", type=int, default=5, help="batches before timing")
    p.add_argument("--batches", type=int, default=50, help="batches in the timed window")
    p.add_argument("--max-bytes", type=int, default=1 << 30,
                   help="bytes of the split read: a window of its first records, at least one "
                   "batch (default 1 GiB)")
    p.add_argument("--decode-records", type=int, default=500,
                   help="records for the bare-decode reference rate (default 500)")
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto",
                   help="auto: the GPU if MXNet sees one, else CPU (stated in the result)")
    p.add_argument("--gpu-id", type=int, default=0, help="which GPU (default 0)")
    p.add_argument("--min-images-per-sec", type=float, help="floor: exit 1 below it")
    p.add_argument("--max-p99-ms", type=float, help="floor: exit 1 above it")
    p.add_argument("--require-gpu", action="store_true", help="floor: exit 1 on a CPU run")
    p.add_argument("--out", help="write bench.json here (path or s3:// URI)")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.set_defaults(func=_cmd)
