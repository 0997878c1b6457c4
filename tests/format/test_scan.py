"""The header-only scan proves canonical splits valid and declines everything else, so the
record-by-record check (which names the failure) always has the last word."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recforge.format import recordio, scan, validate
from tests.common.helpers import write_split
from tests.format import test_validate as corruptions


@pytest.fixture
def good(tmp_path):
    write_split(tmp_path, "train", [0, 1, 2, 1, 0])
    (tmp_path / "classes.json").write_text(json.dumps({"num_classes": 3}))
    return tmp_path


def test_a_good_split_is_proved_by_the_fast_path(good):
    fast = validate.validate_split_fast(good, "train", 3)
    slow = validate.validate_split_records(good, "train", 3)
    assert fast is not None and fast.ok and slow.ok
    assert (fast.records, fast.idx_lines, fast.lst_lines) == (5, 5, 5) == (
        slow.records, slow.idx_lines, slow.lst_lines)


@pytest.mark.parametrize("corrupt", [
    corruptions._corrupt_duplicate_key, corruptions._corrupt_offset_order,
    corruptions._corrupt_offset_inside_record, corruptions._corrupt_trailing_bytes,
    corruptions._corrupt_label_out_of_range, corruptions._corrupt_lst_short,
    corruptions._corrupt_header_id, corruptions._corrupt_missing_idx,
    corruptions._corrupt_truncated_rec,
])
def test_the_fast_path_declines_every_corruption(good, corrupt):
    corrupt(good)
    assert validate.validate_split_fast(good, "train", 3) is None
    assert not validate.validate_split(good, "train", 3).ok


@pytest.mark.parametrize("text", [
    b"0\t0\n1\t40\n\n",  # a blank line
    b"0\t0\n+1\t40\n",  # int() takes it; canonical text does not
    b"0\t0\n1\t40",  # no final newline
    b"0\t0\t7\n",  # a third field
    b"0\t0\n1.0\t40\n",
    b"0\t" + b"9" * 19 + b"\n",  # past int64
])
def test_non_canonical_idx_is_declined(text):
    assert scan.parse_idx(text) is None


def test_idx_parses_whole():
    keys, offsets = scan.parse_idx(b"0\t0\n7\t48\n12\t96\n")
    assert keys.tolist() == [0, 7, 12] and offsets.tolist() == [0, 48, 96]


def test_63_bit_keys_parse_exactly():
    """recforge's hashed record keys use all 63 bits: 19 digits, exact (not via float64)."""
    big = [2**63 - 1, 2**62 + 1, 4611686018427387905]
    keys, _ = scan.parse_idx(b"".join(b"%d\t%d\n" % (k, 4 * i) for i, k in enumerate(big)))
    assert keys.tolist() == big
    lst_keys, labels = scan.parse_lst(b"".join(b"%d\t%d\tc/%d.jpg\n" % (k, i, i)
                                               for i, k in enumerate(big)))
    assert lst_keys.tolist() == big and labels.tolist() == [0.0, 1.0, 2.0]


def test_a_split_with_63_bit_keys_takes_the_fast_path(tmp_path):
    keys = [2**40 + 3, 12345678901234567, 2**63 - 1]
    write_split(tmp_path, "train", [0, 1, 2], keys=keys)
    fast = validate.validate_split_fast(tmp_path, "train", 3)
    assert fast is not None and fast.ok and fast.records == 3


@pytest.mark.parametrize("text", [
    b"0\t1.000000\ta.jpg\r\n",  # str.splitlines would see another line
    "0\t1.000000\ta\u2028b.jpg\r\n".encode(),  # and a CR beside it
    "0\tnan\ta\u2028b.jpg\n".encode(),
    b"0\t1.000000\t\xff.jpg\n",  # not UTF-8
    b"0\t1.000000\t2.000000\ta.jpg\n",  # two labels: not the fast path's business
    b"0.0\t1.000000\ta.jpg\n",  # int() refuses a key with a point
    b"0\tnan\ta.jpg\n",
])
def test_non_canonical_lst_is_declined(text):
    assert scan.parse_lst(text) is None


def test_lst_paths_holding_unicode_line_separators_are_read_line_by_line():
    text = "7\t1.000000\tcaf\x85s/a\u2028b.jpg\n9\t0.000000\tx\u2029.jpg\n".encode()
    keys, labels = scan.parse_lst(text)
    assert keys.tolist() == [7, 9] and labels.tolist() == [1.0, 0.0]


def test_lst_parses_keys_and_labels_whatever_the_path():
    keys, labels = scan.parse_lst("3\t2.000000\tdog/ü 1.2.jpg\n4\t0\tx\n".encode())
    assert keys.tolist() == [3, 4] and labels.tolist() == [2.0, 0.0]


def test_records_split_at_an_aligned_magic_stay_on_the_fast_path(tmp_path):
    magic = recordio.MAGIC.to_bytes(4, "little")
    root = tmp_path / "ds"
    root.mkdir()
    with recordio.RecordWriter(root / "train.rec", root / "train.idx") as w, \
            open(root / "train.lst", "w") as lst:
        for key in range(4):
            image = b"\xff\xd8" + b"ab" + magic * (key % 2) * 3 + b"tail" * (key + 1)
            w.write(key, recordio.pack_image_record(key, key, image))
            lst.write(f"{key}\t{float(key):f}\t{key}.jpg\n")
    offsets = np.array([o for _, o in recordio.read_idx(root / "train.idx")])
    assert (scan.scan_rec(root / "train.rec", offsets) is not None)
    fast = validate.validate_split_fast(root, "train", 4)
    assert fast is not None and fast.records == 4
    assert validate.validate_split_records(root, "train", 4).ok


