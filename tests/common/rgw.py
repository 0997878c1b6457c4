"""A throwaway Ceph cluster with one RADOS Gateway on loopback: the second S3 store the tests
run against, beside the moto server.

One monitor, one OSD on ``memstore`` (objects in the OSD's memory, nothing on disk but the
monitor's small store), no manager, no cephx, one ``radosgw`` (beast) on 127.0.0.1 on a free
port: everything — config, monitor data, pid files, sockets, logs — under one state folder, each
daemon run with ``-c <dir>/ceph.conf``; nothing in ``/etc/ceph``, no systemd. SSE-KMS works
through RGW's ``testing`` KMS backend (key ``alias/recforge-test``, over plain HTTP).

    with running_rgw(tmp_dir) as rgw:        # an Rgw: endpoint, credentials, env()
        ...
    python -m tests.common.rgw start DIR     # prints the AWS_* lines; stays up
    python -m tests.common.rgw env DIR       # the same lines again
    python -m tests.common.rgw stop DIR      # kills the daemons, removes DIR

The gateway's user has the dev server's credentials (``s3server.DEV_CREDENTIALS``), so code that
switches between the two stores only switches ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from recforge.dev.s3server import DEV_CREDENTIALS, free_port

BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
PACKAGES = "radosgw ceph-mon ceph-osd ceph-common"
KMS_KEY_ID = "alias/recforge-test"
# the testing backend's key: fixed, derived, a throwaway cluster's
KMS_KEY = base64.b64encode(hashlib.sha256(b"recforge-test-kms").digest()).decode()
DAEMONS = ("client.rgw", "osd.0", "mon.a")  # stop order
INFO = "rgw.json"


@dataclasses.dataclass(frozen=True)
class Rgw:
    endpoint: str
    access_key: str
    secret_key: str
    state_dir: str
    started_s: float  # cluster up to the first PUT answered

    def env(self) -> dict[str, str]:
        return {**DEV_CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key}


def unavailable() -> str | None:
    """Why no cluster can start here, or None."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return (f"Ceph RGW is not installed ({', '.join(missing)} missing): "
                f"`make rgw` as root, or apt-get install {PACKAGES}")
    return None


def _conf(d: Path, fsid: str, mon_port: int, rgw_port: int) -> str:
    return f"""[global]
fsid = {fsid}
mon_host = v2:127.0.0.1:{mon_port}
public_addr = 127.0.0.1
ms_bind_ipv6 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
auth_allow_insecure_global_id_reclaim = true
mon_warn_on_insecure_global_id_reclaim_allowed = false
# without cephx, a connection must not ask for the "secure" mode (it needs a session key)
ms_mon_client_mode = crc
ms_client_mode = crc
ms_mon_service_mode = crc
ms_mon_cluster_mode = crc
ms_service_mode = crc
ms_cluster_mode = crc
client_mount_timeout = 20
rados_mon_op_timeout = 30
rados_osd_op_timeout = 60
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 1
mon_data_avail_crit = 0
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
run_dir = {d}/run
admin_socket = {d}/run/$name.asok
pid_file = {d}/run/$name.pid
log_file = {d}/log/$name.log
keyring = {d}/keyring
err_to_stderr = true

[mon]
mon_data = {d}/mon/$name

[osd]
osd_data = {d}/osd/$name
osd_objectstore = memstore
memstore_device_bytes = 17179869184
osd_memory_target = 805306368
osd_op_num_shards = 2
osd_op_num_threads_per_shard = 2

[client.rgw]
rgw_frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
rgw_thread_pool_size = 64
rgw_override_bucket_index_max_shards = 1
rgw_enable_usage_log = false
rgw_enable_lc_threads = false
# deleted objects' tails go back to the OSD's memory soon, not after two hours
rgw_gc_obj_min_wait = 30
rgw_gc_processor_period = 30
rgw_crypt_s3_kms_backend = testing
rgw_crypt_s3_kms_encryption_keys = {KMS_KEY_ID}={KMS_KEY}
rgw_crypt_require_ssl = false
"""


