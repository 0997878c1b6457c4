"""Merge composes each split's .rec on the S3 server: no .rec byte passes through the task
(or only the small shards' bytes), and the result is byte-identical to the plain local
concatenation, which MXNet reads record by record."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pytest

from recforge import run_state, storage
from recforge.errors import ValidationFailed
from recforge.format import names, recordio
from recforge.run import Run
from recforge.spec import parse_spec
from recforge.stages import merge, pack, validate
from tests.common import mxnet_readers

pytestmark = pytest.mark.both_stores  # each test against moto and Ceph RGW

MiB = 1 << 20
RECORD = 256 * 1024  # payload bytes of one record


def _spec(bucket: str):
    return parse_spec({"name": "big", "source": {"uri": f"s3://{bucket}/raw"},
                       "publish": {"uri": f"s3://{bucket}/datasets"}})


def _write_shard(work, first_key: int, n: int, split: str, seed: int) -> list[str]:
    """A shard of ``n`` random-payload records; returns the source keys it stands for."""
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    part = names.SHARD_PART
    rows = []
    with recordio.RecordWriter(work / names.rec(part), work / names.idx(part)) as w, \
            open(work / names.lst(part), "w") as lst:
        for key in range(first_key, first_key + n):
            payload = recordio.pack_image_record(key % 3, key, rng.bytes(RECORD))
            offset = w.write(key, payload)
            lst.write(names.lst_line(key, key % 3, f"c/{key}.jpg"))
            rows.append({"key": key, "split": split, "offset": offset, "length": len(payload),
                         "label": key % 3, "source_key": f"c/{key}.jpg"})
    (work / names.RECORDS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / names.QUARANTINE).write_bytes(b"")
    return [r["source_key"] for r in rows]


def _staged_run(bucket, tmp_path, shard_records: list[int]) -> tuple[Run, list]:
    """A run whose pack tasks have written shards of these record counts (train split)."""
    run = Run(_spec(bucket), "compose")
    storage.write_json(run.classes, {"num_classes": 3, "classes": ["a", "b", "c"]})
    for stage in ("ingest", "flatten"):
        storage.put_bytes(run.stage_quarantine(stage), b"")
    ids, listed, dirs, key = [], [], [], 0
    for i, n in enumerate(shard_records):
        sid = f"train-{i:05d}"
        work = tmp_path / sid
        listed += _write_shard(work, key, n, "train", seed=i)
        pack.upload_shard(run, sid, work, masks=False)
        ids.append(sid)
        dirs.append(work)
        key += n
    storage.write_json(run.shard_list, {"shards": ids})
    storage.write_jsonl(run.source_manifest, [{"key": k} for k in listed])
    return run, dirs


def _concat_locally(dirs, tmp_path):
    part = names.SHARD_PART
    out = tmp_path / "expected"
    out.mkdir()
    recordio.concat_indexed([(d / names.rec(part), d / names.idx(part)) for d in dirs],
                            out / "train.rec", out / "train.idx")
    return out


@pytest.mark.mxnet  # MXNet's reader over the composed files
def test_composed_merge_downloads_no_rec_bytes(bucket, tmp_path):
    run, dirs = _staged_run(bucket, tmp_path, [22, 21, 23, 5])  # ~5.5, 5.3, 5.8, 1.3 MiB
    assert all((d / "part.rec").stat().st_size >= storage.MIN_PART for d in dirs[:3])
    before = storage.transferred()
    result = merge.merge(run)
    moved = storage.transferred().minus(before)
    assert moved.down_by_suffix.get(".rec", 0) == 0 and result["transfer"]["down_rec"] == 0
    rec_bytes = sum((d / "part.rec").stat().st_size for d in dirs)
    assert moved.up < rec_bytes / 10  # only the small files went up
    assert result["splits"] == {"train": 71} and result["packed"] == 71

    expected = _concat_locally(dirs, tmp_path)
    got = tmp_path / "got"
    for name in ("train.rec", "train.idx", "train.lst"):
        storage.download(run_state.output(run, name), got / name)
    storage.download(run.checksums("merge"), got / names.CHECKSUMS)
    assert (got / "train.rec").read_bytes() == (expected / "train.rec").read_bytes()
    assert (got / "train.idx").read_bytes() == (expected / "train.idx").read_bytes()

    read = mxnet_readers.read("indexed", idx=str(got / "train.idx"), rec=str(got / "train.rec"))
    assert sorted(read["keys"]) == list(range(71))
    for r in read["records"]:
        assert r["id"] == r["key"] and r["label"] == r["key"] % 3 and r["body_bytes"] == RECORD

    sums = json.loads((got / names.CHECKSUMS).read_text())["files"]
    data = (got / "train.rec").read_bytes()
    start = 0
    for piece, d in zip(sums["train.rec"]["parts"], dirs, strict=True):
        chunk = data[start:start + piece["size"]]
        assert hashlib.sha256(chunk).hexdigest() == piece["sha256"]
        assert chunk == (d / "part.rec").read_bytes()
        start += piece["size"]
    assert start == sums["train.rec"]["size"] == len(data)
    for name in ("train.idx", "train.lst"):
        assert sums[name] == storage.file_digest(got / name)
    listed = {o.key for o in storage.list_objects(run_state.out(run))}
    assert set(sums) == listed - {names.CLAIM}  # merge composed into its claimed version

    assert validate.validate(run)["checked"] == "composition"


def test_small_shards_are_grouped_and_only_their_bytes_move(bucket, tmp_path):
    # 3 + 3 MiB form one uploaded piece; the 6 MiB shard and the last (1 MiB) are copied
    run, dirs = _staged_run(bucket, tmp_path, [12, 12, 24, 4])
    sizes = [(d / "part.rec").stat().st_size for d in dirs]
    assert [p[0] for p in storage.plan_compose(sizes)] == ["upload", "copy", "copy"]
    before = storage.transferred()
    merge.merge(run)
    moved = storage.transferred().minus(before)
    assert moved.down_by_suffix[".rec"] == sizes[0] + sizes[1]
    expected = _concat_locally(dirs, tmp_path)
    assert storage.get_bytes(run_state.output(run, "train.rec")) == \
        (expected / "train.rec").read_bytes()
    assert validate.validate(run)["ok"]


def test_a_small_split_is_concatenated(bucket, tmp_path):
    run, dirs = _staged_run(bucket, tmp_path, [2, 3])
    merge.merge(run)
    expected = _concat_locally(dirs, tmp_path)
    assert storage.get_bytes(run_state.output(run, "train.rec")) == \
        (expected / "train.rec").read_bytes()
    assert storage.get_bytes(run_state.output(run, "train.idx")) == \
        (expected / "train.idx").read_bytes()
    assert validate.validate(run)["ok"]


def test_validate_catches_a_bad_composition(bucket, tmp_path):
    run, _ = _staged_run(bucket, tmp_path, [3, 4])
    merge.merge(run)
    good_idx = storage.get_bytes(run_state.output(run, "train.idx"))
    lines = good_idx.decode().splitlines()
    key, off = lines[3].split("\t")  # the first record of the second shard
    lines[3] = f"{key}\t{int(off) + 8}"
    storage.put_bytes(run_state.output(run, "train.idx"), ("\n".join(lines) + "\n").encode())
    with pytest.raises(ValidationFailed, match="part boundaries"):
        validate.validate(run)
    storage.put_bytes(run_state.output(run, "train.idx"), good_idx)
    rec = storage.get_bytes(run_state.output(run, "train.rec"))
    storage.put_bytes(run_state.output(run, "train.rec"), rec[:-4])
    with pytest.raises(ValidationFailed, match="train.rec is .* its parts sum to"):
        validate.validate(run)


def test_a_shard_that_fails_its_own_check_is_never_uploaded(bucket, tmp_path):
    run = Run(_spec(bucket), "bad")
    storage.write_json(run.classes, {"num_classes": 3})
    work = tmp_path / "s"
    _write_shard(work, 0, 3, "train", seed=0)
    with open(work / "part.rec", "ab") as f:
        f.write(b"junk")
    with pytest.raises(ValidationFailed, match="shard train-00000 failed .*trailing"):
        pack.upload_shard(run, "train-00000", work, masks=False)
    assert not list(storage.list_objects(run.shard_output("train-00000", "")))


@pytest.mark.parametrize("sizes, kinds", [
    ([6 * MiB, 6 * MiB, 1], ["copy", "copy", "copy"]),  # the last part may be small
    ([1, 2, 3], ["upload"]),  # a small run before the last part takes the last one in
    ([3], ["copy"]),
    ([MiB] * 12, ["upload", "upload", "upload"]),  # 5 + 5 + the last 2
    ([MiB] * 5 + [9 * MiB], ["upload", "copy"]),
    ([4 * MiB, 6 * MiB, 6 * MiB], ["upload", "copy"]),  # the run absorbs the next part
    ([0, 6 * MiB, 0], ["copy"]),
    ([MiB, 0, 0], ["copy"]),
    ([0, 0], []),
    ([11 * 1024 * MiB], ["copy", "copy", "copy"]),  # > 5 GiB: copied in equal ranges
])
def test_plan_compose_keeps_s3s_part_rules(sizes, kinds):
    pieces = storage.plan_compose(sizes)
    assert [p[0] for p in pieces] == kinds
    lengths = [p[3] - p[2] if p[0] == "copy" else p[3] for p in pieces]
    assert sum(lengths) == sum(sizes)
    assert all(n >= storage.MIN_PART for n in lengths[:-1]) and 0 not in lengths
    assert all(n <= storage.MAX_PART for n in lengths)


def test_plan_compose_refuses_more_than_10000_pieces():
    with pytest.raises(ValueError, match="at most 10000"):
        storage.plan_compose([6 * MiB] * 10_001)


def test_mask_streams_are_composed_and_aligned_on_s3(bucket, tmp_path):
    from recforge.segmentation import pack as segpack
    from tests.segmentation.test_pack import LOSSLESS, pairs

    run = Run(_spec(bucket), "seg")
    storage.write_json(run.classes, {"num_classes": 10, "ignore_index": 255})
    for stage in ("ingest", "flatten"):
        storage.put_bytes(run.stage_quarantine(stage), b"")
    listed = []
    for i, (start, n) in enumerate([(0, 3), (3, 2)]):
        work = tmp_path / f"train-{i:05d}"
        segpack.pack_pairs([dataclasses.replace(p, row={**p.row, "split": "train"})
                            for p in pairs(n, start=start)], work, LOSSLESS)
        pack.upload_shard(run, f"train-{i:05d}", work, masks=True)
        listed += [k for p in pairs(n, start=start) for k in (p.row["source_key"],
                                                             p.row["mask_key"])]
    storage.write_json(run.shard_list, {"shards": ["train-00000", "train-00001"]})
    storage.write_jsonl(run.source_manifest, [{"key": k} for k in listed])
    summary = merge.merge(run)
    assert summary["listed"] == 10 and summary["packed"] == 10 and summary["splits"] == {
        "train": 5}
    sums = storage.read_json(run.checksums("merge"))["files"]
    assert len(sums["train_mask.rec"]["parts"]) == 2 and "train_mask.idx" in sums
    records = storage.read_jsonl(run_state.output(run, names.RECORDS))
    mask_idx = storage.get_bytes(run_state.output(run, "train_mask.idx")).decode().splitlines()
    assert [r["mask_offset"] for r in records] == [int(ln.split("\t")[1]) for ln in mask_idx]
    assert validate.validate(run)["checked"] == "composition"
    storage.put_bytes(run_state.output(run, "train_mask.idx"),
                      "\n".join(mask_idx[:-1]).encode() + b"\n")
    with pytest.raises(ValidationFailed, match="train_mask"):
        validate.validate(run)


def test_a_shard_without_its_metadata_fails_the_merge_naming_it(bucket, tmp_path):
    run, _ = _staged_run(bucket, tmp_path, [2])
    storage.s3_client().delete_object(
        Bucket=bucket, Key=storage.split_s3(run.shard_output("train-00000", names.SHARD_META))[1])
    with pytest.raises(ValidationFailed, match="train-00000/shard.json is missing.*pack task"):
        merge.merge(run)


def test_shards_read_ahead_merge_as_one_at_a_time_and_a_failed_read_fails(bucket, tmp_path,
                                                                           monkeypatch):
    """Merge reads the shards' small files READ_THREADS at a time: the output is the one a
    read at a time gives, in shard order, and a shard file that cannot be read fails the
    merge as a serial read did — never a shard silently left out."""
    run, _ = _staged_run(bucket, tmp_path, [3, 4, 2, 5, 1, 3])
    got = {}
    for threads in (1, 8):
        monkeypatch.setattr(merge, "READ_THREADS", threads)
        merge.merge(run)
        got[threads] = {name: storage.get_bytes(run_state.output(run, name)) for name in
                        ("train.idx", "train.lst", names.RECORDS, names.SUMMARY,
                         names.QUARANTINE)}
    assert got[1] == got[8]
    keys = [json.loads(line)["key"] for line in got[8][names.RECORDS].splitlines()]
    assert keys == sorted(keys) and len(keys) == 18
    storage.delete(run.shard_output("train-00003", names.RECORDS))
    for threads in (1, 8):
        monkeypatch.setattr(merge, "READ_THREADS", threads)
        with pytest.raises(Exception) as failed:
            merge.merge(run)
        assert "NoSuchKey" in str(failed.value)
        assert any("train-00003" in note for note in failed.value.__notes__)
        assert not storage.exists(run.checksums("merge"))


def test_the_rec_composes_while_the_small_files_stream(bucket, tmp_path, monkeypatch):
    # the compose waits until merge has read a shard's records; merged in turn, it would wait
    # for a read that only starts once it returned, and the merge would fail
    import threading

    run, dirs = _staged_run(bucket, tmp_path, [22, 21])
    records_read = threading.Event()
    compose, each_object = storage.compose, merge.each_object

    def slow_compose(*args, **kwargs):
        if not records_read.wait(timeout=20):
            raise AssertionError("merge waited for the compose before streaming the records")
        return compose(*args, **kwargs)

    def reading(uris, *args, **kwargs):
        uris = list(uris)
        for uri, data in zip(uris, each_object(uris, *args, **kwargs), strict=True):
            if uri.endswith(names.RECORDS):
                records_read.set()
            yield data

    monkeypatch.setattr(storage, "compose", slow_compose)
    monkeypatch.setattr(merge, "each_object", reading)
    result = merge.merge(run)
    assert result["packed"] == 43
    expected = _concat_locally(dirs, tmp_path)
    assert storage.get_bytes(run_state.output(run, "train.rec")) == \
        (expected / "train.rec").read_bytes()
    sums = storage.read_json(run.checksums("merge"))["files"]
    assert sums["train.rec"]["size"] == (expected / "train.rec").stat().st_size  # after it
