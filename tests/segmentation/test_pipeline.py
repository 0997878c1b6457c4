"""``recforge build`` on a segmentation spec (local storage, two pack processes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recforge import pipeline
from recforge.spec import parse_spec
from tests.common import mxnet_readers
from tests.common.segdata import (
    block_ids,
    city_spec_doc,
    cityscapes_color,
    coord_image,
    expected_train_ids,
    png,
    write_city_pairs,
)
from tests.common.sources import SMALL_BENCH

pytestmark = pytest.mark.pipeline  # whole builds: a slow tier


def test_build_segmentation_with_process_pool(tmp_path):
    src = tmp_path / "src"
    truth = {}
    for n in range(9):
        ids = block_ids(64, 48, [*range(34), 255], block=4, seed=10 + n)
        img, mask = src / "img" / f"a/{n}.png", src / "lbl" / f"a/{n}_color.png"
        img.parent.mkdir(parents=True, exist_ok=True)
        mask.parent.mkdir(parents=True, exist_ok=True)
        # distinct photos: identical ones in two splits would (rightly) fail the quality gate
        img.write_bytes(png(np.random.default_rng(n).integers(0, 256, (48, 64, 3), np.uint8)))
        mask.write_bytes(png(cityscapes_color(ids)))
        truth[f"img/a/{n}.png"] = ids
    (src / "img" / "a" / "lonely.png").write_bytes(png(coord_image(64, 48)))  # no mask
    spec = parse_spec(city_spec_doc(src, tmp_path / "pub", bench=SMALL_BENCH))
    result = pipeline.build(spec, run_id="seg1", workers=2)
    summary = result["merge"]
    assert summary["listed"] == 19 and summary["quarantined"] == 1
    assert sum(summary["splits"].values()) == 9
    assert result["quality_gate"]["ok"], result["quality_gate"]

    out = tmp_path / "pub" / "city" / result["publish"]["version"]
    records = [json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines()]
    for split in summary["splits"]:
        ds = mxnet_readers.read("segmentation_pairs", root=str(out), split=split)
        by_key = {r["key"]: r["source_key"] for r in records if r["split"] == split}
        for key, mask in zip(ds["keys"], ds["masks"], strict=True):
            np.testing.assert_array_equal(mask, expected_train_ids(truth[by_key[key]]))


def test_changed_label_definition_fails_against_the_published_version(tmp_path):
    import pytest

    from recforge import releases, storage
    from recforge.errors import LabelMapError
    from recforge.run import Run
    from recforge.stages.remap_labels import remap_labels

    base = {"name": "city", "task": "segmentation",
            "source": {"uri": str(tmp_path / "src"), "pairs": {}},
            "segmentation": {"colormap": "cityscapes", "target": "trainId"},
            "publish": {"uri": str(tmp_path / "pub")}}
    spec = parse_spec(base)
    storage.write_json(releases.version_uri(spec, "v1", "classes.json"),
                       {"classes": ["road", "sidewalk"]})
    storage.write_json(releases.version_uri(spec, "v1", "manifest.json"), {"version": "v1"})
    storage.write_json(releases.latest_uri(spec), {"version": "v1"})
    with pytest.raises(LabelMapError, match="v1 has \\['road', 'sidewalk'\\]"):
        remap_labels(Run(spec, "r"))
    relaxed = parse_spec({**base, "labels": {"allow_renumbering": True}})
    assert remap_labels(Run(relaxed, "r"))["num_classes"] == 19
    assert storage.read_json(Run(relaxed, "r").classes)["based_on_version"] == "v1"


def test_segmentation_nights_skip_without_change_and_rebuild_when_a_mask_changes(tmp_path):
    """A segmentation dataset has the classification one's nightly behaviour: the same
    images and masks again publish nothing; a mask with new bytes under the same key is a
    change (the record's label bytes depend on it) and is built and reported."""
    src = tmp_path / "src"
    write_city_pairs(src, 6, seed=40)
    spec = parse_spec(city_spec_doc(src, tmp_path / "pub", bench=SMALL_BENCH))
    first = pipeline.build(spec, run_id="s1", workers=1)
    again = pipeline.build(spec, run_id="s2", workers=1)
    assert again["no_change"] and again["publish"] is None
    assert again["split"]["content_id"] == first["split"]["content_id"]
    ids = block_ids(32, 24, [*range(34), 255], block=4, seed=99)
    (src / "lbl" / "a" / "3_color.png").write_bytes(png(cityscapes_color(ids)))
    third = pipeline.build(spec, run_id="s3", workers=1)
    assert not third["no_change"]
    assert third["split"]["content_id"] != first["split"]["content_id"]
    changes = third["merge"]["changes"]
    assert changes["objects"]["changed"]["count"] == 1, changes
    assert third["publish"]["version"] != first["publish"]["version"]
