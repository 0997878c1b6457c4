"""Client-side CPU per GET of a small object: recforge's botocore path beside plain boto3,
``obstore`` (Rust ``object_store``) and the AWS CRT S3 client, against local S3 servers.

Against moto (``recforge dev-s3``) and, where ``tests.common.rgw`` starts one here, Ceph RGW,
each server in its own processes: this process's CPU (``time.process_time``: every thread,
the CRT's and obstore's native ones included) is the client's alone; the server's is read
from its processes (``cpu.pids_cpu``) and shown apart. Objects of 2 KB, 20 KB and 120 KB
(random bytes, written by ``storage.put_bytes`` as recforge writes them: with their SHA-256
as S3's additional checksum), ``--gets`` GETs per size through a pool of 8 threads, as
``storage.bulk.prefetch`` issues a stage's per-image GETs. Clients:

* ``recforge``: ``storage.get_bytes`` (the one retry rule, request counting, and the GET of
  ``storage.http_get``: SigV4 signed by recforge, sent on ``storage.connections``' kept-alive
  sockets, the response's SHA-256 validated);
* ``recforge urllib3``: ``storage.get_bytes`` with the same signed request sent on a urllib3
  pool instead of ``storage.connections`` (as ``http_get`` first sent it): the transport
  alone compared;
* ``recforge botocore``: the same rule around botocore's ``get_object`` on the client of
  ``storage.client`` (its config, hooks and, by botocore's default, the response's SHA-256
  validated): the path before ``storage.http_get`` and what ``RECFORGE_S3_GET=botocore``
  chooses, the denominator of every ratio;
* ``recforge prefetch``: ``storage.bulk.prefetch`` itself (its ordered window, 8 threads);
* ``boto3``: a plain ``boto3.client("s3").get_object`` (default config, 64 connections);
* ``boto3 no-checksum``: the same with ``response_checksum_validation="when_required"``;
* ``boto3 recforge-config``: plain ``get_object`` with ``storage.client_config()``
  (adaptive retries: botocore's client-side rate limiter) but without recforge's hooks and
  retry rule;
* ``obstore``: ``obstore.get(store, key).bytes()`` (its retries off, as recforge's rule
  would wrap it);
* ``awscrt``: ``awscrt.s3.S3Client`` GetObject meta-requests (retries off, each response
  validated against the SHA-256 it carries);
* ``awscrt full-object``: the same validating against the object's checksum, the CRT's
  default (it sends a HEAD before each GET).

``--contract`` instead sends one GET per client through ``tests.common.faultproxy`` in front
of moto and reports what recforge's storage contract needs to know: the requests it sent
(methods, ``x-amz-checksum-mode``), what a missing key raises, and, with every request
answered 503 SlowDown, how many requests one GET under recforge's retry rule sent and
whether the rule sees the error as transient.

Each (size, client) is measured ``--repeat`` times, interleaved (every client at one size,
then the next size, round after round), after a warm-up (connections, imports): medians of
CPU ms per GET, wall seconds and GETs/s. On a shared machine absolute numbers are noisy; the
ratios between clients measured interleaved are what to read.

    PYTHONPATH=include .venv/bin/python benchmarks/bench_s3_clients.py
    PYTHONPATH=include .venv/bin/python benchmarks/bench_s3_clients.py --gets 300 --repeat 1

``obstore`` and ``awscrt`` are not recforge dependencies: install them into the venv to
measure them (a client whose package is missing is skipped, and said so).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_build import S3Server, emit, moto_server, rgw_server  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SIZES = {"2KB": 2 << 10, "20KB": 20 << 10, "120KB": 120 << 10}
BUCKET = "clients"
THREADS = 8  # storage.bulk.prefetch's default
BASELINE = "recforge botocore"  # the ratios' denominator


def populate(objects: int) -> dict[str, list[str]]:
    """``objects`` objects of each size under ``s3://clients/<size>/``: keys by size."""
    from recforge import storage

    s3 = storage.s3_client()
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    keys = {name: [f"{name}/{i:05d}.bin" for i in range(objects)] for name in SIZES}
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda k: storage.put_bytes(f"s3://{BUCKET}/{k}",
                                                  os.urandom(SIZES[k.split("/")[0]])),
                      [k for ks in keys.values() for k in ks]))
    return keys


def recforge_client() -> Callable[[str], bytes]:
    from recforge import storage

    return lambda key: storage.get_bytes(f"s3://{BUCKET}/{key}")


