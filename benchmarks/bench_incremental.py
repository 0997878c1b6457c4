"""Incremental nightly rebuilds: a full build, then a no-change night, the same night with
``--force-rebuild``, 1 % changed, 1 % added and 1 % removed, each one ``recforge build`` (the
CLI, a fresh process: the same code path as any night) against the local S3 server
(``recforge.dev.s3server``). The forced night packs and measures nothing (every shard and
the loader benchmark are reused), so its time is what publishing a verified version costs
at all: the least any night that publishes can cost.

The dataset is ``recforge.dev.sampledata`` (crops, flips, rotations and colour jitter of the
photos scikit-image ships, short sides 180-720 px, JPEG and PNG, nested class folders, a
few bad objects): 14 classes x ``--per-class`` images (default 360: 5,040 images). The
changes are spread at random over the dataset. Prints each night's wall time and its ratio
to the full build, and how many chunks each night packed; after each night that published,
its **S3 floor** (``floor_of_night``): the S3 work any build of that night must do, timed on
the same server — list the source, write each split as one object (unchanged runs of
>= 5 MiB copied server-side from the previous version, the rest sent), read the loader
window — so the night can be compared with what the storage itself requires; and each
night's CPU seconds, recforge's and the S3 server's on the same cores (``cpu``), whose sum
over the core count is the least wall time those cores allow for that work.

    PYTHONPATH=include python benchmarks/bench_incremental.py                  # ~4 min on 2 cores
    PYTHONPATH=include python benchmarks/bench_incremental.py --per-class 1440 # 20,160: ~14 min
    PYTHONPATH=include python benchmarks/bench_incremental.py --per-class 40   # a quick look
    PYTHONPATH=include python benchmarks/bench_incremental.py --store rgw      # Ceph RGW

``--store rgw`` runs the nights against a throwaway Ceph RADOS Gateway (``tests.common.rgw``,
C++, as the test tiers use it) instead of moto, whose one Python process serves every
request and copies every composed byte itself: a fairer stand-in for S3's server-side work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))

from recforge import storage  # noqa: E402
from recforge.dev import s3server, sampledata  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
import cpu  # noqa: E402

BUCKET = "bench-incremental"
TARGETS = {"no change": 0.05, "same, forced": 0.15, "1 % changed": 0.25}
FORCED = "same, forced"  # the no-change night again with --force-rebuild
MIN_PART = 5 * 1024 ** 2  # S3's smallest part but the last: a shorter run cannot be copied
FLOOR_PART = 16 * 1024 ** 2


def spec_doc(shard_size: int, resize: int = 256) -> dict:
    return {
        "name": "bench", "schedule": None,
        "source": {"uri": f"s3://{BUCKET}/raw"},
        "publish": {"uri": f"s3://{BUCKET}/datasets"},
        "splits": {"val_ratio": 0.1, "seed": 7},
        "pack": {"resize": resize, "quality": 95, "shard_size": shard_size},
        "bench": {"options": {"batch_size": 32, "data_shape": [3, 224, 224],
                              "measure_batches": 10, "thread_grid": []},
                  "floors": {"cpu": {"min_images_per_sec": 1}}},
        # the samples are crops of one photo per class: near-duplicates across splits
        "quality": {"severity": {"near_duplicates": "warn"}},
    }


def _generate_part(args: tuple[int, int]) -> dict[str, bytes]:
    n, part = args
    objects = sampledata.generate(n, seed=part)
    if part == 0:
        return objects
    # later parts: their own folder per class, and no second copy of the bad objects
    return {f"{k.split('/', 1)[0]}/part{part}/{k.split('/', 1)[1]}": v
            for k, v in objects.items() if "/" in k and k not in sampledata.BAD_OBJECTS}


def generate(per_class: int, workers: int) -> dict[str, bytes]:
    """The sample dataset, ``per_class`` images per class, generated in ``workers``
    processes (each part its own seed and sub-folder): the same kind of photos, faster."""
    parts = max(1, min(workers, per_class // 40))
    sizes = [per_class // parts + (i < per_class % parts) for i in range(parts)]
    with ProcessPoolExecutor(parts) as pool:
        out: dict[str, bytes] = {}
        for objects in pool.map(_generate_part, zip(sizes, range(parts), strict=True)):
            out.update(objects)
    return out


def build(spec: Path, env: dict, workers: int, *flags: str) -> tuple[cpu.Spent, dict]:
    out, spent = cpu.run([sys.executable, "-m", "recforge.cli", "build", str(spec), "--json",
                          "--workers", str(workers), *flags], env=env, capture_output=True,
                         text=True)
    if out.returncode:
        raise SystemExit(f"recforge build failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout[out.stdout.index("\n{") + 1:])
    return spent, result


def packed_chunks(result: dict) -> str:
    if result.get("no_change"):
        return "no shard planned"
    shards = result["pack"]
    packed = sum(s.get("chunks_packed", 0) for s in shards)
    total = sum(s.get("chunks", 0) for s in shards)
    reused = sum(1 for s in shards if s.get("reused"))
    copies = sum(s.get("s3_requests", {}).get("upload_part_copy", 0) for s in shards)
    sent = sum(s.get("s3_bytes", {}).get("up", 0) for s in shards)
    return (f"{packed}/{total} chunks packed, {reused}/{len(shards)} shards reused whole"
            + (f", pack sent {sent / 1e6:.0f} MB" if sent else "")
            + (f" ({copies} parts copied on the store instead)" if copies else ""))


def _split_runs(new_rows: list[dict], old_index: dict) -> tuple[int, int]:
    """``(bytes, bytes that must be sent)`` of one split written as one object: a run of
    unchanged records that were neighbours in the previous version's split too is what the
    store could copy server-side, and S3's part rules decide how much of it can be
    (``storage.plan_reusing``: every part but the last at least ``MIN_PART``, the parts
    sent between copies too); the rest must be sent."""
    runs: list[storage.Reusable] = []
    total = 0
    prev = None
    for r in sorted(new_rows, key=lambda r: r["offset"]):
        end = r["offset"] + r["length"]
        total = max(total, end)
        old = old_index.get((r["key"], r["source_key"], r["source_etag"]))
        if old is not None and prev is not None and old[0] == prev + 1:
            runs[-1] = runs[-1]._replace(length=end - runs[-1].start)
        elif old is not None:
            runs.append(storage.Reusable(r["offset"], r["length"], "previous", old[1], ""))
        prev = None if old is None else old[0]
    pieces = storage.plan_reusing(total, runs)
    return total, (sum(p[2] for p in pieces if p[0] == "send") if pieces else total)


def write_plan(upload: int, copied: int, piece: int = FLOOR_PART) -> list[tuple[str, int]]:
    """The parts of one split object, ``("put" | "copy", size)``: ``upload`` bytes sent and
    ``copied`` bytes copied, in parts of ``piece``. Only the last part may be under
    ``MIN_PART`` (S3's rule), so the shorter remainder goes last, and two short remainders
    are sent as one (a few MiB more than the floor, and only where both are short)."""
    full_puts, put_rest = divmod(upload, piece)
    full_copies, copy_rest = divmod(copied, piece)
    plan = [("put", piece)] * full_puts + [("copy", piece)] * full_copies
    rest = sorted(((n, k) for k, n in (("put", put_rest), ("copy", copy_rest)) if n),
                  reverse=True)
    if len(rest) == 2 and rest[0][0] < MIN_PART:
        rest = [(put_rest + copy_rest, "put")]
    return plan + [(k, n) for n, k in rest]


def floor_of_night(old_version: str, new_version: str, source: str) -> dict:
    """What any build of this night must do on S3, whatever the packer, timed on the same
    server: list the source; write each split as one object (MXNet reads one ``.rec``),
    copying unchanged runs server-side from the previous version where S3's part rules let
    them be parts (``_split_runs``) and sending the rest; read the loader benchmark's
    window. No decoding, no checks, no publish copy."""
    def rows(version: str) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for r in storage.iter_jsonl(storage.join(version, "records.jsonl")):
            out.setdefault(r["split"], []).append(r)
        return out

    old, new = rows(old_version), rows(new_version)
    total = upload = 0
    for split, new_rows in new.items():
        ordered = sorted(old.get(split, []), key=lambda r: r["offset"])
        index = {(r["key"], r["source_key"], r["source_etag"]): (i, r["offset"])
                 for i, r in enumerate(ordered)}
        t, u = _split_runs(new_rows, index)
        total, upload = total + t, upload + u
    window = storage.read_json(storage.join(new_version, "bench.json"))["dataset"]["sample"]
    client, scratch = storage.s3_client(), "floor"
    timings = {}
    t0 = time.perf_counter()
    listed = sum(1 for _ in storage.list_objects(source))
    timings["list"] = time.perf_counter() - t0
    blob = os.urandom(FLOOR_PART)
    t0 = time.perf_counter()
    up = client.create_multipart_upload(Bucket=BUCKET, Key=f"{scratch}/split")["UploadId"]
    src_bucket, src_key = storage.split_s3(storage.join(old_version, "train.rec"))
    src_size = storage.head(f"s3://{src_bucket}/{src_key}").size
    piece = min(FLOOR_PART, src_size)  # a copied part is a range of the previous train.rec

    def part(i_kind_n):
        i, kind, n = i_kind_n
        if kind == "put":
            etag = client.upload_part(Bucket=BUCKET, Key=f"{scratch}/split", UploadId=up,
                                      PartNumber=i, Body=blob[:n])["ETag"]
        else:
            start = (i * piece) % max(1, src_size - n + 1)
            etag = client.upload_part_copy(
                Bucket=BUCKET, Key=f"{scratch}/split", UploadId=up, PartNumber=i,
                CopySource={"Bucket": src_bucket, "Key": src_key},
                CopySourceRange=f"bytes={start}-{start + n - 1}")["CopyPartResult"]["ETag"]
        return {"PartNumber": i, "ETag": etag}

    plan = write_plan(upload, total - upload, piece)
    with ThreadPoolExecutor(8) as pool:
        parts = list(pool.map(part, [(i + 1, k, n) for i, (k, n) in enumerate(plan)]))
    if parts:
        client.complete_multipart_upload(Bucket=BUCKET, Key=f"{scratch}/split", UploadId=up,
                                         MultipartUpload={"Parts": parts})
    timings["write"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rec = storage.join(new_version, "train.rec")
    spans = list(range(0, window["bytes"], FLOOR_PART))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda a: storage.get_range(rec, a, min(FLOOR_PART, window["bytes"] - a)),
                      spans))
    timings["window"] = time.perf_counter() - t0
    storage.delete_prefix(f"s3://{BUCKET}/{scratch}")
    return {"seconds": sum(timings.values()),
            **{f"{k}_s": round(v, 1) for k, v in timings.items()},
            "listed": listed, "bytes": total, "upload": upload, "window": window["bytes"]}


@contextlib.contextmanager
def store(kind: str):
    """The S3 environment (endpoint, credentials) of a local server for the block."""
    if kind == "moto":
        with s3server.running_server() as endpoint:
            yield {"AWS_ENDPOINT_URL": endpoint, **s3server.DEV_CREDENTIALS}
        return
    sys.path.insert(0, str(REPO))
    from tests.common import rgw

    with tempfile.TemporaryDirectory(prefix="recforge-rgw-") as d, \
            rgw.running_rgw(Path(d) / "rgw") as server:
        yield server.env()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-class", type=int, default=360, help="images per class (14 classes)")
    ap.add_argument("--shard-size", type=int, default=500)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--fraction", type=float, default=0.01)
    ap.add_argument("--resize", type=int, default=256,
                    help="pack.resize (0 keeps the photos' sizes: ~3x larger records)")
    ap.add_argument("--store", choices=("moto", "rgw"), default="moto",
                    help="the local S3 server: moto (recforge dev-s3) or Ceph RGW")
    ap.add_argument("--no-floor", action="store_true",
                    help="skip timing each night's S3 floor (what any build must move)")
    args = ap.parse_args()

    rng = random.Random(12)
    with store(args.store) as s3_env, tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, **s3_env, "PYTHONPATH": str(REPO / "include")}
        os.environ.update(s3_env)
        print(f"S3 server: {args.store} at {s3_env['AWS_ENDPOINT_URL']}")
        storage.ensure_bucket(f"s3://{BUCKET}")
        objects = generate(args.per_class, args.workers)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda kv: storage.put_bytes(f"s3://{BUCKET}/raw/{kv[0]}", kv[1]),
                          objects.items()))
        n = len(objects)
        spec = Path(tmp) / "bench.yaml"
        spec.write_text(yaml.safe_dump(spec_doc(args.shard_size, args.resize)))
        images = sorted(k for k in objects
                        if k.endswith((".jpg", ".png")) and k not in sampledata.BAD_OBJECTS)
        del objects
        k = max(1, round(args.fraction * len(images)))
        extra = sampledata.generate(max(1, -(-3 * k // len(sampledata.CLASSES))), seed=99)
        extra = [(key, data) for key, data in extra.items() if key.endswith(".jpg")
                 and key not in sampledata.BAD_OBJECTS and data]
        replacements, additions = extra[:k], extra[k:2 * k]  # distinct photos each
        print(f"{n} objects ({len(images)} images), {args.workers} pack workers, changes of "
              f"{k} images ({args.fraction:.0%})")

        def put(key: str, data: bytes) -> None:
            storage.put_bytes(f"s3://{BUCKET}/raw/{key}", data)

        nights = {
            "full build": lambda: None,
            "no change": lambda: None,
            # nothing to pack or measure: what publishing a verified version costs at all
            FORCED: lambda: None,
            "1 % changed": lambda: [put(key, data) for key, (_, data) in zip(
                rng.sample(images, k), replacements, strict=True)],
            "1 % added": lambda: [put(f"{key.split('/')[0]}/added/{i}.jpg", data)
                                  for i, (key, data) in enumerate(additions)],
            "1 % removed": lambda: [storage.s3_client().delete_object(
                Bucket=BUCKET, Key=f"raw/{key}") for key in rng.sample(images, k)],
        }
        full, latest = None, None
        for name, change in nights.items():
            change()
            spent, result = build(spec, env, args.workers,
                                  *(["--force-rebuild"] if name == FORCED else []))
            wall = spent.wall
            full = full or wall
            target = TARGETS.get(name)
            verdict = "" if target is None else (
                f"  target <= {target:.0%}: {'met' if wall / full <= target else 'MISSED'}")
            print(f"{name:<12} {wall:7.1f} s  {wall / full:6.1%} of full  "
                  f"{packed_chunks(result)}{verdict}", flush=True)
            print(f"             CPU: recforge {spent.cpu:.1f} s, the S3 server "
                  f"{spent.others if spent.others is not None else float('nan'):.1f} s; "
                  f"floor on {os.cpu_count()} cores {spent.floor():.1f} s = "
                  f"{spent.floor() / full:.1%} of full", flush=True)
            print("             stages: " + ", ".join(
                f"{stage} {s:.1f} s" for stage, s in result.get("seconds", {}).items()),
                flush=True)
            published = (result.get("publish") or {}).get("uri")
            if latest and published and not args.no_floor:
                f = floor_of_night(latest, published, f"s3://{BUCKET}/raw")
                print(f"             floor: {f['seconds']:.1f} s = {f['seconds'] / full:.1%} "
                      f"of full (list {f['listed']} keys {f['list_s']} s; write "
                      f"{f['bytes'] / 1e6:.0f} MB of splits, {f['upload'] / 1e6:.0f} MB of it "
                      f"sent, {f['write_s']} s; read the {f['window'] / 1e6:.0f} MB loader "
                      f"window {f['window_s']} s)", flush=True)
            latest = published or latest
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
