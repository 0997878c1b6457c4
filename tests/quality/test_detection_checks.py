"""The checklist on a detection dataset: label arrays, objects per image, box sizes, class
balance by objects, the accounting of annotations, leakage and image sizes.

Each test writes a small detection output folder as merge publishes it (``<split>.rec`` and
``.idx`` of tiny JPEGs whose headers carry the label arrays, ``records.jsonl``,
``classes.json``, ``summary.json``, ``quarantine.jsonl``, ``source_manifest.jsonl``),
injects one fault and runs the gate on the folder (``run_quality_gate``), which re-reads the
records from the ``.rec``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from recforge import quality as q
from recforge.format import detection_label as dl
from recforge.quality.inputs import read_manifest
from recforge.spec.quality import QualitySpec

CLASSES = ["cat", "dog", "owl"]
WIDTH, HEIGHT = 64, 48
PACK = {"resize": 0, "color": 1}
SPLITS = (("train", 24), ("val", 9))


def _objects(rng, k: int) -> list[tuple]:
    """1-3 objects, classes in turn, boxes of 16-32 x 12-24 pixels of the stored image."""
    out = []
    for j in range(1 + k % 3):
        w, h = rng.uniform(0.25, 0.5), rng.uniform(0.25, 0.5)
        x0, y0 = rng.uniform(0, 1 - w), rng.uniform(0, 1 - h)
        out.append(((k + j) % len(CLASSES), x0, y0, x0 + w, y0 + h, float(j == 2)))
    return out


def write_detection(root: Path, layout: str = "voc", objects=_objects) -> None:
    """A consistent detection dataset: the records, listing, summary and .rec agree.

    ``voc``: each record accounts for its image and its ``Annotations/<id>.xml``; ``coco``:
    the records carry no annotation key, one ``annotations/instances_<split>.json`` each
    split was read from is listed. ``objects(rng, k)`` gives record k's objects."""
    import cv2

    from recforge import phash
    from recforge.format import recordio

    rng = np.random.default_rng(7)
    records, listing = [], []
    for split, n in SPLITS:
        with recordio.RecordWriter(root / f"{split}.rec", root / f"{split}.idx") as w:
            for k in range(n):
                coarse = rng.integers(0, 255, (8, 9, 3)).astype(np.uint8)  # distinct dHashes
                img = cv2.resize(coarse, (WIDTH, HEIGHT), interpolation=cv2.INTER_NEAREST)
                data = cv2.imencode(".jpg", img)[1].tobytes()
                found = objects(rng, k)
                label = dl.encode(WIDTH, HEIGHT, found)
                payload = recordio.pack_image_record(label, k, data)
                stem = f"{split}_{k:03d}"
                key = f"JPEGImages/{stem}.jpg" if layout == "voc" else f"images/{stem}.jpg"
                ann = f"Annotations/{stem}.xml" if layout == "voc" else None
                records.append({
                    "key": k, "split": split, "offset": w.write(k, payload),
                    "length": len(payload), "height": HEIGHT, "width": WIDTH, "channels": 3,
                    "label": label, "class_name": None, "name": key, "source_key": key,
                    "source_etag": f"e-{stem}", "source_sha256": hashlib.sha256(data).hexdigest(),
                    "decode_status": "ok", "phash": phash.dhash(img), "annotation_key": ann,
                    "num_objects": len(found)})
                listing.append({"key": key, "size": len(data), "etag": f"e-{stem}"})
                if ann:
                    listing.append({"key": ann, "size": 400, "etag": f"a-{stem}"})
        if layout == "coco":
            listing.append({"key": f"annotations/instances_{split}.json", "size": 9000,
                            "etag": f"j-{split}"})
    listing.append({"key": "README.txt", "size": 10, "etag": "e-readme"})
    quarantine = [{"source_key": "README.txt", "stage": "flatten",
                   "reason": "not_in_detection_layout"}]
    _write_jsonl(root / "records.jsonl", records)
    _write_jsonl(root / "source_manifest.jsonl", listing)
    _write_jsonl(root / "quarantine.jsonl", quarantine)
    (root / "classes.json").write_text(json.dumps({
        "num_classes": len(CLASSES), "classes": CLASSES, "ids": {c: i for i, c in
                                                                 enumerate(CLASSES)},
        "based_on_version": None, "task": "detection"}))
    (root / "summary.json").write_text(json.dumps({
        "listed": len(listing), "packed": len(listing) - 1, "quarantined": 1,
        "splits": dict(SPLITS), "quarantined_by_reason": {"not_in_detection_layout": 1}}))


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def edit_records(root: Path, fn) -> None:
    rows = _read_jsonl(root / "records.jsonl")
    fn(rows)
    _write_jsonl(root / "records.jsonl", rows)


