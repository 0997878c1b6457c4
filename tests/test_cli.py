"""The command line: every flag explained, a version, and a parser that loads no engine."""

from __future__ import annotations

import argparse
import os
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


def test_version_without_an_install_is_the_package_s_own(monkeypatch):
    import importlib.metadata

    from recforge import __version__
    from recforge.cli import _version

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    assert _version() == importlib.metadata.version("recforge") == __version__
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert _version() == __version__


def test_help_loads_no_engine():
    code = ("import sys; from recforge.cli import make_parser; make_parser().format_help(); "
            "print(sorted(m for m in ('numpy', 'cv2', 'mxnet', 'boto3', 'pandas', "
            "'great_expectations', 'airflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_missing_spec_file_names_it(tmp_path, capsys):
    assert main(["build", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"dataset spec {tmp_path / 'nope.yaml'} does not exist" in err


def test_missing_bucket_names_the_bucket_and_the_field(s3_endpoint, capsys):
    assert main(["validate", "s3://no-such-bucket-here/datasets/x/v1"]) == 2
    err = capsys.readouterr().err
    assert "bucket 'no-such-bucket-here' does not exist" in err and "publish.uri" in err


def _cli(tmp_path, *args, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    clean.update(HOME=str(tmp_path), AWS_CONFIG_FILE=str(tmp_path / "none"),
                 AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
                 AWS_EC2_METADATA_DISABLED="true", **env)
    return subprocess.run([sys.executable, "-m", "recforge.cli", *args], env=clean,
                          capture_output=True, text=True, timeout=120)


def test_no_credentials_says_how_to_get_them(tmp_path, s3_endpoint):
    proc = _cli(tmp_path, "validate", "s3://b/x", AWS_ENDPOINT_URL=s3_endpoint)
    assert proc.returncode == 2 and "no S3 credentials" in proc.stderr
    assert "recforge dev-s3 start" in proc.stderr


def test_unreachable_endpoint_names_it_and_the_variable(tmp_path):
    from recforge.dev import s3server

    dead = f"http://127.0.0.1:{s3server.free_port()}"
    proc = _cli(tmp_path, "validate", "s3://b/x", AWS_ENDPOINT_URL=dead,
                **s3server.DEV_CREDENTIALS)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot reach {dead}" in proc.stderr and "AWS_ENDPOINT_URL" in proc.stderr


def test_help_shows_examples_and_the_s3_environment():
    top = make_parser().format_help()
    parser = make_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    build, demo = sub.choices["build"].format_help(), sub.choices["demo"].format_help()
    for text in (top, build):
        assert "examples:" in text and "recforge build include/datasets/" in text
        assert "AWS_ENDPOINT_URL" in text and "AWS_ACCESS_KEY_ID" in text
        assert "AIRFLOW_CONN_AWS_DEFAULT" in text and "aws_default" in text
    assert "recforge validate s3://" in top
    assert "(default 9000)" in demo and "make stop-demo" in demo


def _publish_tiny(root_uri: str, version: str = "v1") -> str:
    """A minimal published version under a dataset prefix: two valid splits, a manifest and
    latest.json; returns the version's URI."""
    import hashlib
    import json
    import tempfile
    from pathlib import Path

    from recforge import storage
    from tests.common.helpers import write_split

    version_uri = storage.join(root_uri, version)
    files = []
    with tempfile.TemporaryDirectory() as tmp:
        write_split(Path(tmp), "train", [0, 1, 0, 1])
        write_split(Path(tmp), "val", [1, 0])
        (Path(tmp) / "classes.json").write_text(json.dumps({"num_classes": 2}))
        for p in sorted(Path(tmp).iterdir()):
            storage.upload(p, storage.join(version_uri, p.name))
            data = p.read_bytes()
            files.append({"name": p.name, "size": len(data),
                          "sha256": hashlib.sha256(data).hexdigest()})
    storage.put_bytes(storage.join(version_uri, "manifest.json"), json.dumps(
        {"version": version, "published_at": "2026-01-01T00:00:00Z", "files": files}).encode())
    storage.put_bytes(storage.join(root_uri, "latest.json"),
                      json.dumps({"version": version}).encode())
    return version_uri


def test_validate_a_dataset_prefix_checks_its_latest_version(bucket, capsys):
    root = f"s3://{bucket}/datasets/pets"
    version = _publish_tiny(root)
    assert main(["validate", root]) == 0
    out, err = capsys.readouterr()
    assert out.rstrip().endswith("valid") and f"its latest version {version}" in err
    assert main(["validate", version]) == 0  # a version folder: itself, no note
    assert "latest version" not in capsys.readouterr().err


def test_validate_names_the_prefix_not_a_temporary_folder(bucket, capsys):
    empty = f"s3://{bucket}/datasets/nothing-here"
    assert main(["validate", empty]) == 2
    out, err = capsys.readouterr()
    assert f"no *.rec or *.idx files under {empty}" in out
    assert "recforge-validate-" not in out + err and "/tmp" not in out + err
    assert "a published version" in err and "a dataset prefix" in err


def test_validate_says_when_a_local_folder_does_not_exist(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert f"the local folder {tmp_path / 'nope'} does not exist" in err
