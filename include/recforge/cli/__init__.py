"""``recforge`` command line: every pipeline step without Airflow.

Every sub-command lives in this package, one module per group, each with a
``register(subparsers)`` listed in ``COMMAND_MODULES``; handlers import the engines they
call, so ``recforge --help`` stays fast.

Modules: ``build.py`` (the whole pipeline, no Airflow), ``check.py`` (the checklist),
``verify.py`` (``verify`` and ``validate``), ``bench.py`` (the loader benchmark),
``report.py`` (``report`` and ``show``), ``pull.py`` (a published version into a folder),
``cache.py`` (``cache prune``), ``masks.py`` (segmentation masks), ``im2rec.py`` (the drop-in
for MXNet's ``tools/im2rec.py``), ``dev.py`` (``demo``, ``dev-s3``, ``sample-data``);
``__main__.py`` makes ``python -m recforge.cli`` the console script.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMAND_MODULES = [
    "recforge.cli.build",
    "recforge.cli.cache",
    "recforge.cli.check",
    "recforge.cli.verify",
    "recforge.cli.pull",
    "recforge.cli.report",
    "recforge.cli.bench",
    "recforge.cli.im2rec",
    "recforge.cli.masks",
    "recforge.cli.dev",
]


def _version() -> str:
    """The installed distribution's version; the package's own ``__version__`` (the same
    value: pyproject.toml reads it) when running from a source tree without an install."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("recforge")
    except PackageNotFoundError:
        from recforge import __version__

        return __version__


S3_ENVIRONMENT = """\
S3 access (boto3's own chain):
  AWS_ENDPOINT_URL        the S3 endpoint; unset: AWS itself
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
                          the credentials (or a profile: AWS_PROFILE, ~/.aws/credentials)
  AWS_DEFAULT_REGION      e.g. us-east-1
  The local dev server prints the lines to export: recforge dev-s3 start
  Inside Airflow the tasks use the connection aws_default when it exists (login, password,
  extra {"endpoint_url": ...}), e.g. AIRFLOW_CONN_AWS_DEFAULT='{"conn_type": "aws", ...}'."""

EPILOG = f"""\
examples:
  recforge demo                                   # the whole product on sample data
  recforge build include/datasets/demo_classification.yaml --dry-run
  recforge validate s3://bucket/datasets/NAME     # its latest version; or .../NAME/VERSION
  recforge verify s3://bucket/datasets/NAME/VERSION
  recforge pull s3://bucket/datasets/NAME data/NAME     # its latest version, verified
  recforge report s3://bucket/datasets/NAME/VERSION -o out/
  recforge COMMAND --help                         # each command's options

{S3_ENVIRONMENT}"""


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recforge",
        description="Forge, check, benchmark and publish MXNet RecordIO datasets.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"recforge {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["im2rec"]:  # im2rec keeps MXNet's own argument parser and help
        from recforge import im2rec

        return im2rec.main(argv[1:])
    parser = make_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from recforge.errors import MissingExtra, needs_extra

    try:  # a module of an optional extra missing anywhere below: the extra to install
        with needs_extra(f"recforge {args.command}"):
            return args.func(args)
    except MissingExtra as exc:
        if args.verbose:
            raise
        print(exc, file=sys.stderr)
        return 2
    except Exception as exc:  # one clear line for expected failures; traceback with -v
        if args.verbose:
            raise
        from recforge import storage

        print(f"recforge {args.command}: error: {storage.explain(exc) or exc}", file=sys.stderr)
        return 2