def set_object(row: dict, i: int, **values) -> None:
    """Set fields (dl.FIELDS) of object ``i`` of a record's label array."""
    for name, v in values.items():
        row["label"][dl.HEADER_WIDTH + i * dl.OBJECT_WIDTH + dl.FIELDS.index(name)] = v


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("docs")


def gate(root: Path, docs: Path, quality: QualitySpec | None = None, pack=None) -> dict:
    return q.run_quality_gate(str(root), quality or QualitySpec(), docs_dir=docs,
                              pack=pack or PACK, task="detection", run_name="test")


DETECTION_RAN = {"decode", "index", "labels", "image_size", "sources", "class_balance",
                 "split_keys", "split_content", "near_duplicates", "objects_per_image",
                 "box_size", "class_name_case"}


def test_a_clean_voc_dataset_passes(tmp_path, docs):
    write_detection(tmp_path)
    result = gate(tmp_path, docs)
    assert result["ok"] and result["warned"] == [], q.format_table(result)
    ran = {n for n, c in result["checks"].items() if c["status"] == "passed"}
    assert ran == DETECTION_RAN
    assert result["checks"]["masks"]["status"] == "not run"
    # every record re-read from the .rec: header label arrays equal the manifest's
    assert "0 of 33 re-read from the .rec failed" in result["checks"]["decode"]["observed"]
    assert result["checks"]["class_balance"]["observed"].endswith("objects)")
    # the images and their VOC annotations, each accounted once
    assert "listed 67, packed 66, quarantined 1; 0 unaccounted" in \
        result["checks"]["sources"]["observed"]
    assert (docs / result["checks"]["box_size"]["docs_page"]).exists()
    assert "checklist-objects" in result["checks"]["box_size"]["docs_page"]


def test_a_clean_coco_dataset_accounts_its_annotation_files_as_used(tmp_path, docs):
    write_detection(tmp_path, layout="coco")
    result = gate(tmp_path, docs)
    assert result["ok"], q.format_table(result)
    observed = result["checks"]["sources"]["observed"]
    assert "2 annotation files used; 0 unaccounted" in observed, observed


def test_a_quarantined_coco_annotation_file_is_not_used_too(tmp_path, docs):
    write_detection(tmp_path, layout="coco")
    entries = _read_jsonl(tmp_path / "quarantine.jsonl")
    entries.append({"source_key": "annotations/instances_val.json", "stage": "flatten",
                    "reason": "annotation_unparsable"})
    _write_jsonl(tmp_path / "quarantine.jsonl", entries)
    result = gate(tmp_path, docs)
    assert result["ok"], q.format_table(result)
    assert "1 annotation files used" in result["checks"]["sources"]["observed"]


def test_a_voc_annotation_not_accounted_by_its_record_fails_sources(tmp_path, docs):
    write_detection(tmp_path)

    def forget(rows):
        rows[4]["annotation_key"] = None
    edit_records(tmp_path, forget)
    result = gate(tmp_path, docs)
    assert result["failed"] == ["sources"], q.format_table(result)
    assert "Annotations/train_004.xml" in " ".join(result["checks"]["sources"]["evidence"])