def _run(d: Path, *args: str, timeout: float = 60) -> str:
    done = subprocess.run([*args[:1], "-c", str(d / "ceph.conf"), *args[1:]],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


def _wait(what: str, check, timeout: float, d: Path, log: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            tail = ""
            with contextlib.suppress(OSError):
                tail = "\n".join((d / "log" / log).read_text().splitlines()[-20:])
            raise RuntimeError(f"{what} did not come up in {timeout:.0f} s:\n{tail}")
        time.sleep(0.1)


def start(state_dir: str | os.PathLike) -> Rgw:
    """Bring the cluster up under ``state_dir`` (created, must be empty or absent); returns
    once the gateway has answered a PUT."""
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    began = time.monotonic()
    d = Path(state_dir).resolve()
    d.mkdir(parents=True, exist_ok=True)
    for sub in ("run", "log", "mon", "osd"):
        (d / sub).mkdir(exist_ok=True)
    (d / "keyring").touch()
    fsid, mon_port, rgw_port = str(uuid.uuid4()), free_port(), free_port()
    (d / "ceph.conf").write_text(_conf(d, fsid, mon_port, rgw_port))
    try:
        subprocess.run(["monmaptool", "--create", "--clobber", "--fsid", fsid, "--addv", "a",
                        f"[v2:127.0.0.1:{mon_port}]", str(d / "monmap")],
                       check=True, capture_output=True, timeout=30)
        _run(d, "ceph-mon", "--cluster", "ceph", "--id", "a", "--mkfs",
             "--monmap", str(d / "monmap"))
        _run(d, "ceph-mon", "--cluster", "ceph", "--id", "a")  # daemonizes, writes its pid
        osd_uuid = str(uuid.uuid4())
        osd_id = _run(d, "ceph", "osd", "new", osd_uuid).strip()
        assert osd_id == "0", osd_id
        (d / "osd" / "osd.0").mkdir()
        _run(d, "ceph-osd", "--cluster", "ceph", "--id", "0", "--mkfs", "--osd-uuid", osd_uuid)
        _run(d, "ceph-osd", "--cluster", "ceph", "--id", "0")

        def osd_up() -> bool:
            return json.loads(_run(d, "ceph", "osd", "stat", "-f", "json")).get(
                "num_up_osds") == 1

        _wait("osd.0", osd_up, 60, d, "osd.0.log")
        _run(d, "radosgw", "--cluster", "ceph", "--name", "client.rgw")
        endpoint = f"http://127.0.0.1:{rgw_port}"

        def answers() -> bool:
            try:
                urllib.request.urlopen(endpoint + "/", timeout=2).close()
                return True
            except Exception:
                return False

        _wait("radosgw", answers, 90, d, "client.rgw.log")
        _run(d, "radosgw-admin", "user", "create", "--uid", "recforge",
             "--display-name", "recforge tests",
             "--access-key", DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
             "--secret", DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        rgw = Rgw(endpoint, DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                  DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"], str(d), 0.0)
        _first_put(rgw)
        rgw = dataclasses.replace(rgw, started_s=round(time.monotonic() - began, 1))
    except BaseException:
        stop(d)
        raise
    (d / INFO).write_text(json.dumps(dataclasses.asdict(rgw)))
    return rgw


def _first_put(rgw: Rgw) -> None:
    """Create a bucket and PUT into it (RGW creates its pools on the first bucket)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=rgw.endpoint, aws_access_key_id=rgw.access_key,
                      aws_secret_access_key=rgw.secret_key, region_name="us-east-1")
    s3.create_bucket(Bucket="recforge-rgw-up")
    s3.put_object(Bucket="recforge-rgw-up", Key="up", Body=b"up")
    s3.delete_object(Bucket="recforge-rgw-up", Key="up")
    s3.delete_bucket(Bucket="recforge-rgw-up")


def info(state_dir: str | os.PathLike) -> Rgw:
    return Rgw(**json.loads((Path(state_dir) / INFO).read_text()))


def stop(state_dir: str | os.PathLike) -> None:
    """Kill the daemons whose pid files are under ``state_dir`` (memstore has nothing worth
    a clean shutdown), then remove the folder."""
    d = Path(state_dir)
    pids = []
    for name in DAEMONS:
        with contextlib.suppress(OSError, ValueError):
            pid = int((d / "run" / f"{name}.pid").read_text())
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                pids.append(pid)
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
    shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def running_rgw(state_dir: str | os.PathLike):
    """A cluster and its gateway for the ``with`` block; the folder is removed after it."""
    rgw = start(state_dir)
    try:
        yield rgw
    finally:
        stop(state_dir)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop", "env"):
        print("usage: python -m tests.common.rgw start|stop|env DIR", file=sys.stderr)
        return 2
    command, state_dir = argv
    if command == "stop":
        stop(state_dir)
        return 0
    rgw = start(state_dir) if command == "start" else info(state_dir)
    for k, v in rgw.env().items():
        print(f"{k}={v}")
    if command == "start":
        print(f"# Ceph RGW up in {rgw.started_s} s; stop: python -m tests.common.rgw stop "
              f"{state_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
