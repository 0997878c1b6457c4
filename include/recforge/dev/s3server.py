"""A local S3-compatible server for dev, demos and tests (moto's S3 application, on loopback).

Real S3 protocol over HTTP — boto3 talks to it exactly as to AWS or MinIO, pointed there by
``AWS_ENDPOINT_URL``. State lives in memory for as long as the server runs. It is served by
waitress, which keeps connections alive between requests as S3 does (:class:`Server`).

``recforge dev-s3 start`` runs it detached (pid file under the state folder) and prints how
to stop it; tests use ``running_server()`` in-process.

To charge what S3 charges, the server patches private parts of moto (``stand_in_for_s3``),
written for the moto versions :data:`SUPPORTED_MOTO` names (the ``dev`` extra's bound in
``pyproject.toml``). Before patching, :func:`check_moto` checks that every name the patches
replace, call or read is there, and refuses a moto that lacks one, naming its version and
the supported range: a silently half-patched server would serve wrong listings or bytes.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime
import inspect
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import xml.sax.saxutils
from pathlib import Path

DEV_CREDENTIALS = {  # dev-only placeholders; moto accepts any credentials
    "AWS_ACCESS_KEY_ID": "recforge-dev",
    "AWS_SECRET_ACCESS_KEY": "recforge-dev-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


SUPPORTED_MOTO = ">=5.2,<5.3"  # the dev extra's moto bound: what the patches were written for

# What the patches replace, call or read in moto, by module: ``Class.name`` → the parameters
# a wrapped function must take in order (None: it need only exist, as a class attribute or
# one its ``__init__`` sets).
MOTO_NAMES: dict[str, dict[str, tuple[str, ...] | None]] = {
    "moto.s3.models": {
        "FakeKey.value": None, "FakeKey.size": None, "FakeKey.lock": None,
        "FakeKey._value_buffer": None, "FakeMultipart.set_part": None,
        "FakeBucket.multiparts": None, "FakeBucket.keys": None,
        "S3Backend.upload_part_copy": (
            "self", "dest_bucket_name", "multipart_id", "part_id", "src_bucket_name",
            "src_key_name", "src_version_id", "start_byte", "end_byte"),
        "S3Backend.get_bucket": None, "S3Backend.get_object": None,
        "S3Backend.list_objects_v2": ("self", "bucket", "prefix", "delimiter",
                                      "continuation_token", "start_after", "max_keys"),
        "S3Backend._truncate_result": None, "S3Backend._pagination_tokens": None,
        "FakeTableStorageBucket": None, "FakeDeleteMarker": None,
    },
    "moto.s3.responses": {
        "S3Response.get_object": ("self",), "S3Response.list_objects_v2": ("self",),
        "S3Response._handle_range_header": ("self", "request", "response_headers",
                                            "response_content"),
        "S3Response.serialized": None,
    },
    "moto.s3.utils": {
        "_VersionedKeyStore.__setitem__": None, "_VersionedKeyStore.setlist": None,
        "_VersionedKeyStore.pop": None, "_VersionedKeyStore.__delitem__": None,
    },
    "moto.backends": {"list_of_moto_modules": None},
}
# ``render_listings_directly`` works on what ``S3Response.list_objects_v2`` hands its
# serializer (moto 5.2's ``self.serialized``; 5.1 rendered a template instead);
# ``route_without_listing_moto`` replaces what moto's router calls for every request
MOTO_CALLS = (("moto.s3.responses", "S3Response.list_objects_v2", "serialized"),
              ("moto.moto_server.werkzeug_app", "DomainDispatcherApplication.get_backend_for_host",
               "list_of_moto_modules"))


class MotoUnsupported(RuntimeError):
    """The installed moto lacks a name the dev server's patches need."""


def _moto_lacks(module, dotted: str, params: tuple[str, ...] | None) -> str | None:
    """What is wrong with ``module.dotted`` (None: nothing)."""
    where = f"{module.__name__}.{dotted}"
    owner_name, _, attr = dotted.rpartition(".")
    if not owner_name:
        return None if hasattr(module, attr) else where
    owner = getattr(module, owner_name, None)
    if owner is None:
        return where
    found = inspect.getattr_static(owner, attr, None)
    if found is None:
        inits = (getattr(k.__dict__.get("__init__"), "__code__", None) for k in owner.__mro__)
        set_in_init = any(code is not None and attr in code.co_names for code in inits)
        return None if set_in_init else where
    if params is not None and tuple(inspect.signature(found).parameters) != params:
        return f"{where}({', '.join(params)})"
    return None


