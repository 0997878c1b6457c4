"""Structural validation catches each kind of broken dataset and names it."""

from __future__ import annotations

import json

import pytest

from recforge.cli import main
from recforge.format import recordio, validate
from tests.common.helpers import jpeg, write_split


@pytest.fixture
def good(tmp_path):
    write_split(tmp_path, "train", [0, 1, 2, 1, 0])
    write_split(tmp_path, "val", [2, 0])
    (tmp_path / "classes.json").write_text(json.dumps({"num_classes": 3}))
    return tmp_path


def test_good_dataset_passes(good):
    report = validate.validate_local(good)
    assert report["ok"], report["failures"]
    assert report["splits"]["train"]["records"] == 5 and report["num_classes"] == 3


def _idx(root):
    return (root / "train.idx").read_text().splitlines()


def _corrupt_duplicate_key(root):
    lines = _idx(root)
    lines[1] = "0\t" + lines[1].split("\t")[1]
    (root / "train.idx").write_text("\n".join(lines) + "\n")


def _corrupt_offset_order(root):
    lines = _idx(root)
    lines[1], lines[2] = lines[2], lines[1]
    (root / "train.idx").write_text("\n".join(lines) + "\n")


def _corrupt_offset_inside_record(root):
    lines = _idx(root)
    k, off = lines[2].split("\t")
    lines[2] = f"{k}\t{int(off) + 8}"
    (root / "train.idx").write_text("\n".join(lines) + "\n")


def _corrupt_trailing_bytes(root):
    with open(root / "train.rec", "ab") as f:
        f.write(b"garbage!")


def _corrupt_label_out_of_range(root):
    write_split(root, "train", [0, 1, 3, 1, 0])


def _corrupt_lst_short(root):
    lines = (root / "train.lst").read_text().splitlines()
    (root / "train.lst").write_text("\n".join(lines[:-1]) + "\n")


def _corrupt_header_id(root):
    with recordio.RecordWriter(root / "train.rec", root / "train.idx") as w:
        for i in range(5):
            w.write(i, recordio.pack_image_record(0, 100 + i, jpeg(seed=i)))


def _corrupt_missing_idx(root):
    (root / "train.idx").unlink()


def _corrupt_truncated_rec(root):
    data = (root / "train.rec").read_bytes()
    (root / "train.rec").write_bytes(data[:-20])


@pytest.mark.parametrize("corrupt, words", [
    (_corrupt_duplicate_key, "duplicate keys"),
    (_corrupt_offset_order, "not strictly increasing"),
    (_corrupt_offset_inside_record, "not a record start"),
    (_corrupt_trailing_bytes, "trailing or corrupt"),
    (_corrupt_label_out_of_range, "label 3.0 outside the integers [0, 3)"),
    (_corrupt_lst_short, "counts differ"),
    (_corrupt_header_id, "header id is 100"),
    (_corrupt_missing_idx, "train.idx is missing"),
    (_corrupt_truncated_rec, "truncated"),
])
def test_each_corruption_is_caught_and_named(good, corrupt, words):
    corrupt(good)
    report = validate.validate_local(good)
    assert not report["ok"]
    assert any(words in f for f in report["failures"]), report["failures"]
    assert report["splits"]["val"]["failures"] == []  # the other split is untouched


def test_cli_exit_status(good, capsys):
    assert main(["validate", str(good)]) == 0
    assert "valid" in capsys.readouterr().out
    _corrupt_trailing_bytes(good)
    assert main(["validate", str(good)]) == 1
    assert "INVALID" in capsys.readouterr().out


def test_validate_s3_prefix(good, bucket):
    from recforge import storage

    for p in good.iterdir():
        storage.upload(p, f"s3://{bucket}/ds/{p.name}")
    assert validate.validate_prefix(f"s3://{bucket}/ds")["ok"]
    storage.put_bytes(f"s3://{bucket}/ds/val.idx", b"0\t0\n0\t0\n")
    report = validate.validate_prefix(f"s3://{bucket}/ds")
    assert not report["ok"] and any("val" in f for f in report["failures"])
