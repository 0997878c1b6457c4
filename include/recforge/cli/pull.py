"""``recforge pull TARGET DIR``: download a published version into a local folder, verified.

TARGET is a version (``s3://…/<name>/<version>``), a dataset prefix (``s3://…/<name>``: its
latest version), either with ``@<version>``, or a dataset name (``pets``, ``pets@v2026…``)
whose spec is ``--spec`` or in the specs folder. Every file the manifest lists is
downloaded (large ones as parallel ranged reads), checked against its SHA-256 (part by part
for a composed file, as ``recforge verify`` does) and named only then; ``manifest.json`` comes
last. Run it again to resume: verified files are kept, ``.partial`` files continue. Exit 0:
pulled; 1: a file's bytes are not the manifest's (named; removed); 2: TARGET names no
version, or DIR holds another version. The engine is :mod:`recforge.pull`.
"""

from __future__ import annotations

import sys


def _pull(args) -> int:
    from recforge import pull
    from recforge.errors import ChecksumMismatch

    try:
        version = pull.resolve(args.target, args.spec)
    except pull.NoSuchVersion as exc:
        print(f"recforge pull: error: {exc}", file=sys.stderr)
        return 2

    def progress(name: str, read: int | None) -> None:
        if args.verbose_files:
            print(f"  {'kept   ' if read is None else 'fetched'} {name}", file=sys.stderr)

    print(f"pulling {version} into {args.dir}", file=sys.stderr)
    try:
        done = pull.pull(version, args.dir, progress=progress)
    except ChecksumMismatch as exc:
        print(f"recforge pull: FAILED: {exc}", file=sys.stderr)
        return 1
    except pull.NoSuchVersion as exc:
        print(f"recforge pull: error: {exc}", file=sys.stderr)
        return 2
    total = len(done.fetched) + len(done.skipped) + 1  # + manifest.json
    print(f"pulled {done.manifest.get('dataset')} {done.manifest.get('version')} into "
          f"{done.dest}: {total} files verified ({len(done.fetched)} fetched, "
          f"{len(done.skipped)} already here), {done.bytes_read / 1e6:.1f} MB read\n")
    print("read it with:")
    print(pull.reader_calls(done.dest, done.manifest))
    return 0


def register(sub) -> None:
    p = sub.add_parser("pull", help="download a published version into a local folder, every "
                       "file verified against its manifest; resumable")
    p.add_argument("target", help="s3://.../<name>/<version>, s3://.../<name> (its latest "
                   "version), either with @<version>, or a dataset name (NAME[@version]) "
                   "from --spec or the specs folder")
    p.add_argument("dir", help="the local folder to pull into (created; a second pull "
                   "resumes)")
    p.add_argument("--spec", help="the spec YAML of a dataset given by name (default: the "
                   "specs folder, RECFORGE_SPECS_DIR or include/datasets)")
    p.add_argument("--list-files", dest="verbose_files", action="store_true",
                   help="print each file as it is fetched or kept")
    p.set_defaults(func=_pull)
