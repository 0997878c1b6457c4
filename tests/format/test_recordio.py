"""recforge's RecordIO reader refuses damaged files with the byte named (no MXNet needed;
the byte identity with MXNet's writer and readers is tests/mxnet/test_recordio.py)."""

from __future__ import annotations

import pytest

from recforge.format import recordio
from tests.common.helpers import write_split


def test_truncated_file_and_bad_offset_are_named(tmp_path):
    write_split(tmp_path, "s", [0, 1])
    data = (tmp_path / "s.rec").read_bytes()
    (tmp_path / "t.rec").write_bytes(data[:-10])
    with pytest.raises(recordio.RecordIOError, match="truncated"):
        list(recordio.iter_records(tmp_path / "t.rec"))
    with open(tmp_path / "s.rec", "rb") as f, \
            pytest.raises(recordio.RecordIOError, match="bad magic .* at byte 4"):
        recordio.read_record_at(f, 4)


def test_oversized_record_refused():
    class Huge(bytes):
        def __len__(self):
            return recordio.MAX_RECORD_BYTES

    with pytest.raises(recordio.RecordIOError, match="2\\^29"):
        recordio.frame(Huge())


@pytest.mark.parametrize("offset", [2**63, 2**64, -(2**63) - 1])
def test_idx_offset_beyond_int64_is_a_format_error(tmp_path, offset):
    write_split(tmp_path, "s", [0, 1])
    idx = tmp_path / "s.idx"
    first, _ = idx.read_text(encoding="ascii").splitlines()
    idx.write_text(f"{first}\n1\t{offset}\n", encoding="ascii")
    with pytest.raises(recordio.RecordIOError) as refused:
        recordio.IndexedRecordReader(idx, tmp_path / "s.rec")
    message = str(refused.value)
    assert message.startswith(f"{idx}:2: offset {offset} does not fit a signed 64-bit integer")
    assert "re-pack the split" in message
    with pytest.raises(recordio.RecordIOError, match=f"{idx}:2: offset {offset}"):
        recordio.read_idx(idx)


def test_reader_refuses_an_offset_beyond_int64(tmp_path):
    write_split(tmp_path, "s", [0])
    with open(tmp_path / "s.rec", "rb") as f, \
            pytest.raises(recordio.RecordIOError, match="signed 64-bit"):
        recordio.read_record_at(f, 2**63)


@pytest.mark.parametrize("payload", [b"", b"a", b"abcd", b"abcde" * 7,
                                     b"abcd" + recordio.struct.pack("<I", recordio.MAGIC) * 3
                                     + b"xy"])
def test_framed_size_is_the_length_frame_writes(payload):
    magic = recordio.struct.pack("<I", recordio.MAGIC)
    splits = sum(1 for i in range(0, len(payload) // 4 * 4, 4) if payload[i:i + 4] == magic)
    assert len(recordio.frame(payload)) == recordio.framed_size(len(payload), splits)


MAGIC_BYTES = recordio.struct.pack("<I", recordio.MAGIC)
PAYLOADS = [b"", b"a", b"abcd", b"abcde" * 7, b"xy" + MAGIC_BYTES + b"z",  # unaligned magic
            b"abcd" + MAGIC_BYTES * 3 + b"xy", MAGIC_BYTES, b"abcd" + MAGIC_BYTES]


def test_a_hashed_writer_digests_what_it_wrote_whole_and_by_group(tmp_path):
    """Each group's SHA-256 and the file's, kept as the records go out, are those of the
    bytes on disk; the records read back as written."""
    import hashlib

    from recforge.storage import file_digest

    groups = ["a", "a", None, "b", "b", "b", "c", "a"]
    spans: dict = {}
    with recordio.RecordWriter(tmp_path / "p.rec", tmp_path / "p.idx", hashed=True) as w:
        for key, (payload, group) in enumerate(zip(PAYLOADS, groups, strict=True)):
            start = w.write(key, payload, group)
            spans.setdefault(group, []).append((start, w.tell()))
        whole = w.digest()
    data = (tmp_path / "p.rec").read_bytes()
    assert whole == file_digest(tmp_path / "p.rec")
    expected = {g: hashlib.sha256(b"".join(data[s:e] for s, e in spans[g])).hexdigest()
                for g in spans if g is not None}
    assert w.group_digests() == expected
    assert [p for _, p in recordio.iter_records(tmp_path / "p.rec")] == PAYLOADS
    with recordio.RecordWriter(tmp_path / "q.rec") as plain, \
            pytest.raises(ValueError, match="hashed=True"):
        plain.digest()