def check_moto() -> None:
    """Refuse, before patching anything, a moto whose names the patches do not find
    (:data:`MOTO_NAMES`, :data:`MOTO_CALLS`): the message names its version and
    :data:`SUPPORTED_MOTO`."""
    import importlib
    from importlib.metadata import version

    missing = []
    for module_name, names in MOTO_NAMES.items():
        module = importlib.import_module(module_name)
        missing += [m for dotted, params in names.items()
                    if (m := _moto_lacks(module, dotted, params))]
    for module_name, dotted, called in MOTO_CALLS:
        owner, _, attr = dotted.partition(".")  # a class's function
        fn = getattr(getattr(importlib.import_module(module_name), owner, None), attr, None)
        if called not in getattr(getattr(fn, "__code__", None), "co_names", ()):
            missing.append(f"{module_name}.{dotted} calling {called}")
    if missing:
        raise MotoUnsupported(
            f"the dev S3 server patches moto, and moto {version('moto')} lacks what the "
            f"patches need: {'; '.join(missing)}. Supported: moto{SUPPORTED_MOTO} (the "
            f"dev extra's bound); install one: pip install 'moto[server]{SUPPORTED_MOTO}'")


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

    def handle_range_in_place(self, request, response_headers, response_content):
        status, headers, body = handle_range(self, request, response_headers,
                                             response_content)
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


_names_lock = threading.RLock()


def _sorted_names(store) -> list[str]:
    """The store's key names in order, kept up to date by ``list_in_key_order``'s hooks."""
    with _names_lock:
        names = store.__dict__.get("_recforge_names")
        if names is None:
            names = store.__dict__["_recforge_names"] = sorted(dict.keys(store))
        return names


def _track_names(store_cls) -> None:
    """Keep a sorted list of names beside each key store: a new name is inserted, a removed
    one deleted (bisect), any other change to the set of names drops the list."""
    set_item, set_list, pop, del_item = (store_cls.__setitem__, store_cls.setlist,
                                         store_cls.pop, store_cls.__delitem__)

    def added(store, key, call):
        with _names_lock:
            new = not dict.__contains__(store, key)
            call()
            names = store.__dict__.get("_recforge_names")
            if new and names is not None:
                bisect.insort(names, key)

    def removed(store, key, call):
        with _names_lock:
            call()
            names = store.__dict__.get("_recforge_names")
            if names is not None:
                i = bisect.bisect_left(names, key)
                if i < len(names) and names[i] == key and not dict.__contains__(store, key):
                    del names[i]

    def dropping(method):
        def dropped(store, *args, **kwargs):
            with _names_lock:
                store.__dict__.pop("_recforge_names", None)
                return method(store, *args, **kwargs)
        return dropped

    store_cls.__setitem__ = lambda s, k, v: added(s, k, lambda: set_item(s, k, v))
    store_cls.setlist = lambda s, k, v: added(s, k, lambda: set_list(s, k, v))
    store_cls.pop = lambda s, k, *d: removed(s, k, lambda: pop(s, k, *d))
    store_cls.__delitem__ = lambda s, k: removed(s, k, lambda: del_item(s, k))
    for name in ("clear", "update", "popitem", "setdefault"):
        setattr(store_cls, name, dropping(getattr(dict, name)))


