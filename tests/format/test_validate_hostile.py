"""Bad files are reported, never crash: the validator says INVALID (exit 1) naming the file."""

from __future__ import annotations

import io
import math

import pytest

from recforge.cli import main
from recforge.format import recordio, validate
from tests.common.helpers import jpeg, write_split


@pytest.mark.parametrize("label", [math.nan, math.inf, -math.inf])
def test_non_finite_labels_are_invalid(tmp_path, label, capsys):
    root = tmp_path / "ds"
    write_split(root, "train", [0, 1, label])
    report = validate.validate_local(root)
    assert not report["ok"]
    assert any("key 2: label" in f and "outside the integers" in f for f in report["failures"])
    assert main(["validate", str(root)]) == 1
    assert "INVALID" in capsys.readouterr().out


def test_non_utf8_lst_is_invalid(tmp_path, capsys):
    root = tmp_path / "ds"
    write_split(root, "train", [0, 1])
    (root / "train.lst").write_bytes(b"0\t0.000000\timg_\xff.jpg\n1\t1.000000\tb.jpg\n")
    report = validate.validate_local(root)
    assert not report["ok"] and any("train.lst is not UTF-8" in f for f in report["failures"])
    assert main(["validate", str(root)]) == 1


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "\udcff"])
def test_bad_classes_json_is_invalid(tmp_path, text):
    root = tmp_path / "ds"
    write_split(root, "train", [0, 1])
    (root / "classes.json").write_text(text, encoding="utf-8", errors="surrogateescape")
    report = validate.validate_local(root)
    assert not report["ok"]
    assert report["failures"][0].startswith("classes.json is not a valid classes document")
    assert main(["validate", str(root)]) == 1


def test_reader_refuses_negative_and_huge_offsets():
    data = recordio.frame(recordio.pack_image_record(0.0, 0, jpeg(8, 8)))
    with pytest.raises(recordio.RecordIOError, match="negative"):
        recordio.read_record_at(io.BytesIO(data), -8)
    assert recordio.read_record_at(io.BytesIO(data), 10**12) is None  # past the end
