"""``recforge pull`` and ``recforge.open``: a published version downloaded into a local
folder is exactly the version's files, each verified against its manifest; a file whose
bytes changed on the store is refused by name; an interrupted pull resumes, reading only
what is missing; ``NAME@version`` picks that version; MXNet reads what was pulled. Against
real S3 servers (moto and Ceph RGW)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

import recforge
from recforge import pipeline, storage
from recforge import pull as pulling
from recforge.cli import main
from recforge.format import names
from tests.common import mxnet_readers
from tests.common.sources import make_source, make_spec, spec_doc

pytestmark = [pytest.mark.both_stores,  # each test against moto and Ceph RGW
              pytest.mark.pipeline]  # whole builds: a slow tier


@pytest.fixture(scope="module")
def published(s3_endpoint):
    """Two versions of ``pets`` (the second with more images), built once per store."""
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    storage.s3_client().create_bucket(Bucket=bucket)
    spec = make_spec(bucket)
    make_source(bucket, classes=("cat", "dog"), per_class=6)
    first = pipeline.build(spec, run_id="p1", workers=1)["publish"]["uri"]
    make_source(bucket, classes=("cat", "dog"), per_class=8)
    second = pipeline.build(spec, run_id="p2", workers=1)["publish"]["uri"]
    return {"bucket": bucket, "root": f"s3://{bucket}/datasets/pets", "first": first,
            "second": second}


def _manifest(version_uri: str) -> dict:
    return storage.read_json(storage.join(version_uri, names.MANIFEST))


def _local_files(dest: Path) -> set[str]:
    return {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}


def _copy_version(version_uri: str, bucket: str) -> str:
    """A copy of the version under a prefix of its own, for tests that damage it; its
    manifest without the store checksums (a copy's checksum is the store's to compute)."""
    manifest = _manifest(version_uri)
    target = f"s3://{bucket}/copies/{uuid.uuid4().hex[:8]}/pets/{manifest['version']}"
    for entry in manifest["files"]:
        storage.copy(storage.join(version_uri, entry["name"]),
                     storage.join(target, entry["name"]))
    manifest["files"] = [{k: v for k, v in e.items() if k != "checksum"}
                         for e in manifest["files"]]
    storage.write_json(storage.join(target, names.MANIFEST), manifest)
    return target


def test_pull_downloads_exactly_the_listed_files_verified(published, tmp_path, capsys):
    dest = tmp_path / "pets"
    assert main(["pull", published["root"], str(dest)]) == 0
    version = published["second"]  # the dataset prefix means its latest version
    manifest = _manifest(version)
    assert _local_files(dest) == {e["name"] for e in manifest["files"]} | {names.MANIFEST}
    for name in _local_files(dest):
        assert (dest / name).read_bytes() == storage.get_bytes(storage.join(version, name)), name
    out = capsys.readouterr().out
    assert f"{len(manifest['files']) + 1} files verified" in out
    for split in ("train", "val"):
        rec, idx = dest / f"{split}.rec", dest / f"{split}.idx"
        assert f'mx.io.ImageRecordIter(path_imgrec="{rec}", path_imgidx="{idx}"' in out
        assert f'fn.readers.mxnet(path=["{rec}"], index_path=["{idx}"])' in out
        assert f'recforge.readers.torch.dataset("{dest}", "{split}")' in out
    # MXNet's own reader over the pulled split: every record, labels in the published order
    rows = sorted((r for r in storage.read_jsonl(storage.join(version, names.RECORDS))
                   if r["split"] == "train"), key=lambda r: r["offset"])
    labels = mxnet_readers.read("iter_labels", rec=str(dest / "train.rec"),
                                idx=str(dest / "train.idx"), data_shape=[3, 32, 32])
    assert labels == [float(r["label"]) for r in rows]


def test_large_files_come_as_parallel_ranged_reads(published, tmp_path):
    version, part = published["second"], 4096
    sizes = {e["name"]: e["size"] for e in _manifest(version)["files"]}
    before = storage.retry.counts().get("get_object", 0)
    done = pulling.pull(version, tmp_path, part=part)
    gets = storage.retry.counts().get("get_object", 0) - before
    assert gets == 1 + sum(max(1, math.ceil(s / part)) for s in sizes.values() if s)
    assert sizes["train.rec"] > 4 * part  # so train.rec came in several ranges
    assert done.bytes_read == sum(sizes.values())
    assert (tmp_path / "train.rec").read_bytes() == storage.get_bytes(
        storage.join(version, "train.rec"))


@pytest.mark.parametrize("name", ["train.rec", "classes.json"])
def test_a_changed_byte_on_the_store_is_refused_by_name(published, tmp_path, capsys, name):
    version = _copy_version(published["second"], published["bucket"])
    data = bytearray(storage.get_bytes(storage.join(version, name)))
    data[len(data) // 2] ^= 0x01
    storage.put_bytes(storage.join(version, name), bytes(data))
    dest = tmp_path / "pets"
    assert main(["pull", version, str(dest)]) == 1
    err = capsys.readouterr().err
    if name == "train.rec":  # composed: no whole-object SHA-256 to compare on the store, so
        # it is downloaded and its parts hashed here
        assert "FAILED: train.rec: part " in err and " SHA-256 " in err
    else:  # refused before downloading where the store keeps checksums, else once hashed
        assert f"FAILED: {name}: SHA-256 " in err or \
            f"{version} is not as its manifest says: {name}: the store's SHA-256" in err
    assert not (dest / name).exists() and not (dest / f"{name}.partial").exists()
    assert not (dest / names.MANIFEST).exists()  # no manifest: no complete copy


def test_an_interrupted_pull_resumes_reading_only_what_is_missing(published, tmp_path):
    version = published["second"]
    whole = tmp_path / "whole"
    pulling.pull(version, whole)
    dest = tmp_path / "pets"
    dest.mkdir()
    for name in _local_files(whole) - {"train.rec", "val.rec", names.MANIFEST}:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes((whole / name).read_bytes())
    train, val = (whole / "train.rec").read_bytes(), (whole / "val.rec").read_bytes()
    half = len(train) // 2
    (dest / "train.rec.partial").write_bytes(train[:half])  # where the last pull stopped
    (dest / "val.rec.partial").write_bytes(b"\x00" * 100)  # not val.rec's start: anew
    before = storage.transferred()
    done = pulling.pull(version, dest)
    moved = storage.transferred().minus(before)
    assert sorted(done.fetched) == ["train.rec", "val.rec"]
    assert done.bytes_read == (len(train) - half) + (len(val) - 100) + len(val)
    assert moved.down_by_suffix.get(".rec") == done.bytes_read
    assert set(moved.down_by_suffix) == {".rec", ".json"}  # + the manifest, read once
    assert _local_files(dest) == _local_files(whole)
    for name in _local_files(whole):
        assert (dest / name).read_bytes() == (whole / name).read_bytes(), name
    again = pulling.pull(version, dest)  # complete: nothing fetched
    assert again.fetched == [] and again.bytes_read == 0


def test_name_at_version_picks_that_version(published, tmp_path, monkeypatch, capsys):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "pets.yaml").write_text(yaml.safe_dump(spec_doc(published["bucket"])))
    first = _manifest(published["first"])["version"]
    assert main(["pull", f"pets@{first}", str(tmp_path / "a"),
                 "--spec", str(specs / "pets.yaml")]) == 0
    assert json.loads((tmp_path / "a" / names.MANIFEST).read_text())["version"] == first
    assert main(["pull", f"{published['root']}@{first}", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "train.rec").read_bytes() == (tmp_path / "a" / "train.rec"
                                                           ).read_bytes()
    monkeypatch.setenv("RECFORGE_SPECS_DIR", str(specs))
    assert main(["pull", "pets", str(tmp_path / "c")]) == 0  # the specs folder; latest
    latest = _manifest(published["second"])["version"]
    assert json.loads((tmp_path / "c" / names.MANIFEST).read_text())["version"] == latest
    capsys.readouterr()
    assert main(["pull", "pets@v19990101T000000Z-nope", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "is no complete version" in err and first in err and latest in err
    # a folder holding another version is refused, not mixed
    assert main(["pull", "pets", str(tmp_path / "a")]) == 2
    assert f"holds version {first} of pets" in capsys.readouterr().err


def test_open_reports_the_version_and_pulls_it(published, tmp_path):
    version = published["second"]
    manifest = _manifest(version)
    rows = storage.read_jsonl(storage.join(version, names.RECORDS))
    ds = recforge.open(published["root"])
    assert (ds.uri, ds.version, ds.task) == (version, manifest["version"], "classification")
    assert ds.classes == ["cat", "dog"]
    assert ds.splits == {s: sum(r["split"] == s for r in rows) for s in ("train", "val")}
    assert ds.manifest == manifest
    with pytest.raises(RuntimeError, match=r"call \.pull\(DIR\) first"):
        ds.local_paths("train")
    done = ds.pull(tmp_path / "pets")
    assert done.version_uri == version
    dest = tmp_path / "pets"
    paths = ds.local_paths("val")
    assert paths == {"rec": str(dest / "val.rec"), "idx": str(dest / "val.idx"),
                     "lst": str(dest / "val.lst")}
    assert all(Path(p).is_file() for p in paths.values())
    assert ds.dali("val") == {"path": [paths["rec"]], "index_path": [paths["idx"]]}
    assert ds.gluon("val") == {"filename": paths["rec"]}  # no MXNet here: its arguments
    got = mxnet_readers.read("gluon_dataset", rec=paths["rec"])
    assert got["length"] == ds.splits["val"]
    local = recforge.open(str(dest))  # the pulled copy opens in place
    assert (local.version, local.splits) == (ds.version, ds.splits)
    assert local.local_paths("val") == paths
    with pytest.raises(KeyError, match="no split 'test'"):
        local.local_paths("test")


def test_torch_reads_the_pulled_split(published, tmp_path):
    pytest.importorskip("torch")
    ds = recforge.open(published["root"])
    ds.pull(tmp_path)
    assert len(ds.torch("val")) == ds.splits["val"]


def test_import_recforge_stays_light():
    code = "import sys, recforge; print('recforge.pull' in sys.modules, 'boto3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]


def _local_version(root: Path, task: str, lst_lines: list[str]) -> Path:
    """A version folder on local disk holding what ``open`` and the reader calls read."""
    files = [{"name": n, "size": 0, "sha256": ""} for n in
             ("train.rec", "train.idx", "train.lst", "train_mask.rec", "train_mask.idx")]
    root.mkdir()
    (root / "train.lst").write_text("".join(lst_lines))
    (root / names.CLASSES).write_text(json.dumps({"classes": ["a", "b"], "num_classes": 2}))
    (root / names.MANIFEST).write_text(json.dumps({
        "dataset": "x", "version": "v1", "task": task, "files": files,
        "summary": {"splits": {"train": len(lst_lines)}}}))
    return root


def test_detection_calls_pad_the_label_to_the_most_objects(tmp_path):
    from recforge.format import detection_label

    labels = [detection_label.encode(64, 48, [(0, 0.1, 0.1, 0.5, 0.5, 0)] * n) for n in (1, 3, 2)]
    root = _local_version(tmp_path / "det", "detection",
                          [names.lst_line(i, lab, f"{i}.jpg") for i, lab in enumerate(labels)])
    assert pulling.label_pad_width(root / "train.lst") == 4 + 6 * 3
    manifest = json.loads((root / names.MANIFEST).read_text())
    calls = pulling.reader_calls(root, manifest)
    assert (f'mx.io.ImageDetRecordIter(path_imgrec="{root}/train.rec", path_imgidx='
            f'"{root}/train.idx", data_shape=(3, 300, 300), batch_size=32, '
            f"label_pad_width={4 + 6 * 3})") in calls
    assert "ImageRecordIter(" not in calls.replace("ImageDetRecordIter(", "")


def test_segmentation_paths_name_the_masks(tmp_path):
    root = _local_version(tmp_path / "seg", "segmentation", ["0\t0.000000\t0.png\n"])
    ds = recforge.open(str(root))
    assert (ds.task, ds.splits, ds.classes) == ("segmentation", {"train": 1}, ["a", "b"])
    assert ds.local_paths("train") == {
        k: str(root / n) for k, n in (("rec", "train.rec"), ("idx", "train.idx"),
                                      ("lst", "train.lst"), ("mask_rec", "train_mask.rec"),
                                      ("mask_idx", "train_mask.idx"))}
    calls = pulling.reader_calls(root, ds.manifest)
    assert f'fn.readers.mxnet(path=["{root}/train_mask.rec"], index_path=' in calls
    assert f'SegmentationRecordDataset("{root}/train.rec")' in calls