def test_a_refused_object_of_an_annotation_does_not_count_as_a_source(tmp_path, docs):
    write_detection(tmp_path)
    entries = _read_jsonl(tmp_path / "quarantine.jsonl")
    entries.append({"source_key": "Annotations/train_003.xml", "stage": "pack",
                    "reason": "degenerate_box", "detail": "xmin 30 >= xmax 12",
                    "part": "object 3", "box": [30, 5, 12, 20]})
    _write_jsonl(tmp_path / "quarantine.jsonl", entries)
    summary = json.loads((tmp_path / "summary.json").read_text())
    summary.update(objects_quarantined=1, objects_quarantined_by_reason={"degenerate_box": 1})
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    result = gate(tmp_path, docs)
    assert result["ok"], q.format_table(result)
    assert "quarantined 1; 0 unaccounted, 0 counted twice" in \
        result["checks"]["sources"]["observed"]


def _box_outside(rows):
    set_object(rows[3], 0, xmax=1.2)


def _xmin_not_below_xmax(rows):
    set_object(rows[5], 0, xmin=0.6, xmax=0.6)


def _ymin_above_ymax(rows):
    set_object(rows[7], 0, ymin=0.8, ymax=0.3)


def _class_out_of_range(rows):
    set_object(rows[2], 0, class_id=3.0)


def _class_not_an_integer(rows):
    set_object(rows[2], 0, class_id=1.5)


def _difficult_not_a_flag(rows):
    set_object(rows[2], 0, difficult=2.0)


def _header_b_wrong(rows):
    rows[6]["label"][1] = 5.0


def _values_not_whole_objects(rows):
    rows[6]["label"] = rows[6]["label"][:-2]


def _label_size_not_the_image(rows):
    rows[6]["label"][2] = 128.0


def _padding_beside_objects(rows):
    rows[6]["label"] += list(dl.PADDING)
    rows[6]["num_objects"] = len(dl.decode(rows[6]["label"])[1])


def _num_objects_disagrees(rows):
    rows[6]["num_objects"] += 1


def _label_not_an_array(rows):
    rows[6]["label"] = 1


@pytest.mark.parametrize("fault, evidence", [
    (_box_outside, "train/3 object 0"),
    (_xmin_not_below_xmax, "train/5 object 0"),
    (_ymin_above_ymax, "train/7 object 0"),
    (_class_out_of_range, "train/2 object 0"),
    (_class_not_an_integer, "train/2 object 0"),
    (_difficult_not_a_flag, "train/2 object 0"),
    (_header_b_wrong, "train/6"),
    (_values_not_whole_objects, "train/6"),
    (_label_size_not_the_image, "train/6"),
    (_padding_beside_objects, "train/6"),
    (_num_objects_disagrees, "train/6"),
    (_label_not_an_array, "train/6"),
])
def test_a_bad_label_array_fails_labels(tmp_path, docs, fault, evidence):
    write_detection(tmp_path)
    edit_records(tmp_path, fault)
    # decode_sample 0: the manifest alone, so the header comparison does not also fire
    result = gate(tmp_path, docs, QualitySpec(decode_sample=0))
    assert result["failed"] == ["labels"], q.format_table(result)
    entry = result["checks"]["labels"]
    assert any(evidence in e for e in entry["evidence"]), entry["evidence"]
    with pytest.raises(q.QualityGateFailed, match="labels"):
        q.enforce(result)


def test_a_header_label_that_differs_from_the_manifest_fails_labels(tmp_path, docs):
    write_detection(tmp_path)

    def nudge(rows):  # still a valid label array, just not the one in the .rec
        set_object(rows[8], 0, xmin=rows[8]["label"][5] / 2)
    edit_records(tmp_path, nudge)
    result = gate(tmp_path, docs)
    assert result["failed"] == ["labels"], q.format_table(result)
    assert "record header label equals the manifest label" in \
        " ".join(result["checks"]["labels"]["evidence"])


def _tiny(rng, k: int) -> list[tuple]:
    """Every other image has one box 1.3 px wide: 12 of 45 boxes in train."""
    found = _objects(rng, k)
    if k % 2 == 0:
        cls, x0, y0, _, y1, d = found[0]
        found[0] = (cls, x0, y0, x0 + 0.02, y1, d)
    return found


def _flat(rng, k: int) -> list[tuple]:
    """Every other image has one box 57.6 x 2.4 px: aspect 24 > 20, side 2.4 px."""
    found = _objects(rng, k)
    if k % 2 == 0:
        found[0] = (found[0][0], 0.05, 0.4, 0.95, 0.45, 0.0)
    return found


