"""The compose file's S3 store, ``compose/ceph-rgw.sh``, run here with the machine's Ceph
packages (the script the compose service runs in the official Ceph image): it comes up
with the tasks' user and buckets, honours the conditional writes publishing needs, keeps
its objects across a restart, and a restart with a new secret rotates the user's key.

No Docker engine runs here; the Ceph binaries are the same programs the image runs (the
image's are newer). Skips where Ceph is not installed (``tests/common/rgw.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from recforge.dev.s3server import free_port
from tests.common import rgw

SCRIPT = Path(__file__).resolve().parents[2] / "compose" / "ceph-rgw.sh"

pytestmark = [pytest.mark.rgw,
              pytest.mark.skipif(rgw.unavailable() is not None, reason=rgw.unavailable() or "")]


def _start(state: Path, port: int, mon_port: int, secret: str) -> subprocess.Popen:
    env = {**os.environ, "RGW_STATE_DIR": str(state), "RGW_PORT": str(port),
           "RGW_MON_PORT": str(mon_port), "RGW_BIND": "127.0.0.1",
           "RGW_OSD_SIZE": str(2 << 30), "RECFORGE_S3_ACCESS_KEY": "recforge",
           "RECFORGE_S3_SECRET_KEY": secret, "RECFORGE_BUCKETS": "recforge-demo,second"}
    proc = subprocess.Popen(["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 180
    while not (state / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"compose/ceph-rgw.sh did not get ready:\n{_stop(proc)}")
        time.sleep(0.5)
    return proc


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.stdout.read() if proc.stdout else ""


def _client(port: int, secret: str):
    import boto3

    return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                        aws_access_key_id="recforge", aws_secret_access_key=secret,
                        region_name="us-east-1")


def test_the_compose_store_serves_recforge_and_keeps_its_data(tmp_path, monkeypatch):
    from recforge import storage
    from recforge.storage import guarantees

    state, port, mon_port = tmp_path / "rgw", free_port(), free_port()
    proc = _start(state, port, mon_port, "first-secret")
    try:
        s3 = _client(port, "first-secret")
        assert {b["Name"] for b in s3.list_buckets()["Buckets"]} == {"recforge-demo", "second"}
        # what publishing proves before its first write into a bucket, against this store
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "recforge")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "first-secret")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setattr(guarantees, "_proved", set())
        storage.s3_client()
        guarantees.prove_conditional_writes("s3://recforge-demo/datasets")
        s3.put_object(Bucket="recforge-demo", Key="kept.txt", Body=b"kept")
    finally:
        said = _stop(proc)
    assert proc.returncode == 0 and "stopping" in said, said

    proc = _start(state, port, mon_port, "rotated-secret")  # a restart, a new secret
    try:
        s3 = _client(port, "rotated-secret")
        assert s3.get_object(Bucket="recforge-demo", Key="kept.txt")["Body"].read() == b"kept"
        from botocore.exceptions import ClientError

        with pytest.raises(ClientError):
            _client(port, "first-secret").get_object(Bucket="recforge-demo", Key="kept.txt")
    finally:
        _stop(proc)
