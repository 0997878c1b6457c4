"""``cache.assemble`` writes a shard from its chunks in one pass: ``part.rec``'s digest is
hashed as it is written, and a fetched chunk's verified SHA-256 is recorded, not computed
again."""

from __future__ import annotations

import hashlib
import json

from recforge import storage
from recforge.format import names
from recforge.incremental import cache


def record(key: int, offset: int, length: int) -> dict:
    return {"key": key, "offset": offset, "length": length, "label": 0.0,
            "name": f"{key}.jpg", "split": "train"}


def test_the_shard_digest_is_the_files_and_verified_chunks_keep_their_digest(tmp_path):
    packed = tmp_path / "packed.rec"
    packed.write_bytes(b"p" * 300)
    fetched = b"f" * 200
    parts = [(fetched, [record(1, 0, 200)], ""),
             (cache.Span(packed, 100, 150), [record(2, 0, 150)], "")]
    # a wrong digest for the fetched chunk shows it is taken as given, not recomputed
    got = cache.assemble(parts, ["h1", "h2"], tmp_path, verified={0: "given"})
    rec = tmp_path / names.rec(names.SHARD_PART)
    assert rec.read_bytes() == fetched + b"p" * 150
    assert got["rec"] == storage.file_digest(rec)
    index = json.loads((tmp_path / cache.CHUNK_INDEX).read_text())
    assert [c["sha256"] for c in index] == ["given", hashlib.sha256(b"p" * 150).hexdigest()]
    assert [(c["start"], c["length"]) for c in index] == [(0, 200), (200, 150)]
    assert got["packed"] == 2 and got["quarantined"] == 0


def test_a_shard_packed_whole_is_adopted_byte_for_byte_as_assemble_writes_it(tmp_path):
    """A shard with no chunk from the cache is packed in one pass in chunk order: ``adopt``
    keeps pack's files instead of writing the shard again, and every file, the chunk index
    and the result are what ``assemble`` writes from the same pack (a chunk whose only image
    is refused, so an empty chunk and a quarantine entry, included) — with the digests pack
    kept as it wrote, and hashing the file where pack kept none; each digest is that of the
    bytes on disk."""
    import cv2
    import numpy as np

    from recforge.imaging import PackOptions
    from recforge.stages.pack import pack_items

    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(3)
    for i in range(8):
        img = rng.integers(0, 255, (40 + 3 * i, 50, 3), np.uint8)
        (src / f"{i}.jpg").write_bytes(cv2.imencode(".jpg", img)[1].tobytes())
    (src / "5.jpg").write_bytes(b"not an image")  # chunk 2 holds only this refused image
    rows = [{"source_key": f"{i}.jpg", "record_key": 10 + i, "label": i % 2, "split": "train",
             "name": f"{i}.jpg", "class_name": "c", "etag": "x", "chunk": c}
            for i, c in enumerate((0, 0, 1, 1, 1, 2, 3, 3))]
    groups = cache.chunks(rows)
    hashes = [f"h{i}" for i in range(len(groups))]
    results, files = [], []
    for way in ("assemble", "adopt", "adopt, hashing the file"):
        out = tmp_path / way
        packed = out / "packed"
        packed.mkdir(parents=True)
        got = pack_items(rows, str(src), PackOptions(resize=32), packed, keep=True)
        if way == "adopt, hashing the file":
            got = {k: v for k, v in got.items() if k not in ("rec", "chunk_sha256")}
        parts = cache.split_packed(packed, groups, got)
        assert cache.tiled(parts, packed / names.rec(names.SHARD_PART))
        data = (packed / names.rec(names.SHARD_PART)).read_bytes()
        results.append(cache.assemble(parts, hashes, out) if way == "assemble"
                       else cache.adopt(parts, hashes, packed, out, got.get("rec")))
        files.append({p.name: p.read_bytes() for p in out.iterdir() if p.is_file()})
        index = json.loads(files[-1][cache.CHUNK_INDEX])
        assert [c["sha256"] for c in index] == [
            hashlib.sha256(data[c["start"]:c["start"] + c["length"]]).hexdigest() for c in index]
        assert results[-1]["rec"] == {"size": len(data),
                                      "sha256": hashlib.sha256(data).hexdigest()}
    assert results[0] == results[1] == results[2]
    assert files[0] == files[1] == files[2]
    assert set(files[0]) == {*names.shard_files(), cache.CHUNK_INDEX}
    assert results[0]["packed"] == 7 and results[0]["quarantined"] == 1
    index = json.loads(files[1][cache.CHUNK_INDEX])
    assert [len(c["records"]) for c in index] == [2, 3, 0, 2]
    assert index[2]["quarantine"] and index[2]["length"] == 0


def test_a_pack_that_does_not_tile_its_file_is_not_adopted(tmp_path):
    packed = tmp_path / "part.rec"
    packed.write_bytes(b"p" * 300)
    whole = [(cache.Span(packed, 0, 100), [], ""), (cache.Span(packed, 100, 200), [], "")]
    assert cache.tiled(whole, packed)
    assert not cache.tiled(whole[1:], packed)  # starts past the first byte
    assert not cache.tiled(whole[:1], packed)  # ends before the last
    assert not cache.tiled([whole[0], (b"f" * 200, [], "")], packed)  # a fetched chunk
    assert not cache.tiled([(cache.Span(packed, 0, 100), [], ""),
                            (cache.Span(packed, 150, 150), [], "")], packed)
