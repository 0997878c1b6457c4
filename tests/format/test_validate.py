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


def test_an_all_empty_split_is_invalid(good, capsys):
    for name in ("test.rec", "test.idx", "test.lst"):
        (good / name).write_bytes(b"")
    report = validate.validate_local(good)
    assert not report["ok"]
    assert report["failures"] == [
        "test: test.rec, test.idx and test.lst are empty: the split has no records, and an "
        "empty split is not a dataset; pack it from a .lst that lists images, or delete its "
        "files if the split is not wanted"]
    assert report["splits"]["train"]["failures"] == report["splits"]["val"]["failures"] == []
    assert main(["validate", str(good)]) == 1
    out = capsys.readouterr().out
    assert "test: test.rec, test.idx and test.lst are empty" in out and "INVALID" in out
    for name in ("test.rec", "test.idx", "test.lst"):  # a split that is not there is fine
        (good / name).unlink()
    assert validate.validate_local(good)["ok"]


def _image_folder(root):
    """Six small images in two class folders, and one file that is not an image."""
    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    for i in range(6):
        folder = root / ("cat" if i % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        img = rng.integers(0, 256, (24 + i, 32, 3), np.uint8)
        cv2.imwrite(str(folder / f"img{i}.jpg"), img)
    (root / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG at all")


def test_im2rec_output_with_quarantined_items_validates(tmp_path, capsys):
    images, out = tmp_path / "images", tmp_path / "out"
    _image_folder(images)
    out.mkdir()
    prefix = str(out / "data")
    assert main(["im2rec", "--list", "--recursive", prefix, str(images)]) == 0
    assert main(["im2rec", prefix, str(images)]) == 1  # 1: finished, some items quarantined
    tsv = out / "data.quarantine.tsv"
    rows = tsv.read_text(encoding="utf-8").splitlines()
    assert len(rows) == 2 and "broken.jpg" in rows[1]
    assert len((out / "data.lst").read_text().splitlines()) == 7
    capsys.readouterr()

    assert main(["validate", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.rstrip().endswith("valid")
    assert ("note: data: 1 .lst item(s) quarantined by recforge im2rec, not in data.rec as "
            "expected; see data.quarantine.tsv") in text
    report = validate.validate_local(out)
    assert report["ok"] and report["splits"]["data"]["records"] == 6
    assert report["splits"]["data"]["quarantined"] == 1
    # the record-by-record check takes the quarantine report into account too
    rep = validate.validate_split_records(out, "data", None)
    assert rep.ok and rep.quarantined == 1 and rep.records == 6

    tsv.write_text(rows[0] + "\n", encoding="utf-8")  # the broken item is no longer accounted for
    assert main(["validate", str(out)]) == 1
    text = capsys.readouterr().out
    assert "data.lst and data.idx list different keys" in text and "INVALID" in text
    assert "quarantined" not in text


def test_a_packed_item_cannot_hide_in_the_quarantine_report(tmp_path):
    images, out = tmp_path / "images", tmp_path / "out"
    _image_folder(images)
    out.mkdir()
    prefix = str(out / "data")
    assert main(["im2rec", "--list", "--recursive", prefix, str(images)]) == 0
    assert main(["im2rec", prefix, str(images)]) == 1
    lst = (out / "data.lst").read_text().splitlines()
    tsv = out / "data.quarantine.tsv"
    header, row = tsv.read_text(encoding="utf-8").splitlines()
    bad = row.split("\t")
    other = next(n for n, line in enumerate(lst, 1) if n != int(bad[0]))
    key = lst[other - 1].split("\t")[0]
    tsv.write_text(f"{header}\n{row}\n{other}\t{key}\tx.jpg\tcorrupt\td\tf\n", encoding="utf-8")
    report = validate.validate_local(out)  # listed as quarantined, yet it is in the .rec
    assert not report["ok"]
    assert any("data.lst and data.idx list different keys" in f for f in report["failures"])
    tsv.write_text("not\ta report\n", encoding="utf-8")
    report = validate.validate_local(out)
    assert not report["ok"]
    assert any("data.quarantine.tsv:1: the header is not" in f for f in report["failures"])
