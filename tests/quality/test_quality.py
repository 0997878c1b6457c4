"""The quality gate: each injected fault fails exactly the check that names it; clean passes.

Most tests build the gate's inputs as small in-memory tables (``GateInputs``) and call
``run_checks``; GX is slow to import, so the first test pays it once. A few tests write a
real packed folder (tiny JPEGs in a .rec) to exercise reading, decoding, S3 and the CLI
(``recforge check``, in ``recforge.cli.check``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recforge import quality as q
from recforge.alerts import build_alert
from recforge.errors import RecforgeFailure
from recforge.quality import GateInputs, QualityGateFailed, suites
from recforge.spec.quality import LOADER_CHECKS, QualitySpec

CLASSES = ["cat", "dog", "owl"]
PACK = {"resize": 256, "upscale": False, "color": 1}


def _framed(length: int) -> int:
    return 8 + ((length + 3) & ~3)


def clean_inputs(sizes=(("train", 30), ("val", 9)), seed: int = 0,
                 segmentation: bool = False) -> GateInputs:
    """A consistent dataset: offsets, .idx, listing, summary and hashes all agree."""
    rng = np.random.default_rng(seed)
    records, idx, sources = [], {}, []
    for split, n in sizes:
        offset, idx[split] = 0, []
        for k in range(n):
            label = k % len(CLASSES)
            length = int(rng.integers(2000, 9000))
            key = f"{CLASSES[label]}/{split}_{k:03d}.jpg"
            row = {
                "key": k, "split": split, "offset": offset, "length": length,
                "height": 256, "width": int(rng.integers(256, 400)), "channels": 3,
                "label": label, "class_name": CLASSES[label], "name": key, "source_key": key,
                "source_etag": f"etag-{split}-{k}",
                "source_sha256": hashlib.sha256(key.encode()).hexdigest(),
                "decode_status": "ok", "phash": f"{int(rng.integers(0, 2**63)):016x}",
            }
            if segmentation:
                row.update(mask_record_key=k, mask_height=row["height"], mask_width=row["width"],
                           mask_values=[0, 1, 2, 255],
                           class_pixels={"0": 900, "1": 700, "2": 800})
            records.append(row)
            sources.append({"key": key, "size": length, "etag": row["source_etag"]})
            idx[split].append((k, offset))
            offset += _framed(length)
    sources.append({"key": "README.txt", "size": 10, "etag": "etag-readme"})
    return GateInputs(
        records=records,
        quarantine=[{"source_key": "README.txt", "stage": "ingest",
                     "reason": "unsupported_extension"}],
        sources=sources,
        classes={"num_classes": len(CLASSES), "classes": CLASSES},
        summary={"listed": len(sources), "packed": len(records), "quarantined": 1,
                 "splits": {s: n for s, n in sizes}},
        idx=idx,
    )


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("docs")


def run(inputs, docs, quality=None, **kw):
    kw.setdefault("pack", PACK)
    return q.run_checks(inputs, quality or QualitySpec(), docs_dir=docs, run_name="test", **kw)


def test_clean_dataset_passes_and_builds_data_docs(docs):
    result = run(clean_inputs(), docs)
    assert result["ok"], q.format_table(result)
    assert result["failed"] == [] and result["warned"] == []
    ran = {n for n, c in result["checks"].items() if c["status"] == "passed"}
    assert ran == {"decode", "index", "labels", "image_size", "sources", "class_balance",
                   "split_keys", "split_content", "near_duplicates", "class_name_case"}
    assert result["checks"]["gpu_memory"]["status"] == "not run"
    assert result["checks"]["masks"]["status"] == "not run"
    assert (docs / "index.html").exists()
    page = result["checks"]["labels"]["docs_page"]
    assert page.startswith("validations/checklist-records/") and (docs / page).exists()
    assert len(json.dumps(result)) < 20_000  # XCom-sized


def _label_out_of_range(i):
    i.records[4]["label"] = 3


def _wrong_size(i):
    i.records[5]["height"], i.records[5]["width"] = 300, 400


def _unaccounted_source(i):
    i.sources.append({"key": "owl/forgotten.jpg", "size": 5, "etag": "x"})


def _same_image_in_train_and_val(i):
    val = next(r for r in i.records if r["split"] == "val")
    val["source_sha256"] = i.records[0]["source_sha256"]  # same bytes, another name


def _near_duplicate_across_splits(i):
    val = next(r for r in i.records if r["split"] == "val")
    val["phash"] = f"{int(i.records[1]['phash'], 16) ^ 0b1011:016x}"  # 3 bits apart


def _source_key_in_two_splits(i):
    val = next(r for r in i.records if r["split"] == "val")
    i.records[2]["source_key"] = val["source_key"]


def _corrupt_record(i):
    i.records[6]["decode_status"] = "undecodable"


def _offsets_out_of_order(i):
    i.records[8]["offset"], i.records[9]["offset"] = i.records[9]["offset"], i.records[8]["offset"]


@pytest.mark.parametrize("fault, check", [
    (_label_out_of_range, "labels"),
    (_wrong_size, "image_size"),
    (_unaccounted_source, "sources"),
    (_same_image_in_train_and_val, "split_content"),
    (_near_duplicate_across_splits, "near_duplicates"),
    (_source_key_in_two_splits, "split_keys"),  # also counted twice: sources fails too
    (_corrupt_record, "decode"),
    (_offsets_out_of_order, "index"),
])
def test_each_fault_fails_its_check(docs, fault, check):
    inputs = clean_inputs()
    fault(inputs)
    result = run(inputs, docs)
    assert not result["ok"]
    also = {"split_keys": ["sources"]}.get(check, [])
    assert sorted(result["failed"]) == sorted([check, *also]), q.format_table(result)
    entry = result["checks"][check]
    assert entry["status"] == "failed" and entry["severity"] == "fail"
    assert entry["evidence"], "a failed check must say which rows"
    with pytest.raises(QualityGateFailed, match=check) as err:
        q.enforce(result)
    assert err.value.result is result
    assert isinstance(err.value, RecforgeFailure)  # the Airflow edge fails it without retries
    assert result["data_docs"] in str(err.value)  # the message says where the evidence is
    alert = build_alert(result, dataset="demo", run="r1")
    assert f"quality gate FAILED ({', '.join(result['failed'])})" in alert.subject
    assert entry["observed"] in alert.text()


def test_evidence_names_the_offending_records(docs):
    inputs = clean_inputs()
    _near_duplicate_across_splits(inputs)
    _same_image_in_train_and_val(inputs)
    result = run(inputs, docs)
    near = result["checks"]["near_duplicates"]
    assert "train/1" in near["evidence"][0] and "3 bits" in near["evidence"][0]
    same = result["checks"]["split_content"]
    assert "train/0" in same["evidence"][0] and "val/0" in same["evidence"][0]


def test_missing_mask_fails_masks(docs):
    inputs = clean_inputs(segmentation=True)
    clean = run(copy.deepcopy(inputs), docs, task="segmentation")
    assert clean["ok"], q.format_table(clean)
    assert clean["checks"]["masks"]["status"] == "passed"
    inputs.records[3]["mask_record_key"] = None
    result = run(inputs, docs, task="segmentation")
    assert result["failed"] == ["masks"]
    assert "1 missing masks" in result["checks"]["masks"]["observed"]


def test_mask_values_outside_classes_fail_labels(docs):
    inputs = clean_inputs(segmentation=True)
    inputs.records[2]["mask_values"] = [0, 7]
    result = run(inputs, docs, task="segmentation")
    assert result["failed"] == ["labels"]


def test_class_imbalance_warns_without_failing(docs):
    inputs = clean_inputs()
    for r in inputs.records:  # only one owl left in train: 1 / 10 < 0.2
        if r["split"] == "train" and r["class_name"] == "owl" and r["key"] > 2:
            r["label"], r["class_name"] = 0, "cat"
    result = run(inputs, docs, QualitySpec(class_balance_min_ratio=0.2))
    assert result["ok"] and result["failed"] == []
    assert result["warned"] == ["class_balance"]
    assert "owl 1" in result["checks"]["class_balance"]["observed"]
    assert q.enforce(result) is result  # warnings never block


def test_severity_override_makes_imbalance_block_and_off_skips(docs):
    inputs = clean_inputs()
    for r in inputs.records:
        if r["split"] == "train" and r["class_name"] == "owl" and r["key"] > 2:
            r["label"], r["class_name"] = 0, "cat"
    strict = QualitySpec(class_balance_min_ratio=0.2, severity={"class_balance": "fail"})
    assert run(copy.deepcopy(inputs), docs, strict)["failed"] == ["class_balance"]
    off = QualitySpec(class_balance_min_ratio=0.2, severity={"class_balance": "off"})
    result = run(inputs, docs, off)
    assert result["ok"] and result["checks"]["class_balance"]["status"] == "off"


def test_loader_results_checks(docs):
    batch = {"type": "NDArray", "dtype": "float32", "shape": [8, 3, 224, 224],
             "min": 0.0, "max": 1.0}
    good = {"batches": [batch] * 3 + [{**batch, "shape": [5, 3, 224, 224]}],
            "images_per_sec": 900.0, "read_mb_per_sec": 80.0, "device": "cpu"}
    spec = QualitySpec(loader={"value_range": (0.0, 1.0), "min_images_per_sec": 500})
    result = q.run_loader_checks(good, spec, docs_dir=docs)
    assert result["ok"], q.format_table(result)
    assert set(result["checks"]) == set(LOADER_CHECKS)
    assert result["checks"]["gpu_memory"]["status"] == "not run"
    bad = {"batches": [batch, {**batch, "dtype": "float64", "max": 255.0},
                       {**batch, "shape": [8, 3, 200, 224]}, batch],
           "images_per_sec": 120.0, "device": "gpu", "gpu_mem_peak_mb": 9000.0}
    spec = QualitySpec(loader={"value_range": (0.0, 1.0), "min_images_per_sec": 500,
                               "gpu_memory_limit_mb": 8000})
    result = q.run_loader_checks(bad, spec, docs_dir=docs)
    assert set(result["failed"]) == set(LOADER_CHECKS)


def test_a_loader_results_callable_is_asked_once_the_dataset_suites_ran(docs, monkeypatch):
    """A benchmark beside the checklist is asked for its results only after the dataset's
    own suites have run (they overlap its untimed work), and its suites then run in the
    same site: Data Docs are built once, at the end."""
    from recforge.quality import gx

    events = []
    real_run, real_docs = gx.Validations.run, gx.Validations.build_docs
    monkeypatch.setattr(gx.Validations, "run", lambda self, frames, plans: (
        events.append(("run", sorted({p.frame for p in plans}))),
        real_run(self, frames, plans))[1])
    monkeypatch.setattr(gx.Validations, "build_docs", lambda self: (
        events.append(("docs",)), real_docs(self))[1])
    batch = {"type": "NDArray", "dtype": "float32", "shape": [8, 3, 224, 224],
             "min": 0.0, "max": 255.0}

    def loader_results():
        events.append(("asked",))
        return {"batches": [batch] * 3, "images_per_sec": 900.0, "device": "cpu"}

    result = run(clean_inputs(), docs, loader_results=loader_results)
    assert result["ok"], q.format_table(result)
    assert result["checks"]["loader_throughput"]["status"] == "passed"
    assert [e[0] for e in events] == ["run", "asked", "run", "docs"]
    assert "records" in events[0][1] and events[2][1] == ["loader", "loader_batches"]
    assert (docs / result["checks"]["loader_throughput"]["docs_page"]).exists()


def test_describe_batch_reads_numpy():
    d = suites.describe_batch(np.full((2, 3, 4, 4), 0.5, dtype=np.float32))
    assert d == {"type": "ndarray", "dtype": "float32", "shape": [2, 3, 4, 4],
                 "min": 0.5, "max": 0.5}


def test_quality_spec_rejects_unknown_check():
    with pytest.raises(ValueError, match="unknown check.*'labelz'"):
        QualitySpec(severity={"labelz": "warn"})
    with pytest.raises(ValueError, match="min < max"):
        QualitySpec(loader={"value_range": (1.0, 0.0)})


def test_importing_quality_stays_light():
    """The spec imports QualitySpec at DAG parse time; the CLI parser imports cli.check."""
    code = ("import sys, recforge.quality, recforge.alerts, recforge.cli.check; print([m for m "
            "in ('great_expectations', 'pandas', 'numpy', 'cv2', 'airflow') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(Path(q.__file__).parents[2])})
    assert out.stdout.strip().splitlines()[-1] == "[]"


# --------------------------------------------------------------- a real packed folder


def write_packed(root: Path, corrupt_key: int | None = None) -> None:
    """train/val .rec/.idx of tiny JPEGs plus the manifest files merge writes."""
    import cv2

    from recforge import phash
    from recforge.format import recordio

    rng = np.random.default_rng(1)
    records, listing = [], []
    for split, n in (("train", 6), ("val", 3)):
        with recordio.RecordWriter(root / f"{split}.rec", root / f"{split}.idx") as w:
            for k in range(n):
                label = k % 2
                coarse = rng.integers(0, 255, (8, 9, 3)).astype(np.uint8)  # distinct dHashes
                img = cv2.resize(coarse, (32, 24), interpolation=cv2.INTER_NEAREST)
                data = cv2.imencode(".jpg", img)[1].tobytes()
                payload = recordio.pack_image_record(float(label), k, data)
                key = f"{CLASSES[label]}/{split}{k}.jpg"
                records.append({
                    "key": k, "split": split, "offset": w.write(k, payload),
                    "length": len(payload), "height": 24, "width": 32, "channels": 3,
                    "label": label, "class_name": CLASSES[label], "name": key,
                    "source_key": key, "source_etag": f"e{split}{k}",
                    "source_sha256": hashlib.sha256(data).hexdigest(), "decode_status": "ok",
                    "phash": phash.dhash(img)})
                listing.append({"key": key, "size": len(data), "etag": f"e{split}{k}"})
    if corrupt_key is not None:  # overwrite the JPEG start of one train record
        r = records[corrupt_key]
        with open(root / "train.rec", "r+b") as f:
            f.seek(r["offset"] + 8 + recordio.IR_SIZE)
            f.write(b"\0" * 64)
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (root / "records.jsonl").write_text(lines)
    (root / "source_manifest.jsonl").write_text("".join(json.dumps(x) + "\n" for x in listing))
    (root / "quarantine.jsonl").write_text("")
    (root / "classes.json").write_text(json.dumps({"num_classes": 2, "classes": CLASSES[:2]}))
    (root / "summary.json").write_text(json.dumps(
        {"listed": 9, "packed": 9, "quarantined": 0, "splits": {"train": 6, "val": 3}}))


def test_gate_on_a_packed_folder_rereads_records(tmp_path, docs):
    import shutil

    write_packed(tmp_path)
    for ext in ("idx", "rec"):  # segmentation's mask files are not a split of their own
        shutil.copy(tmp_path / f"val.{ext}", tmp_path / f"val_mask.{ext}")
    result = q.run_quality_gate(str(tmp_path), QualitySpec(class_balance_min_ratio=0.0),
                                docs_dir=docs, pack={"resize": 0, "color": 1})
    assert result["ok"], q.format_table(result)
    assert "0 of 9 re-read from the .rec failed" in result["checks"]["decode"]["observed"]


def test_an_error_the_callers_loader_results_raise_is_theirs_not_a_gate_error(tmp_path, docs):
    """The checklist beside a benchmark it does not run: what the caller's results callable
    raises (a failed benchmark, the orchestrator skipping the task) reaches the caller as it
    is; the gate's own errors are still GateError."""
    class Skipped(Exception):
        pass

    def loader_results():
        raise Skipped("the benchmark ended failed")

    write_packed(tmp_path)
    with pytest.raises(Skipped, match="ended failed"):
        q.run_quality_gate(str(tmp_path), QualitySpec(class_balance_min_ratio=0.0),
                           docs_dir=docs, pack={"resize": 0, "color": 1},
                           loader_results=loader_results)
    (tmp_path / "classes.json").write_text("{not json")
    with pytest.raises(q.GateError, match="could not check"):
        q.run_quality_gate(str(tmp_path), QualitySpec(class_balance_min_ratio=0.0),
                           docs_dir=docs, pack={"resize": 0, "color": 1},
                           loader_results=loader_results)


