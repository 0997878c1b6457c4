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