def urllib3_runner() -> Callable[[list[str]], None]:
    """``storage.get_bytes`` with ``http_get``'s signed request sent on a urllib3 pool (as
    ``http_get`` first sent it) instead of on ``storage.connections``: the transport alone
    compared, everything else the same. The send is swapped for the pass only."""
    import urllib3

    from recforge import storage
    from recforge.storage import http_get

    pools = urllib3.PoolManager(num_pools=16, maxsize=THREADS)

    def send(where, host: str, path: str, headers: dict):
        hostname = host.rsplit(":", 1)[0] if where.pool.port else host
        pool = pools.connection_from_host(hostname, where.pool.port, where.pool.scheme)
        return pool.urlopen("GET", path, headers=headers, retries=False, redirect=False,
                            preload_content=True, assert_same_host=False,
                            enforce_content_length=True)

    def run(keys: list[str]) -> None:
        own, http_get._send = http_get._send, send
        try:
            with ThreadPoolExecutor(THREADS) as pool:
                for _ in pool.map(lambda k: storage.get_bytes(f"s3://{BUCKET}/{k}"), keys):
                    pass
        finally:
            http_get._send = own

    return run


def recforge_botocore_client() -> Callable[[str], bytes]:
    """``storage.get_bytes`` as it was before ``storage.http_get``: botocore's
    ``get_object`` under the one retry rule, with recforge's client, config and hooks."""
    from recforge.storage import client, retry

    return lambda key: retry.retrying(lambda: client.s3_client().get_object(
        Bucket=BUCKET, Key=key)["Body"].read(), key, "get_object")


def boto3_client(checksums: bool = True, recforge_config: bool = False
                 ) -> Callable[[str], bytes]:
    import boto3
    from botocore.config import Config

    from recforge.storage import client_config

    config = client_config() if recforge_config else Config(
        max_pool_connections=64, s3={"addressing_style": "path"},
        **({} if checksums else {"response_checksum_validation": "when_required"}))
    client = boto3.session.Session().client("s3", config=config)
    return lambda key: client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def obstore_client() -> Callable[[str], object]:
    import boto3
    import obstore
    from obstore.auth.boto3 import Boto3CredentialProvider
    from obstore.store import S3Store

    store = S3Store(BUCKET, endpoint=os.environ["AWS_ENDPOINT_URL"],
                    region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
                    virtual_hosted_style_request=False,
                    credential_provider=Boto3CredentialProvider(boto3.session.Session()),
                    client_options={"allow_http": True}, retry_config={"max_retries": 0})
    return lambda key: obstore.get(store, key).bytes()


def awscrt_client(full_object: bool = False) -> Callable[[str], bytes]:
    """GetObject meta-requests of one ``S3Client``; credentials from a boto3 session. Each
    response is validated against the SHA-256 it carries (as botocore does), or, with
    ``full_object``, against the object's (the CRT's default: a HEAD before each GET)."""
    from urllib.parse import urlparse

    import boto3
    from awscrt import auth, http, io, s3

    endpoint = urlparse(os.environ["AWS_ENDPOINT_URL"])
    session = boto3.session.Session()

    def credentials() -> auth.AwsCredentials:
        got = session.get_credentials().get_frozen_credentials()
        return auth.AwsCredentials(got.access_key, got.secret_key, got.token)

    elg = io.EventLoopGroup(2)
    bootstrap = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
    provider = auth.AwsCredentialsProvider.new_delegate(credentials)
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    client = s3.S3Client(bootstrap=bootstrap, region=region, credential_provider=provider,
                         tls_mode=s3.S3RequestTlsMode.DISABLED if endpoint.scheme == "http"
                         else s3.S3RequestTlsMode.ENABLED,
                         retry_config=s3.S3RetryConfig(retry_mode=s3.S3RetryMode.NONE))
    mode = s3.S3ChecksumValidationMode
    checks = s3.S3ChecksumConfig(validate_response=True, response_validation_mode=(
        mode.FULL_OBJECT if full_object else mode.REQUEST_ONLY))

    def get(key: str) -> bytes:
        chunks: list[bytes] = []
        request = http.HttpRequest("GET", f"/{BUCKET}/{key}",
                                   http.HttpHeaders([("Host", endpoint.netloc)]))
        made = client.make_request(type=s3.S3RequestType.GET_OBJECT, request=request,
                                   checksum_config=checks,
                                   on_body=lambda chunk, **_: chunks.append(bytes(chunk)))
        made.finished_future.result()
        return b"".join(chunks)

    get.keep = (client, bootstrap, elg)  # type: ignore[attr-defined] - alive while used
    return get