READERS = {"dense": float("inf"), "sparse": 0}  # SPARSE_SPACING that forces each reader


def _rec(root, payloads):
    """A ``.rec`` (no ``.idx``) of the given payloads, and their offsets."""
    with recordio.RecordWriter(root / "x.rec") as w:
        offsets = [w.write(None, p) for p in payloads]
    return root / "x.rec", np.array(offsets, np.int64)


def _images(sizes):
    """Image records with ids 0..n-1 and labels ``id % 7``, of the given image sizes."""
    return [recordio.pack_image_record(k % 7, k, bytes([k % 251]) * size)
            for k, size in enumerate(sizes)]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("sizes, block", [
    ([1 + k % 9 for k in range(3000)], 4096 + 12),  # tiny records, many blocks
    ([1] * 50, 64),  # 36-byte records on 64-byte blocks: headers straddle the boundaries
    ([20_000 + 4000 * (k % 5) for k in range(30)], 8 << 20),  # large records
    ([20_000 + 4000 * (k % 5) for k in range(30)], 4096),  # larger than a block
])
def test_both_readers_read_every_header(tmp_path, monkeypatch, reader, sizes, block):
    monkeypatch.setattr(scan, "SPARSE_SPACING", READERS[reader])
    monkeypatch.setattr(scan, "BLOCK_BYTES", block)
    rec, offsets = _rec(tmp_path, _images(sizes))
    if block == 64:
        assert (offsets // 64 != (offsets + 23) // 64).sum() > 10
    got = scan.scan_rec(rec, offsets)
    assert got is not None
    assert got.ids.tolist() == list(range(len(sizes)))
    assert got.labels.tolist() == [k % 7 for k in range(len(sizes))]
    assert got.payload_bytes == sum(recordio.IR_SIZE + size for size in sizes)


@pytest.mark.parametrize("reader", READERS)
def test_both_readers_hand_split_records_to_the_whole_record_read(tmp_path, monkeypatch,
                                                                  reader):
    monkeypatch.setattr(scan, "SPARSE_SPACING", READERS[reader])
    magic = recordio.MAGIC.to_bytes(4, "little")
    images = [b"\xff\xd8ab" + magic * (k % 2) * 3 + b"tail" * (k + 1) for k in range(6)]
    rec, offsets = _rec(tmp_path, [recordio.pack_image_record(k % 7, k, image)
                                   for k, image in enumerate(images)])
    got = scan.scan_rec(rec, offsets)
    assert got is not None and got.ids.tolist() == list(range(6))
    assert got.labels.tolist() == [k % 7 for k in range(6)]
    assert got.payload_bytes == sum(recordio.IR_SIZE + len(image) for image in images)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("block", [64, 8 << 20])
def test_both_readers_decline_the_same_breaks(tmp_path, monkeypatch, reader, block):
    monkeypatch.setattr(scan, "SPARSE_SPACING", READERS[reader])
    monkeypatch.setattr(scan, "BLOCK_BYTES", block)
    # a last record too short for an IRHeader: its header read runs past the end of the file
    rec, offsets = _rec(tmp_path, _images([5] * 9) + [b"abcd"])
    assert scan.scan_rec(rec, offsets) is None
    rec, offsets = _rec(tmp_path, _images([5] * 10))
    assert scan.scan_rec(rec, offsets) is not None
    assert scan.scan_rec(rec, offsets[:-1]) is None  # the chain stops short of the end
    moved = offsets.copy()
    moved[3] += 4
    assert scan.scan_rec(rec, moved) is None
    rec.write_bytes(rec.read_bytes()[:-4])
    assert scan.scan_rec(rec, offsets) is None


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """~160 MB of 40 KB records, with its ``.idx``."""
    root = tmp_path_factory.mktemp("large")
    image = bytes(range(256)) * 160
    with recordio.RecordWriter(root / "x.rec", root / "x.idx") as w:
        for key in range(4000):
            w.write(key, recordio.pack_image_record(0, key, image))
    return root


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's VmHWM")
@pytest.mark.parametrize("reader", READERS)
def test_scanning_a_large_rec_keeps_the_memory_bounded(large, reader):
    """A pack task scans every shard it writes: the scan must not hold the file in memory
    (a memory map did: the kernel's fault-around made the whole shard resident)."""
    code = """if True:
        import sys
        from pathlib import Path
        from recforge.format import scan
        def peak():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) << 10
        scan.SPARSE_SPACING = float(sys.argv[2])
        _, offsets = scan.parse_idx(Path(sys.argv[1], "x.idx").read_bytes())
        before = peak()
        assert scan.scan_rec(Path(sys.argv[1], "x.rec"), offsets) is not None
        print(peak() - before)
    """
    include = Path(scan.__file__).parents[2]
    out = subprocess.run([sys.executable, "-c", code, str(large), str(READERS[reader])],
                         capture_output=True, text=True, check=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(include)})
    grown = int(out.stdout)
    assert grown < 40 << 20, f"the scan raised the peak RSS by {grown / 2**20:.0f} MiB"
