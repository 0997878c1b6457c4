"""``recforge verify URI``: re-check a published version end to end.

URI is a version (``<publish.uri>/<name>/<version>``, the folder holding ``manifest.json``)
or a dataset prefix (``<publish.uri>/<name>``: its latest complete version). Every file the
manifest lists must exist with its size and SHA-256 (a file recorded in ``parts`` is hashed
part by part with ranged reads), the version must hold no other file, and the RecordIO
structure must be sound (``recforge.format.validate``). Exit 0: verified; 1: something
differs (each difference is printed); 2: URI is no published version or dataset. A version
published before manifests carried SHA-256s reports "no SHA-256 recorded" for its files.
"""

from __future__ import annotations

import sys

from recforge.format import names

NOT_DATA = (names.MANIFEST, names.CLAIM)  # the publish protocol's own objects


def _resolve(uri: str) -> str | None:
    """The version folder URI names, or its dataset's latest complete version."""
    from recforge import releases

    if releases.read_manifest(uri) is not None:
        return uri
    latest = releases.resolve_latest(uri)
    return latest["uri"] if latest else None


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
    version = _resolve(args.uri)
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


def register(sub) -> None:
    p = sub.add_parser("verify", help="re-check a published version: every file's size and "
                       "SHA-256 against its manifest, and the RecordIO structure")
    p.add_argument("uri", help="a version (s3://.../<name>/<version>) or a dataset prefix "
                   "(s3://.../<name>: its latest version)")
    p.set_defaults(func=_verify)