def prefetch_runner(keys: list[str]) -> None:
    from recforge.storage import bulk

    for got in bulk.prefetch([f"s3://{BUCKET}/{k}" for k in keys], threads=THREADS):
        if isinstance(got, Exception):
            raise got


CLIENTS: dict[str, Callable[[], Callable[[str], object]]] = {
    "recforge": recforge_client,
    "recforge botocore": recforge_botocore_client,
    "boto3": boto3_client,
    "boto3 no-checksum": lambda: boto3_client(checksums=False),
    "boto3 recforge-config": lambda: boto3_client(recforge_config=True),
    "obstore": obstore_client,
    "awscrt": awscrt_client,
    "awscrt full-object": lambda: awscrt_client(full_object=True),
}


def make_clients(wanted: list[str]) -> tuple[dict[str, Callable[[list[str]], None]], dict]:
    """Each wanted client as ``run(keys)`` (8 threads), and why any is skipped."""
    runners: dict[str, Callable[[list[str]], None]] = {}
    skipped: dict[str, str] = {}
    for name in wanted:
        if name == "recforge prefetch":
            runners[name] = prefetch_runner
            continue
        if name == "recforge urllib3":
            runners[name] = urllib3_runner()
            continue
        try:
            get = CLIENTS[name]()
        except ImportError as exc:
            skipped[name] = f"not installed ({exc.name})"
            continue

        def run(keys: list[str], get=get) -> None:
            with ThreadPoolExecutor(THREADS) as pool:
                for _ in pool.map(get, keys):
                    pass

        runners[name] = run
    return runners, skipped


def measure(run: Callable[[list[str]], None], keys: list[str], server: S3Server) -> dict:
    """One timed pass: this process's CPU, wall and the server's CPU."""
    served, spent, t0 = server.cpu(), time.process_time(), time.perf_counter()
    run(keys)
    wall, spent = time.perf_counter() - t0, time.process_time() - spent
    after = server.cpu()
    return {"cpu_s": spent, "wall_s": wall,
            "server_cpu_s": None if served is None or after is None else after - served}


