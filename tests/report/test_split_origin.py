"""Where each split came from and what was set aside, as the report and the DAG doc say it;
the checklist's warnings on official splits with their advice; class counts per split.

One real build (class folders with split folders, one photo copied into train and val)
through the real stages on the local S3 server, the checklist on its output, and the report
on both; the words per layout are checked on parsed specs.
"""

from __future__ import annotations

import json
import re

import pytest

from recforge import run_state, storage
from recforge.format import names
from recforge.orchestration.docs import dag_doc
from recforge.quality import run_and_upload
from recforge.report import build_report
from recforge.report.advice import explain
from recforge.report.origin import accounting, split_origin, splits_from_source
from recforge.spec import parse_spec
from tests.common.detection import build
from tests.common.helpers import jpeg
from tests.report.test_report import Page


def spec_of(**fields):
    doc = {"name": "pets", "source": {"uri": "s3://raw-data/pets"},
           "publish": {"uri": "s3://datasets"}}
    for key, value in fields.items():
        doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
    return parse_spec(doc)


# ---- the words, per way of splitting ------------------------------------------------------

def test_a_hash_split_names_its_ratios_and_seed():
    spec = spec_of(splits={"val_ratio": 0.2, "test_ratio": 0.1, "seed": 7})
    assert split_origin(spec.public_dump()) == (
        "by a hash of the source key (val_ratio 0.2, test_ratio 0.1, seed 7)")
    assert not splits_from_source(spec.public_dump())
    assert "val 0.2, test 0.1, seed 7 (by a hash of the source key)" in dag_doc(spec)


def test_split_folders_name_the_folders_of_each_split():
    spec = spec_of(splits={"from": "source", "folders": {"train": ["trn"], "val": ["dev"]}})
    assert splits_from_source(spec.public_dump())
    assert split_origin(spec.public_dump()) == (
        "from the source: split folders, <prefix>/<split folder>/<class>/… "
        "(train: trn/; val: dev/)")
    doc = dag_doc(spec)
    assert "by a hash" not in doc
    assert "| Splits | kept from the source (`splits.from: source`): split folders" in doc


def test_list_files_coco_and_voc_splits_say_where_they_come_from():
    lists = spec_of(splits={"from": "source"}, source={
        "layout": "list", "lists": {"train": "s3://raw-data/pets/train.csv",
                                    "val": "s3://raw-data/pets/val.csv"}})
    assert split_origin(lists.public_dump()) == (
        "from the source: one list file per split (train: s3://raw-data/pets/train.csv; "
        "val: s3://raw-data/pets/val.csv)")
    assert "list files (`source.lists`" in dag_doc(lists)
    one = spec_of(splits={"from": "source"}, source={
        "layout": "list", "list_uri": "s3://raw-data/pets/all.csv",
        "columns": {"split": "subset"}})
    assert split_origin(one.public_dump()) == (
        "from the source: the split column ('subset') of the list file "
        "s3://raw-data/pets/all.csv")
    coco = spec_of(task="detection", splits={"from": "source"},
                   source={"layout": "coco"})
    assert split_origin(coco.public_dump()).startswith(
        "from the source: COCO's annotation files, annotations/instances_<split><year>.json")
    assert "instances_<split><year>.json` files" in dag_doc(coco)
    voc = spec_of(task="detection", splits={"from": "source"}, source={
        "layout": "voc", "voc": {"years": [2007, 2012],
                                 "image_sets": {"train": ["trainval"], "val": ["test"]}}})
    assert split_origin(voc.public_dump()) == (
        "from the source: VOC's ImageSets/Main lists (train: trainval.txt; val: test.txt)")
    assert "`ImageSets/Main/<set>.txt` lists" in dag_doc(voc)


def test_accounting_adds_up_with_the_not_used():
    assert accounting({"listed": 10, "packed": 6, "quarantined": 1, "not_used": 3,
                       "not_used_by_reason": {"not_in_image_set": 2, "segmentation": 1}}) == (
        "listed 10 = packed 6 + quarantined 1 + not used 3 (not used: not_in_image_set 2, "
        "segmentation 1)")
    assert accounting({"listed": 4, "packed": 4, "quarantined": 0}) == (
        "listed 4 = packed 4 + quarantined 0 + not used 0")
    assert accounting({}) == ""


def test_advice_on_official_splits_says_why_they_warn_and_how_to_make_them_fail():
    words = explain("split_content", "warning", "warn", splits_from_source=True)
    assert "source's own splits" in words
    assert "with splits.from: source it warns by default" in words
    assert "set quality.severity.split_content: fail to make it block publish" in words
    hashed = explain("split_content", "warning", "warn")
    assert "this spec sets quality.severity.split_content: warn" in hashed
    assert "splits.from" not in hashed
    keys = explain("split_keys", "failed", "fail", splits_from_source=True)
    assert "fix the source's split" in keys and "by their hash" not in keys
    case = explain("class_name_case", "warning", "warn")
    assert "labels.case: lower" in case and "it warns by default" in case


# ---- one build with official splits -------------------------------------------------------

CLASSES = ("cat", "dog")


def official_split_source(bucket: str) -> tuple[str, str]:
    """``<prefix>/train/<class>/`` and ``<prefix>/val/<class>/``; one photo is in both
    splits under different names (as public datasets ship some). Returns its two keys."""
    objects = {}
    for c, cls in enumerate(CLASSES):
        for i in range(3):
            objects[f"train/{cls}/{i}.jpg"] = jpeg(40, 56, seed=10 * c + i)
        objects[f"val/{cls}/v{c}.jpg"] = jpeg(40, 56, seed=100 + c)
    copy = ("train/cat/0.jpg", "val/cat/copy_of_0.jpg")
    objects[copy[1]] = objects[copy[0]]
    for key, data in objects.items():
        storage.put_bytes(f"s3://{bucket}/raw/{key}", data)
    return copy


