"""Classification sources in the shapes they ship, made in code (tiny images):

* ImageNet (ILSVRC2012) as extracted beside Kaggle's files: ``train/<wnid>/<wnid>_<n>.JPEG``
  (one folder per synset; ``n02105855_2933.JPEG`` is a PNG, as in the real train set), a
  flat ``val/ILSVRC2012_val_<8 digits>.JPEG``, ``test/ILSVRC2012_test_<8 digits>.JPEG``
  (no labels published), ``LOC_val_solution.csv`` (``ImageId,PredictionString``: the val
  image's boxes as ``wnid xmin ymin xmax ymax …`` with a trailing blank, rows in no order)
  and ``LOC_synset_mapping.txt`` (``n01440764 tench, Tinca tinca``).
* A Kaggle competition (Aerial Cactus Identification): ``train/<id>.jpg`` + ``train.csv``
  (``id,has_cactus``: the file name, 0 or 1), ``test/<id>.jpg`` unlabelled,
  ``sample_submission.csv``.
* Class folders with split folders: ``<split>/<class>/<image>`` (``validation/`` for val).

Each maker returns ``(objects, truth)``: the keys and bytes to upload, and each image that
must be packed → ``(split, label)`` (split ``None`` where the spec splits by hash).
"""

from __future__ import annotations

import json
from collections import Counter

from recforge import storage
from recforge.format import names
from tests.common.helpers import jpeg, png

# three real synsets and their LOC_synset_mapping.txt lines
SYNSETS = {"n01440764": "tench, Tinca tinca", "n01443537": "goldfish, Carassius auratus",
           "n02105855": "Shetland sheepdog, Shetland sheep dog, Shetland"}
# real train file numbers of each synset (ImageNet numbers them sparsely)
TRAIN_NUMBERS = {"n01440764": (10026, 10027, 10029), "n01443537": (10007, 10014),
                 "n02105855": (2933, 10001)}
PNG_IN_TRAIN = "train/n02105855/n02105855_2933.JPEG"  # a PNG under a .JPEG name, as shipped
# val image number → its synset (LOC_val_solution.csv lists them in no order)
VAL_LABELS = {3: "n02105855", 1: "n01440764", 5: "n01443537", 2: "n01443537",
              4: "n01440764"}


def val_key(n: int) -> str:
    return f"val/ILSVRC2012_val_{n:08d}.JPEG"


def val_solution(labels: dict[int, str]) -> bytes:
    """LOC_val_solution.csv: its header, and per image its boxes (two for some), each
    ``wnid xmin ymin xmax ymax``, with the trailing blank the real file has."""
    lines = ["ImageId,PredictionString"]
    for n, wnid in labels.items():
        boxes = f"{wnid} 12 7 40 44 " + (f"{wnid} 1 2 30 31 " if n % 2 else "")
        lines.append(f"ILSVRC2012_val_{n:08d},{boxes}")
    return ("\n".join(lines) + "\n").encode()


def imagenet() -> tuple[dict[str, bytes], dict[str, tuple[str, str]]]:
    """The ImageNet miniature: objects and truth (see the module doc)."""
    objects, truth, seed = {}, {}, 0
    for wnid, numbers in TRAIN_NUMBERS.items():
        for n in numbers:
            key, seed = f"train/{wnid}/{wnid}_{n}.JPEG", seed + 1
            objects[key] = png(40, 52, seed) if key == PNG_IN_TRAIN else jpeg(40, 52, seed)
            truth[key] = ("train", wnid)
    for n, wnid in VAL_LABELS.items():
        seed += 1
        objects[val_key(n)] = jpeg(44, 50, seed)
        truth[val_key(n)] = ("val", wnid)
    for n in (1, 2):
        objects[f"test/ILSVRC2012_test_{n:08d}.JPEG"] = jpeg(40, 40, 900 + n)
    objects["LOC_val_solution.csv"] = val_solution(VAL_LABELS)
    objects["LOC_synset_mapping.txt"] = "".join(
        f"{w} {d}\n" for w, d in SYNSETS.items()).encode()
    return objects, truth


# Kaggle's Aerial Cactus Identification: train.csv names each image by file name (32 hex
# digits + .jpg) and labels it 0 or 1 (has_cactus); the images sit in train/
KAGGLE_LABELS = {"0004be2cfeaba1c0361d39e2b000257b.jpg": "1",
                 "000c8a36845c0208e833c79c1bffedd1.jpg": "1",
                 "000d1e9a533f62e55c289303b072733d.jpg": "1",
                 "0011485b40695e9138e92d0b3fb55128.jpg": "1",
                 "0014d7a11e90b62848904c1418fc8cf2.jpg": "0"}