def test_gate_catches_a_corrupt_record_in_the_rec(tmp_path, docs):
    write_packed(tmp_path, corrupt_key=2)
    result = q.run_quality_gate(str(tmp_path), QualitySpec(class_balance_min_ratio=0.0),
                                docs_dir=docs, pack={"resize": 0, "color": 1})
    assert result["failed"] == ["decode"]
    assert "train/2" in " ".join(result["checks"]["decode"]["evidence"])


def test_gate_on_s3_and_data_docs_upload(tmp_path, bucket):
    from recforge import storage

    write_packed(tmp_path)
    prefix = f"s3://{bucket}/ds/v1"
    for p in tmp_path.iterdir():
        storage.upload(p, storage.join(prefix, p.name))
    docs_uri = storage.join(prefix, "quality")
    result = q.run_and_upload(prefix, QualitySpec(class_balance_min_ratio=0.0),
                              docs_uri=docs_uri, pack={"resize": 0, "color": 1},
                              dataset="demo", run_name="r1")
    assert result["ok"], q.format_table(result)
    assert "0 of 9 re-read" in result["checks"]["decode"]["observed"]  # ranged S3 reads
    assert result["data_docs"] == f"{prefix}/quality/index.html"
    assert "data_docs_uri" not in result  # one spelling per key
    bkt, key = storage.split_s3(result["data_docs"])
    assert storage.s3_client().head_object(Bucket=bkt, Key=key)["ContentType"] == "text/html"
    page = result["checks"]["labels"]["docs_page"]
    assert b"checklist-records" in storage.get_bytes(storage.join(docs_uri, page))
    assert storage.read_json(storage.join(docs_uri, "quality.json"))["ok"] is True


