"""``recforge build`` (the whole pipeline, no Airflow) and ``recforge validate``."""

from __future__ import annotations

import argparse
import json
import sys


def _build(args: argparse.Namespace) -> int:
    from recforge import pipeline
    from recforge.spec import load_spec

    spec = load_spec(args.spec)
    overrides = {"source.uri": args.source, "publish.uri": args.publish}
    if any(v is not None for v in overrides.values()):
        spec = spec.with_overrides(overrides)
    def run_build():
        return pipeline.build(spec, run_id=args.run_id, workers=args.workers,
                              dry_run=args.dry_run, force_rebuild=args.force_rebuild)

    if args.progress == "bars" or (args.progress == "auto" and sys.stderr.isatty()):
        from tqdm.contrib.logging import logging_redirect_tqdm

        from recforge import progress

        progress.use_bars()  # a bar per stage; log lines print above the bars
        try:
            with logging_redirect_tqdm():
                result = run_build()
        finally:
            progress.use_bars(False)
    else:
        result = run_build()
    if result["no_change"]:
        split = result["split"]
        print(f"dataset {spec.name}: no changes since the latest version (content id "
              f"{split['content_id'][:12]}); nothing built or published "
              "(--force-rebuild builds anyway)")
        if args.json:
            print(json.dumps(result, indent=2, default=str))
        return 0
    summary = result["merge"]
    print(f"dataset {spec.name}: listed {summary['listed']} = packed {summary['packed']} + "
          f"quarantined {summary['quarantined']}")
    if summary.get("changes"):
        from recforge.incremental import changes

        print(f"  changes {changes.headline(summary['changes'])}")
    for split, n in summary["splits"].items():
        print(f"  {split:<5} {n:>7} records")
    for reason, n in sorted(summary["quarantined_by_reason"].items()):
        print(f"  quarantined {reason}: {n}")
    bench = result["benchmark"]["summary"]
    print(f"loader benchmark ({bench['device']}): {bench['images_per_sec']:.0f} img/s, "
          f"bare decode {bench['bare_decode_images_per_sec']:.0f} img/s/thread")
    q = result["quality_gate"]
    warned = f" with warnings {q['warned']}" if q["warned"] else ""
    print(f"quality checklist: passed{warned}; Data Docs: {q['data_docs']}")
    from recforge import storage

    print(f"report: {q['report']}\n  open: {storage.browser_url(q['report'])}")
    if result["publish"]:
        print(f"published: {result['publish']['uri']}")
        if result["publish"].get("report"):
            print(f"  report: {result['publish']['report']}")
    else:
        print(f"dry run, not published; output in {result['staging']}/out")
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from recforge.format import validate

    report = validate.validate_prefix(args.prefix, args.num_classes)
    print(json.dumps(report, indent=2) if args.json else validate.format_report(report))
    return 0 if report["ok"] else 1


def register(sub) -> None:
    p = sub.add_parser("build", help="run the whole pipeline for a dataset spec, no Airflow")
    p.add_argument("spec", help="dataset spec YAML (include/datasets/*.yaml)")
    p.add_argument("--source", help="override source.uri")
    p.add_argument("--publish", help="override publish.uri")
    p.add_argument("--run-id", help="staging run id (default: a timestamp)")
    p.add_argument("--workers", type=int, help="pack processes (default: cores)")
    p.add_argument("--dry-run", action="store_true", help="build and validate, do not publish")
    p.add_argument("--progress", choices=("auto", "bars", "lines"), default="auto",
                   help="progress bars (default on a terminal) or a log line every ~10 s")
    p.add_argument("--force-rebuild", action="store_true",
                   help="build and publish even when nothing changed since the latest version")
    p.add_argument("--json", action="store_true", help="also print the full result as JSON")
    p.set_defaults(func=_build)

    p = sub.add_parser("validate", help="structural check of a packed dataset prefix")
    p.add_argument("prefix", help="s3://bucket/prefix or a local folder with <split>.rec/.idx")
    p.add_argument("--num-classes", type=int, help="labels must be in [0, N) (default: "
                   "classes.json next to the files)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_validate)
