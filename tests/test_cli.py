"""The command line: every flag explained, a version, and a parser that loads no engine."""

from __future__ import annotations

import argparse
import subprocess
import sys

from recforge.cli import main, make_parser


def _actions(parser: argparse.ArgumentParser, path: list[str]):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, [*path, name])
        else:
            yield path, action


def test_every_argument_has_help():
    missing = [(" ".join(path), a.dest) for path, a in _actions(make_parser(), ["recforge"])
               if not a.help and a.dest != "help" and path[-1] != "im2rec"]
    assert missing == []


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.startswith("recforge ")


def test_help_loads_no_engine():
    code = ("import sys; from recforge.cli import make_parser; make_parser().format_help(); "
            "print(sorted(m for m in ('numpy', 'cv2', 'mxnet', 'boto3', 'pandas', "
            "'great_expectations', 'airflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
