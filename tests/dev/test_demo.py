"""What ``recforge demo`` prints last: commands that work as printed, in a fresh shell."""

from __future__ import annotations

import os
import subprocess
import sys

from recforge.dev import demo, s3server
from tests.test_cli import _publish_tiny


def test_next_steps_export_the_variables_before_the_commands(tmp_path):
    (tmp_path / "Makefile").write_text("stop-demo:\n")
    text = demo.next_steps("http://127.0.0.1:9100", "s3://b/datasets/d/v1", tmp_path,
                           recforge=".venv/bin/recforge")
    lines = text.splitlines()
    export = next(i for i, ln in enumerate(lines) if ln.strip().startswith("export "))
    validate = next(i for i, ln in enumerate(lines) if " validate " in ln)
    assert export < validate
    assert "AWS_ENDPOINT_URL=http://127.0.0.1:9100" in lines[export]
    for name, value in s3server.DEV_CREDENTIALS.items():
        assert f"{name}={value}" in lines[export]
    assert lines[validate].strip() == ".venv/bin/recforge validate s3://b/datasets/d/v1"
    assert f"make -C {tmp_path} stop-demo" in lines[-1]
    assert f"dev-s3 stop --state-dir {tmp_path / '.demo'}" in lines[-1]


def test_next_steps_run_as_printed_in_a_shell_without_s3_settings(bucket, s3_endpoint,
                                                                   tmp_path):
    version = _publish_tiny(f"s3://{bucket}/datasets/tiny")
    recforge = f"{sys.executable} -m recforge.cli"
    text = demo.next_steps(s3_endpoint, version, tmp_path, recforge=recforge)
    script = "set -e\n" + "\n".join(ln.strip() for ln in text.splitlines()
                                    if ln.startswith("  "))  # the command lines
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path), AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true")
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "valid" in proc.stdout
