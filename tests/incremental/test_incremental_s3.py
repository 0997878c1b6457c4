"""Incremental builds through the real S3 protocol: the published bytes of an incremental
build equal a full build's, for every kind of change; a night with no change publishes
nothing; a cache object that does not verify is re-packed; prune keeps what versions use."""

from __future__ import annotations

import itertools
import logging

import cv2
import numpy as np
import pytest

from recforge import pipeline, releases, storage
from recforge.run import cache_uri
from tests.common import mxnet_readers
from tests.common.helpers import jpeg
from tests.common.sources import make_source, make_spec

pytestmark = pytest.mark.pipeline  # two to ten whole builds a test: a slow tier

PUBLISHED = [f"{s}.{ext}" for s in ("train", "val") for ext in ("rec", "idx", "lst")] + [
    "records.jsonl", "quarantine.jsonl"]


def _put(bucket: str, key: str, data: bytes) -> None:
    storage.s3_client().put_object(Bucket=bucket, Key=f"raw/{key}", Body=data)


def _files(uri: str) -> dict[str, bytes]:
    """The published bytes that must match (classes.json differs only in based_on_version)."""
    files = {name: storage.get_bytes(f"{uri}/{name}") for name in PUBLISHED}
    return {**files, "classes": storage.read_json(f"{uri}/classes.json")["ids"]}


def _packed(result: dict) -> tuple[int, int]:
    """(chunks packed, chunks in all) over the run's shards (a reused shard packs none)."""
    shards = result["pack"]
    return (sum(s.get("chunks_packed", 0) for s in shards),
            sum(s.get("chunks", 0) for s in shards))


def _full_build(spec, run_id: str) -> dict:
    """The same build with an empty cache: every image fetched, decoded and packed again."""
    storage.delete_prefix(cache_uri(spec))
    result = pipeline.build(spec, run_id=run_id, workers=1, force_rebuild=True)
    packed, total = _packed(result)
    assert packed == total > 0
    return result


def test_incremental_output_equals_a_full_build_for_every_change(bucket):
    make_source(bucket, per_class=16)
    spec = make_spec(bucket, pack={"resize": 40, "shard_size": 12})
    first = pipeline.build(spec, run_id="base", workers=1)
    assert f"-{first['split']['content_id'][:12]}-" in first["publish"]["version"]

    steps = {
        "additions": lambda: [_put(bucket, f"dog/new/{i}.jpg", jpeg(64, 80 + i, seed=900 + i))
                              for i in range(3)],
        "deletions": lambda: [storage.s3_client().delete_object(Bucket=bucket, Key=f"raw/{k}")
                              for k in ("eel/5.jpg", "cat/a/b/2.jpg")],
        "changed bytes": lambda: _put(bucket, "dog/3.jpg", jpeg(70, 90, seed=4242)),
        "a new class": lambda: [_put(bucket, f"ant/{i}.jpg", jpeg(66, 88 + 3 * i, seed=700 + i))
                                for i in range(4)],
    }
    spec_now = spec
    for n, (name, change) in enumerate(steps.items()):
        change()
        inc = pipeline.build(spec_now, run_id=f"inc{n}", workers=1)
        packed, total = _packed(inc)
        assert 0 < packed < total, f"{name}: {packed} of {total} chunks re-packed"
        full = _full_build(spec_now, f"full{n}")
        assert _files(inc["publish"]["uri"]) == _files(full["publish"]["uri"]), name

    changes = storage.read_json(f"{inc['publish']['uri']}/summary.json")["changes"]
    assert changes["classes"]["added"] == ["ant"] and changes["objects"]["added"]["count"] == 4

    # a changed pack option invalidates every shard: all re-packed, same bytes as a full build
    spec_now = spec.with_overrides({"pack.quality": 80})
    inc = pipeline.build(spec_now, run_id="quality", workers=1)
    packed, total = _packed(inc)
    assert packed == total
    full = _full_build(spec_now, "quality-full")
    assert _files(inc["publish"]["uri"]) == _files(full["publish"]["uri"])


def test_no_change_publishes_nothing_unless_forced(bucket):
    make_source(bucket, classes=("dog", "eel"), per_class=8)
    spec = make_spec(bucket)
    first = pipeline.build(spec, run_id="n1", workers=1)["publish"]
    latest = storage.read_json(releases.latest_uri(spec))
    again = pipeline.build(spec, run_id="n2", workers=1)
    assert again["no_change"] and again["publish"] is None and "pack" not in again
    assert storage.read_json(releases.latest_uri(spec)) == latest
    assert not storage.exists(f"{again['staging']}/out/summary.json")
    forced = pipeline.build(spec, run_id="n3", workers=1, force_rebuild=True)
    assert forced["publish"]["version"] != first["version"]
    assert all(s.get("reused") for s in forced["pack"])  # every shard copied from the cache
    assert _files(forced["publish"]["uri"]) == _files(first["uri"])
    manifest = storage.read_json(f"{forced['publish']['uri']}/manifest.json")
    assert manifest["content_id"] == forced["split"]["content_id"] == again["split"]["content_id"]
    # the loader would read the same bytes: the forced version reuses the first's benchmark
    bench = storage.read_json(f"{forced['publish']['uri']}/bench.json")
    assert (bench.get("reused_from") or {}).get("dataset_version") == first["version"]
    # known unchanged from merge's record of the split: its window was not even fetched
    sample = bench["dataset"]["sample"]
    assert sample["fetched"] is False and sample["split_identity"]
    first_bench = storage.read_json(f"{first['uri']}/bench.json")
    assert sample["split_identity"] == first_bench["dataset"]["sample"]["split_identity"]
    assert sample["sha256"] == first_bench["dataset"]["sample"]["sha256"]


