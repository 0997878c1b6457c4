"""A fault-injecting HTTP reverse proxy for tests, on 127.0.0.1 in front of the local S3 server.

Each request is forwarded to the upstream (the moto server) unless the seeded RNG picks a
fault for it, with probability ``rate``, among ``modes``:

* ``slowdown``: 503 with S3's ``SlowDown`` XML error body (request not forwarded);
* ``internal``: 500 with S3's ``InternalError`` XML error body (request not forwarded);
* ``reset``: the request is forwarded, then the status line, the headers and half the body
  are sent and the connection is reset (RST): a body broken mid-read;
* ``delay``: the response is held back ``delay_s`` (seeded, up to ``max_delay_s``) first.

``strip`` (header names) are removed from every request before it is forwarded: a gateway
that drops conditional headers (``If-None-Match``, ``If-Match``) turns a conditional write
into a plain one, as an older S3-compatible store that ignores them does (stores that check
signatures refuse the request instead: the test server does not check them).

``opaque_etags = True`` answers as a store does for SSE-KMS objects, whose ETag is no MD5
of the bytes: every object's ETag (headers, listings, copy results) is replaced by a digest
of the object's name and its real ETag (a ``-<n>`` part count kept), so a copy's ETag
differs from its source's; conditional headers carrying such an ETag are mapped back.
Multipart part requests are left alone (their ETags only feed the completion).

``down = True`` refuses service altogether: every connection is reset as soon as it is
accepted (the server is "down"). ``stats`` counts requests and injected faults per mode.

Bounded: one short-lived thread per connection, socket timeouts on both sides, and
:func:`running_proxy` shuts the server down when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import http.client
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

MODES = ("slowdown", "internal", "reset", "delay")
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
              "trailer", "upgrade"}
ERROR_BODY = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
              "<Message>{message}</Message><RequestId>FAULTPROXY</RequestId></Error>")
ERRORS = {"slowdown": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
          "internal": (500, "Internal Server Error", "InternalError",
                       "We encountered an internal error. Please try again.")}
TIMEOUT_S = 30.0


class FaultProxy(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: str, *, rate: float = 0.0, modes=MODES, seed: int = 0,
                 max_delay_s: float = 0.3, strip: tuple[str, ...] = (),
                 opaque_etags: bool = False):
        unknown = set(modes) - set(MODES)
        if unknown or not 0 <= rate <= 1:
            raise ValueError(f"modes {sorted(unknown)} not in {MODES} or rate {rate} not "
                             "in [0, 1]")
        super().__init__(("127.0.0.1", 0), _Handler)
        parsed = urlparse(upstream)
        self.upstream = (parsed.hostname, parsed.port)
        self.rate, self.modes, self.max_delay_s = rate, tuple(modes), max_delay_s
        self.down = False
        self.strip = {h.lower() for h in strip}
        self.opaque_etags = opaque_etags
        self._real: dict[str, str] = {}  # opaque ETag → the upstream's
        self.stats: Counter = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def pick(self) -> tuple[str | None, float]:
        """This request's fault (None: forward as is) and, for ``delay``, how long."""
        with self._lock:
            self.stats["requests"] += 1
            roll, mode, delay = (self._rng.random(), self._rng.choice(self.modes),
                                 self._rng.uniform(0.0, self.max_delay_s))
            if roll >= self.rate:
                return None, 0.0
            self.stats[mode] += 1
            return mode, delay

    def opaque(self, name: str, etag: str) -> str:
        """The ETag shown for object ``name`` whose upstream ETag is ``etag`` (quoted)."""
        real = etag.strip('"')
        suffix = f"-{real.rsplit('-', 1)[1]}" if "-" in real else ""
        shown = '"' + hashlib.md5(f"{name}|{real}".encode()).hexdigest() + suffix + '"'
        with self._lock:
            self._real[shown] = etag
        return shown

    def real(self, etag: str) -> str:
        """The upstream ETag of a shown one, quoted or not as it was sent."""
        bare = etag.strip('"')
        with self._lock:
            real = self._real.get(f'"{bare}"')
        if real is None:
            return etag
        return real if etag.startswith('"') else real.strip('"')

    def handle_error(self, request, client_address) -> None:
        """A client that gave up on a connection (its own timeout, our reset) is normal
        here: counted, not printed."""
        with self._lock:
            self.stats["client_errors"] += 1

    def verify_request(self, request, client_address) -> bool:
        if self.down:
            with self._lock:
                self.stats["refused"] += 1
            _reset(request)
            return False
        return True


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a crashed or overloaded server's kernel does."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = TIMEOUT_S
    server: FaultProxy

    def log_message(self, *args) -> None:  # quiet: the test reads stats instead
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                chunk = self.rfile.read(size + 2)[:size]
                if not size:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(out)
                out += chunk
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self) -> None:
        body = self._body()
        fault, delay = self.server.pick()
        if fault in ERRORS:
            status, phrase, code, message = ERRORS[fault]
            data = ERROR_BODY.format(code=code, message=message).encode()
            self.send_response(status, phrase)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in HOP_BY_HOP and k.lower() not in self.server.strip}
        if len(headers) < len(self.headers) - len(HOP_BY_HOP & {k.lower() for k in self.headers}):
            with self.server._lock:
                self.server.stats["stripped"] += 1
        parsed = urlparse(self.path)
        opaque = self.server.opaque_etags and "uploadId" not in parsed.query
        if opaque:
            for k in headers:
                if k.lower() in ("if-match", "x-amz-copy-source-if-match"):
                    headers[k] = self.server.real(headers[k])
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=TIMEOUT_S)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            resp = upstream.getresponse()
            data = resp.read()
            out_headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
        finally:
            upstream.close()
        if opaque:
            data, out_headers = self._opaque(unquote(parsed.path), data, out_headers)
        if fault == "delay":
            time.sleep(delay)
        head = [f"HTTP/1.1 {resp.status} {resp.reason}\r\n"]
        head += [f"{k}: {v}\r\n" for k, v in out_headers if k.lower() != "content-length"]
        if self.command != "HEAD" or resp.getheader("Content-Length") is None:
            head.append(f"Content-Length: {len(data)}\r\n")
        else:
            head.append(f"Content-Length: {resp.getheader('Content-Length')}\r\n")
        raw = "".join(head).encode("latin-1") + b"\r\n" + (b"" if self.command == "HEAD" else data)
        if fault == "reset":  # headers and half the body (half the headers if no body)
            cut = len(raw) - max(len(data) // 2, 1) if data else len(raw) // 2
            self.wfile.write(raw[:cut])
            self.wfile.flush()
            self.close_connection = True
            _reset(self.connection)
            return
        self.wfile.write(raw)

    def _opaque(self, path: str, data: bytes, headers: list) -> tuple[bytes, list]:
        """ETags of the object at ``path`` (headers, a copy's result) or of a listing's
        objects (each by its ``<Key>``) made opaque."""
        headers = [(k, self.server.opaque(path, v) if k.lower() == "etag" else v)
                   for k, v in headers]
        xml = any(k.lower() == "content-type" and "xml" in v for k, v in headers)
        if not xml or b"<ETag>" not in data:  # an object's own bytes are never touched
            return data, headers
        bucket = "/" + path.strip("/").split("/", 1)[0]

        def listed(m: re.Match) -> bytes:
            key = re.search(rb"<Key>(.*?)</Key>", m.group(0))
            name = f"{bucket}/{html.unescape(key.group(1).decode())}" if key else path
            return re.sub(rb"<ETag>(.*?)</ETag>", lambda e: b"<ETag>" + html.escape(
                self.server.opaque(name, html.unescape(e.group(1).decode()))).encode()
                + b"</ETag>", m.group(0))

        if b"<Contents>" in data:
            data = re.sub(rb"<Contents>.*?</Contents>", listed, data, flags=re.S)
        else:
            data = listed(re.match(rb".*", data, flags=re.S))
        return data, headers

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


@contextlib.contextmanager
def running_proxy(upstream: str, **kwargs):
    """A :class:`FaultProxy` serving in a thread for the ``with`` block; yields it."""
    proxy = FaultProxy(upstream, **kwargs)
    thread = threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True, name="faultproxy")
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(10)
