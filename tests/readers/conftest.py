"""Three tiny published versions, one per task kind, each built once per module on the local
S3 server with ``recforge.pipeline.build`` and copied to a local folder."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from recforge import pipeline, storage
from recforge.spec import load_spec, parse_spec
from tests.common.segdata import city_spec_doc, write_city_pairs
from tests.common.sources import SMALL_BENCH, make_source, make_spec

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Published:
    uri: str  # the version on S3
    root: str  # the dataset prefix on S3 (latest.json beside the versions)
    local: Path  # the version copied to a folder
    splits: dict  # split → records

    def files(self, split: str, mask: bool = False) -> tuple[str, str]:
        """Local ``(idx, rec)`` of a split, as MXNet's reader takes them."""
        stem = f"{split}_mask" if mask else split
        return str(self.local / f"{stem}.idx"), str(self.local / f"{stem}.rec")


def _bucket() -> str:
    name = f"readers-{uuid.uuid4().hex[:10]}"
    storage.s3_client().create_bucket(Bucket=name)
    return name


def _published(result: dict, root: str, local: Path) -> Published:
    version = result["publish"]["uri"]
    for obj in storage.list_objects(version):
        storage.download(storage.join(version, obj.key), local / obj.key)
    splits = {s: n for s, n in result["merge"]["splits"].items() if n}
    return Published(version, root, local, splits)


@pytest.fixture(scope="module")
def classification(s3_endpoint, tmp_path_factory) -> Published:
    bucket = _bucket()
    make_source(bucket, per_class=8)
    result = pipeline.build(make_spec(bucket), run_id="c1", workers=1)
    return _published(result, f"s3://{bucket}/datasets/pets", tmp_path_factory.mktemp("cls"))


@pytest.fixture(scope="module")
def detection(s3_endpoint, tmp_path_factory) -> Published:
    from recforge.dev import detection_sample

    bucket = _bucket()
    detection_sample.upload(f"s3://{bucket}/raw", "voc", count=12)
    spec = load_spec(REPO / "include" / "datasets" / "demo_detection.yaml").with_overrides({
        "source.uri": f"s3://{bucket}/raw", "publish.uri": f"s3://{bucket}/datasets",
        "pack.resize": 96, "bench.options": {**SMALL_BENCH["options"], "loader": "detection"},
        "bench.floors": {}})
    result = pipeline.build(spec, run_id="d1", workers=1)
    return _published(result, f"s3://{bucket}/datasets/{spec.name}",
                      tmp_path_factory.mktemp("det"))


@pytest.fixture(scope="module")
def segmentation(s3_endpoint, tmp_path_factory) -> Published:
    bucket = _bucket()
    src = tmp_path_factory.mktemp("segsrc")
    write_city_pairs(src, 8, seed=3)
    spec = parse_spec(city_spec_doc(src, f"s3://{bucket}/datasets", bench=SMALL_BENCH))
    result = pipeline.build(spec, run_id="s1", workers=1)
    return _published(result, f"s3://{bucket}/datasets/city", tmp_path_factory.mktemp("seg"))
