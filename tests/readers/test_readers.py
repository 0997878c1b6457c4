"""``recforge.readers`` against MXNet's own readers, bit for bit, from a folder and from S3:
labels, detection label arrays and boxes, segmentation masks, RGB pixels, sharding."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from recforge import storage
from recforge.format.recordio import RecordIOError
from recforge.readers import RecordFile, SplitReader, shard_indices
from tests.common import mxnet_readers

pytestmark = pytest.mark.mxnet  # bit for bit against MXNet's readers: a slow tier


def _mx(published, split: str) -> list[dict]:
    idx, rec = published.files(split)
    return mxnet_readers.read("decoded", idx=idx, rec=rec)["records"]


def test_classification_labels_and_pixels_equal_mxnets(classification):
    for split in classification.splits:
        want = _mx(classification, split)
        reader = SplitReader(str(classification.local), split)
        assert reader.task == "classification"
        got = list(reader)
        assert [s["key"] for s in got] == [r["key"] for r in want]
        assert [s["label"] for s in got] == [r["label"] for r in want]
        assert all(isinstance(s["label"], float) for s in got)
        for s, r in zip(got, want, strict=True):
            assert s["image"].dtype == np.uint8
            np.testing.assert_array_equal(s["image"], np.asarray(r["image"], np.uint8))


def test_pixels_are_cv2s_decode_of_the_stored_bytes_in_rgb_order(classification):
    split = next(iter(classification.splits))
    encoded = SplitReader(str(classification.local), split, decode=False)
    decoded = SplitReader(str(classification.local), split)
    for i in range(len(encoded)):
        data = encoded[i]["image"]
        assert isinstance(data, bytes)
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        np.testing.assert_array_equal(decoded[i]["image"], bgr[..., ::-1])
        assert not np.array_equal(bgr, bgr[..., ::-1])  # the order is visible in the photos


def test_headers_equal_mx_recordio_unpack(classification):
    split = next(iter(classification.splits))
    idx, rec = classification.files(split)
    want = _mx(classification, split)
    records = RecordFile(rec)  # the .idx beside it
    assert records.keys() == [r["key"] for r in want]
    for (header, body), r in zip(records.read_many(range(len(records))), want, strict=True):
        assert (header.flag, header.label, header.id, header.id2) == \
            (r["flag"], r["label"], r["id"], r["id2"])
        assert body[:2] in (b"\xff\xd8", b"\x89P")  # JPEG or PNG, header stripped


def test_detection_label_arrays_and_boxes_equal_mxnets(detection):
    for split in detection.splits:
        idx, rec = detection.files(split)
        want = _mx(detection, split)
        boxes = mxnet_readers.read("detection_labels", rec=rec, idx=idx)
        got = list(SplitReader(str(detection.local), split))
        assert [s["key"] for s in got] == [r["key"] for r in want]
        for s, r in zip(got, want, strict=True):
            assert s["label"].dtype == np.float32
            assert s["label"].tolist() == r["label"]  # the whole array, bit for bit
            assert s["boxes"].shape[1] == 6 and s["boxes"].dtype == np.float32
            assert s["boxes"].tolist() == boxes[str(s["key"])]  # ImageDetIter's rows
            assert s["size"] == (s["image"].shape[1], s["image"].shape[0])
            np.testing.assert_array_equal(s["image"], np.asarray(r["image"], np.uint8))
        assert sum(len(s["boxes"]) for s in got) > len(got)  # scenes of several objects


def test_segmentation_masks_equal_mxnets(segmentation):
    for split in segmentation.splits:
        want = mxnet_readers.read("segmentation_pairs", root=str(segmentation.local),
                                  split=split)
        got = list(SplitReader(str(segmentation.local), split))
        assert [s["key"] for s in got] == want["keys"]
        for s, img, mask in zip(got, want["images"], want["masks"], strict=True):
            assert set(s) == {"key", "image", "mask"}
            np.testing.assert_array_equal(s["mask"], np.asarray(mask, np.uint8))
            np.testing.assert_array_equal(s["image"], np.asarray(img, np.uint8))
        assert len({int(v) for s in got for v in np.unique(s["mask"])}) > 2


@pytest.mark.parametrize("kind", ["classification", "detection", "segmentation"])
def test_s3_reads_what_the_folder_holds_in_few_gets(kind, request):
    published = request.getfixturevalue(kind)
    split = next(iter(published.splits))
    local = list(SplitReader(str(published.local), split))
    before = storage.request_counts().get("get_object", 0)
    remote = SplitReader(published.uri, split)
    got = list(remote)
    gets = storage.request_counts().get("get_object", 0) - before
    assert [s["key"] for s in got] == [s["key"] for s in local]
    for a, b in zip(got, local, strict=True):
        assert a.keys() == b.keys()
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    # the index reads (manifest, classes, .idx) plus one coalesced GET a batch, not a record
    assert gets < 8 + len(got) // 2, (gets, len(got))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_three_ranks_read_every_record_exactly_once(classification, segmentation, where):
    for published in (classification, segmentation):
        split = max(published.splits, key=published.splits.get)
        uri = str(published.local) if where == "local" else published.uri
        every = SplitReader(uri, split).keys()
        shares = [[s["key"] for s in SplitReader(uri, split, rank=r, world_size=3)]
                  for r in range(3)]
        assert sorted(k for share in shares for k in share) == sorted(every)
        assert len(set(every)) == len(every) >= 3
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        assert all(shares)


def test_shard_indices_cover_every_index_once():
    for n in (0, 1, 2, 3, 10, 11):
        got = sorted(i for r in range(3) for i in shard_indices(n, r, 3))
        assert got == list(range(n))
    with pytest.raises(ValueError, match="0 <= rank < world_size"):
        shard_indices(5, 3, 3)


def test_a_dataset_prefix_reads_its_latest_version(classification):
    split = next(iter(classification.splits))
    reader = SplitReader(classification.root, split)
    assert reader.uri == classification.uri
    assert reader.keys() == SplitReader(classification.uri, split).keys()


def test_errors_name_the_object_and_the_fix(classification, tmp_path):
    assert "test" not in classification.splits  # the spec has no test ratio
    with pytest.raises(FileNotFoundError, match=r"no split 'test': it publishes train, val"):
        SplitReader(classification.uri, "test")
    with pytest.raises(FileNotFoundError, match="no manifest.json.*pass <publish.uri>"):
        SplitReader(str(tmp_path), "train")
    split = next(iter(classification.splits))
    idx, rec = classification.files(split)
    bad = tmp_path / "bad.idx"
    bad.write_text(open(idx).read() + "7\tnot-an-offset\n")
    with pytest.raises(RecordIOError, match=r"bad.idx:\d+: expected 'key<TAB>offset'.*re-pack"):
        RecordFile(rec, str(bad))
    lines = open(idx).read().splitlines()
    key, offset = lines[1].split("\t")
    (tmp_path / "shifted.idx").write_text(f"{key}\t{int(offset) + 4}\n")
    with pytest.raises(RecordIOError, match=rf"key {key} at byte {int(offset) + 4}: bad magic"):
        RecordFile(rec, str(tmp_path / "shifted.idx")).raw(0)