def list_in_key_order() -> None:
    """Make moto's ``ListObjectsV2`` cost what S3 charges: the page, not the bucket. moto
    copies, filters and sorts every key of the bucket for every page (0.25 ms a key a
    page: 20,000 source keys in a bucket that also holds the staging and the versions took
    8 s to list, and it grows with every night); here each bucket keeps its names sorted,
    and a page is a bisect to the prefix or the continuation token and a walk of the page
    (a common prefix jumps past its keys). Same keys, folders, order, tokens and
    truncation as moto's own (``tests/dev/test_s3server.py`` compares the two)."""
    from moto.s3 import models, utils

    if getattr(models.S3Backend, "_recforge_listing", False):
        return
    original = models.S3Backend.list_objects_v2
    _track_names(utils._VersionedKeyStore)

    def list_objects_v2(self, bucket, prefix, delimiter, continuation_token, start_after,
                        max_keys):
        if continuation_token:
            limit = self._pagination_tokens.get(continuation_token)
        else:
            limit = start_after
        if isinstance(bucket, models.FakeTableStorageBucket) or (continuation_token
                                                                  and limit is None):
            return original(self, bucket, prefix, delimiter, continuation_token,
                            start_after, max_keys)
        if max_keys == 0:
            return [], False, None
        prefix = prefix or ""
        names = _sorted_names(bucket.keys)
        with _names_lock:
            i = bisect.bisect_left(names, prefix)
            if limit:
                i = max(i, bisect.bisect_right(names, limit))
            found: list = []
            while i < len(names) and len(found) <= max_keys:
                name = names[i]
                if not name.startswith(prefix):
                    break
                rest = name[len(prefix):]
                if delimiter and delimiter in rest:
                    folder = prefix + rest.split(delimiter)[0] + delimiter
                    if not limit or folder > limit:
                        found.append(folder)
                    if ord(folder[-1]) < sys.maxunicode:  # past every name under it
                        end = folder[:-1] + chr(ord(folder[-1]) + 1)
                        i = bisect.bisect_left(names, end, i + 1)
                    else:
                        while i < len(names) and names[i].startswith(folder):
                            i += 1
                    continue
                key = bucket.keys.get(name)
                if key is not None and not isinstance(key, models.FakeDeleteMarker):
                    found.append(key)
                i += 1
        return self._truncate_result(found, max_keys)

    models.S3Backend.moto_list_objects_v2 = original  # what the test compares with
    models.S3Backend.list_objects_v2 = list_objects_v2
    models.S3Backend._recforge_listing = True


def _xml(text) -> str:
    return xml.sax.saxutils.escape(str(text), {'"': "&quot;"})


def _iso8601(value: str) -> str:
    """moto's rendering of an object's ``LastModified`` (``TimestampSerializer``), without
    its dateutil parse: whole seconds as ``…SSZ``, else microseconds."""
    when = datetime.datetime.fromisoformat(value)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if when.microsecond else "%Y-%m-%dT%H:%M:%SZ")


def _contents_xml(item: dict) -> str:
    out = [f"<Contents><Key>{_xml(item['Key'])}</Key>",
           f"<LastModified>{_iso8601(item['LastModified'])}</LastModified>",
           f"<ETag>{_xml(item['ETag'])}</ETag><Size>{item['Size']}</Size>",
           f"<StorageClass>{_xml(item['StorageClass'])}</StorageClass>"]
    for algorithm in item.get("ChecksumAlgorithm", ()):
        out.append(f"<ChecksumAlgorithm>{_xml(algorithm)}</ChecksumAlgorithm>")
    if "Owner" in item:
        out.append(f"<Owner><ID>{_xml(item['Owner']['ID'])}</ID><DisplayName>"
                   f"{_xml(item['Owner']['DisplayName'])}</DisplayName></Owner>")
    out.append("</Contents>")
    return "".join(out)


def render_listings_directly() -> None:
    """Render a ``ListObjectsV2`` page's keys as XML directly. moto's generic,
    model-driven serializer spends ~0.3 ms a key (a third of it parsing each timestamp
    with dateutil), 0.3 s a 1,000-key page, where S3 answers in tens of milliseconds;
    the rest of the response (the envelope, headers, tokens) is still moto's."""
    from moto.s3 import responses

    if getattr(responses.S3Response, "_recforge_render", False):
        return
    original = responses.S3Response.list_objects_v2

    def list_objects_v2(self):
        lists: dict = {}
        serialized = self.serialized

        def without_lists(action_result):
            lists["contents"] = action_result.result.pop("Contents", [])
            lists["folders"] = action_result.result.pop("CommonPrefixes", [])
            return serialized(action_result)

        self.serialized = without_lists
        try:
            status, headers, body = original(self)
        finally:
            del self.serialized
        rendered = "".join([_contents_xml(item) for item in lists.get("contents", ())] +
                           [f"<CommonPrefixes><Prefix>{_xml(f['Prefix'])}</Prefix>"
                            "</CommonPrefixes>" for f in lists.get("folders", ())])
        text = body.decode("utf-8") if isinstance(body, bytes) else body
        end = text.rindex("</ListBucketResult>")
        text = text[:end] + rendered + text[end:]
        body = text.encode("utf-8") if isinstance(body, bytes) else text
        for name in [h for h in headers if h.lower() == "content-length"]:
            headers[name] = str(len(text.encode("utf-8")))
        return status, headers, body

    responses.S3Response.moto_list_objects_v2 = original  # what the test compares with
    responses.S3Response.list_objects_v2 = list_objects_v2
    responses.S3Response._recforge_render = True


