"""What ``recforge build`` prints: the accounting with the objects set aside, and a second
build with nothing changed ending early with exit 0."""

from __future__ import annotations

import pytest
import yaml

from recforge import storage
from recforge.cli import main
from tests.common.helpers import jpeg
from tests.common.sources import spec_doc

pytestmark = pytest.mark.pipeline  # two whole builds: a slow tier


def test_build_prints_objects_set_aside_then_no_changes(bucket, tmp_path, capsys):
    src = f"s3://{bucket}/raw"
    for i in range(14):
        storage.put_bytes(storage.join(src, f"img/{i}.jpg"), jpeg(40, 48, seed=i))
    storage.put_bytes(storage.join(src, "labels.csv"),
                      b"key,label\n" + b"".join(b"img/%d.jpg,%s\n" % (i, b"ab"[i % 2:i % 2 + 1])
                                                for i in range(13)))
    doc = spec_doc(bucket, schedule=None,
                   source={"uri": src, "layout": "list", "list_uri": f"{src}/labels.csv"})
    (tmp_path / "pets.yaml").write_text(yaml.safe_dump(doc))
    assert main(["build", str(tmp_path / "pets.yaml"), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "listed 15 = packed 14 + quarantined 0 + not used 1" in out  # 13 images, the list
    assert "  not used not_listed: 1" in out
    assert main(["build", str(tmp_path / "pets.yaml"), "--workers", "1"]) == 0
    assert "no changes since the latest version" in capsys.readouterr().out