@pytest.mark.parametrize("objects, words, spec", [
    (_tiny, "boxes under 4 px", {}),
    (_flat, "aspect (w/h) beyond", {"min_box_side_px": 2}),
])
def test_too_many_tiny_or_extreme_boxes_warn(tmp_path, docs, objects, words, spec):
    write_detection(tmp_path, objects=objects)
    result = gate(tmp_path, docs, QualitySpec(**spec))
    assert result["ok"] and result["warned"] == ["box_size"], q.format_table(result)
    entry = result["checks"]["box_size"]
    assert any(words in e for e in entry["evidence"]), entry["evidence"]
    assert q.enforce(result) is result  # warn never blocks
    # under the share: passes; set to fail: blocks
    assert gate(tmp_path, docs, QualitySpec(**spec, max_tiny_box_share=0.5))["ok"]
    strict = gate(tmp_path, docs, QualitySpec(**spec, severity={"box_size": "fail"}))
    assert strict["failed"] == ["box_size"]


def test_a_few_tiny_boxes_within_the_share_pass(tmp_path, docs):
    def one_tiny(rng, k):
        found = _objects(rng, k)
        if k == 0:
            cls, x0, y0, _, y1, d = found[0]
            found[0] = (cls, x0, y0, x0 + 0.02, y1, d)
        return found
    write_detection(tmp_path, objects=one_tiny)
    result = gate(tmp_path, docs)
    assert result["ok"] and result["warned"] == [], q.format_table(result)
    assert "2 of 66 boxes under 4 px" in result["checks"]["box_size"]["observed"]


def _negatives(rng, k: int) -> list[tuple]:
    return [] if k % 4 == 0 else _objects(rng, k)


def test_too_many_images_without_objects_warn(tmp_path, docs):
    write_detection(tmp_path, objects=_negatives)  # 9 of 33: 27% > 10%
    result = gate(tmp_path, docs)
    assert result["ok"] and result["warned"] == ["objects_per_image"], q.format_table(result)
    entry = result["checks"]["objects_per_image"]
    assert "9 of 33 images without an object" in entry["observed"]
    assert any("train/0" in e for e in entry["evidence"]), entry["evidence"]
    assert gate(tmp_path, docs, QualitySpec(max_empty_share=0.3))["warned"] == []


def test_too_many_objects_in_one_image_warn(tmp_path, docs):
    write_detection(tmp_path)
    result = gate(tmp_path, docs, QualitySpec(max_objects_per_image=2))
    assert result["warned"] == ["objects_per_image"], q.format_table(result)
    assert "objects per image 1..3" in result["checks"]["objects_per_image"]["observed"]


def _crowded_cats(rng, k: int) -> list[tuple]:
    """As many images per class, but a cat image holds 12 cats: balanced by images, not by
    objects (owl 8 / cat 96 < 0.1)."""
    cls = k % len(CLASSES)
    box = (0.1, 0.1, 0.6, 0.7, 0.0)
    return [(cls, *box)] * (12 if cls == 0 else 1)


def test_class_balance_counts_objects_not_images(tmp_path, docs):
    write_detection(tmp_path, objects=_crowded_cats)
    result = gate(tmp_path, docs)
    assert result["ok"] and result["warned"] == ["class_balance"], q.format_table(result)
    observed = result["checks"]["class_balance"]["observed"]
    assert "dog 8 / cat 96 objects" in observed or "owl 8 / cat 96 objects" in observed, \
        observed


def _same_key_in_val(rows):
    val = next(r for r in rows if r["split"] == "val")
    rows[2]["source_key"] = val["source_key"]


def _same_bytes_in_val(rows):
    val = next(r for r in rows if r["split"] == "val")
    val["source_sha256"] = rows[0]["source_sha256"]


def _near_duplicate_in_val(rows):
    val = next(r for r in rows if r["split"] == "val")
    val["phash"] = f"{int(rows[1]['phash'], 16) ^ 0b101:016x}"  # 2 bits apart


