"""``recforge build``: the whole pipeline for a dataset spec, no Airflow."""

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
    ended = _ended_early(spec.name, result)
    if ended:  # nothing built: already published by this run id, or nothing changed
        print(ended)
        if args.json:
            print(json.dumps(result, indent=2, default=str))
        return 0
    summary = result["merge"]
    set_aside = f" + not used {summary['not_used']}" if summary.get("not_used") else ""
    print(f"dataset {spec.name}: listed {summary['listed']} = packed {summary['packed']} + "
          f"quarantined {summary['quarantined']}{set_aside}")
    if summary.get("changes"):
        from recforge.incremental import changes

        print(f"  changes {changes.headline(summary['changes'])}")
    for split, n in summary["splits"].items():
        print(f"  {split:<5} {n:>7} records")
    for reason, n in sorted(summary["quarantined_by_reason"].items()):
        print(f"  quarantined {reason}: {n}")
    for reason, n in sorted(summary.get("not_used_by_reason", {}).items()):
        print(f"  not used {reason}: {n}")
    print(_pack_costs(result["pack"], summary["listed"]))
    bench = result["benchmark"]["summary"]
    print(f"loader benchmark ({bench['device']}): {bench['images_per_sec']:.0f} img/s, "
          f"bare decode {bench['bare_decode_images_per_sec']:.0f} img/s/thread")
    q = result["quality_gate"]
    warned = f" with warnings: {', '.join(q['warned'])}" if q["warned"] else ""
    print(f"quality checklist: passed{warned}")
    print(_where_to_look(result))
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    return 0


def _ended_early(name: str, result: dict) -> str | None:
    """What a build that built nothing says, or None when it built."""
    if result.get("already_published"):
        published = result["publish"]
        return (f"dataset {name}: run {result['run_id']} already published version "
                f"{published['version']} ({published['uri']}); latest.json checked — "
                "nothing else to do")
    if result["no_change"]:
        return (f"dataset {name}: no changes since the latest version (content id "
                f"{result['split']['content_id'][:12]}); nothing built or published "
                "(--force-rebuild builds anyway)")
    return None


def _pack_costs(shards: list[dict], listed: int) -> str:
    """What packing cost: shards reused and packed, the largest pack task's peak memory,
    and S3 requests per listed image (what a bill and a memory limit are sized on)."""
    reused = sum(1 for s in shards if s.get("reused"))
    peaks = [s["peak_rss_mb"] for s in shards if s.get("peak_rss_mb") is not None]
    requests = sum(n for s in shards for n in (s.get("s3_requests") or {}).values())
    line = f"pack: {len(shards)} shards ({reused} reused from the cache)"
    if peaks:
        line += f", peak memory per task {max(peaks):.0f} MiB"
    if requests:
        line += f", {requests / max(listed, 1):.2f} S3 requests per image"
    return line


def _where_to_look(result: dict) -> str:
    """The lines naming the published version, its report and Data Docs, and how to open
    them: the version's URIs (never a worker's temporary file), and no presigned link (a
    bearer credential on the terminal and in its scrollback): ``recforge report --open``
    opens an s3:// report."""
    from recforge import storage
    from recforge.format import names

    published = result["publish"]
    if not published:
        out = storage.join(result["staging"], "out")
        return (f"dry run, not published; output in {out}\n"
                f"  report: {storage.join(out, names.REPORT)} (staged)\n"
                f"  open:   recforge report {out} --open")
    version = published["uri"]
    lines = [f"published: {version}",
             f"  report:    {published.get('report') or '(none published)'}",
             f"  Data Docs: {storage.join(version, names.QUALITY_DIR, 'index.html')}"]
    if storage.is_s3(version):
        lines.append(f"  open:      recforge report {version} --open  (a browser cannot open "
                     "s3:// links)")
    elif published.get("report"):
        lines.append(f"  open:      {storage.browser_url(published['report'])}")
    return "\n".join(lines)


def register(sub) -> None:
    from recforge.cli import S3_ENVIRONMENT

    p = sub.add_parser(
        "build", help="run the whole pipeline for a dataset spec, no Airflow",
        description="Run the whole pipeline for a dataset spec, no Airflow: ingest, pack,\n"
        "validate, benchmark, quality checklist, then publish a new version.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  recforge build include/datasets/demo_classification.yaml\n"
        "  recforge build my.yaml --dry-run                 # build and check, publish nothing\n"
        "  recforge build my.yaml --source s3://b/raw/pets --publish s3://b/datasets\n"
        "  recforge build my.yaml --force-rebuild --json    # even when nothing changed\n\n"
        + S3_ENVIRONMENT)
    p.add_argument("spec", help="dataset spec YAML (include/datasets/*.yaml)")
    p.add_argument("--source", help="override source.uri")
    p.add_argument("--publish", help="override publish.uri")
    p.add_argument("--run-id", help="staging run id (default: a timestamp)")
    p.add_argument("--workers", type=int,
                   help="pack processes (default: one per core, at most one per shard)")
    p.add_argument("--dry-run", action="store_true", help="build and validate, do not publish")
    p.add_argument("--progress", choices=("auto", "bars", "lines"), default="auto",
                   help="progress bars (default on a terminal) or a log line every ~10 s")
    p.add_argument("--force-rebuild", action="store_true",
                   help="build and publish even when nothing changed since the latest version")
    p.add_argument("--json", action="store_true", help="also print the full result as JSON")
    p.set_defaults(func=_build)
