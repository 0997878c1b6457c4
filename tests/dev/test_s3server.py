"""The detached local S3 server that `make demo` leaves running."""

from __future__ import annotations

import socket

import pytest

from recforge.dev import s3server


def test_start_reuse_refuse_and_stop(tmp_path):
    port = s3server.free_port()
    endpoint, started = s3server.start_detached(tmp_path, port)
    try:
        assert started and endpoint == f"http://127.0.0.1:{port}"
        assert s3server.start_detached(tmp_path, port) == (endpoint, False)
        with pytest.raises(RuntimeError, match=f"port {port} on 127.0.0.1 is taken"):
            s3server.start_detached(tmp_path / "other", port)
    finally:
        assert s3server.stop_detached(tmp_path)
    assert not s3server.stop_detached(tmp_path)


def test_taken_port_is_named(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(RuntimeError, match="--port"):
            s3server.start_detached(tmp_path, s.getsockname()[1])
