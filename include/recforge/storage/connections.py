"""HTTP/1.1 GETs on kept-alive sockets, for ``http_get``: the request written in one
``sendall``, the head parsed from the first ``recv``, the body read with ``recv_into`` into
one buffer of its ``Content-Length``. urllib3 and ``http.client`` parse a head with the
``email`` package and read a body through several buffered layers; on these cores that
costs about as much again as the rest of a GET (``benchmarks/bench_s3_clients.py``,
``recforge urllib3`` beside ``recforge``).

It speaks only what an S3 GET answer needs: a status line, headers, and a body framed by
``Content-Length`` or chunked transfer coding (or, without either, by the connection's
end; none after a 1xx, 204 or 304), over TCP or TLS (the client's verification settings).
Failures are the ones urllib3 raised, which ``storage.errors`` already calls transient: a
reset, or a body cut short, raises ``ProtocolError``; a stalled read ``ReadTimeoutError``; a
host that cannot be reached, after the client's connection attempts, botocore's
``EndpointConnectionError`` or ``ConnectTimeoutError``. A certificate that does not verify
raises botocore's ``SSLError``.

A kept connection the server closed while idle is dropped before use. One that shows
closed only when the request goes out (no byte of an answer came) is replaced once, as
``http.client`` and urllib3 do. Nothing else is retried here: the caller's retry rule is.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

HEAD_LIMIT = 64 << 10  # a response head longer than this is not an S3 answer
RECV = 64 << 10


@dataclass
class Response:
    """What a GET answered: status, headers (names in lower case), body."""

    status: int
    headers: dict[str, str]
    data: bytes | bytearray


class _Stale(Exception):
    """A kept connection that turned out closed before any byte of the answer came."""


@dataclass
class Connections:
    """Kept-alive connections to the hosts of one endpoint (a host per bucket where the
    addressing is virtual), each used by one thread at a time; at most ``keep`` idle ones
    kept per host. ``endpoint_url`` names the endpoint in errors; ``connect_timeout`` and
    ``read_timeout`` are the client's, as are ``attempts`` (tries at connecting)."""

    scheme: str
    port: int | None
    endpoint_url: str
    connect_timeout: float | None
    read_timeout: float | None
    attempts: int
    keep: int
    tls: ssl.SSLContext | None = None
    _idle: dict[str, list[socket.socket]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pid: int = field(default_factory=os.getpid)

    def get(self, host: str, path: str, headers: dict[str, str]) -> Response:
        """One GET of ``path`` (sent as it is) on a connection to ``host`` (``name[:port]``,
        as the Host header carries it)."""
        hostname = host.rsplit(":", 1)[0] if self.port and not host.endswith("]") else host
        hostname = hostname.strip("[]")
        request = "".join((f"GET {path} HTTP/1.1\r\n",
                           *(f"{k}: {v}\r\n" for k, v in headers.items()),
                           "\r\n")).encode("latin-1")
        from urllib3.exceptions import ProtocolError, ReadTimeoutError  # botocore's, loaded

        sock = self._kept(hostname)
        while True:
            kept = sock is not None
            if sock is None:
                sock = self._connect(hostname)
            try:
                response, reusable = _exchange(sock, request)
            except _Stale as exc:
                sock.close()
                if kept:  # closed by the server while idle: once more, on a new one
                    sock = None
                    continue
                raise ProtocolError("Connection aborted.", exc.__cause__ or exc) from exc
            except TimeoutError as exc:
                sock.close()
                raise ReadTimeoutError(None, path, f"Read timed out. ({exc})") from exc
            except OSError as exc:
                sock.close()
                raise ProtocolError("Connection aborted.", exc) from exc
            except BaseException:
                sock.close()
                raise
            if reusable:
                self._give(hostname, sock)
            else:
                sock.close()
            return response

    def _kept(self, hostname: str) -> socket.socket | None:
        if self._pid != os.getpid():  # a forked child: the parent's sockets stay its own
            with self._lock:
                self._idle, self._pid = {}, os.getpid()
        while True:
            with self._lock:
                idle = self._idle.get(hostname)
                sock = idle.pop() if idle else None
            if sock is None or not _dropped(sock):
                return sock
            sock.close()

    def _give(self, hostname: str, sock: socket.socket) -> None:
        with self._lock:
            idle = self._idle.setdefault(hostname, [])
            if len(idle) < self.keep and self._pid == os.getpid():
                idle.append(sock)
                return
        sock.close()

    def _connect(self, hostname: str) -> socket.socket:
        import botocore.exceptions

        port = self.port or (443 if self.scheme == "https" else 80)
        for attempt in range(max(1, self.attempts)):
            if attempt:
                time.sleep(min(0.1 * 2 ** (attempt - 1), 2.0))
            try:
                sock = socket.create_connection((hostname, port), self.connect_timeout)
            except TimeoutError as exc:
                error: Exception = botocore.exceptions.ConnectTimeoutError(
                    endpoint_url=self.endpoint_url, error=exc)
                continue
            except OSError as exc:
                error = botocore.exceptions.EndpointConnectionError(
                    endpoint_url=self.endpoint_url, error=exc)
                continue
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.tls is not None:
                    sock = self.tls.wrap_socket(sock, server_hostname=hostname)
                sock.settimeout(self.read_timeout)
            except ssl.SSLError as exc:  # a certificate that does not verify: not transient
                sock.close()
                raise botocore.exceptions.SSLError(endpoint_url=self.endpoint_url,
                                                   error=exc) from exc
            except BaseException:
                sock.close()
                raise
            return sock
        raise error


def tls_context(verify: bool | str | None) -> ssl.SSLContext:
    """The TLS settings of a botocore client's ``verify``: off, a CA bundle's path, or on
    with botocore's bundle (certifi's)."""
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if not isinstance(verify, str):
        from botocore.httpsession import get_cert_path

        verify = get_cert_path(True)
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle kept connection is no longer usable: readable while no request is
    out means closed by the server (or sent something unasked)."""
    try:
        poll = select.poll()  # not select(): a process may hold fds past FD_SETSIZE
        poll.register(sock, select.POLLIN)
        return bool(poll.poll(0))
    except (OSError, ValueError):
        return True


def _exchange(sock: socket.socket, request: bytes) -> tuple[Response, bool]:
    """Send ``request`` and read its answer: ``(response, whether the connection can be
    used again)``. ``_Stale`` where not one byte came back."""
    try:
        sock.sendall(request)
        head = sock.recv(RECV)
    except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as exc:
        raise _Stale() from exc
    if not head:
        raise _Stale()
    end = head.find(b"\r\n\r\n")
    while end < 0:
        if len(head) > HEAD_LIMIT:
            raise _protocol(f"a response head over {HEAD_LIMIT} bytes")
        more = sock.recv(RECV)
        if not more:
            raise _protocol("connection closed within the response head")
        head += more
        end = head.find(b"\r\n\r\n")
    lines = head[:end].decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    try:
        status = int(rest[:3])
    except ValueError:
        raise _protocol(f"not an HTTP status line: {lines[0][:80]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    start = end + 4
    close = (headers.get("connection", "").lower() == "close" or version == "HTTP/1.0")
    if status in (204, 304) or 100 <= status < 200:  # no body, whatever the headers say
        return Response(status, headers, b""), not close and len(head) == start
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Response(status, headers, _chunked(sock, head[start:])), not close
    length = headers.get("content-length")
    if length is None:  # framed by the connection's end
        return Response(status, headers, _to_end(sock, head[start:])), False
    return Response(status, headers, _sized(sock, head, start, int(length))), not close


def _sized(sock: socket.socket, head: bytes, start: int, length: int) -> bytes | bytearray:
    got = len(head) - start
    if got >= length:
        if got > length:
            raise _protocol(f"{got - length} bytes beyond the body's Content-Length")
        return head[start:]
    body = bytearray(length)
    view = memoryview(body)
    view[:got] = memoryview(head)[start:]
    while got < length:
        n = sock.recv_into(view[got:])
        if not n:
            raise _protocol(f"IncompleteRead({got} bytes read, {length - got} more expected)")
        got += n
    return body


def _chunked(sock: socket.socket, buffered: bytes) -> bytes:
    data, parts = bytearray(buffered), []

    def need(n: int) -> None:
        while len(data) < n:
            more = sock.recv(RECV)
            if not more:
                raise _protocol("connection closed within a chunked body")
            data.extend(more)

    while True:
        line_end = data.find(b"\r\n")
        while line_end < 0:
            need(len(data) + 1)
            line_end = data.find(b"\r\n")
        size = int(bytes(data[:line_end]).split(b";")[0], 16)
        del data[:line_end + 2]
        if size == 0:
            while not data.startswith(b"\r\n"):  # trailers, then the empty line
                end = data.find(b"\r\n\r\n")
                if end >= 0:
                    del data[:end + 2]
                    break
                need(len(data) + 1)
            return b"".join(parts)
        need(size + 2)
        parts.append(bytes(data[:size]))
        del data[:size + 2]


def _to_end(sock: socket.socket, buffered: bytes) -> bytes:
    parts = [buffered]
    while chunk := sock.recv(RECV):
        parts.append(chunk)
    return b"".join(parts)


def _protocol(message: str) -> Exception:
    from urllib3.exceptions import ProtocolError

    return ProtocolError(message)