def test_a_cache_object_that_does_not_verify_is_repacked(bucket, caplog):
    make_source(bucket, classes=("dog", "eel"), per_class=8)
    spec = make_spec(bucket)
    first = pipeline.build(spec, run_id="c1", workers=1)["publish"]
    root = cache_uri(spec)
    parts = [o.key for o in storage.list_objects(root) if o.key.endswith("/part.rec")]
    empty = 0  # chunks of quarantined images only: no bytes to flip
    for part in parts:  # one byte flipped in every chunk's bytes: no ETag, no SHA-256 matches
        entry = storage.read_json(f"{root}/{part.rsplit('/', 1)[0]}/entry.json")
        blob = bytearray(storage.get_bytes(f"{root}/{part}"))
        for c in entry["chunks"]:
            if c["length"]:
                blob[c["start"] + c["length"] // 2] ^= 0xFF
            empty += not c["length"]
        storage.put_bytes(f"{root}/{part}", bytes(blob))
    with caplog.at_level(logging.INFO):
        forced = pipeline.build(spec, run_id="c2", workers=1, force_rebuild=True)
    assert "does not verify" in caplog.text and "is corrupt" in caplog.text
    packed, total = _packed(forced)
    assert packed == total - empty > 0  # no flipped chunk was used
    assert _files(forced["publish"]["uri"]) == _files(first["uri"])


def test_a_changed_shard_reads_unchanged_chunks_in_few_ranged_gets(bucket, caplog):
    make_source(bucket, classes=("dog", "eel"), per_class=12)
    spec = make_spec(bucket, pack={"resize": 40, "shard_size": 12})
    pipeline.build(spec, run_id="r1", workers=1)
    _put(bucket, "dog/3.jpg", jpeg(70, 90, seed=4242))  # one image changed
    caplog.clear()  # only the second build's reads (the first may be captured too)
    with caplog.at_level(logging.INFO, logger="recforge.incremental.cache"):
        inc = pipeline.build(spec, run_id="r2", workers=1)
    changed = [s for s in inc["pack"] if not s.get("reused")]
    assert len(changed) == 1 and changed[0]["chunks_packed"] == 1 < changed[0]["chunks"]
    reads = [r.getMessage() for r in caplog.records if "ranged reads" in r.getMessage()]
    assert reads == [f"cache: {changed[0]['chunks'] - 1} chunks in 1 ranged reads"]


def test_prune_keeps_what_the_last_versions_use(bucket, capsys):
    from recforge.cli import main

    make_source(bucket, classes=("dog", "eel"), per_class=8)
    spec = make_spec(bucket)
    v1 = pipeline.build(spec, run_id="p1", workers=1)["publish"]
    _put(bucket, "dog/extra.jpg", jpeg(60, 90, seed=7))
    v2 = pipeline.build(spec, run_id="p2", workers=1)["publish"]
    from recforge.incremental import cache

    before = cache.prune(spec, keep_versions=2, dry_run=True)
    assert before["deleted"] == 0
    young = cache.prune(spec, keep_versions=1)  # entries written in the last 48 h stay
    assert young["deleted"] == 0 and young["kept"] == before["entries"]
    after = cache.prune(spec, keep_versions=1, min_age_hours=0)
    assert after["deleted"] > 0 and after["versions"] == [v2["version"]]
    used = set(storage.read_json(f"{v2['uri']}/cache_keys.json")["entries"])
    left = {"/".join(o.key.split("/")[:2]) for o in storage.list_objects(cache_uri(spec))}
    assert left <= used
    for v in (v1, v2):  # published versions are copies: both still read
        assert len(mxnet_readers.read("indexed", **dict(zip(("idx", "rec"),
                                                            _local(v["uri"], "train"),
                                                            strict=True)))["keys"]) > 0
    forced = pipeline.build(spec, run_id="p3", workers=1, force_rebuild=True)
    assert all(s.get("reused") for s in forced["pack"])  # the kept entries still serve
    with pytest.raises(SystemExit):
        main(["cache", "prune"])


def _local(uri: str, split: str) -> tuple[str, str]:
    import tempfile

    d = tempfile.mkdtemp()
    for ext in ("idx", "rec"):
        storage.download(f"{uri}/{split}.{ext}", f"{d}/{split}.{ext}")
    return f"{d}/{split}.idx", f"{d}/{split}.rec"


def test_mxnet_readers_take_63_bit_keys_in_key_order(bucket, tmp_path):
    make_source(bucket, classes=("dog", "eel"), per_class=12)
    spec = make_spec(bucket)
    uri = pipeline.build(spec, run_id="k1", workers=1)["publish"]["uri"]
    idx, rec = _local(uri, "train")
    records = sorted((r for r in storage.read_jsonl(f"{uri}/records.jsonl")
                      if r["split"] == "train"), key=lambda r: r["key"])
    keys = [r["key"] for r in records]
    assert max(keys) > 2**40 and all(k < 2**63 for k in keys)
    assert [int(ln.split("\t")[0]) for ln in open(idx)] == keys  # .idx follows the keys
    lst = storage.get_bytes(f"{uri}/train.lst").decode().splitlines()
    assert [int(ln.split("\t")[0]) for ln in lst] == keys

    indexed = mxnet_readers.read("indexed", idx=idx, rec=rec)
    assert indexed["keys"] == keys
    last = indexed["records"][-1]
    assert last["id"] == keys[-1] and last["label"] == records[-1]["label"]
    dataset = mxnet_readers.read("gluon_dataset", rec=rec)
    assert dataset == {"length": len(keys), "first_label": records[0]["label"]}
    for shuffle in (False, True):
        labels = [int(x) for x in mxnet_readers.read(
            "iter_labels", rec=rec, idx=idx, data_shape=[3, 32, 32], shuffle=shuffle, seed=3)]
        assert len(labels) == len(keys)
        want = [int(r["label"]) for r in records]
        assert labels == want if not shuffle else sorted(labels) == sorted(want)


def test_a_previous_shard_that_is_gone_is_repacked_from_the_source(bucket, caplog):
    make_source(bucket, classes=("dog", "eel"), per_class=12)
    spec = make_spec(bucket, pack={"resize": 40, "shard_size": 12})
    pipeline.build(spec, run_id="g1", workers=1)
    storage.delete_prefix(cache_uri(spec))  # pruned (or lost) under the next night
    _put(bucket, "dog/3.jpg", jpeg(70, 90, seed=4242))
    with caplog.at_level(logging.INFO, logger="recforge.incremental.cache"):
        inc = pipeline.build(spec, run_id="g2", workers=1)
    assert "unreadable" in caplog.text
    packed, total = _packed(inc)
    assert packed == total > 0  # every chunk packed again, none lost
    full = _full_build(spec, "g-full")
    assert _files(inc["publish"]["uri"]) == _files(full["publish"]["uri"])


def _noise(seed: int, side: int = 1024) -> bytes:
    """A photo-sized JPEG that does not compress: ~1.2 MB as a record at q95."""
    img = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()


@pytest.mark.both_stores
def test_a_rewritten_shard_copies_its_long_unchanged_runs_on_the_store(bucket):
    """One photo replaced in the middle of a ~20 MB shard leaves runs of more than 5 MiB on
    both sides: the shard's upload copies them server-side instead of sending them again,
    and the published bytes are a full build's."""
    for c, cls in enumerate(("dog", "eel")):
        for i in range(16):
            _put(bucket, f"{cls}/{i}.jpg", _noise(100 * c + i))
    spec = make_spec(bucket, pack={"resize": 0, "shard_size": 32})
    first = pipeline.build(spec, run_id="s1", workers=1)
    train = sorted((r for r in storage.read_jsonl(f"{first['publish']['uri']}/records.jsonl")
                    if r["split"] == "train"), key=lambda r: r["key"])
    shards = sorted((s["shard"], s["packed"]) for s in first["pack"]
                    if s["shard"].startswith("train"))
    at = [0, *itertools.accumulate(n for _, n in shards)]
    big = max(range(len(shards)), key=lambda i: shards[i][1])
    mine = train[at[big]:at[big + 1]]  # the largest shard's records, in its order
    assert sum(r["length"] for r in mine) > 4 * storage.MIN_PART
    ends = list(itertools.accumulate(r["length"] for r in mine))
    middle = next(r for r, end in zip(mine, ends, strict=True) if end >= ends[-1] / 2)
    _put(bucket, middle["source_key"], _noise(4242))
    inc = pipeline.build(spec, run_id="s2", workers=1)
    changed = [s for s in inc["pack"] if not s.get("reused")]
    assert len(changed) == 1 and changed[0]["chunks_packed"] == 1
    assert changed[0]["s3_requests"].get("upload_part_copy", 0) == 2  # a run on each side
    assert changed[0]["s3_bytes"]["up"] < sum(r["length"] for r in mine) / 2
    full = _full_build(spec, "s-full")
    assert _files(inc["publish"]["uri"]) == _files(full["publish"]["uri"])