def route_without_listing_moto() -> None:
    """moto's router asks, for every request, whether the request's host names one of
    moto's service packages, by listing moto's package folder and checking each of its
    ~180 entries is a folder, under the lock every request takes: ~40 % of the server's
    CPU for a small GET. The folder does not change while the server runs, so it is listed
    once."""
    from moto import backends

    if hasattr(backends, "moto_list_of_moto_modules"):
        return
    names = tuple(backends.list_of_moto_modules())
    backends.moto_list_of_moto_modules = backends.list_of_moto_modules  # what the test compares
    backends.list_of_moto_modules = lambda: names


def stand_in_for_s3() -> None:
    """What the dev server changes in moto so that it charges what S3 charges (ranges,
    listing pages, routing a request); the bytes, headers and errors are moto's. Refuses a
    moto the patches were not written for (:func:`check_moto`) before changing anything."""
    check_moto()
    serve_ranges_in_place()
    list_in_key_order()
    render_listings_directly()
    route_without_listing_moto()


def _channel_class():
    """waitress's connection handler, answering a request with nothing to wait for at once.

    waitress (3.0) answers ``Expect: 100-continue`` with ``100 Continue`` whenever a
    request's head is in, and marks the request incomplete until its body comes; a request
    whose body is empty (boto3's PUT of an empty object) is then never answered."""
    from waitress.channel import HTTPChannel
    from waitress.parser import HTTPRequestParser

    class Parser(HTTPRequestParser):
        def received(self, data):
            consumed = super().received(data)
            if self.completed:  # the whole request is in: no body to invite
                self.expect_continue = False
            return consumed

    class Channel(HTTPChannel):
        parser_class = Parser

    return Channel


def _with_raw_uri(app):
    """moto's application with the request target as it arrived in ``RAW_URI``, werkzeug's
    name for it, where moto reads an object's key before any percent-decoding; waitress
    names it ``REQUEST_URI``. Without it moto decodes the already decoded path again:
    ``100%25.jpg`` is stored as ``100%.jpg`` and ``why%3F.jpg`` as ``why``."""
    def application(environ, start_response):
        environ.setdefault("RAW_URI", environ.get("REQUEST_URI", ""))
        return app(environ, start_response)
    return application


class Server:
    """moto's S3 application behind waitress on 127.0.0.1: HTTP/1.1 with kept-alive
    connections, as S3 keeps them. moto's own server (werkzeug's) closes every connection
    after one answer, so each request paid a new TCP connection on the client's side."""

    def __init__(self, port: int = 0):
        import logging

        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            create_backend_app,
        )
        from waitress.server import create_server

        logging.getLogger("waitress").setLevel(logging.ERROR)  # "Task queue depth is 1"
        stand_in_for_s3()
        self._server = create_server(
            _with_raw_uri(DomainDispatcherApplication(create_backend_app)),
            host="127.0.0.1", port=port,
            threads=16, ident="recforge-dev-s3",
            # a test session's many clients each keep connections: poll, not select (1,024
            # descriptors), and room for them; S3 itself drops a connection idle ~20 s
            asyncore_use_poll=True, connection_limit=4096, channel_timeout=20)
        self._server.channel_class = _channel_class()
        self.port = self._server.effective_port
        self._thread = threading.Thread(target=self._server.run, name="dev-s3", daemon=True)

    def start(self) -> str:
        self._thread.start()
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        from waitress import wasyncore

        server = self._server  # closed in the loop's own thread, which then ends
        server.trigger.pull_trigger(lambda: wasyncore.close_all(server._map))
        self._thread.join(10)
        server.task_dispatcher.shutdown()


@contextlib.contextmanager
def running_server(port: int = 0):
    """An in-process server on 127.0.0.1; yields its endpoint URL."""
    server = Server(port)
    try:
        yield server.start()
    finally:
        server.stop()


def serve(port: int) -> None:
    server = Server(port)
    server.start()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()


def start_detached(state_dir: Path, port: int) -> tuple[str, bool]:
    """Start (or find running) a detached server; returns (endpoint, started_now)."""
    check_moto()  # here, with its message, rather than in the child's log
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
