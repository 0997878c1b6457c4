"""Class folders: split folders kept under ``splits.from: source`` and refused under hash,
an unknown split folder refused naming it, and ``labels.case`` through a build; the doc's
spec built on the local S3 server."""

from __future__ import annotations

import pytest

from recforge import run_state, storage
from recforge.errors import SpecError
from recforge.layouts import class_folders
from recforge.spec import parse_spec
from tests.common import mini_imagenet
from tests.common.datasets_doc import spec_from_doc
from tests.common.detection import build
from tests.common.helpers import jpeg


def make_spec(splits: dict | None = None, **extra):
    return parse_spec({"name": "pets", "task": "classification", "schedule": None,
                       "source": {"uri": "s3://raw-data/pets/"},
                       "publish": {"uri": "s3://datasets/recordio/"},
                       "splits": splits or {}, **extra})


def rows(*keys: str) -> list[dict]:
    return [{"key": k, "size": 10, "etag": f"e-{k}"} for k in keys]


def test_split_folders_give_the_split_and_the_class():
    objects, truth = mini_imagenet.split_folders()
    out = class_folders.flatten(rows(*objects, "loose.jpg", "val/x.jpg"),
                                make_spec({"from": "source"}))
    assert {i["source_key"]: (i["split"], i["class_name"]) for i in out.items} == truth
    assert {e.source_key: e.reason for e in out.refused} == {
        "loose.jpg": "not_in_class_folder", "val/x.jpg": "not_in_class_folder"}
    names = [i["name"] for i in out.items]
    assert len(set(names)) == len(names)


def test_split_folders_by_hash_are_refused_with_the_fix():
    objects, _ = mini_imagenet.split_folders()
    with pytest.raises(SpecError, match=r"split names \['test', 'train', 'validation'\].*"
                       r"splits.from: source"):
        class_folders.flatten(rows(*objects), make_spec())


@pytest.mark.parametrize("folders", [None, {"train": ["train"], "val": ["val", "dev"]}])
def test_an_unknown_split_folder_is_refused_naming_it(folders):
    splits = {"from": "source", **({"folders": folders} if folders else {})}
    keys = ("train/cat/a.jpg", "dev/cat/b.jpg", "extra/cat/c.jpg")
    with pytest.raises(SpecError, match=r"\['dev', 'extra'\]" if not folders else
                       r"\['extra'\].*splits.folders"):
        class_folders.flatten(rows(*keys), make_spec(splits))


def test_splits_folders_maps_a_folder_name():
    out = class_folders.flatten(rows("train/cat/a.jpg", "dev/cat/b.jpg"), make_spec(
        {"from": "source", "folders": {"train": ["train"], "val": ["dev"]}}))
    assert {i["source_key"]: i["split"] for i in out.items} == {
        "train/cat/a.jpg": "train", "dev/cat/b.jpg": "val"}


def test_class_folders_by_hash_carry_no_split():
    out = class_folders.flatten(rows("cat/a.jpg", "dog/b/c.jpg"), make_spec())
    assert [(i["class_name"], "split" in i) for i in out.items] == [("cat", False),
                                                                    ("dog", False)]


def test_split_folders_build_from_the_doc(bucket):
    objects, truth = mini_imagenet.split_folders()
    mini_imagenet.upload(bucket, "pets", objects)
    run = build(spec_from_doc("Class folders with split folders", bucket,
                              **{"pack.resize": 32}), "r1")
    mini_imagenet.check_build(run_state.out(run), truth, not_used={}, used=[])


def test_labels_case_lower_merges_class_names_in_a_build(bucket):
    for i, folder in enumerate(("Dog", "DOG", "dog", "Cat")):
        storage.put_bytes(f"s3://{bucket}/raw/{folder}/{i}.jpg", jpeg(32, 32, seed=i))
    spec = parse_spec({"name": "pets", "task": "classification", "schedule": None,
                       "source": {"uri": f"s3://{bucket}/raw"},
                       "publish": {"uri": f"s3://{bucket}/datasets"},
                       "labels": {"case": "lower"}, "pack": {"resize": 32}})
    run = build(spec, "r1")
    truth = {f"{f}/{i}.jpg": (None, f.lower()) for i, f in enumerate(("Dog", "DOG", "dog",
                                                                        "Cat"))}
    mini_imagenet.check_build(run_state.out(run), truth, not_used={}, used=[])
    assert storage.read_json(f"{run_state.out(run)}/classes.json")["classes"] == ["cat", "dog"]
