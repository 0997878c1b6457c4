"""``recforge validate`` of an S3 prefix reads each ``.rec`` by its record headers
(``format.ranged``): a few percent of the bytes, and the same verdict and messages as the
downloaded files get."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest

from recforge import storage
from recforge.cli import main
from recforge.format import names, recordio, validate

RECORDS = 120
IMAGE_BYTES = 20_000  # above format.ranged.GAP: one small ranged GET per record


def write(root: Path, split: str = "train", n: int = RECORDS, labels=None) -> None:
    """A valid split of ``n`` records of ``IMAGE_BYTES`` random bytes; record 3's payload
    holds the magic at an aligned position, so it is framed in parts (``cflag`` 1, 3)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    with recordio.RecordWriter(root / names.rec(split), root / names.idx(split)) as w, \
            open(root / names.lst(split), "w", encoding="utf-8") as lst:
        for key in range(n):
            label = labels(key) if labels else float(key % 3)
            image = bytearray(rng.randbytes(IMAGE_BYTES))
            if key == 3:
                image[400:404] = struct.pack("<I", recordio.MAGIC)
            w.write(key, recordio.pack_image_record(label, key, bytes(image)))
            shown = "\t".join(f"{x:f}" for x in (label if isinstance(label, tuple) else
                                                  (label,)))
            lst.write(f"{key}\t{shown}\tn/img_{key}.jpg\n")
    (root / names.CLASSES).write_text(json.dumps({"num_classes": 3}))


def upload(root: Path, uri: str) -> int:
    for p in root.iterdir():
        storage.upload(p, f"{uri}/{p.name}")
    return sum(p.stat().st_size for p in root.iterdir())


def offset(root: Path, key: int, split: str = "train") -> int:
    return dict(recordio.read_idx(root / names.idx(split)))[key]


def poke(root: Path, at: int, data: bytes) -> None:
    with open(root / "train.rec", "r+b") as f:
        f.seek(at)
        f.write(data)


def test_a_valid_split_is_proved_from_under_5_percent_of_its_bytes(tmp_path, bucket):
    write(tmp_path / "ds")
    total = upload(tmp_path / "ds", f"s3://{bucket}/ds")
    before, gets = storage.transferred(), storage.request_counts().get("get_object", 0)
    report = validate.validate_prefix(f"s3://{bucket}/ds")
    moved = storage.transferred().minus(before)
    assert report["ok"], report["failures"]
    assert report["splits"]["train"]["records"] == RECORDS
    assert moved.down == report["read"]["bytes"] and report["read"]["of"] == total
    assert moved.down < 0.05 * total, (moved.down, total)  # the client's own byte count
    rec = (tmp_path / "ds" / "train.rec").stat().st_size
    assert moved.down_by_suffix[".rec"] < 0.02 * rec
    assert storage.request_counts()["get_object"] - gets <= RECORDS + 8  # a GET a header
    full = validate.validate_prefix(f"s3://{bucket}/ds", full=True)
    assert full["ok"] and full["read"] == {"bytes": total, "of": total, "full": True}


def _bad_magic(root):  # a corrupted header: the record is no record
    poke(root, offset(root, 50), b"\0\0\0\0")


def _header_id(root):
    poke(root, offset(root, 60) + 8 + 8, struct.pack("<Q", 999))


def _label(root):
    poke(root, offset(root, 70) + 8 + 4, struct.pack("<f", 7.0))


def _shorter_length(root):  # the chain breaks inside record 80
    at = offset(root, 80)
    lrec = struct.unpack_from("<I", (root / "train.rec").read_bytes(), at + 4)[0]
    poke(root, at + 4, struct.pack("<I", lrec - 4000))


def _unindexed_record(root):
    lines = (root / "train.idx").read_text().splitlines()
    del lines[90]
    (root / "train.idx").write_text("\n".join(lines) + "\n")


def _split_record(root):  # the magic-split record 3 loses its last part's magic
    at = offset(root, 3) + 8 + recordio.IR_SIZE + 400
    poke(root, at, b"\1\2\3\4")


def _missing_idx(root):  # the check stops before the .rec: none of it is read
    (root / "train.idx").unlink()


def _trailing(root):
    with open(root / "train.rec", "ab") as f:
        f.write(b"garbage!")


