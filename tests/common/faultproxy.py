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

``policy`` (a :class:`BucketPolicy`) makes one bucket a locked-down one, refused as AWS
refuses (403 ``AccessDenied``, the request not forwarded; counted in ``stats["denied"]``,
each reason in ``denials``): every request to it without the expected owner
(``x-amz-expected-bucket-owner``; a copy from it also ``x-amz-source-expected-bucket-owner``),
every write creating an object (PutObject, CreateMultipartUpload, CopyObject) without SSE-KMS
under the policy's key (and its storage class, if it names one), any request sending an ACL
(400 ``AccessControlListNotSupported``, as a bucket with ACLs disabled answers), and the
deletes of the keys :meth:`FaultProxy.refuse_delete` names: a DeleteObject is refused
whole, a DeleteObjects deletes the others and lists each such key in its ``<Error>``
entries, as S3 answers a multi-object delete it partly refused. Moto only: that rewrites the
request body, which a store that checks signatures refuses.

Bounded: one short-lived thread per connection, socket timeouts on both sides, and
:func:`running_proxy` shuts the server down when the ``with`` block ends.
"""

from __future__ import annotations

import base64
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
from dataclasses import dataclass
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
DELETE_STATUS = {"AccessDenied": (403, "Forbidden"), "SlowDown": (503, "Slow Down"),
                 "InternalError": (500, "Internal Server Error")}


@dataclass(frozen=True)
class BucketPolicy:
    """What a locked-down bucket asks of every request to it (see the module's docstring):
    ``owner``, the account id every request must name; ``kms_key_id``, the KMS key every
    write creating an object must ask for (with ``aws:kms``); ``storage_class``, if not None,
    the class it must ask for."""

    bucket: str
    owner: str
    kms_key_id: str
    storage_class: str | None = None

    def refusal(self, method: str, path: str, query: str, headers) -> str | None:
        """Why this request is refused (None: it is not), from its method, path-style path,
        query and headers; an ACL's refusal starts with ``ACL``."""
        bucket, _, key = path.lstrip("/").partition("/")
        source = unquote(headers.get("x-amz-copy-source", "")).lstrip("/").split("/", 1)[0]
        if bucket != self.bucket and source != self.bucket:
            return None
        if bucket == self.bucket and (headers.get("x-amz-acl") or any(
                h.lower().startswith("x-amz-grant-") for h in headers.keys())):
            return f"ACL {headers.get('x-amz-acl') or 'grant'} sent to a bucket without ACLs"
        if source == self.bucket and \
                headers.get("x-amz-source-expected-bucket-owner") != self.owner:
            return f"a copy from {self.bucket} names no expected source owner {self.owner}"
        if bucket != self.bucket or (method == "PUT" and not key and not query):
            return None  # another bucket; CreateBucket takes no expected owner
        if headers.get("x-amz-expected-bucket-owner") != self.owner:
            return f"no x-amz-expected-bucket-owner: {self.owner}"
        params = dict(p.partition("=")[::2] for p in query.split("&") if p)
        creating = (method == "PUT" and key and "partNumber" not in params
                    and "uploadId" not in params) or (method == "POST" and "uploads" in params)
        if not creating:
            return None
        if headers.get("x-amz-server-side-encryption") != "aws:kms" or headers.get(
                "x-amz-server-side-encryption-aws-kms-key-id") != self.kms_key_id:
            return f"a write without SSE-KMS under {self.kms_key_id}"
        if self.storage_class and headers.get("x-amz-storage-class") != self.storage_class:
            return f"a write not in storage class {self.storage_class}"
        return None


class FaultProxy(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: str, *, rate: float = 0.0, modes=MODES, seed: int = 0,
                 max_delay_s: float = 0.3, strip: tuple[str, ...] = (),
                 opaque_etags: bool = False, policy: BucketPolicy | None = None):
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
        self.policy = policy
        self.denials: list[str] = []  # why each refused request was refused
        self._undeletable: dict[tuple[str, str], list] = {}  # (bucket, key) → [code, times]
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

    def refuse_delete(self, bucket: str, key: str, code: str = "AccessDenied",
                      times: int | None = None) -> None:
        """Refuse to delete ``key`` with ``code`` (``times`` times, then delete it; None:
        always), as a deny statement, a legal hold or a store under load does."""
        with self._lock:
            self._undeletable[(bucket, key)] = [code, times]

    def delete_refused(self, bucket: str, key: str) -> str | None:
        """The code this delete of ``key`` is refused with now (counted), or None."""
        with self._lock:
            entry = self._undeletable.get((bucket, key))
            if entry is None or entry[1] == 0:
                return None
            if entry[1] is not None:
                entry[1] -= 1
            self.stats["delete_refused"] += 1
            return entry[0]

    def deny(self, reason: str) -> None:
        with self._lock:
            self.stats["denied"] += 1
            self.denials.append(reason)

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

    def _error(self, status: int, phrase: str, code: str, message: str) -> None:
        """An S3 error answer (a HEAD's without its body, as S3 sends it)."""
        data = ERROR_BODY.format(code=code, message=html.escape(message)).encode()
        self.send_response(status, phrase)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(0 if self.command == "HEAD" else len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _policed(self, parsed) -> bool:
        """Answer what the bucket policy or a refused delete refuses; True if answered."""
        path = unquote(parsed.path)
        policy = self.server.policy
        reason = policy and policy.refusal(self.command, path, parsed.query, self.headers)
        if reason:
            self.server.deny(reason)
            if reason.startswith("ACL"):
                self._error(400, "Bad Request", "AccessControlListNotSupported",
                            "The bucket does not allow ACLs")
            else:
                self._error(403, "Forbidden", "AccessDenied", f"Access Denied: {reason}")
            return True
        bucket, _, key = path.lstrip("/").partition("/")
        code = self.command == "DELETE" and key and "uploadId" not in parsed.query and \
            self.server.delete_refused(bucket, key)
        if code:
            status, phrase = DELETE_STATUS.get(code, (403, "Forbidden"))
            self._error(status, phrase, code, f"{code}: {key} was not deleted")
        return bool(code)

    def _refused_deletes(self, parsed, body: bytes, headers: dict) -> tuple[bytes, bytes]:
        """A DeleteObjects body without the objects whose delete is refused, and the
        ``<Error>`` entries its answer gets for them (b"" when none is refused)."""
        if self.command != "POST" or "delete" not in parsed.query.split("&"):
            return body, b""
        bucket = unquote(parsed.path).strip("/").split("/", 1)[0]
        errors: list[bytes] = []

        def keep(m: re.Match) -> bytes:
            raw = re.search(rb"<Key>(.*?)</Key>", m.group(0), re.S).group(1)
            code = self.server.delete_refused(bucket, html.unescape(raw.decode()))
            if not code:
                return m.group(0)
            errors.append(b"<Error><Key>" + raw + b"</Key><Code>" + code.encode()
                          + b"</Code><Message>" + code.encode() + b"</Message></Error>")
            return b""

        body = re.sub(rb"<Object>.*?</Object>", keep, body, flags=re.S)
        if errors:  # the body changed: its checksums with it
            for k in [k for k in headers if k.lower() == "content-md5"
                      or k.lower().startswith(("x-amz-checksum-", "x-amz-sdk-checksum"))]:
                del headers[k]
            headers["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
        return body, b"".join(errors)

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
        parsed = urlparse(self.path)
        if self._policed(parsed):
            return
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in HOP_BY_HOP and k.lower() not in self.server.strip}
        if len(headers) < len(self.headers) - len(HOP_BY_HOP & {k.lower() for k in self.headers}):
            with self.server._lock:
                self.server.stats["stripped"] += 1
        body, delete_errors = self._refused_deletes(parsed, body, headers)
        if delete_errors and b"<Object>" not in body:  # nothing left to forward
            data = (b'<?xml version="1.0" encoding="UTF-8"?>\n<DeleteResult xmlns='
                    b'"http://s3.amazonaws.com/doc/2006-03-01/">' + delete_errors
                    + b"</DeleteResult>")
            self.send_response(200, "OK")
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
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
        if delete_errors:
            data = data.replace(b"</DeleteResult>", delete_errors + b"</DeleteResult>")
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