@pytest.mark.parametrize("fault, check", [
    (_same_key_in_val, "split_keys"),  # also counted twice, and an image not accounted
    (_same_bytes_in_val, "split_content"),
    (_near_duplicate_in_val, "near_duplicates"),
])
def test_leaks_across_splits_fail_for_detection_records(tmp_path, docs, fault, check):
    write_detection(tmp_path)
    edit_records(tmp_path, fault)
    result = gate(tmp_path, docs, QualitySpec(decode_sample=0))
    also = ["sources"] if check == "split_keys" else []
    assert sorted(result["failed"]) == sorted([check, *also]), q.format_table(result)
    assert result["checks"][check]["evidence"]


def test_image_size_holds_detection_records_to_the_pack_options(tmp_path, docs):
    write_detection(tmp_path)  # 64 x 48: the short side 48
    assert gate(tmp_path, docs, pack={"resize": 48, "upscale": True, "color": 1})["ok"]
    result = gate(tmp_path, docs, pack={"resize": 40, "upscale": False, "color": 1})
    assert result["failed"] == ["image_size"], q.format_table(result)
    assert "short side 48..48" in result["checks"]["image_size"]["observed"]


def test_detection_checks_are_not_run_for_other_tasks(docs):
    from tests.quality.test_quality import clean_inputs

    result = q.run_checks(clean_inputs(), QualitySpec(), docs_dir=docs,
                          pack={"resize": 256, "color": 1}, run_name="test")
    assert result["ok"], q.format_table(result)
    for name in ("objects_per_image", "box_size"):
        assert result["checks"][name]["status"] == "not run"
        assert result["checks"][name]["observed"] == "not a detection dataset"


def test_in_memory_rows_are_checked_as_the_folder_is(tmp_path, docs):
    from recforge.quality import GateInputs

    write_detection(tmp_path)
    rows = _read_jsonl(tmp_path / "records.jsonl")
    set_object(rows[3], 0, xmax=1.2)
    inputs = GateInputs(records=rows, quarantine=_read_jsonl(tmp_path / "quarantine.jsonl"),
                        sources=_read_jsonl(tmp_path / "source_manifest.jsonl"),
                        classes=json.loads((tmp_path / "classes.json").read_text()),
                        summary=json.loads((tmp_path / "summary.json").read_text()))
    result = q.run_checks(inputs, QualitySpec(), docs_dir=docs, pack=PACK, task="detection",
                          run_name="test")
    assert result["failed"] == ["labels"], q.format_table(result)
    assert "train/3 object 0" in " ".join(result["checks"]["labels"]["evidence"])


def test_the_manifest_is_read_into_numeric_columns(tmp_path):
    write_detection(tmp_path)
    records, objects = read_manifest(str(tmp_path / "records.jsonl"))
    assert "label" not in records  # no Python list per record
    assert objects is not None and len(objects) == int(records["label_objects"].sum()) == 66
    assert {str(objects[c].dtype) for c in dl.FIELDS} == {"float32"}
    assert str(objects["row"].dtype) == "int64" and str(objects["object"].dtype) == "int32"
    for col in ("label_values", "label_width", "label_height", "label_objects"):
        assert records[col].dtype == np.float32, col
    assert records["label_hash"].dtype == "UInt64"
    first = dl.decode(_read_jsonl(tmp_path / "records.jsonl")[0]["label"])[1]
    got = objects[objects["row"] == 0][list(dl.FIELDS)].to_numpy()
    assert np.array_equal(got, first)


def test_quality_spec_rejects_an_empty_objects_range():
    with pytest.raises(ValueError, match="min_objects_per_image 5 is above"):
        QualitySpec(min_objects_per_image=5, max_objects_per_image=4)
    assert QualitySpec(severity={"box_size": "off", "objects_per_image": "fail"})


def test_without_a_listing_the_totals_count_the_used_annotation_files(tmp_path, docs):
    write_detection(tmp_path, layout="coco")
    (tmp_path / "source_manifest.jsonl").unlink()
    result = gate(tmp_path, docs)
    entry = result["checks"]["sources"]
    assert entry["status"] == "passed", q.format_table(result)
    assert "totals from summary.json only" in entry["note"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    summary["listed"] += 1  # one listed object that nothing accounts for
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert gate(tmp_path, docs)["failed"] == ["sources"]