def _truncated(root):
    data = (root / "train.rec").read_bytes()
    (root / "train.rec").write_bytes(data[:-20])


@pytest.mark.parametrize("corrupt", [_bad_magic, _header_id, _label, _shorter_length,
                                     _unindexed_record, _split_record, _missing_idx,
                                     _trailing, _truncated])
def test_a_corruption_gets_the_downloaded_files_verdict_and_messages(tmp_path, bucket,
                                                                     corrupt):
    root = tmp_path / "ds"
    write(root)
    corrupt(root)
    local = validate.validate_local(root)
    assert not local["ok"]
    upload(root, f"s3://{bucket}/ds")
    report = validate.validate_prefix(f"s3://{bucket}/ds")
    assert (report["ok"], report["splits"], report["failures"]) == \
        (local["ok"], local["splits"], local["failures"])
    assert report["read"]["bytes"] < 0.05 * report["read"]["of"]  # a break costs its gap


def test_multi_label_headers_are_read_with_their_labels(tmp_path, bucket):
    root = tmp_path / "ds"
    write(root, labels=lambda key: (float(key % 3), 1.0))
    upload(root, f"s3://{bucket}/good")
    assert validate.validate_prefix(f"s3://{bucket}/good")["ok"]
    poke(root, offset(root, 7) + 8 + recordio.IR_SIZE + 4, struct.pack("<f", 5.0))
    local = validate.validate_local(root)
    upload(root, f"s3://{bucket}/bad")
    report = validate.validate_prefix(f"s3://{bucket}/bad")
    assert any("key 7: label 5.0 outside" in f for f in report["failures"])
    assert report["failures"] == local["failures"]


def test_the_command_says_what_it_read(tmp_path, bucket, capsys):
    write(tmp_path / "ds", n=20)
    upload(tmp_path / "ds", f"s3://{bucket}/ds")
    assert main(["validate", f"s3://{bucket}/ds"]) == 0
    out = capsys.readouterr().out
    assert "the .rec files by their record headers" in out and "valid" in out
    poke(tmp_path / "ds", offset(tmp_path / "ds", 10), b"\0\0\0\0")
    storage.upload(tmp_path / "ds" / "train.rec", f"s3://{bucket}/ds/train.rec")
    assert main(["validate", f"s3://{bucket}/ds", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["read"]["full"] is False
    assert main(["validate", f"s3://{bucket}/ds", "--full"]) == 1
    assert "every byte (the full check)" in capsys.readouterr().out


def test_masks_are_checked_by_header_and_decoded_with_full(tmp_path, bucket):
    """A mask's values need its pixels: the ranged check names that it did not look, and
    ``full`` finds what the local check finds; a mask header's id needs no pixels."""
    import numpy as np

    from recforge.segmentation import pack as segpack
    from tests.common.segdata import coord_image, png

    root = tmp_path / "seg"
    pairs = [segpack.SegPair(k, f"{k}.png", png(coord_image(8, 8)),
                             png(np.full((8, 8), k, np.uint8)), {}) for k in range(3)]
    segpack.pack_pairs(pairs, root, segpack.SegPackOptions(), name="train")
    (root / "classes.json").write_text('{"num_classes": 2, "ignore_index": 255}')
    upload(root, f"s3://{bucket}/seg")
    ranged = validate.validate_prefix(f"s3://{bucket}/seg")
    assert ranged["ok"], ranged["failures"]
    assert any("--full decodes them" in n for n in ranged["notes"])
    full = validate.validate_prefix(f"s3://{bucket}/seg", full=True)
    assert full["failures"] == validate.validate_local(root)["failures"] == [
        "train: train_mask.rec: key 2: mask values [2] outside [0, 2) and ignore 255"]
    at = dict(recordio.read_idx(root / "train_mask.idx"))[1] + 8 + 8
    with open(root / "train_mask.rec", "r+b") as f:
        f.seek(at)
        f.write(struct.pack("<Q", 77))
    storage.upload(root / "train_mask.rec", f"s3://{bucket}/seg/train_mask.rec")
    assert "train: train_mask.rec: key 1: header id is 77" in \
        validate.validate_prefix(f"s3://{bucket}/seg")["failures"]
