"""Builders shared by the pipeline, DAG and Celery tests: a small labelled source in S3 with
one object of each bad kind, and a spec for it."""

from __future__ import annotations

from recforge import storage
from recforge.spec import parse_spec
from tests.common.helpers import jpeg, png

# A loader benchmark sized for a few dozen tiny images.
SMALL_BENCH = {"options": {"batch_size": 4, "data_shape": [3, 32, 32], "warmup_batches": 1,
                           "measure_batches": 4, "decode_records": 20, "thread_grid": []}}

BAD = {
    "cat/broken.jpg": "truncated",
    "dog/noise.jpg": "undecodable",
    "dog/empty.png": "zero_bytes",
    "cat/.hidden.jpg": "hidden_file",
    "cat/../escape.jpg": "unsafe_key",
    "notes.md": "unsupported_extension",
    "loose.jpg": "not_in_class_folder",
}


def make_source(bucket: str, classes=("cat", "dog", "eel"), per_class: int = 12) -> dict:
    objects = {}
    for c, cls in enumerate(classes):
        for i in range(per_class):
            sub = ["", "a/", "a/b/"][i % 3]
            data = png(50 + i, 70, seed=100 * c + i) if i % 4 == 0 else jpeg(
                60 + i, 300 + 5 * i, seed=100 * c + i)
            objects[f"{cls}/{sub}{i}.{'png' if i % 4 == 0 else 'jpg'}"] = data
    good = objects[f"{classes[0]}/a/1.jpg"]
    bad = {"cat/broken.jpg": good[: len(good) // 2], "dog/noise.jpg": b"\x00\x01" * 300,
           "dog/empty.png": b"", "cat/.hidden.jpg": good, "cat/../escape.jpg": good,
           "notes.md": b"# notes", "loose.jpg": good}
    objects.update({k: v for k, v in bad.items() if k.split("/")[0] in classes or "/" not in k})
    for key, data in objects.items():
        storage.s3_client().put_object(Bucket=bucket, Key=f"raw/{key}", Body=data)
    return objects


def spec_doc(bucket: str, name: str = "pets", **extra) -> dict:
    """A small spec as YAML would hold it: source and publish in ``bucket``."""
    return {"name": name, "source": {"uri": f"s3://{bucket}/raw"},
            "publish": {"uri": f"s3://{bucket}/datasets"},
            "splits": {"val_ratio": 0.25, "seed": 1},
            "pack": {"resize": 48, "shard_size": 7}, "bench": SMALL_BENCH, **extra}


def make_spec(bucket: str, **extra):
    return parse_spec(spec_doc(bucket, **extra))


def dag_specs(tmp_path, bucket: str, **extra):
    """A specs folder holding ``pets.yaml`` for the DAG tests (unscheduled, small shards,
    the small benchmark), with ``extra`` top-level fields; returns the folder."""
    import yaml

    specs = tmp_path / "specs"
    specs.mkdir()
    doc = {**spec_doc(bucket), "schedule": None, "pack": {"resize": 40, "shard_size": 10}}
    (specs / "pets.yaml").write_text(yaml.safe_dump({**doc, **extra}))
    return specs
