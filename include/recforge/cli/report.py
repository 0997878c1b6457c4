"""``recforge report`` (the dataset report of a version or a run's out/) and ``recforge
show`` (one record, with its mask overlay, as a PNG)."""

from __future__ import annotations

from pathlib import Path


def _report(args) -> int:
    import webbrowser

    from recforge import storage
    from recforge.format import names
    from recforge.report import build_report

    out = Path(args.output or ".") / names.REPORT
    docs = storage.join(args.prefix, names.QUALITY_DIR, "index.html")
    docs_href = None if not args.output else (
        storage.browser_url(docs) if not storage.is_s3(args.prefix) else docs)
    path = build_report(args.prefix, out, previous=args.previous, docs_href=docs_href)
    print(f"report: {path} ({path.stat().st_size / 1024:.0f} KB)")
    print(f"  open: {path.resolve().as_uri()}")
    if args.open:
        webbrowser.open(path.resolve().as_uri())
    return 0


def _show(args) -> int:
    from recforge.report import render_record

    path = render_record(args.prefix, args.key, args.output, split=args.split)
    print(f"wrote {path}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="build the self-contained report.html of a dataset")
    p.add_argument("prefix", help="a published version or a run's out/ (s3://... or a folder)")
    p.add_argument("-o", "--output", help="folder for report.html (default: here)")
    p.add_argument("--previous", help="the version to diff against (default: the one the "
                   "version's manifest names)")
    p.add_argument("--open", action="store_true", help="open it in the default browser")
    p.set_defaults(func=_report)

    p = sub.add_parser("show", help="render one record (with its mask overlay) to a PNG")
    p.add_argument("prefix", help="a published version or a run's out/")
    p.add_argument("key", type=int, help="the record key (.idx key)")
    p.add_argument("--split", help="the split, when the key exists in several")
    p.add_argument("-o", "--output", required=True, help="the PNG to write")
    p.set_defaults(func=_show)
