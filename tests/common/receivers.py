"""Real alert receivers on loopback, as fixtures: an aiosmtpd SMTP server and an http.server
webhook (registered for every test in tests/conftest.py)."""

from __future__ import annotations

import contextlib
import email
import json
import socket
import threading
from email import policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp_server():
    from aiosmtpd.controller import Controller

    class Inbox:
        def __init__(self):
            self.messages = []

        async def handle_DATA(self, server, session, envelope):
            self.messages.append((envelope.mail_from, envelope.rcpt_tos,
                                  email.message_from_bytes(envelope.content,
                                                           policy=policy.default)))
            return "250 OK"

    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, inbox.messages
    finally:
        controller.stop()


@contextlib.contextmanager
def _webhook(fail_first: int = 0):
    """An HTTP receiver on loopback; the first ``fail_first`` POSTs get a 503."""
    received: list[dict] = []
    refused: list[int] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if len(refused) < fail_first:
                refused.append(503)
                self.send_response(503)
                self.end_headers()
                return
            received.append({"content_type": self.headers["Content-Type"],
                             "json": json.loads(body)})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/T000/B000", received, refused
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def webhook_server():
    with _webhook() as (url, received, _):
        yield url, received


@pytest.fixture
def flaky_webhook_server():
    """Answers 503 to the first two POSTs: a sender that does not retry loses the alert."""
    with _webhook(fail_first=2) as served:
        yield served