def check_cli(argv: list[str]) -> int:
    """``recforge check ARGV`` through the sub-command's own ``register`` (the CLI's command
    table, which lists it, is tested with the CLI)."""
    import argparse

    from recforge.cli import check

    parser = argparse.ArgumentParser(prog="recforge")
    check.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_check_prints_checklist_and_exits_nonzero_on_failure(tmp_path, capsys):
    write_packed(tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: t\nsource: {uri: /x}\npublish: {uri: /y}\npack: {resize: 0}\n")
    args = ["check", str(tmp_path), "--spec", str(spec), "--docs", str(tmp_path / "d1")]
    assert check_cli(args) == 0
    out = capsys.readouterr().out
    assert "12c   near_duplicates" in out and "quality gate passed" in out
    assert f"Data Docs: {tmp_path / 'd1' / 'index.html'}" in out
    rows = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    rows[0]["label"] = 5
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert check_cli([*args, "--json", "--upload-docs", str(tmp_path / "site")]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] == ["labels"]
    assert result["data_docs"] == str(tmp_path / "site" / "index.html")
    assert (tmp_path / "site" / "index.html").exists() and "data_docs_uri" not in result


def test_building_the_cli_parser_imports_no_engine():
    """The handler imports the engines (quality, storage, spec) when it runs, not before."""
    code = ("import sys, argparse; from recforge.cli import check; "
            "check.register(argparse.ArgumentParser().add_subparsers()); print([m for m in "
            "('recforge.quality', 'recforge.storage', 'recforge.spec', 'pydantic', 'boto3') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(Path(q.__file__).parents[2])})
    assert out.stdout.strip().splitlines()[-1] == "[]"