@pytest.fixture
def built(bucket, tmp_path):
    copy = official_split_source(bucket)
    spec = parse_spec({"name": "pets", "source": {"uri": f"s3://{bucket}/raw"},
                       "publish": {"uri": f"s3://{bucket}/datasets"},
                       "splits": {"from": "source"},
                       "quality": {"class_balance_split": "each",
                                   "class_balance_min_ratio": 0.6},
                       "pack": {"resize": 32, "shard_size": 8}})
    run = build(spec, "r1")
    result = run_and_upload(run_state.out(run), spec.quality, docs_uri=run_state.quality_docs(run),
                            source_manifest=run.source_manifest, pack=spec.pack,
                            task=spec.task, dataset=spec.name, run_name=run.run_id)
    return spec, run, result, copy


def report_of(spec, run, tmp_path) -> Page:
    about = {"dataset": spec.name, "version": "v1", "run_id": run.run_id, "task": spec.task,
             "spec": spec.public_dump(), "uri": f"{spec.publish.uri}/pets/v1", "blocked": []}
    path = build_report(run_state.out(run), tmp_path / "report.html", about=about)
    return Page(path.read_text(encoding="utf-8"))


def test_official_splits_build_passes_with_warnings_naming_both_keys(built, tmp_path):
    spec, run, result, (train_key, val_key) = built
    records = list(storage.iter_jsonl(storage.join(run_state.out(run), names.RECORDS)))
    where = {r["source_key"]: r["split"] for r in records}
    assert where == {**{f"train/{c}/{i}.jpg": "train" for c in CLASSES for i in range(3)},
                     "val/cat/v0.jpg": "val", "val/dog/v1.jpg": "val", val_key: "val"}
    assert result["ok"] and result["failed"] == []
    # the copy is a byte-identical image and a near-duplicate across the official splits
    assert set(result["warned"]) == {"split_content", "near_duplicates", "class_balance"}
    content = result["checks"]["split_content"]
    assert content["severity"] == "warn"
    assert content["observed"] == "1 identical images (SHA-256) in more than one split"
    assert train_key in content["evidence"][0] and val_key in content["evidence"][0]
    near = result["checks"]["near_duplicates"]
    assert near["severity"] == "warn" and "0 bits" in near["evidence"][0]
    balance = result["checks"]["class_balance"]["observed"]
    assert balance == ("smallest/largest in val (the worst split) = 0.500 (dog 1 / cat 2 "
                       "records); per split train 1.000, val 0.500")

    page = report_of(spec, run, tmp_path)
    text = " ".join(page.text)
    assert page.summary["splits"] == (
        "from the source: split folders, <prefix>/<split folder>/<class>/… (train: train/, "
        "training/; val: val/, validation/, valid/; test: test/, testing/)")
    summary = storage.read_json(storage.join(run_state.out(run), names.SUMMARY))
    assert summary["listed"] == summary["packed"] + summary["quarantined"] + \
        summary.get("not_used", 0) == 9
    assert page.summary["listed = packed + quarantined + not used"] == (
        "listed 9 = packed 9 + quarantined 0 + not used 0")
    assert page.summary["records"] == "train 6, val 3"
    assert "with splits.from: source it warns by default" in text
    assert "set quality.severity.split_content: fail to make it block publish" in text
    assert "set quality.severity.near_duplicates: fail to make it block publish" in text
    assert f"{val_key}" in text and f"{train_key}" in text
    assert ("The splits are the source's own (splits.from: source): the pairs are kept as "
            "the publisher ships them.") in text


def test_the_report_shows_class_counts_per_split(built, tmp_path):
    spec, run, _, _ = built
    html = build_report(run_state.out(run), tmp_path / "r.html", about={
        "spec": spec.public_dump(), "uri": "x", "blocked": []}).read_text(encoding="utf-8")
    table = html[html.index("records per class and split</h3>"):]
    cells = re.findall(r"<t[dh](?: [^>]*)?>(.*?)</t[dh]>", table[:table.index("</table>")])
    assert cells == ["class", "train", "val", "cat", "3", "2", "dog", "3", "1",
                     "<b>smallest / largest</b>", "1.000", "0.500"]


def test_the_report_lists_objects_set_aside(built, tmp_path):
    """A version whose download held objects that are no part of it (as a VOC download's
    segmentation files): the counts add up with them, and the quarantine section lists
    them apart from the quarantined."""
    spec, run, _, _ = built
    summary = storage.read_json(storage.join(run_state.out(run), names.SUMMARY))
    summary.update(listed=summary["listed"] + 2, not_used=2,
                   not_used_by_reason={"not_in_image_set": 2})
    storage.write_json(storage.join(run_state.out(run), names.SUMMARY), summary)
    rows = [{"key": "val/owl/a.jpg", "reason": "not_in_image_set", "detail": "in no list"},
            {"key": "val/owl/b.jpg", "reason": "not_in_image_set", "detail": "in no list"}]
    storage.put_bytes(storage.join(run_state.out(run), names.NOT_USED),
                      "".join(json.dumps(r) + "\n" for r in rows).encode())
    page = report_of(spec, run, tmp_path)
    text = " ".join(page.text)
    assert page.summary["listed = packed + quarantined + not used"] == (
        "listed 11 = packed 9 + quarantined 0 + not used 2 (not used: not_in_image_set 2)")
    assert page.summary["not used (set aside, not bad data)"].startswith("2: objects of the "
                                                                         "download")
    assert "Not used (2)" in text and "val/owl/a.jpg" in text and "val/owl/b.jpg" in text
    assert "Nothing was quarantined." in text
