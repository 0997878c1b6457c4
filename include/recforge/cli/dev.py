"""``recforge demo | dev-s3 | sample-data``: the development conveniences (``recforge.dev``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from recforge.errors import needs_extra

DEMO_SPECS = {"classification": "demo_classification", "detection": "demo_detection"}


def _demo(args) -> int:
    with needs_extra("recforge demo", "dev", "airflow"):  # moto, the sample photos, the DAG
        from recforge.dev.demo import run_demo

    return run_demo(Path(args.repo), port=args.port, per_class=args.per_class, task=args.task)


def _dev_s3(args) -> int:
    from recforge.dev import s3server

    state = Path(args.state_dir)
    if args.action == "start":
        with needs_extra("recforge dev-s3 start", "dev"):  # checked here: moto runs in a child
            endpoint, started = s3server.start_detached(state, args.port)
        print(f"local S3 server: {endpoint}{'' if started else ' (already running)'}")
        print(f"  use it:  export AWS_ENDPOINT_URL={endpoint}")
        for name, value in s3server.DEV_CREDENTIALS.items():  # dev-only placeholders
            print(f"           export {name}={value}")
        print(f"  stop it: recforge dev-s3 stop --state-dir {state}")
    elif args.action == "stop":
        print("stopped" if s3server.stop_detached(state) else "not running")
    else:
        pid_file = state / "s3.pid"
        print(pid_file.read_text().strip() if pid_file.exists() else "not running")
    return 0


def _sample_data(args) -> int:
    if args.task == "detection":
        from recforge.dev import detection_sample as sample

        with needs_extra("recforge sample-data", "dev"):
            n = sample.upload(args.uri, args.layout, args.per_class, args.seed)
        bad = len(sample.BAD_OBJECTS[args.layout])
        print(f"wrote {n} objects ({args.layout} layout: {args.per_class + 1} annotated scenes "
              f"of {len(sample.OBJECT_PHOTOS)} classes, {bad} deliberately bad objects, "
              f"{len(sample.BAD_PARTS)} bad boxes) to {args.uri}")
        return 0
    from recforge.dev import sampledata

    with needs_extra("recforge sample-data", "dev"):  # the photos come from scikit-image
        n = sampledata.upload(args.uri, args.per_class, args.seed)
    good = n - len(sampledata.BAD_OBJECTS)
    print(f"wrote {n} objects ({good} images in {len(sampledata.CLASSES)} classes, "
          f"{len(sampledata.BAD_OBJECTS)} deliberately bad) to {args.uri}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("dev-s3", help="start/stop the local S3-compatible dev server")
    p.add_argument("action", choices=["start", "stop", "status"],
                   help="start it detached, stop it, or print its pid")
    p.add_argument("--port", type=int, default=9000, help="loopback port (default 9000)")
    p.add_argument("--state-dir", default=".demo",
                   help="where its pid, port and data live (default .demo)")
    p.set_defaults(func=_dev_s3)

    p = sub.add_parser("sample-data", help="write the generated sample dataset to a URI")
    p.add_argument("uri", help="s3://bucket/prefix or a local folder")
    p.add_argument("--task", choices=["classification", "detection"], default="classification",
                   help="classification: class folders of photos; detection: scenes with "
                   "known boxes and their annotations (default classification)")
    p.add_argument("--layout", choices=["voc", "coco"], default="voc",
                   help="detection: write Pascal VOC or COCO annotations (default voc)")
    p.add_argument("--per-class", type=int, default=40,
                   help="photos per class (default 40; 14 classes); detection: scenes")
    p.add_argument("--seed", type=int, default=0, help="random seed of the variants")
    p.set_defaults(func=_sample_data)

    p = sub.add_parser(
        "demo", help="run the embedded default end to end through the real DAG",
        description="Start the local S3 server (unless AWS_ENDPOINT_URL is set), upload the\n"
        "sample images, run the demo DAG with `airflow dags test`, then print where the\n"
        "dataset was published and the commands to look at it.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  recforge demo                  # local S3 server on 127.0.0.1:9000\n"
        "  recforge demo --port 9100      # when 9000 is taken\n"
        "  recforge demo --task detection # the Pascal VOC detection sample instead\n"
        "  make stop-demo                 # stop the server it leaves running\n"
        "                                 # (recforge dev-s3 stop --state-dir .demo)")
    p.add_argument("--repo", default=".", help="repository root (holds dags/ and include/; "
                   "default: here)")
    p.add_argument("--port", type=int, default=9000,
                   help="loopback port of the local S3 server (default 9000)")
    p.add_argument("--per-class", type=int, default=40,
                   help="sample images per class (default 40; 14 classes); detection: scenes")
    p.add_argument("--task", choices=sorted(DEMO_SPECS), default="classification",
                   help="which demo spec runs: demo_classification (default) or "
                   "demo_detection (VOC scenes with known boxes)")
    p.set_defaults(func=_demo)
