"""A local S3-compatible server for dev, demos and tests (moto's server mode, on loopback).

Real S3 protocol over HTTP — boto3 talks to it exactly as to AWS or MinIO, pointed there by
``AWS_ENDPOINT_URL``. State lives in memory for as long as the server runs.

``recforge dev-s3 start`` runs it detached (pid file under the state folder) and prints how
to stop it; tests use ``running_server()`` in-process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

DEV_CREDENTIALS = {  # dev-only placeholders; moto accepts any credentials
    "AWS_ACCESS_KEY_ID": "recforge-dev",
    "AWS_SECRET_ACCESS_KEY": "recforge-dev-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(endpoint: str, timeout: float = 30.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=2).close()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError(f"local S3 server at {endpoint} did not come up") from None
            time.sleep(0.2)


class _ObjectBytes:
    """An object's bytes, read only where sliced: what a ranged GET needs."""

    def __init__(self, key) -> None:
        self.key = key

    def __len__(self) -> int:
        return self.key.size

    def __getitem__(self, span: slice) -> bytes:
        start, stop, _ = span.indices(len(self))
        with self.key.lock:
            buf = self.key._value_buffer
            buf.seek(start)
            return buf.read(max(0, stop - start))

    def __bytes__(self) -> bytes:
        return self[0:len(self)]


_ranged = threading.local()


def serve_ranges_in_place() -> None:
    """Make moto's ranged GETs and ranged part copies read only the range, as S3 and MinIO
    do. moto reads (and copies) the whole object and then slices it: 32 bytes of a 400 MB
    object took 267 ms, so every ranged read of a merged ``.rec`` (validation's part
    boundaries, the gate's re-read sample, report thumbnails, the loader window) and every
    part of publish's part-by-part copy (``storage.copy_exact``) cost time in proportion to
    the whole file on the dev server only. Same bytes, same headers, same errors."""
    from moto.s3 import models, responses

    if getattr(responses.S3Response, "_recforge_ranges", False):
        return
    value = models.FakeKey.value

    def lazy_value(key):
        return _ObjectBytes(key) if getattr(_ranged, "on", False) else value.fget(key)

    get_object = responses.S3Response.get_object

    def get_object_ranged(self):
        _ranged.on = bool(self.headers.get("range")) and "partNumber" not in self.querystring
        try:
            return get_object(self)
        finally:
            _ranged.on = False

    handle_range = responses.S3Response._handle_range_header

    def handle_range_in_place(self, request, headers, content):
        status, headers, body = handle_range(self, request, headers, content)
        return status, headers, bytes(body) if isinstance(body, _ObjectBytes) else body

    part_copy = models.S3Backend.upload_part_copy

    def upload_part_copy_in_place(self, dest_bucket_name, multipart_id, part_id,
                                  src_bucket_name, src_key_name, src_version_id, start_byte,
                                  end_byte):
        if start_byte is None:  # the whole source: nothing to save
            return part_copy(self, dest_bucket_name, multipart_id, part_id, src_bucket_name,
                             src_key_name, src_version_id, start_byte, end_byte)
        multipart = self.get_bucket(dest_bucket_name).multiparts[multipart_id]
        key = self.get_object(src_bucket_name, src_key_name, version_id=src_version_id)
        return multipart.set_part(part_id, _ObjectBytes(key)[start_byte:end_byte + 1])

    models.S3Backend.upload_part_copy = upload_part_copy_in_place
    models.FakeKey.value = property(lazy_value, value.fset)
    responses.S3Response.get_object = get_object_ranged
    responses.S3Response._handle_range_header = handle_range_in_place
    responses.S3Response._recforge_ranges = True


@contextlib.contextmanager
def running_server(port: int = 0):
    """An in-process server on 127.0.0.1; yields its endpoint URL."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    serve_ranges_in_place()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port or free_port(), verbose=False)
    server.start()
    host, real_port = server.get_host_and_port()
    try:
        yield f"http://127.0.0.1:{real_port}"
    finally:
        server.stop()


def serve(port: int) -> None:
    from moto.server import ThreadedMotoServer

    serve_ranges_in_place()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()


def start_detached(state_dir: Path, port: int) -> tuple[str, bool]:
    """Start (or find running) a detached server; returns (endpoint, started_now)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    pid_file, endpoint = state_dir / "s3.pid", f"http://127.0.0.1:{port}"
    if pid_file.exists():
        pid = int(pid_file.read_text().split()[0])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 0)
            old = pid_file.read_text().split()[1]
            wait_until_up(old, 5)
            return old, False
    try:  # something already listens there (a bind probe would trip over TIME_WAIT)
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        pass
    else:
        raise RuntimeError(
            f"port {port} on 127.0.0.1 is taken (another recforge demo or S3 server?); "
            "stop it with `recforge dev-s3 stop --state-dir <its folder>`, choose another "
            "port with --port, or point AWS_ENDPOINT_URL at the running server")
    log = open(state_dir / "s3.log", "ab")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "recforge.dev.s3server", str(port)],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    pid_file.write_text(f"{proc.pid} {endpoint}\n")
    wait_until_up(endpoint)
    return endpoint, True


def stop_detached(state_dir: Path) -> bool:
    pid_file = state_dir / "s3.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().split()[0])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    pid_file.unlink()
    return True


if __name__ == "__main__":
    serve(int(sys.argv[1]))