def bench_server(server: S3Server, args) -> dict:
    """Every client at every size, ``args.repeat`` rounds, interleaved; medians."""
    os.environ.update(server.env)
    keys = populate(args.objects)
    runners, skipped = make_clients(args.clients)
    for run in runners.values():  # warm-up: connections, imports, credentials
        run(keys["2KB"][:64])
    got: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.repeat):
        for size, objects in keys.items():
            wanted = (objects * (args.gets // len(objects) + 1))[:args.gets]
            for name, run in runners.items():
                got.setdefault((size, name), []).append(measure(run, wanted, server))
    rows = []
    for (size, name), passes in got.items():
        med = {k: statistics.median(p[k] for p in passes) if all(
            p[k] is not None for p in passes) else None for k in passes[0]}
        rows.append({"server": server.kind, "size": size, "client": name,
                     "cpu_ms_per_get": round(1000 * med["cpu_s"] / args.gets, 4),
                     "wall_s": round(med["wall_s"], 3),
                     "gets_per_s": round(args.gets / med["wall_s"], 1),
                     "server_cpu_ms_per_get": None if med["server_cpu_s"] is None
                     else round(1000 * med["server_cpu_s"] / args.gets, 4)})
    for row in rows:
        base = next(r for r in rows if r["size"] == row["size"]
                    and r["client"] == BASELINE)
        row["cpu_x_botocore_path"] = round(row["cpu_ms_per_get"] / base["cpu_ms_per_get"], 3)
    return {"rows": rows, "skipped": skipped}


def markdown(rows: list[dict]) -> str:
    lines = ["| server | size | client | client CPU ms/GET | x recforge botocore | GETs/s | "
             "server CPU ms/GET |", "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        server = r["server_cpu_ms_per_get"]
        lines.append(f"| {r['server']} | {r['size']} | {r['client']} | "
                     f"{r['cpu_ms_per_get']:.3f} | {r['cpu_x_botocore_path']:.2f} | "
                     f"{r['gets_per_s']:.0f} | {'' if server is None else f'{server:.3f}'} |")
    return "\n".join(lines)


def one_server(kind: str, work: Path, args) -> dict | None:
    """The benchmark against one fresh server (``moto`` or ``rgw``); None where Ceph RGW
    cannot start here."""
    server = moto_server(work) if kind == "moto" else rgw_server(work)
    if isinstance(server, str):
        print(f"Ceph RGW did not start ({server}): skipped", file=sys.stderr)
        return None
    try:
        return bench_server(server, args)
    finally:
        server.stop()


def _probe_one(get: Callable[[str], object], key: str, wrapped: bool) -> dict:
    """One GET of ``key`` (under recforge's retry rule where ``wrapped``): what it gave or
    raised and whether recforge's rule counts that error as transient."""
    from recforge.storage import errors, retry

    try:
        got = retry.retrying(lambda: get(key), key, "get_object") if wrapped else get(key)
    except Exception as exc:  # noqa: BLE001 - what each client raises is the finding
        return {"raised": f"{type(exc).__module__}.{type(exc).__name__}",
                "message": str(exc)[:160],
                "transient_to_recforge": errors.is_transient(exc),
                "file_not_found": isinstance(exc, FileNotFoundError)}
    return {"bytes": len(bytes(got))}


def contract(args) -> dict:
    """Through a fault proxy (``tests.common.faultproxy``) in front of moto, per client:
    the requests one GET sends (method, ``x-amz-checksum-mode``), a 503 SlowDown on every
    request (one GET under recforge's rule: requests sent, what is raised), and a missing
    key (what is raised)."""
    sys.path.insert(0, str(REPO))
    from tests.common import faultproxy

    seen: list[tuple[str, str | None]] = []

    class Logged(faultproxy._Handler):
        def _log_then_handle(self) -> None:
            seen.append((self.command, self.headers.get("x-amz-checksum-mode")))
            self._handle()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _log_then_handle

    os.environ.update({"RECFORGE_S3_MAX_ATTEMPTS": "1", "RECFORGE_S3_BACKOFF_S": "0.01"})
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-s3-clients-") as tmp:
        server = moto_server(Path(tmp))
        try:
            os.environ.update(server.env)
            key = populate(1)["120KB"][0]
            for fault in (0.0, 1.0):
                with faultproxy.running_proxy(server.env["AWS_ENDPOINT_URL"], rate=fault,
                                              modes=("slowdown",)) as proxy:
                    proxy.RequestHandlerClass = Logged
                    os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
                    for name, make in CLIENTS.items():
                        if name not in args.clients:
                            continue
                        # storage.get_bytes runs under the rule already; the others get it
                        wrapped = not name.startswith("recforge")
                        try:
                            get = make()
                        except ImportError:
                            continue
                        row = out.setdefault(name, {})
                        del seen[:]
                        if fault:
                            row["slowdown_503"] = {**_probe_one(get, key, wrapped),
                                                   "requests": len(seen)}
                        else:
                            row["get"] = {**_probe_one(get, key, False),
                                          "requests": [m for m, _ in seen],
                                          "checksum_mode": sorted({c or "-" for _, c in seen})}
                            row["missing_key"] = _probe_one(get, "no/such.key", False)
                os.environ["AWS_ENDPOINT_URL"] = server.env["AWS_ENDPOINT_URL"]
        finally:
            server.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gets", type=int, default=3000, help="GETs per size per pass")
    ap.add_argument("--objects", type=int, default=500, help="objects per size (GETs cycle)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--servers", default="moto,rgw")
    ap.add_argument("--clients", type=lambda v: v.split(","),
                    default=["recforge", "recforge urllib3", "recforge botocore",
                             "recforge prefetch", "boto3",
                             "boto3 no-checksum",
                             "obstore", "awscrt", "awscrt full-object"])
    ap.add_argument("--json-out", help="write the JSON document here too")
    ap.add_argument("--contract", action="store_true",
                    help="instead: each client's requests, retries and errors through a fault "
                         "proxy (what recforge's storage contract needs of it)")
    args = ap.parse_args(argv)
    if args.contract:
        print(json.dumps(contract(args), indent=2))
        return 0
    doc: dict = {"gets": args.gets, "objects": args.objects, "repeat": args.repeat,
                 "threads": THREADS, "cores": os.cpu_count(), "servers": {}}
    for kind in args.servers.split(","):
        with tempfile.TemporaryDirectory(prefix="bench-s3-clients-") as tmp:
            got = one_server(kind, Path(tmp), args)
        if got:
            doc["servers"][kind] = got
    emit(markdown([r for got in doc["servers"].values() for r in got["rows"]]), doc,
         args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
