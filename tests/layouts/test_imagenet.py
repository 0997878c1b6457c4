"""ImageNet (ILSVRC2012) as shipped, built from docs/datasets.md's spec on the local S3
server: train labelled by its synset folders, the flat val by LOC_val_solution.csv."""

from __future__ import annotations

from recforge import run_state
from tests.common import mini_imagenet
from tests.common.datasets_doc import spec_from_doc
from tests.common.detection import build


def test_imagenet_keeps_its_splits_and_synsets(bucket):
    objects, truth = mini_imagenet.imagenet()
    mini_imagenet.upload(bucket, "imagenet", objects)
    spec = spec_from_doc("ImageNet", bucket, **{"pack.resize": 32})
    assert spec.source.uri == f"s3://{bucket}/imagenet/"
    run = build(spec, "r1")
    records = mini_imagenet.check_build(
        run_state.out(run), truth,
        not_used={"test/ILSVRC2012_test_00000001.JPEG": "not_listed",
                  "test/ILSVRC2012_test_00000002.JPEG": "not_listed",
                  "LOC_synset_mapping.txt": "not_a_list"},
        used=["LOC_val_solution.csv"])
    # the val images have no label in their path: every one came from its row
    assert {k: v for k, v in records.items() if k.startswith("val/")} == {
        mini_imagenet.val_key(n): ("val", wnid) for n, wnid in mini_imagenet.VAL_LABELS.items()}
    assert records[mini_imagenet.PNG_IN_TRAIN] == ("train", "n02105855")
