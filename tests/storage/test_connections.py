"""``storage.connections``: the GET transport of ``http_get``, against a scripted server that
answers each request with the raw bytes a test gives it (framings, closes, cuts, stalls)."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import pytest
from botocore.exceptions import EndpointConnectionError
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from recforge.storage import connections, errors

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


class Scripted:
    """A server on 127.0.0.1 that reads each request's head and answers with the next of
    ``answers``: bytes to send, or a callable given the connection (to close it, cut it,
    or stall). Counts connections and requests."""

    def __init__(self, answers, tls=None):
        self.answers, self.connections, self.requests = list(answers), 0, []
        self.tls = tls
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn):
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:  # the client refused the certificate
                conn.close()
                return
        with conn:
            buf = b""
            while self.answers:
                while b"\r\n\r\n" not in buf:
                    more = conn.recv(65536)
                    if not more:
                        return
                    buf += more
                head, _, buf = buf.partition(b"\r\n\r\n")
                self.requests.append(head.split(b"\r\n")[0].decode())
                answer = self.answers.pop(0)
                if callable(answer):
                    if answer(conn) == "closed":
                        return
                else:
                    conn.sendall(answer)

    def close(self):
        self.sock.close()


@pytest.fixture
def server(request):
    made = []

    def start(*answers):
        made.append(Scripted(answers))
        return made[-1]

    yield start
    for s in made:
        s.close()


def pool(port: int, read_timeout: float = 5.0, attempts: int = 2) -> connections.Connections:
    return connections.Connections("http", port, f"http://127.0.0.1:{port}", 2.0,
                                   read_timeout, attempts, keep=4)


def get(conns, path="/b/k"):
    return conns.get(f"127.0.0.1:{conns.port}", path, {"host": f"127.0.0.1:{conns.port}"})


def test_a_connection_is_kept_and_the_path_sent_as_it_is(server):
    s = server(OK, OK, OK)
    conns = pool(s.port)
    got = [get(conns, "/b/a/./b/../c"), get(conns), get(conns)]
    assert [(r.status, bytes(r.data)) for r in got] == [(200, b"hello")] * 3
    assert s.connections == 1
    assert s.requests[0] == "GET /b/a/./b/../c HTTP/1.1"
    assert got[0].headers["content-length"] == "5"


def test_a_body_larger_than_one_read_arrives_whole(server):
    body = bytes(range(256)) * 4096  # 1 MiB
    s = server(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body, OK)
    conns = pool(s.port)
    assert bytes(get(conns).data) == body
    assert bytes(get(conns).data) == b"hello" and s.connections == 1


def test_chunked_and_close_framed_bodies(server):
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\nX-Trailer: t\r\n\r\n")

    def close_framed(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
        return "closed"

    s = server(chunked, OK, close_framed, OK)
    conns = pool(s.port)
    assert bytes(get(conns).data) == b"abcdefg"
    assert bytes(get(conns).data) == b"hello"  # the chunked answer left the connection clean
    assert bytes(get(conns).data) == b"until the end"
    assert s.connections == 1
    assert bytes(get(conns).data) == b"hello"  # a close-framed answer's connection not kept
    assert s.connections == 2


def test_an_answer_without_a_body_keeps_the_connection(server):
    s = server(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", OK)
    conns = pool(s.port, read_timeout=2.0)
    started = time.perf_counter()
    got = get(conns)
    assert (got.status, bytes(got.data)) == (304, b"")
    assert bytes(get(conns).data) == b"hello"
    assert s.connections == 1 and time.perf_counter() - started < 1.0


def test_a_kept_connection_closed_while_idle_is_not_used(server, monkeypatch):
    s = server(lambda conn: conn.sendall(OK) or conn.shutdown(socket.SHUT_WR) or "closed", OK)
    conns = pool(s.port)
    checked, dropped = [], connections._dropped
    monkeypatch.setattr(connections, "_dropped",
                        lambda sock: checked.append(dropped(sock)) or checked[-1])
    exchanged, exchange = [], connections._exchange
    monkeypatch.setattr(connections, "_exchange",
                        lambda sock, req: exchanged.append(sock) or exchange(sock, req))
    assert bytes(get(conns).data) == b"hello"
    time.sleep(0.1)  # the server's close reaches this side
    assert bytes(get(conns).data) == b"hello"
    assert checked == [True]  # seen closed before use: no request sent on it
    assert len(exchanged) == 2 and s.connections == 2 and len(s.requests) == 2


def test_a_kept_connection_closed_as_the_request_went_is_tried_once_on_a_new_one(server,
                                                                                monkeypatch):
    s = server(OK, lambda conn: "closed", OK)
    conns = pool(s.port)
    monkeypatch.setattr(connections, "_dropped", lambda sock: False)  # the race
    assert bytes(get(conns).data) == b"hello"
    assert bytes(get(conns).data) == b"hello"
    assert s.connections == 2 and len(s.requests) == 3


def test_a_new_connection_closed_without_an_answer_fails_transient(server):
    s = server(lambda conn: "closed")
    with pytest.raises(ProtocolError) as failed:
        get(pool(s.port))
    assert errors.is_transient(failed.value) and s.connections == 1


def test_a_body_cut_short_and_a_stalled_one_fail_transient(server):
    def cut(conn):
        conn.sendall(OK[:-2])
        return "closed"

    def stall(conn):
        conn.sendall(OK[:-2])
        time.sleep(1.0)

    s = server(cut, stall, OK)
    conns = pool(s.port, read_timeout=0.3)
    with pytest.raises(ProtocolError, match="IncompleteRead"):
        get(conns)
    with pytest.raises(ReadTimeoutError) as stalled:
        get(conns)
    assert errors.is_transient(stalled.value)
    assert bytes(get(conns).data) == b"hello"  # neither connection was kept


def test_what_is_no_http_answer_is_refused(server):
    s = server(b"SSH-2.0-OpenSSH\r\n\r\n", OK + b"extra")
    conns = pool(s.port)
    with pytest.raises(ProtocolError, match="not an HTTP status line"):
        get(conns)
    with pytest.raises(ProtocolError, match="beyond the body"):
        get(conns)


def test_an_endpoint_that_does_not_answer_is_named_after_the_attempts(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tries = []
    real = socket.create_connection
    monkeypatch.setattr(connections.socket, "create_connection",
                        lambda *a, **k: tries.append(a) or real(*a, **k))
    monkeypatch.setattr(connections.time, "sleep", lambda s: None)
    with pytest.raises(EndpointConnectionError, match=f"127.0.0.1:{port}"):
        get(pool(port, attempts=3))
    assert len(tries) == 3


def test_a_forked_child_does_not_use_its_parents_connections(server):
    s = server(OK, OK)
    conns = pool(s.port)
    get(conns)
    conns._pid = -1  # as a forked child sees it: the kept socket is the parent's
    get(conns)
    assert s.connections == 2


def self_signed(tmp_path):
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "recforge test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_pem, key_pem = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return cert_pem, key_pem


def test_tls_with_the_clients_verification(tmp_path):
    """A CA bundle's path verifies the server; botocore's own bundle refuses a self-signed
    certificate (botocore's ``SSLError``, not transient); ``verify=False`` does not check."""
    from botocore.exceptions import SSLError

    cert, key = self_signed(tmp_path)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    s = Scripted([OK] * 4, tls=served)
    try:
        for verify in (str(cert), False):
            conns = connections.Connections("https", s.port, "https://127.0.0.1", 2.0, 5.0, 1,
                                            keep=4, tls=connections.tls_context(verify))
            assert bytes(get(conns).data) == b"hello"
            assert bytes(get(conns).data) == b"hello"
        refused = connections.Connections("https", s.port, "https://127.0.0.1", 2.0, 5.0, 1,
                                          keep=4, tls=connections.tls_context(True))
        with pytest.raises(SSLError) as failed:
            get(refused)
        assert not errors.is_transient(failed.value)
    finally:
        s.close()
    assert s.connections == 3  # one kept connection for each client, one refused
