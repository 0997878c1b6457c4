"""``recforge verify URI``: re-check a published version end to end; ``recforge validate
PREFIX``: the RecordIO structure alone, of any packed prefix.

URI is a version (``<publish.uri>/<name>/<version>``, the folder holding ``manifest.json``)
or a dataset prefix (``<publish.uri>/<name>``: its latest complete version). Every file the
manifest lists must exist with its size and SHA-256 (a file recorded in ``parts`` is hashed
part by part with ranged reads), the version must hold no other file, and the RecordIO
structure must be sound (``recforge.format.validate``). Exit 0: verified; 1: something
differs (each difference is printed); 2: URI is no published version or dataset. A version
published before manifests carried SHA-256s reports "no SHA-256 recorded" for its files.

``validate`` takes what ``verify`` takes (a dataset prefix means its latest version, found by
the same :func:`recforge.releases.resolve_version`) and also a run's ``out/`` or any folder
holding ``<split>.rec``/``.idx``; on S3 it reads each ``.rec`` by its record headers alone
(``--full``: every byte, and masks decoded). Exit 0: valid; 1: invalid; 2: nothing there to
check.
"""

from __future__ import annotations

import sys

from recforge.format import names

NOT_DATA = (names.MANIFEST, names.CLAIM)  # the publish protocol's own objects
WHAT = ("a published version (.../<name>/<version>), a dataset prefix (.../<name>: its latest "
        "version) or a run's out/ prefix")


def differences(version_uri: str) -> list[str]:
    """Everything about a published version that is not as its manifest says."""
    from concurrent.futures import ThreadPoolExecutor

    from recforge import releases, storage
    from recforge.format.validate import validate_prefix

    manifest = releases.read_manifest(version_uri) or {}
    listed = {f["name"]: f for f in manifest.get("files", [])}
    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(
            lambda n: releases.check_file(storage.join(version_uri, n), listed[n], name=n),
            sorted(listed)))
    out = [p for p in found if p]
    extra = sorted(o.key for o in storage.list_objects(version_uri)
                   if o.key not in listed and o.key not in NOT_DATA)
    out += [f"{k}: in the version but not in its manifest" for k in extra]
    report = validate_prefix(version_uri)
    out += [f"RecordIO structure: {f}" for f in report["failures"]]
    return out


def _verify(args) -> int:
    from recforge import releases

    version = releases.resolve_version(args.uri)
    if version is None:
        print(f"recforge verify: error: {args.uri} holds no manifest.json and no complete "
              "version: give a published version or a dataset prefix", file=sys.stderr)
        return 2
    problems = differences(version)
    for p in problems:
        print(f"  - {p}")
    print(f"{'verified' if not problems else 'FAILED'}: {version}"
          + (f" ({len(problems)} difference(s))" if problems else ""))
    return 1 if problems else 0


def _validate(args) -> int:
    import json

    from recforge import releases, storage
    from recforge.format import validate

    prefix = args.prefix
    if not storage.is_s3(prefix) and not storage.local_path(prefix).is_dir():
        print(f"recforge validate: error: the local folder {prefix} does not exist; give "
              f"{WHAT}, on S3 (s3://...) or here", file=sys.stderr)
        return 2
    version = releases.resolve_version(prefix)
    if version is not None and version.rstrip("/") != prefix.rstrip("/"):
        print(f"{prefix} is a dataset prefix: validating its latest version {version}",
              file=sys.stderr)
    report = validate.validate_prefix(version or prefix, args.num_classes, full=args.full)
    print(json.dumps(report, indent=2) if args.json else validate.format_report(report))
    if not report["splits"] and any(f.startswith("no *.rec") for f in report["failures"]):
        print(f"recforge validate: error: {prefix} holds no packed dataset; give {WHAT}",
              file=sys.stderr)
        return 2
    return 0 if report["ok"] else 1


def register(sub) -> None:
    p = sub.add_parser("validate", help="structural check of a packed dataset: a version, a "
                       "dataset's latest version or a run's out/")
    p.add_argument("prefix", help="s3://bucket/prefix or a local folder: a published version, "
                   "a dataset prefix (its latest version), or a run's out/ (<split>.rec/.idx)")
    p.add_argument("--num-classes", type=int, help="labels must be in [0, N) (default: "
                   "classes.json next to the files)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--full", action="store_true", help="on S3, download every byte and decode "
                   "the segmentation masks (PNG, size, values); by default each .rec is read "
                   "by its record headers alone, which is every other check")
    p.set_defaults(func=_validate)

    p = sub.add_parser("verify", help="re-check a published version: every file's size and "
                       "SHA-256 against its manifest, and the RecordIO structure")
    p.add_argument("uri", help="a version (s3://.../<name>/<version>) or a dataset prefix "
                   "(s3://.../<name>: its latest version)")
    p.set_defaults(func=_verify)
