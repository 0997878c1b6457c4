"""``recforge report`` (the dataset report of a version or a run's out/) and ``recforge
show`` (one record, with its mask overlay, as a PNG)."""

from __future__ import annotations

from pathlib import Path


def _report(args) -> int:
    import sys
    import webbrowser

    from recforge import releases, storage
    from recforge.format import names
    from recforge.report import build_report

    prefix = args.prefix
    if not storage.is_s3(prefix) and not storage.local_path(prefix).is_dir():
        print(f"recforge report: error: the local folder {prefix} does not exist",
              file=sys.stderr)
        return 2
    # a dataset prefix means its latest version (latest.json), as for validate/verify/show
    version = releases.resolve_version(prefix)
    if version is not None and version.rstrip("/") != prefix.rstrip("/"):
        print(f"{prefix} is a dataset prefix: reporting on its latest version {version}",
              file=sys.stderr)
        prefix = version
    out = Path(args.output or ".") / names.REPORT
    docs = storage.join(prefix, names.QUALITY_DIR, "index.html")
    if not storage.is_s3(prefix):
        docs_href = storage.browser_url(docs)  # a file:// link to the version's Data Docs
    elif args.open:
        # opened here, by its owner: the one place a presigned link is written (into the
        # local page, never printed), so the Data Docs link opens from the browser
        docs_href = storage.browser_url(docs)
    else:
        docs_href = docs
    path = build_report(prefix, out, previous=args.previous, docs_href=docs_href)
    print(f"report: {path} ({path.stat().st_size / 1024:.0f} KB)")
    print(f"  open: {path.resolve().as_uri()}")
    if args.open:
        webbrowser.open(path.resolve().as_uri())
    return 0


def _show(args) -> int:
    import sys

    from recforge import releases, storage
    from recforge.report import render_record

    prefix = args.prefix
    if not storage.is_s3(prefix) and not storage.local_path(prefix).is_dir():
        print(f"recforge show: error: the local folder {prefix} does not exist", file=sys.stderr)
        return 2
    version = releases.resolve_version(prefix)  # a dataset prefix: its latest version
    if version is not None and version.rstrip("/") != prefix.rstrip("/"):
        print(f"{prefix} is a dataset prefix: showing from its latest version {version}",
              file=sys.stderr)
    try:
        path, r = render_record(version or prefix, args.key, args.output, split=args.split)
    except KeyError as exc:  # str() of a KeyError quotes its message
        print(f"recforge show: error: {exc.args[0]}", file=sys.stderr)
        return 2
    what = (f"{r['num_objects']} object(s)" if "num_objects" in r
            else f"class {r.get('class_name') or r.get('label')}")
    print(f"wrote {path}: record {r['key']} of split {r['split']}, {what}, from "
          f"{r.get('source_key') or '?'}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="build the self-contained report.html of a dataset")
    p.add_argument("prefix", help="a published version, a dataset prefix (its latest "
                   "version) or a run's out/ (s3://... or a folder)")
    p.add_argument("-o", "--output", help="folder for report.html (default: here)")
    p.add_argument("--previous", help="the version to diff against (default: the one the "
                   "version's manifest names)")
    p.add_argument("--open", action="store_true", help="open it in the default browser")
    p.set_defaults(func=_report)

    p = sub.add_parser("show", help="render one record (with its mask overlay) to a PNG")
    p.add_argument("prefix", help="a published version, a dataset prefix (its latest "
                   "version) or a run's out/")
    p.add_argument("key", type=int, help="the record's key: the `key` column of records.jsonl "
                   "(the .idx key; the report shows it on hover over a thumbnail)")
    p.add_argument("--split", help="the split, when the key exists in several")
    p.add_argument("-o", "--output", required=True, help="the PNG to write")
    p.set_defaults(func=_show)