KAGGLE_TEST = ("000940378805c44108d287872b2f04ce.jpg", "0017242f54ececa4512b4d7937d1e21e.jpg")


def kaggle() -> tuple[dict[str, bytes], dict[str, tuple[None, str]]]:
    """A Kaggle competition's download: ``train/<id>`` labelled by ``train.csv``
    (``id,has_cactus``), ``test/<id>`` unlabelled, ``sample_submission.csv``."""
    objects, truth = {}, {}
    for i, (image_id, label) in enumerate(KAGGLE_LABELS.items()):
        objects[f"train/{image_id}"] = jpeg(32, 32, 300 + i)
        truth[f"train/{image_id}"] = (None, label)
    for i, image_id in enumerate(KAGGLE_TEST):
        objects[f"test/{image_id}"] = jpeg(32, 32, 400 + i)
    objects["train.csv"] = ("id,has_cactus\n" + "".join(
        f"{i},{lab}\n" for i, lab in KAGGLE_LABELS.items())).encode()
    objects["sample_submission.csv"] = ("id,has_cactus\n" + "".join(
        f"{i},0.5\n" for i in KAGGLE_TEST)).encode()
    return objects, truth


SPLIT_FOLDER_IMAGES = {"train": {"cat": 3, "dog": 2}, "validation": {"cat": 1, "dog": 2},
                       "test": {"cat": 1, "dog": 1}}


def split_folders() -> tuple[dict[str, bytes], dict[str, tuple[str, str]]]:
    """Class folders under split folders (``validation/`` is val), one image deeper."""
    objects, truth, seed = {}, {}, 500
    for folder, classes in SPLIT_FOLDER_IMAGES.items():
        split = {"validation": "val"}.get(folder, folder)
        for cls, n in classes.items():
            for i in range(n):
                key, seed = f"{folder}/{cls}/{'night/' if i == 1 else ''}{cls}.{i}.jpg", seed + 1
                objects[key] = jpeg(36, 44, seed)
                truth[key] = (split, cls)
    return objects, truth


def upload(bucket: str, prefix: str, objects: dict[str, bytes]) -> None:
    for key, data in objects.items():
        storage.put_bytes(storage.join(f"s3://{bucket}", prefix, key), data)


def built(out: str) -> tuple[dict[str, tuple[str, str]], dict, list[dict], dict[str, str]]:
    """What a built dataset ``out`` holds: source key → (split, class name) of every record,
    summary.json, the quarantine entries, and not_used.jsonl's key → reason."""
    classes = storage.read_json(storage.join(out, names.CLASSES))["classes"]
    records = {}
    for r in storage.iter_jsonl(storage.join(out, names.RECORDS)):
        assert r["source_key"] not in records, f"{r['source_key']} packed twice"
        records[r["source_key"]] = (r["split"], classes[int(r["label"])])
    summary = storage.read_json(storage.join(out, names.SUMMARY))
    refused = [json.loads(line) for line in storage.get_bytes(
        storage.join(out, names.QUARANTINE)).decode().splitlines() if line]
    not_used_uri = storage.join(out, names.NOT_USED)
    not_used = {r["key"]: r["reason"] for r in storage.iter_jsonl(not_used_uri)} \
        if storage.exists(not_used_uri) else {}
    return records, summary, refused, not_used


def check_build(out: str, truth: dict, not_used: dict[str, str], used: list[str]) -> dict:
    """Assert ``out`` packed exactly ``truth`` (each image in its split with its label;
    split ``None``: any of train/val, by hash), set aside exactly ``not_used``, used
    ``used``, quarantined nothing, and that its counts reconcile; returns the records."""
    records, summary, refused, set_aside = built(out)
    assert refused == []
    assert sorted(records) == sorted(truth)
    for key, (split, label) in truth.items():
        assert records[key][1] == label, key
        assert records[key][0] == split if split else records[key][0] in ("train", "val"), key
    assert set_aside == not_used
    assert summary.get("used", []) == sorted(used)
    assert summary["listed"] == len(truth) + len(not_used) + len(used)
    assert summary["packed"] == len(truth) + len(used) and summary["quarantined"] == 0
    assert summary["listed"] == summary["packed"] + summary["quarantined"] + \
        summary.get("not_used", 0)
    assert summary.get("not_used_by_reason", {}) == dict(Counter(not_used.values()))
    return records
