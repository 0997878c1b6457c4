"""``recforge show``: what it says when the prefix or the key is not what it needs."""

from __future__ import annotations

import json

from recforge.cli import main


def test_show_says_what_is_missing_plainly(tmp_path, capsys):
    png = str(tmp_path / "x.png")
    assert main(["show", str(tmp_path / "nope"), "1", "-o", png]) == 2
    assert f"the local folder {tmp_path / 'nope'} does not exist" in capsys.readouterr().err
    assert main(["show", str(tmp_path), "1", "-o", png]) == 2
    err = capsys.readouterr().err
    assert "holds no records.jsonl" in err and "a report needs" not in err
    (tmp_path / "records.jsonl").write_text(json.dumps(
        {"key": 0, "split": "train", "offset": 0, "length": 1, "label": 0,
         "class_name": "cat", "source_key": "cat/a.jpg"}) + "\n")
    assert main(["show", str(tmp_path), "5", "-o", png]) == 2
    err = capsys.readouterr().err
    assert "recforge show: error: no record with key 5 in " in err  # no quotes around it
    assert "records.jsonl (its `key` column" in err
